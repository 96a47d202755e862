"""Runs end to end: a host creates runs over HTTP and a worker executes them (a tool turn calling `echo`, then a
final turn), with 1, 2 and 4 worker threads, beside the commit bound of the same database measured in the same
run; then the latency of GET /api/v1/runs/{id} at a steady 100 requests per second.

    .venv/bin/python bench/bench_runs.py                  # full run, compared with the floors
    .venv/bin/python bench/bench_runs.py --quick          # a few seconds: proves it works, checks no floor
    .venv/bin/python bench/bench_runs.py --databases sqlite,postgresql,mysql

Production's processes: the API is `nrllm-sidecar serve --no-worker` and the worker `nrllm-sidecar worker
--concurrency N` (the AgentLoop), each in its own process; this process is the host (HTTP clients in threads,
a host token) and measures.

commits/s   the bound: bench_store's one-row transactions, same database and threads, this run
posts/s     runs created per second by POST /api/v1/runs (4 client threads, each posting as fast as answered)
runs/s      runs completed per second, from the first POST to the last run's finished_at, all runs completed
api ms      CPU time of the API process per run (its POST), from /proc; worker ms: of the worker process per run

Exits 1 when a floor is missed or a check fails (every run completed with the echoed text, six events each).
"""

import http.client
import itertools
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench_store import commit_rate, empty_tables
from harness import (
    address,
    arguments,
    check,
    close_connections,
    conclude,
    cpu_seconds,
    measuring,
    percentile,
    sidecar_processes,
    verdict,
)
from scratch_databases import scratch_database

from sidecar import bootstrap
from sidecar.config import Settings
from sidecar.domain.clock import utcnow
from sidecar.domain.sealing import generate_key
from sidecar.domain.vocabulary import RunStatus
from sidecar.store import db as store_db
from sidecar.store import runs, tokens
from sidecar.store.models import Run, RunEvent

ROOT = Path(__file__).resolve().parent.parent
RUN_FLOORS = {"sqlite": 100, "postgresql": 50}  # runs/s with 2 threads (issue 3)
FLOOR_THREADS = 2
P99_FLOOR_MS = 20.0
GET_RATE = 100  # requests per second, paced
THREAD_COUNTS = (1, 2, 4)
POSTERS = 4  # client threads creating runs
GETTERS = 4  # client threads sharing the paced GETs (each sends every GETTERS-th one)
POLL_INTERVAL = "0.1"  # the worker's queue poll: it is in another process, so a POST cannot wake it
ACTOR = "be_user:1"
ECHOED = "hello from the benchmark"
BODY = json.dumps({
    "input": "Say hello through the echo tool.",
    "script": [
        {"tool_calls": [{"id": "call_1", "name": "echo", "arguments": {"text": ECHOED}}]},
        {"content": "The echo tool answered: {last_tool_result}"},
    ],
    "tools": ["echo"],
})
OUTPUT = f"The echo tool answered: {ECHOED}"
EVENTS_PER_RUN = 6  # status queued, status running, llm, tool, llm, status completed


@dataclass(frozen=True)
class Sizes:
    runs: int  # per end-to-end measurement
    commits: int  # per commit-rate measurement
    get_seconds: float  # of paced GETs


FULL = Sizes(runs=1500, commits=3000, get_seconds=10)
QUICK = Sizes(runs=20, commits=80, get_seconds=1)


@dataclass
class Row:
    dialect: str
    threads: int
    commits_per_second: float
    posts_per_second: float
    runs_per_second: float
    api_cpu_ms: float  # CPU time of the API process per run
    worker_cpu_ms: float  # CPU time of the worker process per run


@dataclass
class Latency:
    dialect: str
    requests: int
    p50_ms: float
    p99_ms: float
    max_ms: float


class Client:
    """A client of the API, as the host token's actor. The sidecar's server closes the connection after each
    answer (werkzeug does not keep connections alive); http.client opens the next one itself."""

    def __init__(self, base: tuple[str, int], token: str):
        self.connection = http.client.HTTPConnection(*base, timeout=30)
        self.headers = {"Authorization": f"Bearer {token}", "X-Nrllm-Actor": ACTOR, "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: str | None = None) -> tuple[int, dict]:
        self.connection.request(method, path, body=body, headers=self.headers)
        response = self.connection.getresponse()
        return response.status, json.loads(response.read())


API = ("api", ["serve", "--no-worker", "--port", "0"], "listening on http://")


def worker(threads: int) -> tuple[str, list[str], str]:
    args = ["worker", "--concurrency", str(threads), "--processes", "1", "--poll-interval", POLL_INTERVAL]
    return f"worker-{threads}", args, "started with"


def end_to_end(processes: list, count: int, token: str) -> tuple[float, ...]:
    """(posts/s, runs/s, API and worker CPU ms per run) for `count` runs created over HTTP (the API is the first
    of `processes`, the worker the second) and executed by the worker."""
    cpu_before = [cpu_seconds(proc.pid) for proc, _ in processes]
    clients = [Client(address(processes[0][1]), token) for _ in range(POSTERS)]
    numbers = itertools.count()
    answers: list[int] = []
    released = threading.Barrier(POSTERS + 1)

    def post(client: Client) -> None:
        released.wait()
        while next(numbers) < count:
            status, body = client.call("POST", "/api/v1/runs", BODY)
            answers.append(status if body.get("input") else -status)

    posters = [threading.Thread(target=post, args=(c,), daemon=True) for c in clients]
    for thread in posters:
        thread.start()
    first_post = utcnow()
    started = time.perf_counter()
    released.wait()
    for thread in posters:
        thread.join()
    posted = time.perf_counter() - started
    check(answers == [201] * count, f"{count} POSTs answered 201 with a run")
    deadline = time.monotonic() + max(60.0, count / 5)
    while (done := Run.select().where(Run.finished_at.is_null(False)).count()) < count:
        check(time.monotonic() < deadline, f"the worker finished {count} runs in time (finished {done})")
        time.sleep(0.05)
    cpu = [(cpu_seconds(proc.pid) - before) * 1000 / count
           for (proc, _), before in zip(processes, cpu_before, strict=True)]
    last_finished = Run.select(Run.finished_at).order_by(Run.finished_at.desc()).limit(1).scalar()
    by_status = runs.count_by_status()
    check(by_status == {RunStatus.COMPLETED.value: count}, f"all {count} runs completed (found {by_status})")
    outputs = {output for (output,) in Run.select(Run.output).distinct().tuples()}
    check(outputs == {OUTPUT}, f"every output is {OUTPUT!r} (found {sorted(map(str, outputs))[:3]})")
    check(RunEvent.select().count() == EVENTS_PER_RUN * count, f"{EVENTS_PER_RUN} events per run")
    return count / posted, count / (last_finished - first_post).total_seconds(), *cpu


def paced_gets(base: tuple[str, int], token: str, seconds: float) -> list[float]:
    """Latencies (ms) of GET /api/v1/runs/{id} sent at fixed times, GET_RATE a second, whatever the answers
    take (open loop): each is measured from the time it was due, so a late answer also counts for the sends
    it delayed."""
    ids = [run_id for (run_id,) in Run.select(Run.id).tuples()]
    check(bool(ids), "the database holds runs to read")
    total = int(seconds * GET_RATE)
    latencies: list[float] = []
    clients = [Client(base, token) for _ in range(GETTERS)]
    start = time.perf_counter() + 0.2

    def send(index: int, client: Client) -> None:
        for n in range(index, total, GETTERS):
            due = start + n / GET_RATE
            time.sleep(max(0.0, due - time.perf_counter()))
            run_id = ids[n % len(ids)]
            status, body = client.call("GET", f"/api/v1/runs/{run_id}")
            latencies.append((time.perf_counter() - due) * 1000)
            check(status == 200 and body["id"] == run_id, f"GET of run {run_id} answered 200 ({status})")

    senders = [threading.Thread(target=send, args=(i, c), daemon=True) for i, c in enumerate(clients)]
    for thread in senders:
        thread.start()
    for thread in senders:
        thread.join()
    check(len(latencies) == total, f"{total} GETs answered")
    return latencies


def measure(dialect: str, url: str, sizes: Sizes, quick: bool) -> tuple[list[Row], Latency]:
    key = generate_key()  # NRLLM_SECRET_KEYS is required on PostgreSQL and MariaDB
    with tempfile.TemporaryDirectory(prefix="nrllm-bench-runs-") as directory:
        logs = Path(directory)
        bootstrap.start(Settings(instance_path=logs, database_url=url, secret_keys=(key,)), migrate=True)
        bound = store_db.database.obj
        store_db.database.execute_sql("CREATE TABLE bench_commits (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
        token, _ = tokens.create("bench-host", "host")
        env = {**os.environ, "NRLLM_DATABASE_URL": url, "NRLLM_SECRET_KEYS": key, "NRLLM_INSTANCE_PATH": directory}
        rows = []
        try:
            for threads in THREAD_COUNTS:
                empty_tables()
                bound_rate = commit_rate(threads, sizes.commits)
                close_connections(bound)
                with sidecar_processes(env, logs, API, worker(threads)) as processes:
                    rows.append(Row(dialect, threads, bound_rate, *end_to_end(processes, sizes.runs, token)))
                    print_row(rows[-1], quick)
                    if threads == THREAD_COUNTS[-1]:
                        # The database holds the runs just completed; the worker, idle, polls as in production.
                        latencies = paced_gets(address(processes[0][1]), token, sizes.get_seconds)
        finally:
            close_connections(bound)
    latency = Latency(dialect, len(latencies), percentile(latencies, 0.5), percentile(latencies, 0.99),
                      max(latencies))
    return rows, latency


COLUMNS = (f"{'database':<11}{'threads':>8}{'commits/s':>11}{'posts/s':>9}{'runs/s':>8}{'run/commit':>12}"
           f"{'api ms':>8}{'worker ms':>11}")


def print_row(row: Row, quick: bool) -> None:
    floor = RUN_FLOORS.get(row.dialect) if row.threads == FLOOR_THREADS else None
    met = floor is not None and row.runs_per_second >= floor
    print(f"{row.dialect:<11}{row.threads:>8}{row.commits_per_second:>11.0f}{row.posts_per_second:>9.0f}"
          f"{row.runs_per_second:>8.0f}{row.runs_per_second / row.commits_per_second:>12.3f}{row.api_cpu_ms:>8.1f}"
          f"{row.worker_cpu_ms:>11.1f}  {verdict(floor, met, quick)}", flush=True)


def print_latency(latency: Latency, quick: bool) -> None:
    floor = f"< {P99_FLOOR_MS:.0f}"
    print(f"{latency.dialect:<11}{latency.requests:>9}{latency.p50_ms:>8.1f}{latency.p99_ms:>8.1f}"
          f"{latency.max_ms:>8.1f}  {verdict(floor, latency.p99_ms < P99_FLOOR_MS, quick)}", flush=True)


def misses(rows: list[Row], latencies: list[Latency], quick: bool) -> list[str]:
    found = []
    for row in rows:
        figures = (row.commits_per_second, row.posts_per_second, row.runs_per_second)
        if not all(figure > 0 for figure in figures):
            found.append(f"{row.dialect} with {row.threads} threads: a figure is not > 0: {figures}")
        floor = RUN_FLOORS.get(row.dialect)
        if not quick and floor and row.threads == FLOOR_THREADS and row.runs_per_second < floor:
            found.append(f"{row.dialect}: {row.runs_per_second:.0f} runs/s with {row.threads} threads, "
                         f"below the floor of {floor}")
    for latency in latencies:
        if not quick and latency.p99_ms >= P99_FLOOR_MS:
            found.append(f"{latency.dialect}: GET p99 {latency.p99_ms:.1f} ms, not under {P99_FLOOR_MS:.0f} ms")
    return found


def main() -> int:
    args = arguments(__doc__, quick_help="small samples; checks figures > 0, not the floors").parse_args()
    sizes = QUICK if args.quick else FULL
    print(f"runs benchmark ({'quick' if args.quick else 'full'}): {sizes.runs} runs per measurement, "
          f"{sizes.commits} commits per commit-rate measurement, GETs at {GET_RATE}/s for {sizes.get_seconds:g} s")
    print(f"machine: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} (1 min) before this benchmark")
    print(__doc__.split("\n\n")[3].strip())
    print(f"{COLUMNS}  floor (runs/s)", flush=True)
    rows: list[Row] = []
    latencies: list[Latency] = []
    problems: list[str] = []
    for dialect in args.databases:
        with measuring(dialect, args.quick, problems), scratch_database(dialect) as url:
            dialect_rows, latency = measure(dialect, url, sizes, args.quick)
            rows += dialect_rows
            latencies.append(latency)
    print(f"GET /api/v1/runs/{{id}}, paced at {GET_RATE}/s (latency from the time each request was due):")
    print(f"{'database':<11}{'requests':>9}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}  floor (p99 ms)")
    for latency in latencies:
        print_latency(latency, args.quick)
    problems += misses(rows, latencies, args.quick)
    if args.quick:
        print("quick run: samples too small to compare with the floors; checked only that every figure is > 0")
    else:
        print("floors (2 threads): " + ", ".join(f"{d} {f} runs/s" for d, f in RUN_FLOORS.items())
              + f"; GET p99 under {P99_FLOOR_MS:.0f} ms")
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) at the end")
    return conclude(problems)


if __name__ == "__main__":
    sys.exit(main())
