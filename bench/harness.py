"""What every benchmark here shares: its command line, its checks, how an unreachable server or a failed check
is reported, the verdict beside a floor, and the exit status (1 on any problem); and the sidecar's own
processes started as production starts them, with the CPU time each one used."""

import argparse
import contextlib
import math
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scratch_databases import Unreachable

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"
DIALECTS = ("sqlite", "postgresql", "mysql")


class CheckFailed(Exception):
    """The sidecar did something wrong under load (a run claimed twice, a run not completed): no figure of
    that measurement means anything."""


def check(condition: bool, what: str) -> None:
    if not condition:
        raise CheckFailed(what)


def _databases(text: str) -> list[str]:
    dialects = text.split(",")
    if unknown := sorted(set(dialects) - set(DIALECTS)):
        raise argparse.ArgumentTypeError(f"unknown databases: {', '.join(unknown)} (known: {', '.join(DIALECTS)})")
    return dialects


def arguments(doc: str, *, quick_help: str, databases: str = "sqlite,postgresql") -> argparse.ArgumentParser:
    """The options every benchmark takes: --quick and --databases (a list once parsed)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument(
        "--databases", default=databases, type=_databases, help=f"comma-separated: {','.join(DIALECTS)}"
    )
    return parser


def add_worker_size(parser: argparse.ArgumentParser, processes_help: str = "the worker's") -> None:
    """--processes and --concurrency, for a benchmark that starts `nrllm-sidecar worker` (worker_size())."""
    parser.add_argument("--processes", type=int, help=f"passed to `worker --processes` (default: {processes_help})")
    parser.add_argument("--concurrency", type=int, help="passed to `worker --concurrency` (default: the worker's)")


def worker_size(args: argparse.Namespace) -> list[str]:
    """The `worker` arguments of the options add_worker_size() added, where they were given."""
    return [*(["--processes", str(args.processes)] if args.processes else []),
            *(["--concurrency", str(args.concurrency)] if args.concurrency else [])]


@contextlib.contextmanager
def measuring(dialect: str, quick: bool, problems: list[str]):
    """Measure one database: a server that cannot be reached or a failed check becomes a problem, and the
    next database is measured. Like the tests, a missing server is only skipped in a workstation's quick run;
    never in CI, and never in a full run, whose point is to compare this database with its floor."""
    try:
        yield
    except Unreachable as exc:
        if quick and not IN_CI:
            print(f"SKIPPED {exc}", flush=True)
        else:
            problems.append(str(exc))
    except CheckFailed as exc:
        problems.append(f"{dialect}: check failed: {exc}")


def close_connections(bound) -> None:
    """Close the benchmark's connections to a database it is done with, or done with for now."""
    bound.close()
    if hasattr(bound, "close_all"):
        bound.close_all()  # a pool keeps the connections of ended threads checked out


def verdict(floor, met: bool, quick: bool) -> str:
    """The last column of a row: its floor, and whether it was met (a quick run's samples are too small)."""
    if floor is None:
        return "-"
    if quick:
        return f"{floor} (not checked in a quick run)"
    return f"{floor} {'ok' if met else 'MISSED'}"


def conclude(problems: list[str], ok: str = "OK", most: int = 50) -> int:
    """Print the problems (or `ok`) and return the exit status."""
    for problem in problems[:most]:
        print(f"FAIL {problem}")
    if len(problems) > most:
        print(f"FAIL ... and {len(problems) - most} more")
    if not problems:
        print(ok)
    return 1 if problems else 0


def percentile(values: list[float], share: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(share * 100) - 1]


@contextlib.contextmanager
def sidecar_processes(env: dict, logs: Path, *specs: tuple[str, list[str], str]):
    """`nrllm-sidecar <args>` for each (name, args, ready) in its own process, all started at once; yields
    [(process, its first log line containing `ready`)] when every one has logged it. Stops them all (SIGTERM)."""
    procs = []
    try:
        for name, args, _ in specs:
            with open(logs / f"{name}.log", "w") as log:
                procs.append(subprocess.Popen([sys.executable, "-m", "sidecar.cli", *args], cwd=ROOT, env=env,
                                              stdout=subprocess.DEVNULL, stderr=log))
        yield [(proc, ready_line(proc, logs / f"{name}.log", ready))
               for proc, (name, _, ready) in zip(procs, specs, strict=True)]
    finally:
        for proc in procs:
            proc.terminate()  # a graceful stop, as in production
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def ready_line(proc: subprocess.Popen, log: Path, ready: str) -> str:
    deadline = time.monotonic() + 30
    while not (line := next((s for s in log.read_text().splitlines() if ready in s), None)):
        check(proc.poll() is None and time.monotonic() < deadline, f"{log.stem} started: {log.read_text()[-2000:]}")
        time.sleep(0.02)
    return line


def address(line: str) -> tuple[str, int]:
    """(host, port) of a `listening on http://host:port` log line."""
    host, _, port = line.rpartition("http://")[2].partition(":")
    return host, int(port)


def process_tree(pid: int) -> list[int]:
    """The process and its descendants (Linux /proc); [] once it is gone."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [pid, *(found for child in children for found in process_tree(int(child)))]


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) the process has used so far; NaN where /proc does not tell (not Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return math.nan


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
