"""1,000 event streams held open against a real `serve` process: health still answers at once, the API
processes use next to no CPU while no run moves, and a run that moves reaches its streams."""

import json
import resource
import time
import urllib.request

import pytest

from sidecar.store import runs, tokens
from tests.support.api import ACTOR
from tests.support.servers import cpu_seconds, process_tree, start_serve
from tests.support.streams import StreamCrowd

pytestmark = pytest.mark.slow

STREAMS = 1000
RUNS = 100
IDLE_SECONDS = 5.0
# Generous for a shared CI machine: an idle stream costs nothing, so the processes' few hundredths of a
# second come from their timers; polling 1,000 streams' tables would cost whole seconds.
IDLE_CPU_BOUND = 0.25  # of one core, averaged over IDLE_SECONDS


def _raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"the open-files limit ({hard}) is below the {needed} this test needs")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def _health_seconds(port: int) -> float:
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=30) as response:
        json.load(response)
    return time.monotonic() - started


@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
def test_a_thousand_open_streams_cost_no_cpu_while_idle_and_health_answers(database_url, tmp_path):
    _raise_fd_limit(4 * STREAMS)  # the serve process inherits it: its workers hold the other ends
    # A small pool per process: the database server is shared by the tests running at once.
    served = start_serve(f"{database_url}?max_connections=8", tmp_path / "serve.log", "--no-worker",
                         env={"NRLLM_STREAMS_PER_TOKEN": str(STREAMS)})
    crowd = None
    try:
        token = tokens.create("host-crowd", "host")[0]
        run_ids = [runs.create_run(ACTOR, f"queued {i}") for i in range(RUNS)]  # no worker: they stay queued
        paths = [f"/api/v1/runs/{run_ids[i % RUNS]}/events" for i in range(STREAMS)]
        crowd = StreamCrowd(served.port, {"Authorization": f"Bearer {token}", "X-Nrllm-Actor": ACTOR})
        crowd.open(paths)
        time.sleep(1.0)  # let the opening burst settle before measuring the quiet
        pids = process_tree(served.proc.pid)
        before = cpu_seconds(pids)
        time.sleep(IDLE_SECONDS)
        used = cpu_seconds(pids) - before
        assert used < IDLE_CPU_BOUND * IDLE_SECONDS, f"{used:.2f} s of CPU in {IDLE_SECONDS} s with idle streams"
        slowest = max(_health_seconds(served.port) for _ in range(20))
        assert slowest < 5, f"health took {slowest:.2f} s with {STREAMS} streams open"
        # A run that moves reaches its streams: cancelling one ends its ten streams with the Run.
        moved = run_ids[0]
        runs.request_cancel(moved, by="test")
        ended = [s for i, s in enumerate(crowd.sockets) if i % RUNS == 0]
        deadline = time.monotonic() + 30
        for sock in ended:
            sock.setblocking(True)
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            while b"event: run\n" not in crowd.received[sock]:
                crowd.received[sock] += sock.recv(65536)
            assert b'"status": "cancelled"' in crowd.received[sock]
    finally:
        if crowd is not None:
            crowd.close()
        assert served.stop() == 0, served.log()[-3000:]
