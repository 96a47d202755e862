"""The sidecar's own consumers of run statuses: each handles every status of the vocabulary (a status
added there fails here until every consumer says what it does with it), and each is declared through
the consumer hook like any plugin's consumer."""

import pytest

from nrllm_sidecar_compat import service as compat_service
from nrllm_sidecar_compat.gate import Gate, ReportedConsumer
from sidecar import __version__
from sidecar.consumers import CORE_CONSUMERS, INBOX_KIND, REAPER_ACTION, core_consumer_versions
from sidecar.domain.vocabulary import RunStatus
from sidecar.plugins import plugin_manager

ALL = {s.value for s in RunStatus}


@pytest.mark.parametrize("name", sorted(CORE_CONSUMERS))
def test_every_core_consumer_maps_every_status(name):
    table = CORE_CONSUMERS[name]
    assert set(table) == set(RunStatus), f"{name} does not say what it does with {set(RunStatus) - set(table)}"


def test_only_running_runs_are_reaped_and_only_human_waits_reach_the_inbox():
    assert [s for s, action in REAPER_ACTION.items() if action == "reap"] == [RunStatus.RUNNING]
    decided_by_people = {RunStatus.WAITING_FOR_INPUT, RunStatus.WAITING_FOR_APPROVAL}
    assert {s for s, kind in INBOX_KIND.items() if kind} == decided_by_people


def test_the_core_consumers_are_declared_through_the_hook():
    assert "sidecar.consumers" in [impl.plugin_name for impl in plugin_manager().hook.nrllm_consumers.get_hookimpls()]
    declarations = compat_service.declarations()
    for name in CORE_CONSUMERS:
        declaration = declarations[name]
        assert declaration.declared_by == "sidecar.consumers" and declaration.origins == frozenset()
        assert declaration.statuses_for(__version__) == ALL
    assert core_consumer_versions() == {name: __version__ for name in CORE_CONSUMERS}


def test_loaded_core_consumers_never_close_the_gate():
    gate = Gate(compat_service.declarations(), [ReportedConsumer(n, v) for n, v in core_consumer_versions().items()])
    assert all(gate.may_write(status) for status in ALL)
    assert {c.declared_by for c in gate.consumers} == {"plugin sidecar.consumers"}
