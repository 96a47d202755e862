"""The one way to start a worker process and the one way to run a worker in this process.

`start_worker_process` starts `nrllm-sidecar worker` against a database; `start_worker` (a fixture) starts
a `Worker` in this process, with the agent loop and a delegation coordinator as the command has them, and
stops it at the end of the test. Both hold leases of GENEROUS_LEASE seconds unless the test says otherwise:
only a test about a lease running out passes a short one.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.config import Settings
from sidecar.delegation.coordinator import Coordinator
from sidecar.domain.lease import LeasePolicy
from sidecar.engine import AgentLoop
from sidecar.engine.registry import build_registry
from sidecar.worker import Worker
from tests.support import GENEROUS_LEASE, ROOT


def start_worker_process(database_url: str, *args: str, lease: float = GENEROUS_LEASE, log_path: Path | None = None,
                         env: dict | None = None) -> subprocess.Popen:
    """Start `nrllm-sidecar worker` in its own process against the test database."""
    env = {**os.environ, "NRLLM_DATABASE_URL": database_url, "NRLLM_LEASE_SECONDS": str(lease), **(env or {})}
    stderr = open(log_path, "w") if log_path else subprocess.DEVNULL  # noqa: SIM115 - owned by the process
    return subprocess.Popen(
        [sys.executable, "-m", "sidecar.cli", "worker", "--poll-interval", "0.1", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )


@pytest.fixture
def start_worker(settings):
    """Start a worker in this process; every one started is stopped at the end of the test.

    start_worker()                           the agent loop and one coordinator, as `nrllm-sidecar worker`
    start_worker(executor=StepExecutor())   another executor (sidecar/testing.py)
    start_worker(settings=webhook.settings) settings of its own (a public URL, so its sends register pushes)
    concurrency, coordinators, tick        segments at once, coordinators beside it, their tick in seconds
    """
    started = []

    def start(executor=None, *, settings: Settings = settings, concurrency: int = 2,
              coordinators: int = 1, tick: float = 0.05) -> Worker:
        worker = Worker(executor or AgentLoop(build_registry(settings)), LeasePolicy(settings.lease_seconds),
                        concurrency=concurrency, poll_interval=0.05,
                        companions=tuple(Coordinator(settings, tick_seconds=tick) for _ in range(coordinators)))
        worker.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop(grace=10)


def stop_process(proc: subprocess.Popen, timeout: float = 20.0) -> int:
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def exit_code(proc: subprocess.Popen, log_path: Path, timeout: float = 30) -> int:
    """The exit status of a worker expected to exit; if it does not, its threads' stacks and log in the failure."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)  # the worker dumps its threads' stacks into its log
        try:
            proc.wait(1)  # the time to write them; it keeps running
        except subprocess.TimeoutExpired:
            proc.kill()
        raise AssertionError(f"the worker did not exit; its log:\n{log_path.read_text()}") from None


def scrape(port: int) -> str:
    """A process's Prometheus counters (`--metrics-port`)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return answer.read().decode()
