"""The compatibility gate's last word on `waiting_for_dependency` (store/status_guard.py) in the two writes of
a delegation: the journal row with its turn (turns.save_turn_and_journal) and the suspension (waits.suspend).
Each asks the gate with the consumer report's time that the statement writing the run read, not with a read
of the guard's own, and so still sees a report another process changed just before; a gate built from the
same report is kept, whichever read its time."""

from collections import Counter

import pytest

import nrllm_sidecar_compat.service as compat_service
from sidecar.domain.errors import StatusNotWritable
from sidecar.domain.lease import LeasePolicy
from sidecar.store import consumers as consumer_store
from sidecar.store import events, leases, outbound, runs, status_guard, turns
from sidecar.store.models import ModelTurn, Outbound
from tests.support.delegation import journalled_send, suspend_on
from tests.support.runs import run_row

LEASE = LeasePolicy(30)
BLOCKING = [{"name": "nr_mcp_agent", "version": "0.15.1"}]  # does not read waiting_for_dependency


@pytest.fixture
def reads(database_url, monkeypatch):
    """The gate's own guard installed, as at start-up; the gate's reads of the report's time and of its rows
    (which build it again) are counted."""
    compat_service.install_store_guard()
    counted = Counter()
    for name in ("reported_time", "load_report"):
        original = getattr(consumer_store, name)
        monkeypatch.setattr(consumer_store, name, lambda o=original, n=name: counted.update([n]) or o())
    yield counted
    status_guard.install(None)


def _report_elsewhere(consumers: list[dict]) -> None:
    """Change the report as another process would: this process does not count the change (the gate it built
    is only found stale by the report's time)."""
    consumer_store.replace_report.__wrapped__(consumers)


def _send(message_id: str, tool_call_id: str) -> dict:
    return dict(owner="owner", remote_agent="research", message_id=message_id, tool_call_id=tool_call_id,
                context_id="ctx", body='{"x": 1}')


def test_a_turn_journalled_asks_the_gate_with_the_report_time_its_update_read(reads):
    consumer_store.replace_report([])  # the gate opens
    run_id = runs.create_run("owner", "x")
    (claim,) = leases.claim_queued("w", 1, LEASE)
    compat_service.current_gate()  # built from a read of the report's time of its own, as the offer does
    reads.clear()
    first = turns.save_turn_and_journal(claim, 0, {"content": "delegating"}, 5, 0.0, {"index": 0},
                                        send=_send("m-1", "call_1"))
    assert first is not None and first.message_id == "m-1"
    assert reads == {}, "the time the update read is the one the gate was built from: kept, nothing read"

    _report_elsewhere(BLOCKING)
    before, events_before = run_row(run_id), len(events.list_events(run_id))
    with pytest.raises(StatusNotWritable, match="0.16.0"):
        turns.save_turn_and_journal(claim, 1, {"content": "delegating again"}, 5, 0.0, {"index": 1},
                                    send=_send("m-2", "call_2"))
    assert [row.message_id for row in Outbound.select()] == ["m-1"], "the refused row was undone"
    assert ModelTurn.select().count() == 1, "and its turn with it"
    after = run_row(run_id)
    assert (after.iterations_used, after.last_event_sequence) == (before.iterations_used, before.last_event_sequence)
    assert len(events.list_events(run_id)) == events_before
    assert reads == {"load_report": 1}, "the gate was built again for the new report, its time not read again"


def test_a_suspension_asks_the_gate_with_the_report_time_its_update_read(reads):
    consumer_store.replace_report([])
    claim, row, _ = journalled_send(outcome="pending")  # record_send asks the gate with a read of its own
    reads.clear()
    task_id = f"task-{claim.run_id}"

    _report_elsewhere(BLOCKING)
    with pytest.raises(StatusNotWritable, match="0.16.0"):
        suspend_on(claim, row, answer_task=task_id)
    assert run_row(claim.run_id).status == "running"
    assert outbound.get(row.id).outcome == "pending", "the send's answer was undone with the suspension"

    _report_elsewhere([])
    wait = suspend_on(claim, row, answer_task=task_id)
    assert (wait.outbound_id, run_row(claim.run_id).status) == (row.id, "waiting_for_dependency")
    assert reads["reported_time"] == 0, "the guard read no report time of its own"
