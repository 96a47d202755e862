"""A graceful stop never lets two workers execute one run at once: real worker processes, a lease shorter than
the tool, and the worker holding the run stopped with SIGTERM, with a grace longer and shorter than the tool.

The tool (`tick`, tests/support/engine.py) ignores its lease and records in a file which process ran it, when
it started, every 0.2 s while it works, and when it ended.
"""

import signal
import time

import pytest

from sidecar.store import events, runs
from sidecar.store.models import ModelTurn, ToolResult, WorkerHeartbeat
from tests.support.engine import CallLog
from tests.support.private_servers import free_port
from tests.support.runs import run_row
from tests.support.waiting import wait_until
from tests.support.workers import exit_code, scrape, start_worker_process, stop_process

pytestmark = pytest.mark.slow

TICKING = ("--executor", "tests.support.engine:TickingAgentLoop")
TOOL_SECONDS = 6


def _ticking_run() -> str:
    return runs.create_run("be_user:7", "work, then report", spec={"provider": "scripted", "script": [
        {"tool_calls": [{"id": "call_1", "name": "tick", "arguments": {"seconds": TOOL_SECONDS}}]},
        {"content": "done: {last_tool_result}"},
    ]})


def _records(tool_log) -> list[tuple[str, int, float]]:
    """(what, pid, unix time) of every line the tool wrote."""
    return [(what, int(pid), float(at)) for what, pid, at in (line.split() for line in CallLog.read(tool_log))]


def _of(records, what: str, pid: int | None = None) -> list[float]:
    return [at for w, p, at in records if w == what and (pid is None or p == pid)]


class TwoWorkers:
    """Two `nrllm-sidecar worker` processes on one database, each serving its counters."""

    def __init__(self, database_url, tmp_path, *, lease: float, grace: float):
        self.ports = [free_port() for _ in range(2)]
        self.logs = [tmp_path / f"w{n}.log" for n in range(2)]
        self.procs = [start_worker_process(database_url, *TICKING, "--grace", str(grace),
                                           "--metrics-port", str(self.ports[n]), lease=lease, log_path=self.logs[n])
                      for n in range(2)]
        wait_until(lambda: WorkerHeartbeat.select().count() == 2, timeout=60, what="both workers to start")

    def index_of(self, pid: int) -> int:
        return [p.pid for p in self.procs].index(pid)

    def stop(self) -> None:
        for proc in self.procs:
            stop_process(proc)


@pytest.fixture
def tool_log(tmp_path, monkeypatch):
    path = tmp_path / "tool.log"
    monkeypatch.setenv("NRLLM_TEST_CALL_LOG", str(path))  # the worker processes inherit it
    return path


def _started_by_one_worker(tool_log, workers: TwoWorkers) -> int:
    """Wait for the tool to start; the index of the worker running it."""
    wait_until(lambda: _of(_records(tool_log), "start"), timeout=60, what="a worker to start the tool")
    ((_, pid, _),) = _records(tool_log)[:1]
    return workers.index_of(pid)


def test_a_tool_that_ends_within_the_grace_runs_once_although_it_outlasts_the_lease(database_url, tmp_path,
                                                                                      tool_log):
    workers = TwoWorkers(database_url, tmp_path, lease=2.0, grace=60)
    try:
        run_id = _ticking_run()
        holder = _started_by_one_worker(tool_log, workers)
        other = 1 - holder
        signalled = time.time()
        workers.procs[holder].send_signal(signal.SIGTERM)
        assert exit_code(workers.procs[holder], workers.logs[holder], timeout=60) == 0
        scraped = scrape(workers.ports[other])
    finally:
        workers.stop()

    row = run_row(run_id)
    assert (row.status, row.output, row.requeue_count) == ("completed", "done: ticked", 0)
    records = _records(tool_log)
    pid = workers.procs[holder].pid
    assert [(what, p) for what, p, _ in records if what != "tick"] == [("start", pid), ("end", pid)]
    (ended,) = _of(records, "end")
    assert ended - signalled > 2.0, "the tool did not outlast the lease after the signal: nothing was shown"
    log = events.list_events(run_id)
    assert not {"lease_lost", "requeued", "handed_back"} & {e["kind"] for e in log}
    assert [e["payload"]["to"] for e in log if e["kind"] == "status"] == ["queued", "running", "completed"]
    # The other worker reaped nothing and claimed nothing while the holder finished.
    assert "nrllm_reaped_total{" not in scraped and "nrllm_claims_total 0.0" in scraped, scraped


def test_a_tool_still_running_when_the_grace_ends_is_handed_back_and_dies_with_its_process(database_url, tmp_path,
                                                                                            tool_log):
    # A long lease: the other worker must take the run over from the hand-back, long before the lease would
    # have let it.
    workers = TwoWorkers(database_url, tmp_path, lease=10.0, grace=1.0)
    try:
        run_id = _ticking_run()
        holder = _started_by_one_worker(tool_log, workers)
        other = 1 - holder
        lease_until = run_row(run_id).lease_expires_at  # heartbeats only push it later
        workers.procs[holder].send_signal(signal.SIGTERM)
        assert exit_code(workers.procs[holder], workers.logs[holder], timeout=60) == 0
        wait_until(lambda: run_row(run_id).status == "completed", timeout=60, what="the other worker to finish")
        scraped = scrape(workers.ports[other])
    finally:
        workers.stop()

    first, second = workers.procs[holder].pid, workers.procs[other].pid
    row = run_row(run_id)
    assert (row.status, row.output, row.requeue_count) == ("completed", "done: ticked", 0)
    log = events.list_events(run_id)
    (handed_back,) = [e for e in log if e["kind"] == "handed_back"]
    assert handed_back["payload"]["grace_seconds"] == 1.0 and f":{first}:" in handed_back["payload"]["holder"]
    after = [e for e in log if e["sequence"] > handed_back["sequence"]]
    assert [e["kind"] for e in after[:3]] == ["status", "requeued", "status"]
    taken_over = after[2]
    assert taken_over["payload"] == {"from": "queued", "to": "running"}
    assert taken_over["at"] < lease_until, "the run waited for its lease to expire instead of being handed back"
    assert "lease_lost" not in {e["kind"] for e in log}

    # The tool ran twice, never at once: the first run stopped with its process, before the second began,
    # and only the second ended.
    records = _records(tool_log)
    assert [(what, p) for what, p, _ in records if what != "tick"] == [("start", first), ("start", second),
                                                                         ("end", second)]
    (second_start,) = _of(records, "start", second)
    assert max(_of(records, "tick", first) + _of(records, "start", first)) < second_start
    # The first worker's segment wrote nothing after the hand-back: one tool result, the other worker's.
    assert [e["kind"] for e in log].count("tool") == 1 and ToolResult.select().count() == 1
    assert ModelTurn.select().count() == 2  # the first worker's saved turn, replayed; the second's answer
    assert "handed back run" in workers.logs[holder].read_text()
    assert "nrllm_reaped_total{" not in scraped and "nrllm_claims_total 1.0" in scraped, scraped
