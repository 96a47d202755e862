"""The signals that stop a segment (cancel, budget, deadline, lost lease) pass through a plugin tool's
`except Exception`: the run still ends as it must, and the tool's code after its except never runs."""

import pytest

from sidecar.domain import errors
from sidecar.domain.vocabulary import SegmentOutcome
from sidecar.engine import AgentLoop
from sidecar.engine.registry import build_registry
from sidecar.hookspecs import hookimpl
from sidecar.plugins import build_plugin_manager
from sidecar.segment import Segment, execute_segment
from sidecar.store import notes, runs
from sidecar.store.models import ToolResult
from tests.support.engine import FunctionTool, make_settings, request_cancel, requeue_as_the_reaper_would
from tests.support.runs import run_row
from tests.support.segments import claim_next


class CarefulPlugin:
    """A third-party plugin whose tool wraps its work in `except Exception`, as much library code does."""

    def __init__(self, work):
        self.work = work
        self.swallowed: list[str] = []

    @hookimpl
    def nrllm_tools(self, settings):
        return [FunctionTool("careful", self.careful)]

    def careful(self, arguments, context):
        try:
            self.work(context)
        except Exception as exc:
            self.swallowed.append(type(exc).__name__)
            return "carried on"
        return "done"


def _loop(plugin: CarefulPlugin) -> AgentLoop:
    return AgentLoop(build_registry(make_settings(), build_plugin_manager(extra_plugins=[plugin])))


def _queue(budget=None) -> str:
    script = [{"tool_calls": [{"id": "call_1", "name": "careful", "arguments": {}}]}, {"content": "never"}]
    return runs.create_run("be_user:7", "hello", spec={"provider": "scripted", "script": script}, budget=budget)


def _segment() -> Segment:
    claim = claim_next()
    return Segment(claim, runs.get_run(claim.run_id))


def test_every_control_signal_is_no_exception():
    signals = [errors.Suspended, errors.Interrupted, errors.LeaseLost, errors.CancelRequested]
    assert all(issubclass(signal, errors.ControlSignal) for signal in signals)
    assert not any(issubclass(signal, Exception) for signal in signals)


def test_a_cancel_interrupts_a_tool_that_catches_exception(database_url):
    def cancelled_then_waits(context):
        request_cancel(context.run_id)
        context.sleep(30)  # looks for a cancel every half second: raises Interrupted

    plugin = CarefulPlugin(cancelled_then_waits)
    run_id = _queue()
    assert execute_segment(_loop(plugin), _segment()) is SegmentOutcome.CANCELLED
    assert plugin.swallowed == []
    assert (run_row(run_id).status, run_row(run_id).termination_reason) == ("cancelled", "cancelled")
    assert ToolResult.select().where(ToolResult.run == run_id).count() == 0


def test_the_deadline_interrupts_a_tool_that_catches_exception(database_url):
    plugin = CarefulPlugin(lambda context: context.sleep(30))
    run_id = _queue(budget={"deadline_seconds": 0.5})
    assert execute_segment(_loop(plugin), _segment()) is SegmentOutcome.FAILED
    assert plugin.swallowed == []
    assert run_row(run_id).termination_reason == "deadline_exceeded"


def test_a_lost_lease_stops_a_tool_that_catches_exception(database_url):
    def taken_over_then_writes(context):
        requeue_as_the_reaper_would(context.run_id)  # the lease expired meanwhile and the reaper acted
        context.write(notes.write, "too late")  # fenced: raises LeaseLost

    plugin = CarefulPlugin(taken_over_then_writes)
    run_id = _queue()
    with pytest.raises(errors.LeaseLost):
        _loop(plugin).execute(_segment())  # the executor lets it through to its worker ...
    assert plugin.swallowed == []
    assert notes.of_run(run_id) == []
    assert run_row(run_id).status == "queued"


def test_the_worker_ends_a_segment_whose_lease_a_careful_tool_lost(database_url):
    plugin = CarefulPlugin(lambda context: (requeue_as_the_reaper_would(context.run_id),
                                            context.write(notes.write, "too late")))
    run_id = _queue()
    assert execute_segment(_loop(plugin), _segment()) is SegmentOutcome.LEASE_LOST  # ... which ends it so
    assert plugin.swallowed == [] and run_row(run_id).status == "queued"
