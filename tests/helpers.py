"""Small helpers shared by the tests."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from sidecar.store import db as store_db
from sidecar.store import events
from sidecar.store.models import Run

ROOT = Path(__file__).resolve().parent.parent


def run_row(run_id: str) -> Run:
    return Run.get(Run.id == run_id)


def event_kinds(run_id: str) -> list[str]:
    return [e["kind"] for e in events.list_events(run_id)]


def sequences(run_id: str) -> list[int]:
    return [e["sequence"] for e in events.list_events(run_id)]


def steps_input(*steps, output="done") -> str:
    return json.dumps({"steps": list(steps), "output": output})


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def start_worker(database_url: str, *args: str, lease: float = 1.0, log_path: Path | None = None,
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


def stop_process(proc: subprocess.Popen, timeout: float = 20.0) -> int:
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def cli_in_process(database_url: str, *args: str, env: dict | None = None):
    """Invoke the command line in this process (click's runner), then give the test back its own database
    binding (the command binds the store to the URL again)."""
    from sidecar.cli import main

    bound = store_db.database.obj
    result = CliRunner().invoke(main, list(args), env={"NRLLM_DATABASE_URL": database_url, **(env or {})})
    if store_db.database.obj is not bound:
        store_db.database.obj.close_all() if hasattr(store_db.database.obj, "close_all") else \
            store_db.database.obj.close()
        store_db.database.initialize(bound)
    return result


def exit_code(proc: subprocess.Popen, log_path: Path, timeout: float = 30) -> int:
    """The exit status of a worker expected to exit; if it does not, its threads' stacks and log in the failure."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)  # the worker dumps its threads' stacks into its log
        time.sleep(1)
        proc.kill()
        raise AssertionError(f"the worker did not exit; its log:\n{log_path.read_text()}") from None


def scrape(port: int) -> str:
    """A process's Prometheus counters (`--metrics-port`)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return answer.read().decode()
