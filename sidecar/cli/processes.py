"""`nrllm-sidecar worker`, `serve` and `reap`: the processes that execute runs and serve the API."""

import faulthandler
import gc
import importlib
import logging
import os
import signal
import sys
import threading
import time

import click
from prometheus_client import start_http_server

from .. import affinity
from ..bootstrap import from_env as _bind
from ..config import Settings
from ..domain.lease import LeasePolicy
from ..serving.server import DEFAULT_THREADS, DEFAULT_WORKERS
from ..store import db as store_db
from ..store import leases


def _load_executor(dotted: str):
    module_name, _, attr = dotted.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)()
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"cannot load executor {dotted!r}: {exc}", param_hint="--executor") from exc


def _on_termination(stop) -> None:
    """SIGTERM and SIGINT stop gracefully (once); a second signal is left to the default handler.

    `stop` stops claiming at once and hands back what is still held after the grace; then the process ends
    (_exit_stopped).

    SIGUSR1 writes every thread's stack to standard error, for an operator looking at a stuck process.
    """
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    def handler(signum, _frame):
        signal.signal(signum, signal.SIG_DFL)
        threading.Thread(target=stop, name="shutdown", daemon=True).start()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _exit_stopped() -> None:
    """End the process after a graceful stop, at once, with status 0.

    A thread still executing a segment the worker handed back must not outlive the hand-back (its writes are
    fenced, but a tool's work outside the database is not), and an ordinary exit would wait for it: the
    interpreter joins the worker's pool threads. So the logs are flushed and the process ends here.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


DEFAULT_EXECUTOR = "sidecar.engine:AgentLoop"


def _schedule_as_batch() -> None:
    """Run this process, and the threads and processes it starts, under Linux's SCHED_BATCH, unless it was
    started under another policy than the default one (an operator's `chrt` or systemd's
    CPUSchedulingPolicy= stays as it is).

    A worker or HTTP process is many threads sharing one interpreter lock. A thread waking another (a lock
    handed on, a segment or a request submitted to a pool, a condition notified) was often preempted by the
    thread it woke, which then found the interpreter lock still held by its waker and slept again: two
    context switches for nothing, with the lock held through them. SCHED_BATCH does not preempt on
    wake-up, and otherwise shares the cores as the default policy does, at the same nice value
    (docs/configuration.md, "Scheduling policy")."""
    if not hasattr(os, "SCHED_BATCH"):
        return
    try:
        if os.sched_getscheduler(0) == os.SCHED_OTHER:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except OSError as exc:  # a sandbox that forbids it: the default policy, as before
        logging.getLogger("nrllm_sidecar.processes").debug("SCHED_BATCH not set: %s", exc)


def _make_worker(settings: Settings, concurrency: int, poll_interval: float, executor: str):
    from ..delegation.coordinator import Coordinator
    from ..purger import RetentionPurger
    from ..store.doorbell import Doorbell
    from ..worker import Worker

    purger = (RetentionPurger(settings.retention),) if settings.retention else ()
    return Worker(
        _load_executor(executor),
        LeasePolicy(settings.lease_seconds),
        concurrency=concurrency,
        poll_interval=poll_interval,
        # The doorbell first: another process's ring wakes the loop and the coordinator (store/doorbell.py).
        companions=(Doorbell(), Coordinator(settings), *purger),
    )


# The defaults of --concurrency and --processes, by the database (docs/configuration.md, "Worker processes").
# On SQLite a process per core (SQLite has one writer, so at most 4) uses the machine, each with 8 segment
# threads: with 16 the cycle's p99 and a push's resumption were slower, since every thread with work takes its
# turn at the process's interpreter lock and at the one writer (docs/performance.md, "Eight segment threads on
# SQLite"). On a server database each thread holds one of a process's pooled connections (store/db.py,
# POOL_SIZE), and workers are scaled by starting more, where the server's connections allow.
DEFAULT_CONCURRENCY = 8
SQLITE_MOST_PROCESSES = 4


def sized(kind: str, concurrency: int | None, processes: int | None) -> tuple[int, int]:
    """(concurrency, processes) for a worker on a database of `kind`: what was given, else the defaults."""
    if concurrency is None:
        concurrency = DEFAULT_CONCURRENCY
    if processes is None:
        processes = min(os.cpu_count() or 1, SQLITE_MOST_PROCESSES) if kind == "sqlite" else 1
    return concurrency, processes


worker_options = [
    click.option("--concurrency", type=click.IntRange(min=1),
                 help=f"Segments executed at once (threads) [default: {DEFAULT_CONCURRENCY}]."),
    click.option("--poll-interval", default=1.0, show_default=True, type=click.FloatRange(min=0.01),
                 help="Seconds between polls of the queue for runs queued by other processes."),
    click.option("--executor", default=DEFAULT_EXECUTOR, show_default=True, hidden=True,
                 help="module:Class of the segment executor."),
    click.option("--grace", default=30.0, show_default=True, type=click.FloatRange(min=0),
                 help="On SIGTERM, seconds to let segments finish (their leases are still renewed, so this may "
                      "exceed the lease) before handing the rest back to the queue."),
    click.option("--processes", type=click.IntRange(min=1),
                 help="Worker processes, each with --concurrency threads and its own coordinator: one per core "
                      "uses every core (a process's threads share one interpreter lock) [default: one per core, "
                      "at most 4, on SQLite; 1 on a server database]."),
]


def _worker_argv(concurrency: int, poll_interval: float, executor: str, grace: float, processes: int = 1,
                 cpu: int | None = None) -> list:
    """The command line of a worker process started by this one (serve's companion, worker's others)."""
    return [sys.executable, "-m", "sidecar.cli", *(["-v"] if logging.getLogger().isEnabledFor(logging.DEBUG) else []),
            "worker", "--concurrency", str(concurrency), "--poll-interval", str(poll_interval),
            "--executor", executor, "--grace", str(grace), "--processes", str(processes),
            *(["--cpu", str(cpu)] if cpu is not None else [])]


def _with_worker_options(fn):
    for option in reversed(worker_options):
        fn = option(fn)
    return fn


@click.command()
@_with_worker_options
@click.option("--metrics-port", type=click.IntRange(1, 65535),
              help="Serve this process's Prometheus counters on http://HOST:PORT/metrics (no token).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="The address --metrics-port listens on.")
@click.option("--cpu", type=click.IntRange(min=0), hidden=True,
              help="The core this process is held to, chosen by the worker process that starts it.")
def worker(concurrency: int, poll_interval: float, executor: str, grace: float, processes: int,
           metrics_port: int | None, metrics_host: str, cpu: int | None) -> None:
    """Claim queued runs and execute them until SIGTERM; then finish or hand back what is held.

    With --processes N this process is one of the N and starts the others (started again if one dies); a
    SIGTERM stops all of them, each with its --grace."""
    from ..serving.server import Companion

    _schedule_as_batch()  # first: every thread and process started from here on inherits the policy
    settings = _bind(migrate=True, wait_for_database=True)
    concurrency, processes = sized(store_db.dialect(), concurrency, processes)
    if metrics_port is not None:
        # The API's /metrics shows the counters of its own process only: a worker elsewhere serves its own.
        start_http_server(metrics_port, addr=metrics_host)
    # One core for each process of the group (sidecar/affinity.py); this one is the first.
    cores = affinity.cores_for_group(processes, settings.cpu_pinning, affinity.usable_cores()) if cpu is None else []
    others = [Companion(_worker_argv(concurrency, poll_interval, executor, grace, cpu=affinity.core_of(index, cores)),
                        grace)
              for index in range(1, processes)]
    mine = cpu if cpu is not None else affinity.core_of(0, cores)
    if mine is not None:
        affinity.pin(mine)
    for other in others:
        other.start()
    w = _make_worker(settings, concurrency, poll_interval, executor)
    restarting = threading.Lock()  # no process is started again once the others are asked to stop

    def stop() -> None:
        with restarting:
            for other in others:
                other.begin_stop()
        w.stop(grace)

    _on_termination(stop)
    if others:
        threading.Thread(target=_keep_running, args=(others, restarting), name="worker-processes",
                         daemon=True).start()
    # What start-up built (modules, the registry, the plugins) lives as long as the process. Frozen, the
    # collector no longer walks it: a full collection, a pause of every segment thread, took 20 to 30 ms
    # and now takes about 10 (as in each HTTP worker, serving/http_worker.py).
    gc.freeze()
    w.run()
    for other in others:
        other.wait_stopped()
    _exit_stopped()


def _keep_running(others: list, restarting: threading.Lock) -> None:
    """Start again a worker process that ended while not asked to stop (at most every few seconds)."""
    while True:
        time.sleep(1.0)
        with restarting:
            for other in others:
                other.keep_running()


@click.command()
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1))
def reap(limit: int) -> None:
    """Act on running runs whose lease expired: requeue, or fail them when retrying is unsafe."""
    _bind()
    for item in leases.reap(limit):
        click.echo(f"{item.run_id}\t{item.action}")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8780, show_default=True, type=int)
@click.option("--no-worker", is_flag=True, help="Serve the API only; workers run elsewhere.")
@click.option("--demo", is_flag=True, help="Also start a demo: two runs that wait, and how to watch and approve them.")
@click.option("--workers", default=DEFAULT_WORKERS, show_default=True, type=click.IntRange(min=1),
              help="HTTP worker processes (gunicorn).")
@click.option("--threads", default=DEFAULT_THREADS, show_default=True, type=click.IntRange(min=2),
              help="Threads of each HTTP worker: an open event stream holds one.")
@_with_worker_options
def serve(host, port, no_worker, demo, workers, threads, concurrency, poll_interval, executor, grace,
          processes) -> None:
    """Serve the HTTP API with gunicorn (migrating the database first), with a worker beside it unless --no-worker.

    SIGTERM stops gracefully (requests finish, streams end, the worker gets its --grace); SIGHUP replaces
    the HTTP workers and the worker without dropping requests."""
    from ..serving.server import Companion, ServeOptions, SidecarServer

    _schedule_as_batch()  # first: gunicorn's processes and the worker beside them inherit the policy
    if demo:
        from .. import demo as demo_setup

        # Before the settings are read, and inherited by the worker process: the demo agent is on 127.0.0.1.
        demo_setup.allow_demo_agent()
    # Here, once: a broken plugin or an old schema stops serve before it listens; an outage is waited out.
    settings = _bind(migrate=True, wait_for_database=True)
    concurrency, processes = sized(store_db.dialect(), concurrency, processes)
    companion = None
    if not no_worker:
        companion = Companion(_worker_argv(concurrency, poll_interval, executor, grace, processes), grace)

    def on_ready(bound_port: int) -> None:
        if demo:
            shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
            click.echo(demo_setup.prepare(settings, f"http://{shown}:{bound_port}"))
        store_db.close_all()  # the HTTP workers are forked next: no connection may be shared with them
        click.echo(f"nrllm-sidecar listening on http://{host}:{bound_port}", err=True)

    SidecarServer(ServeOptions(host, port, workers, threads), companion, on_ready).run()
