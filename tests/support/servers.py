"""`nrllm-sidecar serve` in its own process, always started by `start_serve`: as the tests run it (this
checkout, the tests' plugins, a database of the test's) and as an installation runs it (`live_sidecar`: the
installed command, an SQLite file of its own, without the tests' plugins); raw HTTP and the process tree."""

import os
import re
import socket
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support import GENEROUS_LEASE, ROOT
from tests.support.waiting import wait_until
from tests.support.workers import one_worker_process, stop_process

STEPS = ("--executor", "sidecar.testing:StepExecutor")
BIN = Path(sys.executable).parent  # where pip put the nrllm-sidecar command of this environment


# This checkout's command, with the tests' plugins (PYTHONPATH); `live_sidecar` runs the installed one.
SERVE = (sys.executable, "-m", "sidecar.cli", "serve")
# How far start_serve waits: until an HTTP worker answers, or not at all (the test waits for what it is
# about, an HTTP worker that boots, say).
ANSWERING, STARTED = "answering", "started"


@dataclass
class Served:
    proc: subprocess.Popen
    port: int | None  # None when start_serve did not wait (STARTED)
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self, timeout: float = 60.0) -> int:
        return stop_process(self.proc, timeout)


def start_serve(database_url: str, log_path: Path, *args: str, env: dict | None = None, until: str = ANSWERING,
                read_stdout: bool = False, command: tuple[str, ...] = SERVE, cwd: Path = ROOT) -> Served:
    """The one way the tests start `serve --port 0` against the database, its standard error in `log_path`
    (a file never blocks the process as a full pipe would). Leases are generous.

    env: variables over this process's environment; a None value removes one.
    until: ANSWERING or STARTED (see above).
    read_stdout: standard output as a text pipe the test reads (what `serve --demo` prints), else discarded.
    The embedded worker is one process unless `args` say `--processes` (the default would start one per core).
    """
    args = one_worker_process(args)
    merged = {**os.environ, "NRLLM_DATABASE_URL": database_url, "NRLLM_LEASE_SECONDS": str(GENEROUS_LEASE),
              **(env or {})}
    merged = {name: value for name, value in merged.items() if value is not None}
    with open(log_path, "w") as log:  # the child has its own descriptor: this one can close now
        proc = subprocess.Popen([*command, "--port", "0", *args], cwd=cwd, env=merged, stderr=log,
                                stdout=subprocess.PIPE if read_stdout else subprocess.DEVNULL, text=read_stdout)
    if until == STARTED:
        return Served(proc, None, log_path)

    def port():
        assert proc.poll() is None, f"serve ended: {log_path.read_text()[-3000:]}"
        match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log_path.read_text())
        return int(match.group(1)) if match else None

    try:
        served = Served(proc, wait_until(port, timeout=60, what="serve to listen"), log_path)
        wait_until(lambda: _answers(served.port), timeout=60, what="an HTTP worker to answer")
    except BaseException:
        stop_process(proc)  # a test that never got its Served cannot stop it
        raise
    return served


def _answers(port: int) -> bool:
    try:
        return raw_request(port, b"GET /api/v1/health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")[0] > 0
    except OSError:
        return False


def raw_request(port: int, data: bytes, timeout: float = 30.0) -> tuple[int, dict, bytes]:
    """Send bytes as they are; read the answer until the server closes. (status, headers, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        return parse_answer(read_until_closed(sock))


def read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def parse_answer(raw: bytes) -> tuple[int, dict, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def process_tree(pid: int) -> list[int]:
    """The process and its descendants (Linux /proc)."""
    found = [pid]
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        found.extend(process_tree(int(child)))
    return found


def cpu_seconds(pids) -> float:
    """User and system CPU time the processes used so far (Linux /proc/<pid>/stat)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


@dataclass(frozen=True)
class LiveSidecar:
    url: str
    env: dict  # the environment the sidecar runs with: its database, and PATH with nrllm-sidecar first
    log: Path

    def command(self, *args: str) -> str:
        """Run `nrllm-sidecar ARGS` against this sidecar's database; its standard output."""
        done = subprocess.run(["nrllm-sidecar", *args], env=self.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


@contextmanager
def live_sidecar(directory: Path, python_path: tuple[Path, ...] = ()):
    """The installed `nrllm-sidecar serve`, as `make run` serves it: without the tests' PYTHONPATH (so without
    the test plugins), on an SQLite file of its own; `python_path` adds plugins as installed ones
    (tests/support/plugin_site.py)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in python_path)
    env.update(NRLLM_DATABASE_URL=f"sqlite:///{directory / 'sidecar.db'}", PATH=f"{BIN}{os.pathsep}{env['PATH']}")
    served = start_serve(env["NRLLM_DATABASE_URL"], directory / "serve.log", cwd=directory,
                         command=(str(BIN / "nrllm-sidecar"), "serve"),
                         env={"PYTHONPATH": env.get("PYTHONPATH"), "PATH": env["PATH"]})
    try:
        yield LiveSidecar(served.base_url, env, served.log_path)
    finally:
        assert served.stop() == 0, served.log()
