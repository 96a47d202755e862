"""When the worker's loop looks at the queue: at once for a run queued in this process, when a finishing
segment frees a thread that a queued run waits for, and otherwise only at its poll. The poll here is
longer than any test, so a run found in time was found by a wake-up."""

import pytest

from sidecar.domain.lease import LeasePolicy
from sidecar.store import leases, runs
from sidecar.testing import StepExecutor
from sidecar.worker import Worker
from tests.support.runs import run_row, steps_input
from tests.support.waiting import wait_until

POLL_SECONDS = 600.0  # no run in these tests waits for the poll


@pytest.fixture
def worker_polling_rarely():
    started = []

    def start(concurrency: int) -> Worker:
        worker = Worker(StepExecutor(), LeasePolicy(30), concurrency=concurrency, poll_interval=POLL_SECONDS)
        worker.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop(grace=10)


def _looks_at_the_queue(monkeypatch) -> list:
    """Each look the worker's loop takes (it asks whether a claim could find a run), appended to the list."""
    looks = []
    asked = leases.worth_claiming

    def counted() -> bool:
        looks.append(1)
        return asked()

    monkeypatch.setattr(leases, "worth_claiming", counted)
    return looks


def test_a_finishing_segment_hands_its_thread_to_a_run_that_waited_for_one(database_url, worker_polling_rarely):
    worker_polling_rarely(concurrency=1)
    # Queued at once: the second and third find the only thread busy, and wait for it, not for the poll.
    ids = [runs.create_run("owner", steps_input({"sleep": 0.2}, output=f"run {i}")) for i in range(3)]
    wait_until(lambda: all(run_row(run_id).status == "completed" for run_id in ids), timeout=20,
               what="three runs completed one after the other on one thread")
    assert [run_row(run_id).output for run_id in ids] == ["run 0", "run 1", "run 2"]


def test_a_segment_on_a_thread_held_for_a_companion_also_hands_it_on(database_url, worker_polling_rarely,
                                                                     monkeypatch):
    """The coordinator holds a thread for a run it resumes (reserve_slot, take_reserved) without the loop's
    knowing: a run queued meanwhile finds no thread free, and the end of that segment is what wakes the loop."""
    looks = _looks_at_the_queue(monkeypatch)
    worker = worker_polling_rarely(concurrency=1)
    wait_until(lambda: looks, what="the loop's first look, with its thread free and nothing queued")
    assert worker.reserve_slot()
    resumed = runs.create_run("owner", steps_input({"sleep": 0.5}, output="resumed"), wake=False)
    claims = leases.claim_queued(worker.id, 1, worker.lease)
    worker.take_reserved((claims[0], claims.rows.get(resumed)))
    queued = runs.create_run("owner", steps_input(output="queued"))  # wakes the loop: no thread is free
    wait_until(lambda: run_row(queued).status == "completed", timeout=20, what="the queued run completed")
    assert run_row(resumed).output == "resumed"


def test_a_finishing_segment_does_not_wake_the_loop_when_no_run_waits(database_url, worker_polling_rarely,
                                                                       monkeypatch):
    looks = _looks_at_the_queue(monkeypatch)
    worker_polling_rarely(concurrency=2)
    wait_until(lambda: looks, what="the loop's first look")
    for i in range(5):  # one after another: a thread is always free when a run is queued
        run_id = runs.create_run("owner", steps_input(output=f"run {i}"))
        wait_until(lambda run_id=run_id: run_row(run_id).status == "completed", what=f"run {i} completed")
    # The first look, then one for each run's queueing; a look after each segment too would make eleven.
    assert len(looks) <= 1 + 5 + 1, looks
