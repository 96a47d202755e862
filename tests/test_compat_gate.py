"""The gate's rules, pure: no database, no HTTP."""

import pytest

from nrllm_sidecar_compat.gate import NO_REPORT_REASON, Declaration, Gate, ReportedConsumer
from sidecar.domain.vocabulary import BASE_STATUSES, RunStatus

DEPENDENCY = RunStatus.WAITING_FOR_DEPENDENCY.value
BASE = sorted(s.value for s in BASE_STATUSES)
ALL = [s.value for s in RunStatus]
MCP = Declaration.build("nr_mcp_agent", {"<0.16.0": BASE, ">=0.16.0": ALL}, declared_by="nr_mcp_agent")


def gate(*reported, declarations=(MCP,)):
    return Gate({d.name: d for d in declarations}, list(reported))


def test_closed_until_the_first_report():
    closed = Gate({"nr_mcp_agent": MCP}, None)
    assert not closed.may_write(DEPENDENCY)
    assert closed.refusal(DEPENDENCY) == NO_REPORT_REASON
    assert closed.report_dict()["delegation"] == {"offered": False, "blocked_origins": [], "reason": NO_REPORT_REASON}


def test_an_empty_report_opens_it():
    assert gate().may_write(DEPENDENCY)
    assert gate().report_dict()["delegation"]["offered"] is True


def test_base_statuses_are_always_writable():
    closed = Gate({}, None)
    assert all(closed.may_write(s) for s in BASE)


def test_nr_mcp_agent_before_0_16_blocks_and_names_the_version_that_works():
    report = gate(ReportedConsumer("nr_mcp_agent", "0.15.1")).report_dict()
    assert report["statuses"][DEPENDENCY] == {
        "writable": False,
        "blocked_by": [{"consumer": "nr_mcp_agent", "version": "0.15.1", "understands_from": "0.16.0"}],
    }
    assert report["delegation"] == {
        "offered": False,
        "blocked_origins": [],
        "reason": "nr_mcp_agent 0.15.1 is loaded and does not handle waiting_for_dependency; it does from "
                  "0.16.0 (see docs/upgrading.md)",
    }
    assert report["consumers"][0]["declared_by"] == "plugin nr_mcp_agent"
    assert DEPENDENCY not in report["consumers"][0]["understands"]


@pytest.mark.parametrize("version", ["0.16.0", "0.16.1", "1.0.0", "0.17.0rc1"])
def test_nr_mcp_agent_from_0_16_opens_it(version):
    assert gate(ReportedConsumer("nr_mcp_agent", version)).may_write(DEPENDENCY)


def test_a_version_that_is_not_pep_440_is_unknown_and_closes_it():
    g = gate(ReportedConsumer("nr_mcp_agent", "dev-main"))
    assert not g.may_write(DEPENDENCY)
    assert "dev-main" in g.refusal(DEPENDENCY) and "unknown" in g.refusal(DEPENDENCY)


def test_an_undeclared_consumer_reads_the_base_vocabulary_unless_the_report_says_more():
    assert not gate(ReportedConsumer("typo3_run_views", "1.0.0")).may_write(DEPENDENCY)
    assert gate(ReportedConsumer("typo3_run_views", "1.0.0", frozenset(ALL))).may_write(DEPENDENCY)


def test_an_unknown_version_reads_the_base_vocabulary_even_with_understands():
    g = gate(ReportedConsumer("typo3_run_views", "dev-main", frozenset(ALL)))
    assert not g.may_write(DEPENDENCY)
    assert "dev-main" in g.refusal(DEPENDENCY)


def test_a_plugin_declaration_wins_over_the_reported_understands():
    g = gate(ReportedConsumer("nr_mcp_agent", "0.15.1", frozenset(ALL)))
    assert not g.may_write(DEPENDENCY)


def test_origin_scoped_consumers_gate_only_their_runs():
    scoped = Declaration.build("page_module", {">=0": BASE}, origins=["typo3:page-module"], declared_by="pm")
    g = gate(ReportedConsumer("page_module", "2.0.0"), declarations=(MCP, scoped))
    assert g.may_write(DEPENDENCY) and g.may_write(DEPENDENCY, "typo3:other")
    assert not g.may_write(DEPENDENCY, "typo3:page-module")
    delegation = g.report_dict()["delegation"]
    assert delegation == {"offered": True, "blocked_origins": ["typo3:page-module"], "reason": None}
    assert "page_module 2.0.0" in g.refusal(DEPENDENCY, "typo3:page-module")


def test_a_global_blocker_closes_every_origin():
    scoped = Declaration.build("page_module", {">=0": ALL}, origins=["typo3:page-module"])
    g = gate(ReportedConsumer("nr_mcp_agent", "0.15.1"), ReportedConsumer("page_module", "1.0"),
             declarations=(MCP, scoped))
    assert not g.may_write(DEPENDENCY, "typo3:page-module")
    assert g.report_dict()["delegation"]["blocked_origins"] == []


def test_declarations_are_checked():
    with pytest.raises(ValueError, match="version range"):
        Declaration.build("x", {"not a range!": BASE})
    with pytest.raises(ValueError, match="unknown statuses"):
        Declaration.build("x", {">=1": ["waiting_for_godot"]})
