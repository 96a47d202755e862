"""Worker processes against one database: exactly-once execution, fencing, takeover, heartbeats, drain.

Each test starts real `nrllm-sidecar worker` processes (sidecar.testing.StepExecutor as the executor)
and signals them as an operator or a crash would.
"""

import os
import signal
import time

import pytest

from sidecar.store import events, runs
from sidecar.store.models import Run, RunEvent
from tests.support import SHORT_LEASE
from tests.support.private_servers import free_port
from tests.support.runs import event_kinds, run_row, steps_input
from tests.support.waiting import wait_until
from tests.support.workers import exit_code, scrape, start_worker_process, stop_between_transactions, stop_process

pytestmark = pytest.mark.slow

STEPS = ("--executor", "sidecar.testing:StepExecutor")


def _claims_of(run_id: str) -> int:
    return sum(
        1 for e in RunEvent.select().where(RunEvent.run == run_id, RunEvent.kind == "status")
        if '"to": "running"' in e.payload
    )


def _status(run_id: str) -> str:
    return run_row(run_id).status


def _held_by_a_worker(run_id: str) -> bool:
    row = run_row(run_id)
    return row.status == "running" and row.lease_holder is not None


def test_three_worker_processes_drain_five_hundred_runs_each_exactly_once(database_url, tmp_path):
    # The generous default lease: this is about three processes competing for claims, and a 1 s lease on a
    # loaded machine expires now and then, which rightly counts a second claim.
    workers = [start_worker_process(database_url, *STEPS, "--concurrency", "2", log_path=tmp_path / f"w{n}.log")
               for n in range(3)]
    try:
        # Every process competes from the first run on: on a loaded machine one that is still starting could
        # find the queue drained by the other two.
        wait_until(lambda: all("started with" in (tmp_path / f"w{n}.log").read_text() for n in range(3)),
                   timeout=60, what="the three worker processes to start")
        ids = [runs.create_run("owner", steps_input({"event": "work"}, output=f"out {i}")) for i in range(500)]
        wait_until(lambda: Run.select().where(Run.status == "completed").count() == 500, timeout=240,
                   what="500 runs completed")
    finally:
        for w in workers:
            stop_process(w)
    rows = {r.id: r for r in Run.select()}
    holders = set()
    for i, run_id in enumerate(ids):
        assert rows[run_id].output == f"out {i}"
        assert event_kinds(run_id) == ["status", "status", "step", "status"], run_id
        assert _claims_of(run_id) == 1
    for e in RunEvent.select().where(RunEvent.kind == "status"):
        if '"to": "running"' in e.payload:
            holders.add(e.run_id)
    assert len(holders) == 500
    # All three processes took part (each logs its segments).
    logs = [(tmp_path / f"w{n}.log").read_text() for n in range(3)]
    assert all("segment of run" in log for log in logs), "a worker process executed nothing"


def test_a_stopped_worker_past_its_lease_is_fenced_out_after_another_completes_the_run(database_url, tmp_path):
    log_a = tmp_path / "a.log"
    a = start_worker_process(database_url, *STEPS, lease=SHORT_LEASE, log_path=log_a)
    b = None
    try:
        run_id = runs.create_run("owner", steps_input({"sleep": 2.0}, {"event": "after sleep"}, output="done"))
        wait_until(lambda: _held_by_a_worker(run_id), what="worker A to claim the run")
        holder_a = run_row(run_id).lease_holder
        stop_between_transactions(a)
        b = start_worker_process(database_url, *STEPS, lease=SHORT_LEASE, log_path=tmp_path / "b.log")
        wait_until(lambda: _status(run_id) == "completed", timeout=30, what="worker B to complete the run")
        done = run_row(run_id)
        assert done.lease_holder is None and done.requeue_count == 1
        events_before = [(e.sequence, e.kind, e.payload) for e in RunEvent.select().where(RunEvent.run == run_id)]
        assert [k for _, k, _ in events_before].count("step") == 2  # the sleep and the event, both by B

        os.kill(a.pid, signal.SIGCONT)
        wait_until(lambda: "lease_lost" in log_a.read_text(), timeout=15, what="worker A to report lease_lost")
        stop_process(a)  # whatever A would still write, it has written
        after = run_row(run_id)
        assert (after.status, after.output, after.updated_at) == ("completed", "done", done.updated_at)
        assert [(e.sequence, e.kind, e.payload) for e in RunEvent.select().where(RunEvent.run == run_id)] \
            == events_before
        assert f"segment of run {run_id} (epoch 1): lease_lost" in log_a.read_text()
        (lost,) = RunEvent.select().where(RunEvent.run == run_id, RunEvent.kind == "lease_lost")
        assert holder_a in lost.payload
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
        stop_process(a)
        if b:
            stop_process(b)


def test_a_killed_worker_s_run_is_requeued_and_completes_once(database_url, tmp_path):
    a = start_worker_process(database_url, *STEPS, lease=SHORT_LEASE)
    run_id = runs.create_run("owner", steps_input({"sleep": 1.5}, {"event": "work"}, output="done"))
    wait_until(lambda: _held_by_a_worker(run_id), what="worker A to claim the run")
    a.kill()
    a.wait()
    b = start_worker_process(database_url, *STEPS, lease=SHORT_LEASE)
    try:
        wait_until(lambda: _status(run_id) == "completed", timeout=30, what="the run to complete elsewhere")
    finally:
        stop_process(b)
    row = run_row(run_id)
    assert (row.output, row.requeue_count) == ("done", 1)
    kinds = event_kinds(run_id)
    assert kinds.count("requeued") == 1 and kinds.count("lease_lost") == 1
    steps = [e["payload"]["name"] for e in events.list_events(run_id) if e["kind"] == "step"]
    assert steps == ["sleep", "work"], "a step ran twice, or the killed worker wrote after its death"
    assert _claims_of(run_id) == 2


def test_the_heartbeat_keeps_a_step_longer_than_the_lease_alive(database_url, tmp_path):
    # Two workers, so a reaper that wrongly took the run would find another taker.
    # A step more than twice the lease.
    workers = [start_worker_process(database_url, *STEPS, lease=SHORT_LEASE) for _ in range(2)]
    try:
        run_id = runs.create_run("owner", steps_input({"sleep": 2.5 * SHORT_LEASE}, output="long"))
        wait_until(lambda: _status(run_id) == "completed", timeout=30, what="the long step to complete")
    finally:
        for w in workers:
            stop_process(w)
    row = run_row(run_id)
    assert (row.output, row.requeue_count) == ("long", 0)
    assert "lease_lost" not in event_kinds(run_id) and _claims_of(run_id) == 1


def test_sigterm_drains_a_segment_in_flight(database_url, tmp_path):
    w = start_worker_process(database_url, *STEPS, log_path=tmp_path / "w.log")
    run_id = runs.create_run("owner", steps_input({"sleep": 1.5}, output="drained"))
    wait_until(lambda: _held_by_a_worker(run_id), what="the worker to claim the run")
    w.send_signal(signal.SIGTERM)
    assert exit_code(w, tmp_path / "w.log") == 0
    row = run_row(run_id)
    assert (row.status, row.output, row.requeue_count) == ("completed", "drained", 0)


def test_sigterm_releases_what_does_not_finish_within_the_grace(database_url, tmp_path):
    w = start_worker_process(database_url, *STEPS, "--grace", "0.5", log_path=tmp_path / "w.log")
    run_id = runs.create_run("owner", steps_input({"sleep": 30}, output="never here"))
    wait_until(lambda: _held_by_a_worker(run_id), what="the worker to claim the run")
    started = time.monotonic()
    w.send_signal(signal.SIGTERM)
    assert exit_code(w, tmp_path / "w.log") == 0
    assert time.monotonic() - started < 20, "the worker waited for the 30 s step instead of releasing it"
    row = run_row(run_id)
    assert (row.status, row.lease_holder, row.requeue_count) == ("queued", None, 0)
    assert event_kinds(run_id)[-1] == "requeued"
    taker = start_worker_process(database_url, "--executor", "sidecar.testing:StepExecutor")
    try:
        Run.update(input=steps_input(output="taken over")).where(Run.id == run_id).execute()
        wait_until(lambda: _status(run_id) == "completed", timeout=30, what="another worker to take it over")
    finally:
        stop_process(taker)


def test_a_worker_serves_its_own_counters_on_its_metrics_port(database_url, tmp_path):
    port = free_port()
    run_id = runs.create_run("owner", steps_input({"event": "work"}, output="done"))
    proc = start_worker_process(database_url, *STEPS, "--metrics-port", str(port), log_path=tmp_path / "w.log")
    try:
        wait_until(lambda: _status(run_id) == "completed", timeout=30, what="the run to complete")
        # The outcome is counted after the commit that completed the run: a scrape right after may be first.
        completed = 'nrllm_segment_outcomes_total{outcome="completed"} 1.0'

        def counted() -> str | None:
            text = scrape(port)
            return text if completed in text else None

        scraped = wait_until(counted, timeout=30, what="the completed segment counted")
    finally:
        stop_process(proc)
    assert "nrllm_claims_total 1.0" in scraped


def test_worker_processes_start_the_others_share_the_queue_and_stop_together(database_url, tmp_path):
    from sidecar.store.models import WorkerHeartbeat

    log_path = tmp_path / "w.log"
    ids = [runs.create_run("owner", steps_input({"event": "work"}, output=f"out {i}")) for i in range(60)]
    group = start_worker_process(database_url, *STEPS, "--processes", "3", log_path=log_path)
    try:
        wait_until(lambda: Run.select().where(Run.status == "completed").count() == 60, timeout=120,
                   what="60 runs completed")
        wait_until(lambda: WorkerHeartbeat.select().count() == 3, what="three worker processes beating")
        pids = {beat.pid for beat in WorkerHeartbeat.select()}
        assert group.pid in pids and len(pids) == 3
        # One of the others dies: it is started again.
        killed = next(p for p in pids if p != group.pid)
        os.kill(killed, signal.SIGKILL)
        wait_until(lambda: len({b.pid for b in WorkerHeartbeat.select()} - pids) == 1, timeout=60,
                   what="the dead worker process started again")
        running = {b.pid for b in WorkerHeartbeat.select()} - {killed}
    finally:
        code = stop_process(group, timeout=60)
    assert code == 0, log_path.read_text()[-3000:]
    assert all(_status(run_id) == "completed" for run_id in ids)
    for pid in running:
        wait_until(lambda pid=pid: not _alive(pid), what=f"worker process {pid} ended")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0] != "Z"
