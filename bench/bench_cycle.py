"""The durable delegation cycle end to end, with production's processes: runs created over HTTP, each a model
turn calling `delegate_to_agent`, the journalled SendMessage to a remote agent in another process, the
suspension, a poll (or a push) that finds the task completed, the resumption, the final turn, `completed`.

    .venv/bin/python bench/bench_cycle.py                  # full run, compared with the floors
    .venv/bin/python bench/bench_cycle.py --quick          # a few seconds: proves it works, checks no floor
    .venv/bin/python bench/bench_cycle.py --databases sqlite --processes 1
    .venv/bin/python bench/bench_cycle.py --agents "sdk push"     # only the rows of these agents
    .venv/bin/python bench/bench_cycle.py --agents fast --in-flight 20 --runs 1200   # one row of its own
    .venv/bin/python bench/bench_cycle.py --agents "fast push" --stages   # and where a run's time went

`nrllm-sidecar serve --no-worker` (the API) and `nrllm-sidecar worker` (with whatever worker processes it
starts), each a process tree of its own; this process is the host (a host token, HTTP clients in threads)
and watches the runs in the database. The agents are registered with a 0.2 s poll interval:

fast        the demo's A2A agent (sidecar/demo_agent.py, standard library) in a process of its own; a task
            works 10 ms, so the send answers `working` and a poll finds it completed
fast push   the same demo agent pushing the completed task to the API (POST /api/v1/push)
sdk         a real a2a-sdk peer (tests/support/peers.py) in a process of its own, `work:0.01:...`
sdk push    the same peer pushing its task's updates to the API (submitted, working, completed)

commits/s   the bound: one-row committed transactions through the store's database object, 1 thread, this run
in flight   runs kept in flight: a new run is created as soon as one ends
cycles/s    runs completed per second, from the first POST to the last run's finished_at
p50/p99 ms  end to end per run: from just before its POST to its finished_at
cpu ms      CPU time per cycle (user and system, /proc/<pid>/stat) of the API processes, of each worker
            process, and of all of them: the figure that moves least with the machine's load
db ms       CPU time per cycle of PostgreSQL's backends serving the sidecar, when the server runs on this
            machine (it shares the cores, so it bounds cycles/s too); not in cpu ms, which the floor counts
others ms   CPU time per cycle of the benchmark's own processes, which share the cores too: the remote agents
            and this process (the host's HTTP clients and the watcher of the runs); not in cpu ms either

--stages    after each row, the steps between a run's events (the event kinds, a status by its new value, the
            wait's resolution as `resolved`) with their mean, p50 and p99 ms over the row's runs, the steps
            that took the most time in all first; the time from the POST to the first event is not in it

Checked: every run completed with the agent's answer. Exits 1 when a floor is missed or a check fails.
"""

import http.client
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from bench_store import commit_rate
from bench_waiting import start_peer
from harness import (
    ROOT,
    CheckFailed,
    add_worker_size,
    address,
    arguments,
    check,
    close_connections,
    conclude,
    cpu_seconds,
    free_port,
    measuring,
    percentile,
    process_tree,
    sidecar_processes,
    verdict,
    worker_size,
)
from scratch_databases import scratch_database

from sidecar import bootstrap
from sidecar.config import Settings
from sidecar.domain.clock import utcnow
from sidecar.domain.sealing import generate_key
from sidecar.store import consumers, remote_agents, tokens
from sidecar.store import db as store_db
from sidecar.store.models import DependencyWait, Run, RunEvent
from sidecar.store.remote_agents import AgentFields

ACTOR = "be_user:1"
ANSWER = "forty-two"
POLL_SECONDS = 0.2  # every agent's poll interval
WORK_SECONDS = 0.01  # of every remote task
CYCLES_FLOOR = {"sqlite": 100, "postgresql": 150}  # cycles/s with THROUGHPUT_IN_FLIGHT (issue 14)
CPU_FLOOR_MS = 10.0  # per cycle, all sidecar processes together
# With LATENCY_IN_FLIGHT. The sdk rows have none: the a2a-sdk peer's own CPU (four pushes a task) shares the
# machine's two cores with the sidecar, so they measure the peer as much (docs/performance.md).
P99_FLOOR_MS = {"fast": 500, "fast push": 150}
THROUGHPUT_IN_FLIGHT, LATENCY_IN_FLIGHT = 100, 20
POSTERS = 4  # client threads creating runs
PG_WORKERS = 2  # worker processes on PostgreSQL unless --processes says otherwise (the floor's two workers)


@dataclass(frozen=True)
class Phase:
    agent: str  # the registered agent's name, also the row's label
    in_flight: int
    runs: int


FULL = (Phase("fast", THROUGHPUT_IN_FLIGHT, 1000), Phase("fast", LATENCY_IN_FLIGHT, 400),
        Phase("fast push", LATENCY_IN_FLIGHT, 400), Phase("sdk", LATENCY_IN_FLIGHT, 400),
        Phase("sdk push", LATENCY_IN_FLIGHT, 400))
QUICK = (Phase("fast", 10, 20), Phase("fast push", 5, 10), Phase("sdk", 5, 10), Phase("sdk push", 5, 10))
COMMITS = {False: 3000, True: 100}


@dataclass
class Row:
    dialect: str
    phase: Phase
    commits_per_second: float
    cycles_per_second: float
    latencies_ms: list[float]
    api_ms: float
    worker_ms: list[float]  # per worker process
    db_ms: float  # the database server's backends (PostgreSQL on this machine; NaN elsewhere)
    others_ms: float  # the remote agents' processes and this one (the host)

    @property
    def total_ms(self) -> float:
        return self.api_ms + sum(self.worker_ms)


def body_for(agent: str) -> str:
    message = f"work:{WORK_SECONDS}:{ANSWER}" if agent.startswith("sdk") else ANSWER
    return json.dumps({
        "input": "Ask the remote agent.",
        "script": [{"tool_calls": [{"id": "call_1", "name": "delegate_to_agent",
                                    "arguments": {"agent": agent.replace(" ", "-"), "message": message}}]},
                   {"content": "Remote said: {last_tool_result}"}],
        "tools": ["delegate_to_agent"],
    })


class Agents:
    """The remote agents, each in a process of its own, until stop()."""

    def __init__(self):
        code = ("import sys; from sidecar.demo_agent import DemoAgent; "
                f"a = DemoAgent(work_seconds={WORK_SECONDS}).start(); print(a.url, flush=True); sys.stdin.read()")
        self.fast = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.fast_url = self.fast.stdout.readline().strip()
        self.sdk, self.sdk_url = start_peer(push=True)

    def register(self) -> None:
        for name, url, push in (("fast", self.fast_url, False), ("fast-push", self.fast_url, True),
                                ("sdk", self.sdk_url, False), ("sdk-push", self.sdk_url, True)):
            remote_agents.create_agent(name, AgentFields(url=url, poll_interval_seconds=POLL_SECONDS,
                                                         deadline_seconds=600, push=push))

    def cpu_seconds(self) -> float:
        """The CPU time the agents' processes have used so far."""
        return cpu_seconds(self.fast.pid) + cpu_seconds(self.sdk.pid)

    def stop(self) -> None:
        for proc in (self.fast, self.sdk):
            proc.stdin.close()
            proc.wait(30)


def drive(port: int, token: str, phase: Phase) -> tuple[float, list[float], list[str]]:
    """Create phase.runs runs over HTTP, phase.in_flight at a time; (cycles/s, latencies ms, run ids)."""
    slots = threading.Semaphore(phase.in_flight)
    lock = threading.Lock()
    sent: dict[str, object] = {}  # run id -> just before its POST (naive UTC, as the store's times)
    numbers = iter(range(phase.runs))
    failures: list[str] = []
    body = body_for(phase.agent)
    headers = {"Authorization": f"Bearer {token}", "X-Nrllm-Actor": ACTOR, "Content-Type": "application/json"}

    def post() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while True:
            with lock:
                if next(numbers, None) is None:
                    return
            slots.acquire()
            before = utcnow()
            try:
                connection.request("POST", "/api/v1/runs", body=body, headers=headers)
                answer = connection.getresponse()
                created = json.loads(answer.read())
            except (OSError, http.client.HTTPException, ValueError) as exc:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                created, answer = {"error": str(exc)}, None
            if answer is None or answer.status != 201:
                failures.append(str(created)[:300])
                slots.release()
                continue
            with lock:
                sent[created["id"]] = before

    posters = [threading.Thread(target=post, daemon=True) for _ in range(POSTERS)]
    for thread in posters:
        thread.start()
    finished: dict[str, object] = {}
    deadline = time.monotonic() + 60 + phase.runs / 5
    while len(finished) + len(failures) < phase.runs:
        check(time.monotonic() < deadline, f"{phase.runs} runs finished in time ({len(finished)} did)")
        with lock:
            pending = [run_id for run_id in sent if run_id not in finished]
        for start in range(0, len(pending), 500):
            for run_id, status, finished_at in finished_among(pending[start:start + 500]):
                check(status == "completed", f"run {run_id} completed (it is {status})")
                finished[run_id] = finished_at
                slots.release()
        time.sleep(0.01)
    check(not failures, f"every POST answered 201 ({len(failures)} did not: {failures[:2]})")
    first, last = min(sent.values()), max(finished.values())
    latencies = [(finished[run_id] - at).total_seconds() * 1000 for run_id, at in sent.items()]
    return phase.runs / (last - first).total_seconds(), latencies, list(sent)


def print_stages(ids: list[str]) -> None:
    """The steps between each run's events, and the wait's resolution, over the runs `ids` (see --stages)."""
    moments: dict[str, list[tuple]] = defaultdict(list)
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for event in RunEvent.select().where(RunEvent.run.in_(chunk)):
            label = event.kind
            if event.kind == "status":
                label = json.loads(event.payload).get("to") or label
            moments[event.run_id].append((event.at, event.sequence, label))
        waits = DependencyWait.select().where(DependencyWait.run.in_(chunk), DependencyWait.resolved_at.is_null(False))
        for wait in waits:
            moments[wait.run_id].append((wait.resolved_at, math.inf, "resolved"))
    steps: dict[str, list[float]] = defaultdict(list)
    for found in moments.values():
        found.sort()
        for (at, _, label), (then, _, next_label) in pairwise(found):
            steps[f"{label} -> {next_label}"].append((then - at).total_seconds() * 1000)
    for step, spans in sorted(steps.items(), key=lambda item: -sum(item[1])):
        p50, p99 = (percentile(spans, 0.5), percentile(spans, 0.99)) if len(spans) > 1 else (spans[0], spans[0])
        print(f"  {step:<42}{len(spans):>6}  mean {statistics.fmean(spans):7.1f}  p50 {p50:7.1f}  p99 {p99:7.1f}")


def finished_among(ids: list[str]) -> list[tuple]:
    """(id, status, finished_at) of the runs among `ids` that have finished. The watcher asks every 10 ms, on
    the two cores it measures: one statement as SQL text, where peewee building the query cost about 0.5 ms
    of CPU each time, 0.6 ms a cycle that the sidecar's processes did not get."""
    placeholders = ", ".join([store_db.database.obj.param] * len(ids))
    sql = f"SELECT id, status, finished_at FROM runs WHERE finished_at IS NOT NULL AND id IN ({placeholders})"
    return [(run_id, status, Run.finished_at.python_value(at))
            for run_id, status, at in store_db.database.execute_sql(sql, ids).fetchall()]


def check_answers(ids: list[str]) -> None:
    for start in range(0, len(ids), 500):
        outputs = {r.output for r in Run.select(Run.output).where(Run.id.in_(ids[start:start + 500]))}
        check(all(o.startswith("Remote said: ") and ANSWER in o for o in outputs),
              f"every run completed with the agent's answer (found {sorted(outputs)[:2]})")


def api_and_workers(processes: list) -> tuple[list[int], list[int]]:
    """The API's processes (serve's tree) and the worker processes (the worker command's tree)."""
    (api, _), (worker, _) = processes
    return process_tree(api.pid), process_tree(worker.pid)


def backends_cpu() -> dict[int, float]:
    """PostgreSQL: the CPU seconds used so far by each of the server's backends connected to the benchmark's
    database, but this process's own (which watches the runs), when the server runs on this machine (its
    /proc entries readable). {} on SQLite."""
    if store_db.dialect() != "postgresql":
        return {}
    pids = store_db.database.execute_sql(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall()
    return {pid: cpu_seconds(pid) for (pid,) in pids}


def backends_ms(before: dict[int, float], runs: int) -> float:
    """The backends' CPU milliseconds per cycle since `before` (a backend that connected since counts from
    zero; one that disconnected meanwhile is lost). NaN on SQLite."""
    if store_db.dialect() != "postgresql":
        return math.nan
    after = backends_cpu()
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items()) * 1000 / runs


def measure(dialect: str, url: str, phases: tuple[Phase, ...], quick: bool, worker_args: list[str],
            agents: Agents, stages: bool = False) -> list[Row]:
    key = generate_key()
    rows = []
    with tempfile.TemporaryDirectory(prefix="nrllm-bench-cycle-") as directory:
        logs = Path(directory)
        bootstrap.start(Settings(instance_path=logs, database_url=url, secret_keys=(key,)), migrate=True)
        bound = store_db.database.obj
        store_db.database.execute_sql("CREATE TABLE bench_commits (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
        consumers.replace_report([])  # the host reported its consumers: the gate offers delegation
        agents.register()
        token, _ = tokens.create("bench-host", "host")
        bound_rate = commit_rate(1, COMMITS[quick])
        close_connections(bound)
        port = free_port()
        env = {**os.environ, "NRLLM_DATABASE_URL": url, "NRLLM_SECRET_KEYS": key, "NRLLM_INSTANCE_PATH": directory,
               "NRLLM_REMOTE_ALLOW": "127.0.0.1", "NRLLM_PUBLIC_URL": f"http://127.0.0.1:{port}"}
        specs = (("api", ["serve", "--no-worker", "--port", str(port)], "listening on http://"),
                 ("worker", ["worker", *worker_args], "started with"))
        try:
            with sidecar_processes(env, logs, *specs) as processes:
                api_port = address(processes[0][1])[1]
                time.sleep(1.0)  # every worker process has started
                for phase in phases:
                    api_pids, worker_pids = api_and_workers(processes)
                    before = {pid: cpu_seconds(pid) for pid in api_pids + worker_pids}
                    backends_before = backends_cpu()
                    others_before = agents.cpu_seconds() + time.process_time()
                    rate, latencies, ids = drive(api_port, token, phase)
                    used = {pid: (cpu_seconds(pid) - before[pid]) * 1000 / phase.runs for pid in before}
                    db_ms = backends_ms(backends_before, phase.runs)
                    others_ms = (agents.cpu_seconds() + time.process_time() - others_before) * 1000 / phase.runs
                    check_answers(ids)
                    rows.append(Row(dialect, phase, bound_rate, rate, latencies, sum(used[p] for p in api_pids),
                                    [used[p] for p in worker_pids], db_ms, others_ms))
                    print_row(rows[-1], quick)
                    if stages:
                        print_stages(ids)
        except CheckFailed as exc:
            tails = "".join(f"\n--- {p.name}:\n{p.read_text()[-1500:]}" for p in logs.glob("*.log"))
            raise CheckFailed(f"{exc}{tails}") from None
        finally:
            close_connections(bound)
    return rows


COLUMNS = (f"{'database':<11}{'agent':<9}{'in flight':>10}{'runs':>6}{'commits/s':>10}{'cycles/s':>9}{'p50 ms':>8}"
           f"{'p99 ms':>8}{'api ms':>8}{'worker ms':>14}{'cpu ms':>8}{'db ms':>7}{'others ms':>10}")


def floors_of(row: Row) -> list[tuple[str, float, bool]]:
    """(what, floor, met) for every floor this row is compared with."""
    found = [("cpu ms", CPU_FLOOR_MS, row.total_ms <= CPU_FLOOR_MS)]
    if row.phase.in_flight == THROUGHPUT_IN_FLIGHT and row.dialect in CYCLES_FLOOR:
        floor = CYCLES_FLOOR[row.dialect]
        found.append(("cycles/s", floor, row.cycles_per_second >= floor))
    if row.phase.in_flight == LATENCY_IN_FLIGHT and row.phase.agent in P99_FLOOR_MS:
        floor = P99_FLOOR_MS[row.phase.agent]
        found.append(("p99 ms", floor, percentile(row.latencies_ms, 0.99) < floor))
    return found


def print_row(row: Row, quick: bool) -> None:
    workers = "+".join(f"{ms:.1f}" for ms in row.worker_ms)
    verdicts = ", ".join(f"{what} {verdict(floor, met, quick)}" for what, floor, met in floors_of(row))
    print(f"{row.dialect:<11}{row.phase.agent:<9}{row.phase.in_flight:>10}{row.phase.runs:>6}"
          f"{row.commits_per_second:>10.0f}{row.cycles_per_second:>9.1f}{percentile(row.latencies_ms, 0.5):>8.0f}"
          f"{percentile(row.latencies_ms, 0.99):>8.0f}{row.api_ms:>8.2f} {workers:>13}{row.total_ms:>8.2f}"
          f"{'-' if math.isnan(row.db_ms) else f'{row.db_ms:.1f}':>7}{row.others_ms:>10.1f}  {verdicts}",
          flush=True)


def misses(rows: list[Row]) -> list[str]:
    return [f"{row.dialect} {row.phase.agent} ({row.phase.in_flight} in flight): {what} floor {floor} MISSED"
            for row in rows for what, floor, met in floors_of(row) if not met]


def main() -> int:
    parser = arguments(__doc__, quick_help="a few runs per phase; checks they complete, not the floors")
    add_worker_size(parser, "the worker's on SQLite, one per core; 2 on PostgreSQL, the floor's two workers")
    parser.add_argument("--poll-interval", help="passed to `worker --poll-interval` (default: the worker's, 1 s; "
                        "the API's doorbell wakes the worker processes; figures before ced0d37 used 0.05)")
    parser.add_argument("--agents", help="comma-separated rows to run (fast, fast push, sdk, sdk push; default: all)")
    parser.add_argument("--in-flight", type=int, help="one row per agent, with this many runs in flight")
    parser.add_argument("--runs", type=int, help="runs in each row (default: the row's)")
    parser.add_argument("--stages", action="store_true", help="after each row, where a run's time went (its steps)")
    args = parser.parse_args()
    phases = QUICK if args.quick else FULL
    if args.agents:
        wanted = {name.strip() for name in args.agents.split(",")}
        phases = tuple(phase for phase in phases if phase.agent in wanted)
        if not phases:
            parser.error(f"--agents names no row: {args.agents}")
    if args.in_flight:
        phases = tuple({phase.agent: Phase(phase.agent, args.in_flight, phase.runs) for phase in phases}.values())
    if args.runs:
        phases = tuple(Phase(phase.agent, phase.in_flight, args.runs) for phase in phases)
    worker_args = (["--poll-interval", args.poll_interval] if args.poll_interval else []) + worker_size(args)
    print(f"cycle benchmark ({'quick' if args.quick else 'full'}): agents polled every {POLL_SECONDS} s, "
          f"worker {' '.join(worker_args) or '(its defaults)'}")
    print(f"machine: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} (1 min) before this benchmark")
    print(COLUMNS + "  floors", flush=True)
    agents = Agents()
    rows: list[Row] = []
    problems: list[str] = []
    try:
        for dialect in args.databases:
            with measuring(dialect, args.quick, problems), scratch_database(dialect) as url:
                processes = [] if args.processes or dialect != "postgresql" else ["--processes", str(PG_WORKERS)]
                rows += measure(dialect, url, phases, args.quick, worker_args + processes, agents, args.stages)
    finally:
        agents.stop()
    for row in rows:
        if not (row.cycles_per_second > 0 and row.latencies_ms and row.total_ms > 0):
            problems.append(f"{row.dialect} {row.phase.agent}: a figure is missing")
    if not args.quick:
        problems += misses(rows)
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) at the end")
    return conclude(problems)


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
