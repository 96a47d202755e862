"""Reload and stop of a real `serve` process: SIGHUP replaces the HTTP workers and the worker without a
lost event, SIGTERM ends streams at once and lets the worker finish its segment (its grace), and the
arbiter forks with no SQLite connection open."""

import os
import signal
import time

import pytest

from sidecar import failpoints
from sidecar.domain.lease import LeasePolicy
from sidecar.serving.server import GRACEFUL_TIMEOUT
from sidecar.store import runs, tokens, workers
from tests.support.api import ACTOR, as_host
from tests.support.databases import sqlite_files_open_in
from tests.support.runs import run_row, sequences, steps_input
from tests.support.servers import STARTED, STEPS, process_tree, start_serve
from tests.support.streams import EventStream
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def follow_across_reconnects(base_url: str, run_id: str, headers: dict, on_event=lambda seen: None):
    """Read a run's stream as an EventSource does: a stream that ends before the Run is reconnected with
    Last-Event-ID. Returns the event sequences seen, the final Run and the number of connections."""
    seen: list[int] = []
    connections = 0
    while True:
        resume = {"Last-Event-ID": str(seen[-1])} if seen else {}
        stream = EventStream(base_url, "GET", f"/api/v1/runs/{run_id}/events", {**headers, **resume})
        connections += 1
        assert stream.status == 200, stream.response.read()
        for id_, kind, data in stream:
            if kind == "run":
                return seen, data, connections
            seen.append(int(id_))
            on_event(seen)
        assert connections < 20, "the stream keeps ending without the run"


def test_sighup_replaces_workers_and_streams_resume_with_last_event_id_missing_nothing(database_url, tmp_path):
    served = start_serve(database_url, tmp_path / "serve.log", *STEPS, "--poll-interval", "0.05", "--grace", "30")
    try:
        token = tokens.create("host-reload", "host")[0]
        run_id = runs.create_run(ACTOR, steps_input(*[{"sleep": 0.1, "event": f"step {i}"} for i in range(60)]))
        api_pids = set(process_tree(served.proc.pid))
        reloaded = []

        def reload_once(seen):
            if len(seen) == 5 and not reloaded:
                reloaded.append(time.monotonic())
                os.kill(served.proc.pid, signal.SIGHUP)

        seen, final, connections = follow_across_reconnects(served.base_url, run_id, as_host(token), reload_once)
        assert reloaded and connections >= 2, "the reload ended the stream, and the client came back"
        assert final["status"] == "completed" and run_row(run_id).status == "completed"
        assert seen == sequences(run_id), "every event once, in order, across the reload"
        wait_until(lambda: not api_pids & set(process_tree(served.proc.pid)[1:]), timeout=60,
                   what="new HTTP workers and a new worker to replace the old ones")
    finally:
        assert served.stop() == 0, served.log()[-3000:]


def test_sigterm_ends_streams_at_once_and_the_worker_finishes_its_segment_within_its_grace(database_url, tmp_path):
    served = start_serve(database_url, tmp_path / "serve.log", *STEPS, "--poll-interval", "0.05", "--grace", "30")
    token = tokens.create("host-stop", "host")[0]
    run_id = runs.create_run(ACTOR, steps_input({"event": "began"}, {"sleep": 4}, {"event": "ended"}))
    wait_until(lambda: run_row(run_id).status == "running", what="the worker to start the run")
    stream = EventStream(served.base_url, "GET", f"/api/v1/runs/{run_id}/events", as_host(token))
    assert stream.status == 200
    processes = process_tree(served.proc.pid)  # the arbiter, its HTTP workers, the worker
    served.proc.send_signal(signal.SIGTERM)
    stopped_at = time.monotonic()
    messages = list(stream)
    assert time.monotonic() - stopped_at < 20, "the stream ended when the server stopped, not at its timeout"
    assert not messages or messages[-1][1] != "run", "the stream ended before the run did: the client resumes"
    assert served.proc.wait(90) == 0, served.log()[-3000:]
    row = run_row(run_id)
    assert (row.status, row.output) == ("completed", "done"), "the segment in flight finished within the grace"
    assert workers.alive_count(LeasePolicy(5).worker_alive_window) == 0, "the worker said goodbye (stop(grace))"
    assert not [pid for pid in processes if os.path.exists(f"/proc/{pid}")], "no process is left behind"


def _worker_pids(served) -> list[int]:
    return [pid for pid in process_tree(served.proc.pid)
            if b"\0worker\0" in open(f"/proc/{pid}/cmdline", "rb").read()]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_worker_that_dies_is_started_again_and_runs_go_on(database_url, tmp_path):
    served = start_serve(database_url, tmp_path / "serve.log", *STEPS, "--poll-interval", "0.05")
    try:
        first = wait_until(lambda: _worker_pids(served), timeout=30, what="the worker beside the API")
        os.kill(first[0], signal.SIGKILL)
        again = wait_until(lambda: [p for p in _worker_pids(served) if p not in first], timeout=60,
                           what="serve to start the worker again")
        assert len(again) == 1
        run_id = runs.create_run(ACTOR, steps_input({"event": "after the restart"}))
        wait_until(lambda: run_row(run_id).status == "completed", timeout=60, what="the new worker to run it")
    finally:
        assert served.stop() == 0, served.log()[-3000:]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_sigterm_while_an_http_worker_boots_still_stops_it_at_once(database_url, tmp_path):
    """A worker that takes the SIGTERM before it has its own handlers (the stall holds it there) would miss
    it and serve until the graceful timeout (30 s) killed it; the arbiter says it again until it is gone."""
    served = start_serve(database_url, tmp_path / "serve.log", "--no-worker", "--workers", "1", until=STARTED,
                         env={"NRLLM_FAILPOINT": "http_worker.boot"})
    try:
        wait_until(lambda: "Booting worker" in served.log(), timeout=60, what="an HTTP worker to boot")
        served.proc.send_signal(signal.SIGTERM)
        stopped_at = time.monotonic()
        assert served.proc.wait(60) == 0, served.log()[-3000:]
        took = time.monotonic() - stopped_at
        assert took < failpoints.STALL_SECONDS + 15 < GRACEFUL_TIMEOUT, f"stopped after {took:.1f} s"
    finally:
        served.stop()


def test_the_arbiter_forks_its_http_workers_with_no_sqlite_connection_open(tmp_path):
    """A child copies the locks SQLite keeps in its parent's memory for the parent's connections, and takes
    them for its own. The arbiter migrates a new database, so the commits started its checkpointing thread:
    when it says it listens (its HTTP workers are forked next), that connection must be closed too."""
    database = (tmp_path / "new.db").resolve()
    served = start_serve(f"sqlite:///{database}", tmp_path / "serve.log", "--no-worker", "--workers", "1",
                         until=STARTED)
    try:
        wait_until(lambda: "listening on" in served.log(), timeout=60, interval=0.01, what="serve to listen")
        assert sqlite_files_open_in(served.proc.pid, database) == []
    finally:
        assert served.stop() == 0, served.log()[-3000:]
