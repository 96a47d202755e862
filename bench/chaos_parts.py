"""The real parts a chaos schedule runs and breaks: worker processes, the A2A peer process behind a faulty
proxy, the optional API process that takes pushes, and private database servers (see chaos.py).

The worker and peer processes are this module run as a program (`--child-worker`, `--child-peer`): a worker
is `nrllm-sidecar worker` with one more tool, `tally`, whose every execution appends a line to a file, so a
tool effect that happens twice is seen; the peer is tests/support/peers.py recording every request and task.
"""

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.support: the peer, the faulty proxy, the private servers

from tests.support.private_servers import PrivateMariaDB, PrivatePostgres, free_port  # noqa: E402

TALLY_ENV = "NRLLM_CHAOS_TALLY"
WORKER_GRACE = 1.0  # --grace of the worker processes: a SIGTERM releases what is left after a second


# --- the processes' own code ------------------------------------------------------------------------------


def child_worker(args: list[str]) -> None:
    """`nrllm-sidecar worker ARGS` with the tally tool registered."""
    from sidecar.cli import run
    from sidecar.domain.vocabulary import ToolEffect
    from sidecar.engine.tools import Tool
    from sidecar.hookspecs import hookimpl
    from sidecar.plugins import plugin_manager

    class TallyTool(Tool):
        name = "tally"
        effect = ToolEffect.NON_IDEMPOTENT_WRITE  # a crash while it runs fails the run: it must never run twice
        description = "Counts one execution under a label, outside the sidecar's database."
        parameters = {"type": "object", "properties": {"label": {"type": "string"}, "seconds": {"type": "number"}},
                      "required": ["label"], "additionalProperties": False}

        def run(self, arguments, context):
            line = json.dumps({"run": context.run_id, "label": arguments["label"], "pid": os.getpid()})
            with open(os.environ[TALLY_ENV], "a") as out:
                out.write(line + "\n")  # one write: lines of several processes never mix
            # A slow external call that nothing interrupts (a stop's grace may run out meanwhile).
            time.sleep(arguments.get("seconds", 0))
            return f"tallied {arguments['label']}"

    class ChaosTools:
        @hookimpl
        def nrllm_tools(self, settings):
            return [TallyTool()]

    plugin_manager().register(ChaosTools(), name="chaos-tally")
    sys.argv = ["nrllm-sidecar", "worker", *args]
    run()


def child_peer(port: int, record: str) -> None:
    """A real a2a-sdk peer (with push notifications) on this port until its standard input closes."""
    from tests.support.peers import Peer

    Peer(card="1.0", push=True, port=port, record=record).start()
    print("ready", flush=True)
    sys.stdin.read()


# --- starting and stopping them ---------------------------------------------------------------------------


def _spawn(args: list[str], env: dict, log: Path, **kwargs) -> subprocess.Popen:
    with open(log, "a") as out:
        return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *args], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=out, **kwargs)


class WorkerSlot:
    """One place for a worker process: killed, stopped and started again by the schedule, restarted by the
    supervisor when it is down and allowed back."""

    def __init__(self, number: int, env: dict, directory: Path):
        self.number = number
        self.env = env
        self.log = directory / f"worker{number}.log"
        self.proc: subprocess.Popen | None = None
        self.failpoint: str | None = None  # the process's
        self.armings: list[str] = []  # failpoints for the next processes, in order
        self.armed: collections.Counter = collections.Counter()  # failpoint -> processes started with it
        self.down_until = 0.0  # monotonic time before which the supervisor leaves it down
        self.expected_exit = False  # the schedule stopped it (or armed a failpoint that kills it)
        self.signals: list[int] = []  # the signals the schedule sent this process

    def start(self) -> None:
        """Start a process, armed with the next failpoint of `armings` if there is one."""
        failpoint = self.armings.pop(0) if self.armings else None
        if failpoint:
            self.armed[failpoint] += 1
        env = {**self.env, "NRLLM_FAILPOINT": failpoint} if failpoint else self.env
        with open(self.log, "a") as out:
            out.write(f"--- started{' with failpoint ' + failpoint if failpoint else ''} at {time.time():.3f}\n")
        # One process per slot: a process the worker started itself would not have the tally tool.
        self.proc = _spawn(["--child-worker", "--concurrency", "4", "--processes", "1", "--poll-interval", "0.1",
                            "--grace", str(WORKER_GRACE)], env, self.log)
        self.failpoint = failpoint
        self.expected_exit = bool(failpoint)
        self.signals = []
        self.told = False  # how it ended was told

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: int, down_for: float) -> None:
        self.expected_exit = True
        self.down_until = time.monotonic() + down_for
        if self.alive():
            self.signals.append(signum)
            self.proc.send_signal(signum)

    def kill_now(self) -> None:
        self.signal(signal.SIGKILL, 0)
        self.proc.wait()

    def supervise(self) -> tuple[str, str] | None:
        """Start it again when it is down and allowed back. A process that ended by itself is told:
        ("failpoint", its name) when its failpoint killed it, ("exited", why) otherwise."""
        if self.proc is None or self.alive():
            return None
        ended = None
        if self.told:
            pass
        elif not self.expected_exit:
            ended = ("exited", f"worker {self.number} exited by itself with status {self.proc.returncode}")
        elif self.failpoint and self.proc.returncode == -signal.SIGKILL and not self.signals:
            ended = ("failpoint", self.failpoint)
        elif self.signals == [signal.SIGTERM] and self.proc.returncode != 0 and self.started():
            # (A SIGTERM that arrives while the process still imports ends it before it has a handler, and a
            # second one kills a stopping worker at once, as documented.)
            ended = ("exited", f"worker {self.number} ended with status {self.proc.returncode} after a SIGTERM")
        self.told = True
        if time.monotonic() >= self.down_until:
            self.start()
        return ended

    def working(self) -> bool:
        return self.alive() and not self.signals and self.started()

    def started(self) -> bool:
        """This process got as far as working (it logs so)."""
        return "started with" in self.log.read_text().rpartition("--- started")[2]

    def stop(self) -> None:
        if self.alive():
            self.expected_exit = True
            self.proc.terminate()
            try:
                self.proc.wait(WORKER_GRACE + 20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class PeerProcess:
    """The A2A peer in its own process on a fixed port; a restart is a new process that knows no task."""

    def __init__(self, directory: Path):
        self.port = free_port()
        self.record = directory / "peer.jsonl"
        self.log = directory / "peer.log"
        self.proc: subprocess.Popen | None = None
        self.kills: list[float] = []  # time.time() of each kill: a task finished before one may be forgotten

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait: bool = True) -> None:
        self.proc = _spawn(["--child-peer", str(self.port), str(self.record)], os.environ.copy(), self.log,
                           stdin=subprocess.PIPE)
        if wait:
            self.wait_until_up()

    def wait_until_up(self) -> None:
        deadline = time.monotonic() + 300  # a busy machine
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the A2A peer did not start: {self.log.read_text()[-1500:]}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        import socket

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            self.kills.append(time.time())

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def entries(self) -> list[dict]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line.strip()]


class ApiProcess:
    """`nrllm-sidecar serve --no-worker`: where the peer posts its pushes."""

    def __init__(self, env: dict, directory: Path):
        self.port = free_port()
        self.log = directory / "api.log"
        env = {**env, "NRLLM_PUBLIC_URL": self.url}
        with open(self.log, "a") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "sidecar.cli", "serve", "--no-worker", "--port",
                                          str(self.port)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=out)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --- databases ----------------------------------------------------------------------------------------------

_SERVER_KINDS = {"postgresql": PrivatePostgres, "mysql": PrivateMariaDB}


class Unavailable(Exception):
    """A private database server cannot be started on this machine."""


class Databases:
    """A fresh database per schedule: a SQLite file, or a database on a private server of this run (created on
    first use, removed at the end) that the `db` fault may stop and start."""

    def __init__(self):
        self.servers: dict = {}

    def server(self, dialect: str):
        if dialect not in self.servers:
            try:
                server = _SERVER_KINDS[dialect]()
            except Exception as exc:  # noqa: BLE001 - no binaries, no postgres account: it cannot run here
                raise Unavailable(f"a private {dialect} server cannot be started here ({exc})") from exc
            try:
                server.start()
            except Exception as exc:  # noqa: BLE001
                server.cleanup()
                raise Unavailable(f"a private {dialect} server cannot be started here ({exc})") from exc
            self.servers[dialect] = server
        return self.servers[dialect]

    @contextlib.contextmanager
    def fresh(self, dialect: str, name: str, directory: Path):
        if dialect == "sqlite":
            yield f"sqlite:///{directory / 'chaos.db'}"
            return
        server = self.server(dialect)
        server.create_database(name)
        try:
            yield server.url(name)
        finally:
            with contextlib.suppress(Exception):  # a schedule that left the server down: cleanup() removes it
                if not server.is_running():
                    server.start()
                _drop(dialect, server, name)

    def cleanup(self) -> None:
        for server in self.servers.values():
            server.cleanup()


def _drop(dialect: str, server, name: str) -> None:
    if dialect == "postgresql":
        import psycopg2

        conn = psycopg2.connect(server.url("postgres"), connect_timeout=5)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.close()
    else:
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", port=server.port, user="root", connect_timeout=5, autocommit=True)
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()


def schedule_directory(seed: int, index: int) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"nrllm-chaos-{seed}-{index}-"))


if __name__ == "__main__":
    if sys.argv[1] == "--child-worker":
        child_worker(sys.argv[2:])
    elif sys.argv[1] == "--child-peer":
        child_peer(int(sys.argv[2]), sys.argv[3])
