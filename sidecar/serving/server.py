"""`nrllm-sidecar serve`: gunicorn's arbiter in this process, the API in its forked HTTP workers, and the
sidecar's worker as a companion process beside them (docs/deploy.md).

The companion is `nrllm-sidecar worker` in a process of its own, not a thread of the arbiter: the arbiter
forks HTTP workers at start, on a reload and whenever one dies, and a fork must not copy threads that
hold database connections or locks. The arbiter starts the companion once it listens, starts it again
if it dies (at most every RESTART_SECONDS), replaces it on SIGHUP, and on SIGTERM stops it with one
SIGTERM (the worker's own graceful stop: its --grace) while the HTTP workers finish their requests.
"""

import contextlib
import ctypes
import logging
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter

from ..config import Settings

# Two cores: two HTTP workers; threads enough for 1,000 open event streams beside the other requests.
DEFAULT_WORKERS = 2
DEFAULT_THREADS = 1024
GRACEFUL_TIMEOUT = 30  # seconds a stopping HTTP worker has to finish its requests
KEEPALIVE = 5  # seconds an idle kept-alive connection stays open
LIMIT_REQUEST_LINE = 4094
LIMIT_REQUEST_FIELDS = 100
LIMIT_REQUEST_FIELD_SIZE = 8190
WORKER_CLASS = "sidecar.serving.http_worker.SidecarWorker"
COMPANION_MARGIN = 15  # seconds past its grace a stopping companion may take before it is killed
RESTART_SECONDS = 5.0
TERM_REPEAT_SECONDS = 1.0  # how often a stopping arbiter says SIGTERM again to HTTP workers still alive

log = logging.getLogger("nrllm_sidecar.serve")


@dataclass(frozen=True)
class ServeOptions:
    host: str
    port: int
    workers: int = DEFAULT_WORKERS
    threads: int = DEFAULT_THREADS


def gunicorn_settings(options: ServeOptions) -> dict:
    host = f"[{options.host}]" if ":" in options.host else options.host
    return {
        "bind": [f"{host}:{options.port}"],
        "workers": options.workers,
        "threads": options.threads,
        "worker_class": WORKER_CLASS,
        # Kept-alive connections on top of the threads, so a busy worker still keeps some.
        "worker_connections": options.threads + 256,
        "keepalive": KEEPALIVE,
        "graceful_timeout": GRACEFUL_TIMEOUT,
        "limit_request_line": LIMIT_REQUEST_LINE,
        "limit_request_fields": LIMIT_REQUEST_FIELDS,
        "limit_request_field_size": LIMIT_REQUEST_FIELD_SIZE,
        "control_socket_disable": True,
        "proc_name": "nrllm-sidecar",
        "errorlog": "-",
        "loglevel": "debug" if logging.getLogger().isEnabledFor(logging.DEBUG) else "info",
    }


def _die_with_parent() -> None:
    """In the companion, before exec: SIGTERM it if the arbiter dies without stopping it (Linux)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


class Companion:
    """The sidecar's worker process beside the HTTP workers."""

    def __init__(self, argv: list[str], grace: float):
        self.argv = argv
        self.grace = grace
        self.process: subprocess.Popen | None = None
        self.retiring: list[subprocess.Popen] = []
        self.started_at = 0.0
        self.stopping = False

    def start(self) -> None:
        # Its own process group: a terminal's Ctrl-C reaches it through the arbiter, as exactly one SIGTERM
        # (a second signal would end the worker at once).
        self.process = subprocess.Popen(self.argv, process_group=0, preexec_fn=_die_with_parent)
        self.started_at = time.monotonic()
        log.info("worker started (pid %d)", self.process.pid)

    def reap(self) -> None:
        """Collect the exit of ended companions (before gunicorn's waitpid(-1) takes them as unknown)."""
        if self.process is not None:
            self.process.poll()
        self.retiring = [p for p in self.retiring if p.poll() is None]

    def keep_running(self) -> None:
        self.reap()
        if self.stopping or self.process is None or self.process.returncode is None:
            return
        if time.monotonic() - self.started_at >= RESTART_SECONDS:
            log.error("worker (pid %d) ended with status %s; starting it again",
                      self.process.pid, self.process.returncode)
            self.start()

    def replace(self) -> None:
        """SIGHUP: a new companion first, then the old one stops gracefully (runs are leased: no overlap)."""
        old = self.process
        self.start()
        if old is not None and old.poll() is None:
            old.send_signal(signal.SIGTERM)
            self.retiring.append(old)

    def begin_stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait_stopped(self) -> None:
        for process in [p for p in (self.process, *self.retiring) if p is not None]:
            try:
                process.wait(self.grace + COMPANION_MARGIN)
            except subprocess.TimeoutExpired:
                log.error("worker (pid %d) did not stop in time; killing it", process.pid)
                process.kill()
                process.wait()


class SidecarArbiter(Arbiter):
    def __init__(self, app, companion: Companion | None, on_ready):
        self.companion = companion
        self.on_ready = on_ready
        self.term_again_at: float | None = None
        super().__init__(app)

    def start(self):
        super().start()
        # Before the first HTTP worker is forked: the callback must leave no database connection open.
        self.on_ready(self.LISTENERS[0].getsockname()[1])
        if self.companion is not None:
            self.companion.start()

    def handle_chld(self):
        if self.companion is not None:
            self.companion.reap()
        super().handle_chld()

    def manage_workers(self):
        super().manage_workers()
        if self.companion is not None:
            self.companion.keep_running()

    def reload(self):
        if self.companion is not None:
            self.companion.replace()  # first: gunicorn's reload waits for the old HTTP workers to end
        super().reload()

    def reap_workers(self):
        super().reap_workers()
        # An HTTP worker forked just before the stop may still be booting when the SIGTERM comes: until it
        # installs its own handlers it has the arbiter's, inherited over fork, which only queue the signal
        # in the worker's copy of the arbiter, and the worker would then serve until the graceful timeout
        # kills it. Saying SIGTERM again while waiting reaches it once it has booted (once is enough for a
        # worker that heard it: SidecarWorker.handle_exit).
        if self.term_again_at is not None and time.monotonic() >= self.term_again_at:
            self.term_again_at = time.monotonic() + TERM_REPEAT_SECONDS
            self.kill_workers(signal.SIGTERM)

    def stop(self, graceful=True):
        if self.companion is not None:
            self.companion.begin_stop()  # the worker's grace runs while the HTTP workers drain
        if graceful:
            self.term_again_at = time.monotonic() + TERM_REPEAT_SECONDS
        super().stop(graceful)
        if self.companion is not None:
            self.companion.wait_stopped()


class SidecarServer(BaseApplication):
    """gunicorn configured from `serve`'s options; each HTTP worker builds the app from the environment."""

    def __init__(self, options: ServeOptions, companion: Companion | None, on_ready):
        self.options = options
        self.companion = companion
        self.on_ready = on_ready
        super().__init__()

    def load_config(self):
        for name, value in gunicorn_settings(self.options).items():
            self.cfg.set(name, value)

    def load(self):
        from ..app import create_app

        return create_app(Settings.from_env())

    def run(self):
        SidecarArbiter(self, self.companion, self.on_ready).run()
