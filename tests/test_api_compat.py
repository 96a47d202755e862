"""The consumers API and the gate's report, end to end: host report -> gate -> store refusal."""

import pytest

from nrllm_sidecar_compat import service as compat_service
from sidecar.domain.lease import LeasePolicy
from sidecar.domain.vocabulary import RunStatus
from sidecar.hookspecs import hookimpl
from sidecar.plugins import plugin_manager
from sidecar.store import leases, runs
from sidecar.store.models import ConsumerReportState, ReportedConsumerRow
from sidecar.store.status_guard import StatusNotWritable
from tests.support.api import as_host, as_operator
from tests.support.runs import run_row

DEPENDENCY = "waiting_for_dependency"


def report(client, token, *consumers):
    return client.put("/api/v1/consumers", json={"consumers": list(consumers)}, headers=as_host(token, actor=None))


def compat(client, token):
    response = client.get("/api/v1/compat", headers=as_operator(token))
    assert response.status_code == 200
    return response.get_json()


def _suspend_into_dependency(origin=None):
    run_id = runs.create_run("be_user:7", "x", origin=origin)
    claim = next(c for c in leases.claim_queued("w", 10, LeasePolicy(30)) if c.run_id == run_id)
    leases.suspend_run(claim, RunStatus.WAITING_FOR_DEPENDENCY)
    return run_id


def test_no_report_keeps_the_gate_closed_with_its_reason(client, operator_token):
    body = compat(client, operator_token)
    assert body["reported_at"] is None
    assert body["statuses"][DEPENDENCY] == {"writable": False, "blocked_by": []}
    assert body["delegation"]["offered"] is False
    assert body["delegation"]["reason"].startswith("no consumer report yet")
    with pytest.raises(StatusNotWritable, match="no consumer report yet"):
        _suspend_into_dependency()


def test_nr_mcp_agent_0_15_1_blocks_delegation_and_the_store_refuses_the_status(client, host_token, operator_token):
    assert report(client, host_token, {"name": "nr_mcp_agent", "version": "0.15.1"}).status_code == 200
    body = compat(client, operator_token)
    assert body["statuses"][DEPENDENCY] == {
        "writable": False,
        "blocked_by": [{"consumer": "nr_mcp_agent", "version": "0.15.1", "understands_from": "0.16.0"}],
    }
    assert body["delegation"] == {
        "offered": False,
        "blocked_origins": [],
        "reason": "nr_mcp_agent 0.15.1 is loaded and does not handle waiting_for_dependency; it does from 0.16.0 "
                  "(see docs/upgrading.md)",
    }
    mcp = next(c for c in body["consumers"] if c["name"] == "nr_mcp_agent")
    assert mcp["declared_by"] == "plugin nr_mcp_agent" and DEPENDENCY not in mcp["understands"]
    run_id = runs.create_run("be_user:7", "x")
    (claim,) = leases.claim_queued("w", 1, LeasePolicy(30))
    with pytest.raises(StatusNotWritable, match="0.16.0"):
        leases.suspend_run(claim, RunStatus.WAITING_FOR_DEPENDENCY)
    assert run_row(run_id).status == "running"


def test_reporting_0_16_0_opens_it(client, host_token, operator_token):
    report(client, host_token, {"name": "nr_mcp_agent", "version": "0.15.1"})
    response = client.put("/api/v1/consumers/nr_mcp_agent", json={"version": "0.16.0"},
                          headers=as_host(host_token, actor=None))
    assert response.status_code == 200
    body = compat(client, operator_token)
    assert body["delegation"] == {"offered": True, "blocked_origins": [], "reason": None}
    assert run_row(_suspend_into_dependency()).status == DEPENDENCY


def test_an_empty_report_opens_it_and_dev_main_closes_it_as_unknown(client, host_token, operator_token):
    report(client, host_token)
    assert compat(client, operator_token)["delegation"]["offered"] is True
    report(client, host_token, {"name": "nr_mcp_agent", "version": "dev-main"})
    delegation = compat(client, operator_token)["delegation"]
    assert delegation["offered"] is False and "dev-main" in delegation["reason"] and "unknown" in delegation["reason"]


def test_an_undeclared_host_consumer_is_read_by_what_it_understands(client, host_token, operator_token):
    base = [s.value for s in RunStatus if s.value != DEPENDENCY]
    report(client, host_token, {"name": "typo3_run_views", "version": "1.0.0", "understands": base})
    assert compat(client, operator_token)["statuses"][DEPENDENCY]["blocked_by"] == [
        {"consumer": "typo3_run_views", "version": "1.0.0", "understands_from": None}]
    report(client, host_token, {"name": "typo3_run_views", "version": "1.0.0", "understands": base + [DEPENDENCY]})
    body = compat(client, operator_token)
    assert body["delegation"]["offered"] is True
    listed = client.get("/api/v1/consumers", headers=as_operator(operator_token)).get_json()
    assert listed["consumers"][0]["declared_by"] == "host report"


class PageModulePlugin:
    """A consumer that reads only the runs of one origin."""

    @hookimpl
    def nrllm_consumers(self):
        base = [s.value for s in RunStatus if s.value != DEPENDENCY]
        return [{"name": "page_module", "understands": {">=0": base}, "origins": ["typo3:page-module"]}]


@pytest.fixture
def page_module_plugin():
    pm = plugin_manager()
    plugin = PageModulePlugin()
    pm.register(plugin, name="page-module-test")
    yield
    pm.unregister(plugin)


def test_origin_scoped_consumers_gate_only_their_runs(client, host_token, operator_token, page_module_plugin):
    report(client, host_token, {"name": "page_module", "version": "3.1.0"})
    delegation = compat(client, operator_token)["delegation"]
    assert delegation == {"offered": True, "blocked_origins": ["typo3:page-module"], "reason": None}
    assert run_row(_suspend_into_dependency(origin="typo3:other")).status == DEPENDENCY
    with pytest.raises(StatusNotWritable, match="page_module 3.1.0"):
        _suspend_into_dependency(origin="typo3:page-module")
    assert compat_service.delegation_refusal("typo3:page-module") is not None
    assert compat_service.delegation_refusal(None) is None


def test_runs_already_waiting_are_counted_never_rewritten(client, host_token, operator_token):
    report(client, host_token)
    run_id = _suspend_into_dependency()
    report(client, host_token, {"name": "nr_mcp_agent", "version": "0.15.1"})
    assert compat(client, operator_token)["runs_in_unreadable_status"] == 1
    assert run_row(run_id).status == DEPENDENCY


@pytest.mark.parametrize("body", [
    {},
    {"consumers": "nr_mcp_agent"},
    {"consumers": [{"name": "nr_mcp_agent"}]},
    {"consumers": [{"version": "1.0"}]},
    {"consumers": [{"name": "", "version": "1.0"}]},
    {"consumers": [{"name": "x", "version": 16}]},
    {"consumers": [{"name": "x", "version": "1.0", "understands": ["waiting_for_godot"]}]},
    {"consumers": [{"name": "x", "version": "1.0"}, {"name": "x", "version": "2.0"}]},
    {"consumers": [], "extra": 1},
])
def test_bad_reports_are_422_and_write_nothing(client, host_token, body):
    response = client.put("/api/v1/consumers", json=body, headers=as_host(host_token, actor=None))
    assert response.status_code == 422, response.get_json()
    assert response.get_json()["code"] == "validation_failed"
    assert ReportedConsumerRow.select().count() == 0 and ConsumerReportState.select().count() == 0


def test_roles_of_the_consumers_api(client, host_token, operator_token):
    put = client.put("/api/v1/consumers", json={"consumers": []}, headers=as_operator(operator_token))
    assert (put.status_code, put.get_json()["code"]) == (403, "forbidden_role")
    assert client.get("/api/v1/consumers", headers=as_host(host_token, actor=None)).status_code == 200
    assert client.get("/api/v1/compat", headers=as_host(host_token, actor=None)).status_code == 200
    assert client.get("/api/v1/compat").status_code == 401
    missing = client.delete("/api/v1/consumers/nobody", headers=as_host(host_token, actor=None))
    assert (missing.status_code, missing.get_json()["code"]) == (404, "not_found")
    assert ConsumerReportState.select().count() == 0, "a refused delete counted as a report"


def test_a_host_report_cannot_replace_the_sidecar_s_own_consumers(client, host_token, operator_token):
    report(client, host_token, {"name": "sidecar_inbox", "version": "0.0.1"})
    body = compat(client, operator_token)
    assert body["delegation"]["offered"] is True
    inbox = [c for c in body["consumers"] if c["name"] == "sidecar_inbox"]
    assert len(inbox) == 1 and inbox[0]["version"] != "0.0.1"
