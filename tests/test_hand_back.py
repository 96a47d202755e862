"""A stopping worker's hand-back on SQLite, PostgreSQL and MariaDB: what it writes, that the worker keeps its
leases through the grace and does not wait for a segment it handed back, and that the old holder's segment
writes nothing after it, through any of its writes and even while one is under way."""

import threading
import time

import pytest

from sidecar.domain.decisions import PauseKind
from sidecar.domain.errors import LeaseLost
from sidecar.domain.lease import LeasePolicy
from sidecar.domain.vocabulary import RunStatus, TerminationReason
from sidecar.segment import Segment
from sidecar.store import events, leases, notes, pauses, runs
from sidecar.store.models import BaseModel, Run
from tests.support import SHORT_LEASE
from tests.support.runs import event_kinds, run_row
from tests.support.waiting import wait_until
from tests.support.workers import worker_in_thread

LEASE = LeasePolicy(30)


def _claim(holder: str = "worker-a") -> leases.Claim:
    runs.create_run("owner", "x")
    (claim,) = leases.claim_queued(holder, 1, LEASE)
    return claim


def test_a_hand_back_queues_the_run_at_once_without_counting_a_requeue(database_url):
    claim = _claim()
    assert leases.hand_back(claim, 2.5) == "requeued"
    row = run_row(claim.run_id)
    assert (row.status, row.requeue_count, row.lease_holder, row.lease_expires_at) == ("queued", 0, None, None)
    assert row.lease_epoch == claim.epoch + 1 and row.queued_at is not None
    said = events.list_events(claim.run_id)[-3:]
    assert [(e["kind"], e["payload"]) for e in said] == [
        ("handed_back", {"holder": "worker-a", "epoch": claim.epoch, "grace_seconds": 2.5}),
        ("status", {"from": "running", "to": "queued"}),
        ("requeued", {"reason": "released", "holder": "worker-a"}),
    ]
    assert leases.reap() == [], "a hand-back is not the reaper's business"
    (again,) = leases.claim_queued("worker-b", 1, LEASE)
    assert again.run_id == claim.run_id and again.epoch > claim.epoch


def test_a_run_with_a_non_idempotent_write_in_flight_is_failed_not_handed_to_another_worker(database_url):
    claim = _claim()
    leases.update_run_fenced(claim, pending_effect="write_note (tool call call_1)")
    assert leases.hand_back(claim, 0) == "not_retryable"
    row = run_row(claim.run_id)
    assert (row.status, row.termination_reason, row.lease_holder) == ("failed", "not_retryable", None)
    assert event_kinds(claim.run_id)[-2:] == ["handed_back", "status"]
    assert leases.claim_queued("worker-b", 1, LEASE) == []


def test_a_run_that_ended_meanwhile_is_not_handed_back(database_url):
    claim = _claim()
    leases.finish(claim, RunStatus.COMPLETED, output="done")
    with pytest.raises(LeaseLost):
        leases.hand_back(claim, 1)
    assert event_kinds(claim.run_id)[-1] == "status" and run_row(claim.run_id).status == "completed"


SEGMENT_WRITES = {
    "event": lambda s: s.event("step", {}),
    "update": lambda s: s.update(output="late"),
    "stamp_pending_effect": lambda s: s.stamp_pending_effect("late"),
    "save_turn": lambda s: s.save_turn(0, {"content": "late"}, tokens=1, cost=0.0, event={}),
    "save_tool_result": lambda s: s.save_tool_result(0, "call_1", "echo", "late", event={}),
    "complete": lambda s: s.complete("late"),
    "fail": lambda s: s.fail(TerminationReason.PROVIDER_FAILED),
    "cancel": lambda s: s.cancel(),
    "suspend": lambda s: s.guarded(leases.suspend_run, RunStatus.WAITING_FOR_INPUT),
    "pause": lambda s: s.guarded(pauses.pause, pauses.PauseRequest(PauseKind.INPUT, 0, "call_1", "why?")),
    "note": lambda s: s.guarded(notes.write, "late"),
}


def _everything() -> dict:
    """Every row of every table, to compare before and after."""
    return {model.__name__: sorted(map(str, model.select().tuples())) for model in BaseModel.__subclasses__()}


@pytest.mark.parametrize("write", SEGMENT_WRITES)
def test_every_write_of_a_handed_back_segment_is_fenced_by_the_epoch_alone(database_url, write):
    claim = _claim()
    segment = Segment(claim, runs.get_run(claim.run_id))
    leases.hand_back(claim, 1)
    before = _everything()
    # The worker sets `lost` first; left unset here, the proof rests on the database's fence alone.
    assert not segment.lost.is_set()
    with pytest.raises(LeaseLost):
        SEGMENT_WRITES[write](segment)
    assert _everything() == before


def test_a_segment_writing_while_it_is_handed_back_writes_nothing_after_the_hand_back(database_url):
    claim = _claim()
    segment = Segment(claim, runs.get_run(claim.run_id))
    written, stopped_by = [], []

    def keep_writing():
        try:
            while True:
                written.append(segment.event("step", {"n": len(written)}))
        except LeaseLost as exc:
            stopped_by.append(exc)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    wait_until(lambda: len(written) >= 5, what="the segment to write")
    leases.hand_back(claim, 1)
    writer.join(30)
    assert not writer.is_alive() and stopped_by, "the writer was not fenced out"
    (handed_back,) = [e for e in events.list_events(claim.run_id) if e["kind"] == "handed_back"]
    steps = [e["sequence"] for e in events.list_events(claim.run_id) if e["kind"] == "step"]
    assert steps == written and max(steps) < handed_back["sequence"]
    assert Run.get_by_id(claim.run_id).status == "queued"


class _Stubborn:
    """An executor that works on, whatever happens to its lease, until told to write once more and end."""

    def __init__(self):
        self.working = threading.Event()
        self.go_on = threading.Event()
        self.late_write: list[str] = []

    def execute(self, segment: Segment):
        self.working.set()
        self.go_on.wait(60)
        try:
            segment.event("step", {"late": True})
            self.late_write.append("written")
        except LeaseLost:
            self.late_write.append("fenced")
            raise
        return segment.complete("late")


def test_a_stopping_worker_keeps_its_lease_through_the_grace_then_hands_back_without_waiting(settings):
    executor = _Stubborn()
    run_id = runs.create_run("owner", "x")
    # A short lease, as this is about keeping it through the grace.
    worker = worker_in_thread(settings, executor, concurrency=1, coordinators=0, lease=SHORT_LEASE)
    try:
        assert executor.working.wait(30)
        stopping = threading.Thread(target=worker.stop, args=(3 * SHORT_LEASE,))
        stopping.start()
        reaped = []
        while stopping.is_alive():  # another worker's reaper, far more eager than any
            reaped += leases.reap()
            time.sleep(0.02)
        stopping.join()
        assert reaped == [], "a lease expired during the grace"
        row = run_row(run_id)
        assert (row.status, row.requeue_count) == ("queued", 0)
        assert event_kinds(run_id)[-3:] == ["handed_back", "status", "requeued"]
        before = _everything()
    finally:
        executor.go_on.set()
    wait_until(lambda: executor.late_write, what="the abandoned segment to try its late write")
    assert executor.late_write == ["fenced"] and _everything() == before
