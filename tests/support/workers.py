"""The one way to start a worker process and the one way to run a worker in this process.

`start_worker_process` starts `nrllm-sidecar worker` against a database; `worker_in_thread` starts a
`Worker` in this process, with the agent loop and a delegation coordinator as the command has them, and the
`start_worker` fixture does so and stops it at the end of the test. Both hold leases of GENEROUS_LEASE
seconds unless the test says otherwise: only a test about a lease running out passes a short one.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sidecar.config import Settings
from sidecar.delegation.coordinator import Coordinator
from sidecar.domain.lease import LeasePolicy
from sidecar.engine import AgentLoop
from sidecar.engine.registry import build_registry
from sidecar.store import db as store_db
from sidecar.store import write_lock
from sidecar.worker import Worker
from tests.support import GENEROUS_LEASE, ROOT
from tests.support.databases import file_lock_is_free


def one_worker_process(args: tuple[str, ...]) -> tuple[str, ...]:
    """`worker` or `serve` arguments for one worker process unless they say `--processes` (the default on
    SQLite is one per core, which a test would not expect)."""
    return args if "--processes" in args else (*args, "--processes", "1")


def start_worker_process(database_url: str, *args: str, lease: float = GENEROUS_LEASE, log_path: Path | None = None,
                         env: dict | None = None, preexec_fn=None) -> subprocess.Popen:
    """Start `nrllm-sidecar worker` in its own process against the test database: one worker process unless
    `args` say `--processes` (the default would start one per core). `preexec_fn` runs in the child before
    the command, as an operator's wrapper (`chrt`, `nice`) would."""
    args = one_worker_process(args)
    env = {**os.environ, "NRLLM_DATABASE_URL": database_url, "NRLLM_LEASE_SECONDS": str(lease), **(env or {})}
    stderr = open(log_path, "w") if log_path else subprocess.DEVNULL  # noqa: SIM115 - owned by the process
    return subprocess.Popen(
        [sys.executable, "-m", "sidecar.cli", "worker", "--poll-interval", "0.1", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        preexec_fn=preexec_fn,
    )


def worker_in_thread(settings: Settings, executor=None, *, concurrency: int = 2, coordinators: int = 1,
                     tick: float = 0.05, lease: float | None = None, companions: tuple = ()) -> Worker:
    """A started worker in this process: `executor` (by default the agent loop of the settings), and
    `coordinators` delegation coordinators ticking every `tick` seconds beside it, as `nrllm-sidecar worker`
    has one, and other `companions`; its lease is the settings' unless `lease` says otherwise. The caller
    stops it."""
    coordinating = tuple(_counting_ticks(Coordinator(settings, tick_seconds=tick)) for _ in range(coordinators))
    worker = Worker(executor or AgentLoop(build_registry(settings)), LeasePolicy(lease or settings.lease_seconds),
                    concurrency=concurrency, poll_interval=0.05, companions=coordinating + tuple(companions))
    worker.start()
    return worker


@pytest.fixture
def start_worker(settings):
    """Start workers in this process (`worker_in_thread`, with the test's settings unless given others);
    every one started is stopped at the end of the test.

    start_worker()                           the agent loop and one coordinator, as `nrllm-sidecar worker`
    start_worker(executor=StepExecutor())   another executor (sidecar/testing.py)
    start_worker(settings=webhook.settings) settings of its own (a public URL, so its sends register pushes)
    """
    started = []

    def start(executor=None, *, settings: Settings = settings, **options) -> Worker:
        worker = worker_in_thread(settings, executor, **options)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop(grace=10)


class _TickCount:
    def __init__(self):
        self.done = 0
        self.changed = threading.Condition()

    def add(self) -> None:
        with self.changed:
            self.done += 1
            self.changed.notify_all()


def _counting_ticks(coordinator: Coordinator) -> Coordinator:
    """The coordinator, counting its finished ticks (for `wait_for_ticks`): each of its looks at what is due
    (it polls the due waits and sends the due cancels, if any)."""
    count, look = _TickCount(), coordinator.look

    def counted(*args, **kwargs):
        try:
            return look(*args, **kwargs)
        finally:
            count.add()

    coordinator.look = counted
    coordinator.tick_count = count
    return coordinator


def wait_for_ticks(worker: Worker, ticks: int = 5, timeout: float = 120.0) -> None:
    """Until every coordinator of an in-process worker finished `ticks` more ticks (each looks at every due
    wait and sends what is to be sent): what a test waits for to say "nothing more happened", rather than
    a time that a busy machine may fill with fewer ticks. Each coordinator is woken once per tick period,
    as where it listens for notifications (PostgreSQL) it would otherwise sleep until something is due."""
    deadline = time.monotonic() + timeout
    for coordinator in (c for c in worker.companions if hasattr(c, "tick_count")):
        count = coordinator.tick_count
        with count.changed:
            wanted = count.done + ticks
            while count.done < wanted:
                assert time.monotonic() < deadline, f"the coordinator finished fewer than {ticks} ticks in {timeout}s"
                coordinator.wake()
                count.changed.wait(coordinator.tick_seconds)


def stop_process(proc: subprocess.Popen, timeout: float = 20.0) -> int:
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def stop_between_transactions(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGSTOP a worker process at a moment it holds no transaction open on the store's database, as a
    process frozen by an operator or the kernel while it works. Stopped inside one, it would keep what the
    transaction holds (on SQLite the one writer's lock, elsewhere the rows it wrote) from every other
    process until it is continued: such a test would wait on the stopped process, not on the system. So
    it is continued for a moment and stopped again until it holds none."""
    deadline = time.monotonic() + timeout
    while True:
        os.kill(proc.pid, signal.SIGSTOP)
        while not _all_threads_stopped(proc.pid):  # each thread stops when it next runs
            time.sleep(0.001)
        if not _others_in_a_transaction():
            return
        os.kill(proc.pid, signal.SIGCONT)
        assert time.monotonic() < deadline, "the worker process was always inside a transaction when stopped"
        time.sleep(0.01)


def _all_threads_stopped(pid: int) -> bool:
    states = [(task / "stat").read_text().rpartition(")")[2].split()[0] for task in Path(f"/proc/{pid}/task").iterdir()]
    return all(state == "T" for state in states)


def _others_in_a_transaction() -> bool:
    """Whether a connection other than this process's holds a transaction open on the store's database (on a
    server, only this test's database: other tests may run beside it)."""
    if store_db.dialect() == "sqlite":  # every writer holds the writer file's lock from BEGIN to COMMIT
        return not file_lock_is_free(os.path.realpath(store_db.database.obj.database) + write_lock.SUFFIX)
    if store_db.dialect() == "postgresql":
        sql = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
               "AND pid <> pg_backend_pid() AND xact_start IS NOT NULL")
    else:
        # InnoDB refreshes what it shows of its transactions at most every 0.1 s: a look taken before the
        # process stopped could miss a transaction it began since.
        time.sleep(0.15)
        sql = ("SELECT count(*) FROM information_schema.innodb_trx AS t JOIN information_schema.processlist AS p "
               "ON p.id = t.trx_mysql_thread_id WHERE p.db = DATABASE() AND p.id <> CONNECTION_ID()")
    return store_db.database.execute_sql(sql).fetchone()[0] > 0


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
