"""The agent loop on SQLite, PostgreSQL and MariaDB: scripted runs, tool errors, budgets, cancellation,
provider failure, and replay of written-ahead turns after a crash."""

import threading
import time
from dataclasses import replace

import pytest

from sidecar.delegation.start import Started
from sidecar.domain.errors import LeaseLost
from sidecar.domain.vocabulary import SegmentOutcome, ToolEffect
from sidecar.engine import AgentLoop
from sidecar.engine.providers import ScriptedProvider
from sidecar.segment import Segment
from sidecar.store import consumers, events, runs, turns
from sidecar.store.models import ModelTurn, Run, ToolResult
from tests.support.engine import CallLog, Crash, FunctionTool, registry, request_cancel, requeue_as_the_reaper_would
from tests.support.runs import event_kinds, run_row
from tests.support.segments import claim_next, drive_segment
from tests.support.waiting import wait_until


def _run(script, *, tools=None, budget=None, input="hello") -> str:
    spec = {"provider": "scripted", "script": script}
    if tools is not None:
        spec["tools"] = tools
    return runs.create_run("be_user:7", input, spec=spec, budget=budget)


def _call(name, arguments, call_id="call_1"):
    return {"id": call_id, "name": name, "arguments": arguments}


def _results(run_id) -> list[str]:
    return [e["payload"]["result"] for e in events.list_events(run_id) if e["kind"] == "tool"]


def _event(run_id, kind) -> dict:
    (payload,) = [e["payload"] for e in events.list_events(run_id) if e["kind"] == kind]
    return payload


def test_a_tool_turn_then_a_final_turn_with_the_last_tool_result(database_url):
    run_id = _run([
        {"tool_calls": [_call("echo", {"text": "hi there"}, "call_1"), _call("sleep", {"seconds": 0.1}, "call_2")]},
        {"tool_calls": [_call("echo", {"text": "second"}, "call_3")]},
        {"content": "the tools said: {last_tool_result}"},
    ])
    assert drive_segment(loop=AgentLoop(registry())) is SegmentOutcome.COMPLETED

    row = run_row(run_id)
    assert (row.status, row.termination_reason, row.output) == ("completed", "completed", "the tools said: second")
    assert (row.iterations_used, row.lease_holder, row.pending_effect) == (3, None, None)
    assert event_kinds(run_id) == ["status", "status", "llm", "tool", "tool", "llm", "tool", "llm", "status"]
    assert _results(run_id) == ["hi there", "slept 0.1s", "second"]
    first_llm = [e["payload"] for e in events.list_events(run_id) if e["kind"] == "llm"][0]
    assert first_llm["tool_calls"][0] == {"id": "call_1", "name": "echo", "arguments": {"text": "hi there"}}
    tool_event = [e["payload"] for e in events.list_events(run_id) if e["kind"] == "tool"][0]
    assert tool_event["effect"] == "read_only" and tool_event["tool_call_id"] == "call_1"
    assert ModelTurn.select().where(ModelTurn.run == run_id).count() == 3
    assert ToolResult.select().where(ToolResult.run == run_id).count() == 3


def test_a_final_turn_without_tools_and_an_empty_last_tool_result(database_url):
    run_id = _run([{"content": "nothing ran: [{last_tool_result}]"}])
    drive_segment(loop=AgentLoop(registry()))
    assert run_row(run_id).output == "nothing ran: []"


def test_unknown_tool_not_offered_and_bad_arguments_are_error_results_and_the_model_continues(database_url):
    run_id = _run(
        [
            {"tool_calls": [
                _call("no_such_tool", {}, "a"),
                _call("sleep", {"seconds": 1}, "b"),
                _call("echo", {"text": 5}, "c"),
                _call("echo", {}, "d"),
                _call("echo", "not an object", "e"),
            ]},
            {"tool_calls": [_call("echo", {"text": "still here"}, "f")]},
            {"content": "{last_tool_result}"},
        ],
        tools=["echo"],
    )
    assert drive_segment(loop=AgentLoop(registry())) is SegmentOutcome.COMPLETED
    results = _results(run_id)
    assert all(r.startswith("error: ") for r in results[:5]), results
    assert "unknown tool 'no_such_tool'" in results[0]
    assert "tool 'sleep' is not offered to this run (offered: echo)" in results[1]
    assert "invalid arguments for echo: text: 5 is not of type 'string'" in results[2]
    assert "'text' is a required property" in results[3]
    assert "not a JSON object" in results[4]
    assert run_row(run_id).output == "still here"


def test_a_tool_that_fails_gives_an_error_result(database_url):
    def broken(arguments, context):
        raise RuntimeError("disk on fire")

    run_id = _run([{"tool_calls": [_call("broken", {})]}, {"content": "{last_tool_result}"}])
    drive_segment(loop=AgentLoop(registry(FunctionTool("broken", broken))))
    assert run_row(run_id).output == "error: broken failed: RuntimeError"


def test_repeated_call_ids_are_made_unique_before_the_turn_is_saved(database_url):
    run_id = _run([
        {"tool_calls": [_call("echo", {"text": "one"}, "call_1"), _call("echo", {"text": "two"}, "call_1")]},
        {"tool_calls": [_call("echo", {"text": "three"}, "call_1")]},
        {"content": "{last_tool_result}"},
    ])
    assert drive_segment(loop=AgentLoop(registry())) is SegmentOutcome.COMPLETED
    ids = [r.tool_call_id for r in ToolResult.select().where(ToolResult.run == run_id).order_by(ToolResult.id)]
    assert ids == ["call_1", "call_0_1", "call_1_0"]
    assert run_row(run_id).output == "three"


def test_the_iteration_budget_ends_the_run_before_the_next_model_turn(database_url):
    turn = {"tool_calls": [_call("echo", {"text": "again"})]}
    run_id = _run([turn, turn, turn, {"content": "never"}], budget={"max_iterations": 2})
    assert drive_segment(loop=AgentLoop(registry())) is SegmentOutcome.FAILED
    row = run_row(run_id)
    assert (row.status, row.termination_reason, row.iterations_used) == ("failed", "max_iterations", 2)
    # The tools of the last allowed turn ran; no third turn was asked for.
    assert event_kinds(run_id)[2:] == ["llm", "tool", "llm", "tool", "budget", "status"]
    assert _event(run_id, "budget") == {"reason": "max_iterations", "message": "2 of 2 model turns used"}


@pytest.mark.parametrize("limit, per_turn", [({"max_tokens": 100}, {"tokens": 60}), ({"max_cost": 0.5}, {"cost": 0.3})])
def test_a_turn_that_exhausts_tokens_or_cost_stops_the_run_before_its_tools(database_url, limit, per_turn):
    log = CallLog()
    run_id = _run(
        [{"tool_calls": [_call("echo", {"text": "x"})], **per_turn}] * 3 + [{"content": "never"}], budget=limit
    )
    assert drive_segment(loop=AgentLoop(registry(log=log))) is SegmentOutcome.FAILED
    row = run_row(run_id)
    assert (row.termination_reason, row.iterations_used) == ("budget_exhausted", 2)
    expected = (120, 0) if "tokens" in per_turn else (0, pytest.approx(0.6))
    assert (row.tokens_used, row.cost_used) == expected
    assert log.lines.count("end echo") == 1  # the second turn's tool did not run
    assert event_kinds(run_id)[2:] == ["llm", "tool", "llm", "budget", "status"]


def test_the_deadline_stops_a_sleeping_tool(database_url):
    run_id = _run([{"tool_calls": [_call("sleep", {"seconds": 30})]}, {"content": "late"}],
                  budget={"deadline_seconds": 0.5})
    started = time.monotonic()
    assert drive_segment(loop=AgentLoop(registry())) is SegmentOutcome.FAILED
    assert time.monotonic() - started < 5
    row = run_row(run_id)
    assert (row.status, row.termination_reason) == ("failed", "deadline_exceeded")
    assert ToolResult.select().where(ToolResult.run == run_id).count() == 0


def test_a_cancel_requested_by_a_tool_ends_the_run_at_the_next_boundary(database_url):
    log = CallLog()
    cancel = FunctionTool("cancel_me", lambda args, ctx: request_cancel(ctx.run_id) or "cancel requested")
    run_id = _run([{"tool_calls": [_call("cancel_me", {}, "a"), _call("echo", {"text": "no"}, "b")]},
                   {"content": "never"}])
    assert drive_segment(loop=AgentLoop(registry(cancel, log=log))) is SegmentOutcome.CANCELLED
    row = run_row(run_id)
    assert (row.status, row.termination_reason, row.output) == ("cancelled", "cancelled", None)
    assert _results(run_id) == ["cancel requested"]  # its result is kept; the next call never ran
    assert [line for line in log.lines if line.startswith("provider")] == [f"provider {run_id} 0"]
    assert event_kinds(run_id)[-1] == "status"


def test_a_cancel_requested_while_the_model_answers_ends_the_run_before_its_tools_run(database_url):
    # The saved turn's write reads the cancel mark back; the boundary before its first tool call takes that one.
    class CancellingProvider:
        name = "cancelling"

        def next_turn(self, request):
            request_cancel(request.run_id)  # the host cancels while the model is answering
            return ScriptedProvider().next_turn(request)

    log = CallLog()
    base = registry(log=log)
    loop = AgentLoop(replace(base, providers={**base.providers, "cancelling": CancellingProvider()}))
    run_id = runs.create_run("be_user:7", "hi", spec={"provider": "cancelling", "script": [
        {"tool_calls": [_call("echo", {"text": "no"})]}, {"content": "never"}]})
    assert drive_segment(loop=loop) is SegmentOutcome.CANCELLED
    assert run_row(run_id).status == "cancelled"
    assert "start echo" not in log.lines
    assert ModelTurn.select().where(ModelTurn.run == run_id).count() == 1  # the turn was saved before


def test_a_cancel_requested_while_a_tool_sleeps_ends_the_run_long_before_the_sleep_would(database_url):
    run_id = _run([{"tool_calls": [_call("sleep", {"seconds": 60})]}, {"content": "never"}])
    outcome, log = [], CallLog()
    thread = threading.Thread(target=lambda: outcome.append(drive_segment(loop=AgentLoop(registry(log=log)))))
    thread.start()
    wait_until(lambda: "start sleep" in log.lines, what="the tool to start sleeping")
    requested = time.monotonic()
    request_cancel(run_id)
    thread.join(40)
    assert outcome == [SegmentOutcome.CANCELLED] and time.monotonic() - requested < 30  # half the sleep
    assert run_row(run_id).status == "cancelled"
    assert ToolResult.select().where(ToolResult.run == run_id).count() == 0


def test_a_script_that_runs_out_before_a_final_turn_fails_with_provider_failed(database_url):
    run_id = _run([{"tool_calls": [_call("echo", {"text": "x"})]}])
    assert drive_segment(loop=AgentLoop(registry())) is SegmentOutcome.FAILED
    row = run_row(run_id)
    assert (row.status, row.termination_reason) == ("failed", "provider_failed")
    error = _event(run_id, "error")
    assert error["provider"] == "scripted"
    assert error["message"] == "provider scripted failed: the script ran out after 1 turns without a final turn"


def test_an_unknown_provider_fails_the_run_with_the_reason(database_url):
    run_id = runs.create_run("owner", "hi", spec={"provider": "nonesuch"})
    drive_segment(loop=AgentLoop(registry()))
    assert run_row(run_id).termination_reason == "provider_failed"
    assert "unknown provider 'nonesuch'" in _event(run_id, "error")["message"]


def test_a_non_idempotent_tool_is_stamped_while_it_runs_and_cleared_with_its_result(database_url):
    seen = []

    def write(arguments, context):
        seen.append(Run.get(Run.id == context.run_id).pending_effect)
        return "written"

    tool = FunctionTool("write_it", write, ToolEffect.NON_IDEMPOTENT_WRITE)
    run_id = _run([{"tool_calls": [_call("write_it", {}, "w1")]}, {"content": "{last_tool_result}"}])
    drive_segment(loop=AgentLoop(registry(tool)))
    assert seen == ["write_it (tool call w1)"]
    row = run_row(run_id)
    assert (row.output, row.pending_effect) == ("written", None)
    assert _event(run_id, "tool")["effect"] == "non_idempotent_write"


# -- replay -------------------------------------------------------------------------------------


def _provider_calls(log: CallLog, run_id: str) -> list[int]:
    return [int(line.split()[2]) for line in log.lines if line.startswith(f"provider {run_id} ")]


def test_a_retried_segment_replays_the_saved_turn_and_runs_the_tool_without_asking_again(database_url):
    log = CallLog()
    run_id = _run([{"tool_calls": [_call("echo", {"text": "once"})]}, {"content": "got {last_tool_result}"}])
    with pytest.raises(Crash):
        drive_segment(loop=AgentLoop(registry(log=log, crash_tools=("echo",))))  # dies after the turn was saved
    assert ModelTurn.select().where(ModelTurn.run == run_id).count() == 1
    requeue_as_the_reaper_would(run_id)

    assert drive_segment(loop=AgentLoop(registry(log=log))) is SegmentOutcome.COMPLETED
    assert _provider_calls(log, run_id) == [0, 1]  # turn 0 was asked for once
    assert log.lines.count("end echo") == 1
    row = run_row(run_id)
    assert (row.output, row.iterations_used) == ("got once", 2)
    assert event_kinds(run_id).count("llm") == 2 and event_kinds(run_id).count("tool") == 1


def test_a_retried_segment_does_not_run_a_tool_whose_result_was_saved(database_url):
    log = CallLog()
    run_id = _run([{"tool_calls": [_call("echo", {"text": "once"})]}, {"content": "got {last_tool_result}"}])
    with pytest.raises(Crash):
        drive_segment(loop=AgentLoop(registry(log=log, crash_provider_at={1})))  # dies asking for turn 1
    requeue_as_the_reaper_would(run_id)

    assert drive_segment(loop=AgentLoop(registry(log=log))) is SegmentOutcome.COMPLETED
    assert log.lines.count("start echo") == 1
    # Turn 1 was never saved, so asking for it again is right; turn 0 was asked for once.
    assert _provider_calls(log, run_id) == [0, 1, 1]
    assert run_row(run_id).output == "got once"
    assert ToolResult.select().where(ToolResult.run == run_id).count() == 1


def test_the_final_turn_is_saved_with_the_completion_or_not_at_all(database_url, monkeypatch):
    log = CallLog()
    run_id = _run([{"content": "final answer"}])

    def dies_completing(*args, **kwargs):
        raise Crash("died inside the transaction that saves the final turn and completes the run")

    monkeypatch.setattr(turns, "write_finish", dies_completing)
    with pytest.raises(Crash):
        drive_segment(loop=AgentLoop(registry(log=log)))
    # One transaction: the turn, its count and its llm event were undone with the completion.
    assert ModelTurn.select().where(ModelTurn.run == run_id).count() == 0
    assert (run_row(run_id).status, run_row(run_id).iterations_used) == ("running", 0)
    assert "llm" not in event_kinds(run_id)

    monkeypatch.undo()
    requeue_as_the_reaper_would(run_id)
    assert drive_segment(loop=AgentLoop(registry(log=log))) is SegmentOutcome.COMPLETED
    assert _provider_calls(log, run_id) == [0, 0]  # the turn was never saved: asking again is right
    row = run_row(run_id)
    assert (row.output, row.iterations_used, row.lease_holder) == ("final answer", 1, None)
    assert event_kinds(run_id)[-2:] == ["llm", "status"]
    assert [e["sequence"] for e in events.list_events(run_id)] == list(range(1, row.last_event_sequence + 1))
    assert ModelTurn.select().where(ModelTurn.run == run_id).count() == 1


def test_a_saved_final_turn_completes_a_retried_segment_without_asking_again(database_url):
    # What an earlier release, which saved the final turn and completed in two transactions, could leave: the
    # final turn saved and the run still running when its worker died.
    log = CallLog()
    run_id = _run([{"content": "final answer"}])
    segment = Segment(claim_next(run_id), runs.get_run(run_id))
    message = {"content": "final answer"}  # as Turn.message() saves it
    segment.save_turn(0, message, tokens=0, cost=0.0, event={"index": 0, "content": "final answer"})
    requeue_as_the_reaper_would(run_id)

    assert drive_segment(loop=AgentLoop(registry(log=log))) is SegmentOutcome.COMPLETED
    assert _provider_calls(log, run_id) == []
    assert run_row(run_id).output == "final answer"


def test_a_delegation_is_told_whether_its_call_is_new_to_this_segment(database_url):
    # Only a call whose turn this segment saved may skip looking for an earlier attempt's journalled send.
    seen = []

    class Delegation(FunctionTool):
        delegation = True

        def delegate(self, call):
            seen.append(call.first_attempt)
            if len(seen) == 1:
                raise Crash("died right after the turn was saved")
            return Started(result="answered")

    consumers.replace_report([])  # the gate open, as after a host's empty report: delegation is offered
    run_id = _run([{"tool_calls": [_call("hand_over", {})]}, {"content": "{last_tool_result}"}],
                  tools=["hand_over"])
    loop = AgentLoop(registry(Delegation("hand_over", None)))
    with pytest.raises(Crash):
        drive_segment(loop=loop)
    requeue_as_the_reaper_would(run_id)
    assert drive_segment(loop=loop) is SegmentOutcome.COMPLETED
    assert seen == [True, False]  # the retry replays the saved turn: its call may have sent already
    assert run_row(run_id).output == "answered"


class HandOver(FunctionTool):
    """A delegation tool that would save its call's turn with its journal row, and answers at once instead."""

    delegation = True
    journals_with_turn = True

    def __init__(self, seen: list):
        super().__init__("hand_over", None)
        self.seen = seen

    def delegate(self, call):
        self.seen.append(call.unsaved_turn.saved)
        return Started(result="answered")


def test_a_turn_left_to_its_delegation_is_saved_before_the_call_result_when_the_tool_did_not(database_url):
    consumers.replace_report([])  # delegation offered
    seen = []
    run_id = _run([{"tool_calls": [_call("hand_over", {})]}, {"content": "{last_tool_result}"}],
                  tools=["hand_over"])
    assert drive_segment(loop=AgentLoop(registry(HandOver(seen)))) is SegmentOutcome.COMPLETED
    assert seen == [False]  # handed over unsaved
    assert [t.index for t in ModelTurn.select().where(ModelTurn.run == run_id)] == [0, 1]
    assert [k for k in event_kinds(run_id) if k in ("llm", "tool")] == ["llm", "tool", "llm"]
    assert (run_row(run_id).output, run_row(run_id).iterations_used) == ("answered", 2)


def test_a_turn_left_to_its_delegation_is_saved_when_the_deadline_stops_the_run_before_the_call(database_url):
    class SlowProvider:
        name = "slow"

        def next_turn(self, request):
            time.sleep(0.8)  # the model answers after the run's deadline
            return ScriptedProvider().next_turn(request)

    consumers.replace_report([])
    seen = []
    base = registry(HandOver(seen))
    loop = AgentLoop(replace(base, providers={**base.providers, "slow": SlowProvider()}))
    run_id = runs.create_run("be_user:7", "hi", budget={"deadline_seconds": 0.5}, spec={
        "provider": "slow", "tools": ["hand_over"], "script": [{"tool_calls": [_call("hand_over", {})]}]})
    assert drive_segment(loop=loop) is SegmentOutcome.FAILED
    row = run_row(run_id)
    assert (row.termination_reason, row.iterations_used, seen) == ("deadline_exceeded", 1, [])
    assert ModelTurn.select().where(ModelTurn.run == run_id).count() == 1  # saved before the stop, as any turn


def test_a_provider_that_raises_fails_the_run_as_a_provider_failure(database_url):
    class Broken:
        name = "broken"

        def next_turn(self, request):
            raise KeyError("choices")

    base = registry()
    loop = AgentLoop(replace(base, providers={**base.providers, "broken": Broken()}))
    run_id = runs.create_run("owner", "hi", spec={"provider": "broken"})
    assert drive_segment(loop=loop) is SegmentOutcome.FAILED
    assert run_row(run_id).termination_reason == "provider_failed"
    assert _event(run_id, "error")["message"] == "provider broken failed: the provider raised KeyError: 'choices'"


def test_a_segment_that_lost_its_lease_during_a_tool_writes_nothing_more(database_url):
    def taken_over(arguments, context):
        requeue_as_the_reaper_would(context.run_id)  # the lease expired meanwhile and the reaper acted
        return "too late"

    run_id = _run([{"tool_calls": [_call("slow", {})]}, {"content": "never"}])
    with pytest.raises(LeaseLost):
        drive_segment(loop=AgentLoop(registry(FunctionTool("slow", taken_over))))
    row = run_row(run_id)
    assert (row.status, row.iterations_used) == ("queued", 1)
    assert ToolResult.select().where(ToolResult.run == run_id).count() == 0
    assert event_kinds(run_id)[-3:] == ["lease_lost", "status", "requeued"]
