"""The command line, `nrllm-sidecar`: thin wrappers that parse, call the store or a service, print."""

import faulthandler
import importlib
import logging
import os
import signal
import sys
import threading
import time

import click
from prometheus_client import start_http_server

from . import __version__, bootstrap, logs
from .bootstrap import SchemaNotCurrent
from .config import Settings
from .domain.lease import LeasePolicy
from .keys import SecretKeysError
from .plugins import PluginLoadError
from .serving.server import DEFAULT_THREADS, DEFAULT_WORKERS
from .store import db, leases, migrations

_bind = bootstrap.from_env


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


# -h everywhere: the context settings of the top group are inherited by every command under it.
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nrllm-sidecar")
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
def main(verbose: bool) -> None:
    """nr-llm sidecar: agent runs that can wait for people and remote agents."""
    logs.configure(verbose=verbose, log_format=os.environ.get("NRLLM_LOG_FORMAT") or "text")


@main.group("db")
def db_group() -> None:
    """The database schema."""


@db_group.command("upgrade")
def db_upgrade() -> None:
    """Apply pending migrations (idempotent; safe to run from several processes at once)."""
    db.bind(Settings.from_env().database_url)  # no plugins needed: a broken one must not block migrating
    applied = migrations.upgrade()
    click.echo(f"schema at version {migrations.current_version()}" + (f" (applied {applied})" if applied else ""))


DEFAULT_EXECUTOR = "sidecar.engine:AgentLoop"


def _make_worker(settings: Settings, concurrency: int, poll_interval: float, executor: str):
    from .delegation.coordinator import Coordinator
    from .purger import RetentionPurger
    from .worker import Worker

    purger = (RetentionPurger(settings.retention),) if settings.retention else ()
    return Worker(
        _load_executor(executor),
        LeasePolicy(settings.lease_seconds),
        concurrency=concurrency,
        poll_interval=poll_interval,
        companions=(Coordinator(settings), *purger),
    )


worker_options = [
    click.option("--concurrency", default=4, show_default=True, type=click.IntRange(min=1),
                 help="Segments executed at once (threads)."),
    click.option("--poll-interval", default=1.0, show_default=True, type=click.FloatRange(min=0.01),
                 help="Seconds between polls of the queue for runs queued by other processes."),
    click.option("--executor", default=DEFAULT_EXECUTOR, show_default=True, hidden=True,
                 help="module:Class of the segment executor."),
    click.option("--grace", default=30.0, show_default=True, type=click.FloatRange(min=0),
                 help="On SIGTERM, seconds to let segments finish (their leases are still renewed, so this may "
                      "exceed the lease) before handing the rest back to the queue."),
    click.option("--processes", default=1, show_default=True, type=click.IntRange(min=1),
                 help="Worker processes, each with --concurrency threads and its own coordinator: one per core "
                      "uses every core (a process's threads share one interpreter lock)."),
]


def _worker_argv(concurrency: int, poll_interval: float, executor: str, grace: float, processes: int = 1) -> list:
    """The command line of a worker process started by this one (serve's companion, worker's others)."""
    return [sys.executable, "-m", "sidecar.cli", *(["-v"] if logging.getLogger().isEnabledFor(logging.DEBUG) else []),
            "worker", "--concurrency", str(concurrency), "--poll-interval", str(poll_interval),
            "--executor", executor, "--grace", str(grace), "--processes", str(processes)]


def _with_worker_options(fn):
    for option in reversed(worker_options):
        fn = option(fn)
    return fn


@main.command()
@_with_worker_options
@click.option("--metrics-port", type=click.IntRange(1, 65535),
              help="Serve this process's Prometheus counters on http://HOST:PORT/metrics (no token).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="The address --metrics-port listens on.")
def worker(concurrency: int, poll_interval: float, executor: str, grace: float, processes: int,
           metrics_port: int | None, metrics_host: str) -> None:
    """Claim queued runs and execute them until SIGTERM; then finish or hand back what is held.

    With --processes N this process is one of the N and starts the others (started again if one dies); a
    SIGTERM stops all of them, each with its --grace."""
    from .serving.server import Companion

    settings = _bind(migrate=True, wait_for_database=True)
    if metrics_port is not None:
        # The API's /metrics shows the counters of its own process only: a worker elsewhere serves its own.
        start_http_server(metrics_port, addr=metrics_host)
    others = [Companion(_worker_argv(concurrency, poll_interval, executor, grace), grace)
              for _ in range(processes - 1)]
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


@main.command()
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1))
def reap(limit: int) -> None:
    """Act on running runs whose lease expired: requeue, or fail them when retrying is unsafe."""
    _bind()
    for item in leases.reap(limit):
        click.echo(f"{item.run_id}\t{item.action}")


@main.command()
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
    from .serving.server import Companion, ServeOptions, SidecarServer
    from .store import db as store_db

    if demo:
        from . import demo as demo_setup

        # Before the settings are read, and inherited by the worker process: the demo agent is on 127.0.0.1.
        demo_setup.allow_demo_agent()
    # Here, once: a broken plugin or an old schema stops serve before it listens; an outage is waited out.
    settings = _bind(migrate=True, wait_for_database=True)
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


from .commands import keys_group, runs_group, token_group  # noqa: E402 - subcommand groups live in their own module
from .grant_commands import grants_group  # noqa: E402
from .outbound_commands import outbound_group  # noqa: E402

main.add_command(token_group)
main.add_command(runs_group)
main.add_command(keys_group)
main.add_command(outbound_group)
main.add_command(grants_group)

def _plugin_source(row: dict) -> str:
    """Where a plugin comes from, worded so that no version is taken for another program's: the core and the
    bundled plugins carry the sidecar's version, a third-party plugin its own distribution's."""
    from . import __version__

    if row["default"]:
        return f"core (sidecar {__version__})"
    if row["distribution"] is None:
        return "plugin (no installed distribution)"
    if row["distribution"] == "nrllm-sidecar":
        return f"bundled with sidecar {row['version']}"
    return f"plugin package {row['distribution']} {row['version']}"


@main.command()
def plugins() -> None:
    """List the loaded plugins: name, where each comes from, its hooks, the consumers it declares."""
    from .plugins import describe

    _bind()
    for row in describe():
        columns = [row["name"], _plugin_source(row), ", ".join(row["hooks"])]
        if row["consumers"]:
            columns.append(f"declares consumers {', '.join(row['consumers'])} (versions: the host's report, "
                           "see `nrllm-sidecar compat`)")
        click.echo("\t".join(columns))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (as GET /api/v1/compat).")
def compat(as_json: bool) -> None:
    """Show the compatibility gate; exit 1 while delegation is not offered."""
    import json

    from nrllm_sidecar_compat.service import report as gate_report

    from .domain.clock import rfc3339

    _bind()
    report = gate_report()
    report["reported_at"] = rfc3339(report["reported_at"])
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        delegation = report["delegation"]
        click.echo(f"consumer report: {report['reported_at'] or 'none yet'}")
        for status, state in report["statuses"].items():
            blockers = ", ".join(f"{b['consumer']} {b['version']}" for b in state["blocked_by"])
            click.echo(f"{status}: {'writable' if state['writable'] else 'not writable'}"
                       + (f" (blocked by {blockers})" if blockers else ""))
        click.echo(f"delegation: {'offered' if delegation['offered'] else 'not offered'}"
                   + (f": {delegation['reason']}" if delegation["reason"] else ""))
        if delegation["blocked_origins"]:
            click.echo(f"not offered for origins: {', '.join(delegation['blocked_origins'])}")
        click.echo(f"runs in a status a loaded consumer cannot read: {report['runs_in_unreadable_status']}")
    sys.exit(0 if report["delegation"]["offered"] else 1)


def run() -> None:
    """The console script: a plugin that fails to load ends the command with its name, not a traceback."""
    try:
        main()
    except (PluginLoadError, SchemaNotCurrent, SecretKeysError) as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    run()
