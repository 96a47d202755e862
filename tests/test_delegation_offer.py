"""A delegation tool (a plugin's tool with `delegation = True`) in the agent loop: offered only while the
compatibility gate lets runs wait for a dependency; a model that calls it anyway gets the gate's reason. The
offer goes by a gate found current a moment ago; a change made in this process is seen at once."""

import pytest

import nrllm_sidecar_compat.service as compat_service
from nrllm_sidecar_compat.gate import NO_REPORT_REASON
from sidecar.domain.vocabulary import ToolEffect
from sidecar.engine.providers import ScriptedProvider
from sidecar.engine.tools import Tool
from sidecar.hookspecs import hookimpl
from sidecar.plugins import plugin_manager
from sidecar.store import consumers as consumer_store
from sidecar.store import events, runs
from tests.support.runs import run_row
from tests.support.segments import drive_segment


class AskRemoteAgent(Tool):
    name = "ask_remote_agent"
    effect = ToolEffect.IDEMPOTENT_WRITE  # as the design's delegation tool: the journal makes a retry safe
    description = "Hands a question to a remote agent; the run waits for its answer."
    parameters = {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}
    delegation = True

    def run(self, arguments, context):
        return "the remote agent took it"


class ToolsSeen:
    """The scripted provider, recording the tool names each turn request offered."""

    name = "tools_seen"

    def __init__(self):
        self.offered: list[list[str]] = []

    def next_turn(self, request):
        self.offered.append([spec.name for spec in request.tools])
        return ScriptedProvider().next_turn(request)


class DelegationPlugin:
    def __init__(self):
        self.provider = ToolsSeen()

    @hookimpl
    def nrllm_tools(self, settings):
        return [AskRemoteAgent()]

    @hookimpl
    def nrllm_model_providers(self, settings):
        return [self.provider]


@pytest.fixture
def seen(database_url):
    plugin = DelegationPlugin()
    plugin_manager().register(plugin, name="delegation-test")
    yield plugin.provider.offered
    plugin_manager().unregister(plugin)


CALL_IT = [
    {"tool_calls": [{"id": "c1", "name": "ask_remote_agent", "arguments": {"question": "status of job 7?"}}]},
    {"content": "{last_tool_result}"},
]


def _run(script, origin=None) -> str:
    run_id = runs.create_run("be_user:7", "x", origin=origin, spec={"provider": "tools_seen", "script": script})
    drive_segment()
    return run_id


def _tool_results(run_id):
    return [e["payload"]["result"] for e in events.list_events(run_id) if e["kind"] == "tool"]


@pytest.mark.parametrize("report, reason", [
    (None, NO_REPORT_REASON),
    ([{"name": "nr_mcp_agent", "version": "0.15.1"}],
     "nr_mcp_agent 0.15.1 is loaded and does not handle waiting_for_dependency; it does from 0.16.0"),
])
def test_not_offered_while_the_gate_is_closed_and_a_call_gets_the_reason(seen, report, reason):
    if report is not None:
        consumer_store.replace_report(report)
    run_id = _run(CALL_IT)
    assert seen and all("ask_remote_agent" not in names and "echo" in names for names in seen)
    (result,) = _tool_results(run_id)
    assert result.startswith("error: ") and reason in result
    row = run_row(run_id)
    assert (row.status, row.pending_effect) == ("completed", None), "the tool never ran, the model went on"


def test_offered_once_the_host_reports_consumers_that_read_the_status(seen):
    consumer_store.replace_report([])
    _run([{"content": "nothing to ask"}])
    consumer_store.replace_report([{"name": "nr_mcp_agent", "version": "0.16.0"}])
    _run([{"content": "nothing to ask"}])
    assert ["ask_remote_agent" in names for names in seen] == [True, True]


def test_an_origin_scoped_consumer_withholds_it_only_from_its_runs(seen):
    consumer_store.replace_report([{"name": "example_dashboard", "version": "1.4"}])  # the example plugin's
    dashboard_run = _run(CALL_IT, origin="example:dashboard")
    _run([{"content": "nothing to ask"}], origin="typo3:page")
    assert ["ask_remote_agent" in names for names in seen] == [False, False, True]
    (result,) = _tool_results(dashboard_run)
    assert result.startswith("error: ") and "example_dashboard 1.4" in result


def test_the_offer_goes_by_the_gate_found_current_less_than_its_max_age_ago(seen, monkeypatch):
    """The offer reads the report's time at most once in OFFER_MAX_AGE_SECONDS (the store's guard, which
    writes the status, has it every time, from the statement that writes the run: tests/test_gate_guard.py);
    a change of the report made in this process is seen at once, one made elsewhere once the gate's age has
    passed."""
    reads = []
    original = consumer_store.reported_time
    monkeypatch.setattr(consumer_store, "reported_time", lambda: reads.append(1) or original())
    monkeypatch.setattr(compat_service, "OFFER_MAX_AGE_SECONDS", 30.0)
    consumer_store.replace_report([])
    _run([{"content": "first"}])
    _run([{"content": "second, within the max age"}])
    assert len(reads) == 1

    consumer_store.replace_report([{"name": "nr_mcp_agent", "version": "0.15.1"}])  # closes it, here
    _run([{"content": "after a change made here"}])
    assert len(reads) == 2
    consumer_store.replace_report.__wrapped__([])  # opens it, as another process would: not counted here
    _run([{"content": "the gate found current a moment ago"}])
    monkeypatch.setattr(compat_service, "OFFER_MAX_AGE_SECONDS", 0.0)
    _run([{"content": "the gate as of now"}])
    assert ["ask_remote_agent" in names for names in seen] == [True, True, False, False, True]
    assert len(reads) == 3
