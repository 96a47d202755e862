"""Runs waiting for remote agents at scale: one coordinator tick with 1,000 due among 100,000 waiting, a
worker's memory with 1,000 and with 100,000 waiting, and delegation cycles per second with a real peer.

    .venv/bin/python bench/bench_waiting.py                  # full run, compared with the floors
    .venv/bin/python bench/bench_waiting.py --quick          # a few seconds: proves it works, checks no floor
    .venv/bin/python bench/bench_waiting.py --databases sqlite,postgresql,mysql

Waiting runs are seeded directly (bulk inserts of the run, its journal row and its dependency wait with a
checkpoint sealed under a real key); all but `due` of them have their next poll a month away. The tick and
the worker talk to a null transport (a client stand-in that answers every GetTask with `working` without a
network; the benchmark swaps `remote.client_for` in its own processes, production code is untouched), so
they measure the sidecar: the claim of due rows, unsealing, the journal lookups, the thread pool.

tick s      Coordinator(batch=due).tick(): claims and polls every due wait in one tick (the production
            batch is 100, so this is ten production ticks' work at once), with `small` and `big` waiting
worker MB   peak RSS (VmHWM) of a worker process (AgentLoop, 4 threads, a coordinator with production
            settings) that ran `worker_seconds` while `due` waits came due every second, with `small` and
            with `big` runs waiting; flat: the difference stays under FLAT_MB
cycles/s    a real a2a-sdk peer (tests/support/peers.py, in its own process) and a `nrllm-sidecar worker`
            process (production settings, agent polled every 0.2 s): `cycles` runs created at once, each
            delegating `work:0.1:...` (send, suspend, poll, resume, complete), over the time from the first
            creation to the last completion
alone s     one such cycle with nothing else going on (the median of three, one after the other)

Exits 1 when a floor is missed or a check fails.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from harness import CheckFailed, arguments, check, conclude, measuring
from peewee import fn
from scratch_databases import scratch_database

from sidecar import bootstrap, keys
from sidecar.config import Settings
from sidecar.delegation import remote
from sidecar.delegation.coordinator import Coordinator
from sidecar.delegation.types import TaskView
from sidecar.domain.clock import utcnow
from sidecar.domain.sealing import generate_key
from sidecar.store import consumers, db, remote_agents, runs
from sidecar.store.models import DependencyWait, Outbound, Run, WorkerHeartbeat
from sidecar.store.remote_agents import AgentFields

ROOT = Path(__file__).resolve().parent.parent
TICK_FLOOR_SECONDS = 1.0  # one tick with 1,000 due among 100,000 waiting (issue 6)
RSS_FLOOR_MB = 200.0  # a worker with 100,000 waiting
FLAT_MB = 20.0  # allowed growth of the worker's peak RSS from `small` to `big` waiting
AGENT = "bench"
INSERT_CHUNK = 500


@dataclass(frozen=True)
class Sizes:
    small: int
    big: int
    due: int
    worker_seconds: float
    cycles: int


FULL = Sizes(small=1_000, big=100_000, due=1_000, worker_seconds=10, cycles=300)
QUICK = Sizes(small=200, big=2_000, due=100, worker_seconds=1, cycles=10)


# --- the null transport (benchmark only) -----------------------------------------------------------------


class NullClient:
    """Answers every GetTask with `working`, at once and without a network."""

    calls = 0
    lock = threading.Lock()

    def get_task(self, task_id: str, timeout: float | None = None) -> TaskView:
        with NullClient.lock:
            NullClient.calls += 1
        return TaskView(id=task_id, context_id=None, state="working", text="", status_text="")

    def cancel_task(self, task_id: str, timeout: float | None = None) -> TaskView:
        return TaskView(id=task_id, context_id=None, state="canceled", text="", status_text="")


def install_null_transport() -> None:
    remote.client_for = lambda agent, settings: NullClient()


# --- seeding -------------------------------------------------------------------------------------------


def settings_for(url: str, key: str) -> Settings:
    return Settings(instance_path=Path(tempfile.gettempdir()), database_url=url, lease_seconds=30.0,
                    remote_allow=("127.0.0.1",), secret_keys=(key,))


CONVERSATION = [
    {"role": "user", "content": "Find the three most cited papers on sealed checkpoints and summarise them."},
    {"role": "assistant", "tool_calls": [{"id": "call_1", "name": "delegate_to_agent", "arguments": {
        "agent": AGENT, "message": "List the three most cited papers on sealed checkpoints."}}]},
]


def seed(count: int, due: int, sealer) -> list[str]:
    """`count` waiting runs (the first `due` of them due now); returns the ids of the due waits."""
    now = utcnow()
    later, past = now + timedelta(days=30), now - timedelta(seconds=1)
    due_ids = []
    for start in range(0, count, INSERT_CHUNK):
        run_rows, journal_rows, wait_rows = [], [], []
        for index in range(start, min(count, start + INSERT_CHUNK)):
            run_id, wait_id, outbound_id = (str(uuid.uuid4()) for _ in range(3))
            context_id, task_id = str(uuid.uuid4()), f"task-{run_id}"
            checkpoint, fingerprint = sealer.seal({
                "run_id": run_id, "tool_call_id": "call_1", "turn_index": 0, "remote_agent": AGENT,
                "remote_task_id": task_id, "outbound_id": outbound_id, "context_id": context_id,
                "actor": "bench", "workspace": "0", "deadline_at": later.isoformat(), "run_deadline_at": None,
                "budget": {"delegations_used": 1, "bytes_used": 400}, "conversation": CONVERSATION,
            })
            run_rows.append({"id": run_id, "owner": "bench", "input": "wait", "status": "waiting_for_dependency",
                             "waiting_on": wait_id, "pause_generation": 1, "delegations_used": 1,
                             "created_at": now, "updated_at": now})
            journal_rows.append({"id": outbound_id, "kind": "send", "owner": "bench", "run": run_id,
                                 "remote_agent": AGENT, "message_id": str(uuid.uuid4()), "tool_call_id": "call_1",
                                 "context_id": context_id, "request_body": "{}", "request_sha256": "0" * 64,
                                 "outcome": "accepted", "remote_task_id": task_id, "created_at": now, "sent_at": now})
            wait_rows.append({"id": wait_id, "run": run_id, "generation": 1, "tool_call_id": "call_1",
                              "remote_agent": AGENT, "outbound_id": outbound_id, "checkpoint": checkpoint,
                              "key_fingerprint": fingerprint, "since": now, "deadline_at": later,
                              "next_poll_at": past if index < due else later})
            if index < due:
                due_ids.append(wait_id)
        with db.database.atomic():
            Run.insert_many(run_rows).execute()
            Outbound.insert_many(journal_rows).execute()
            DependencyWait.insert_many(wait_rows).execute()
    return due_ids


def make_due(wait_ids: list[str]) -> None:
    past = utcnow() - timedelta(seconds=1)
    for start in range(0, len(wait_ids), INSERT_CHUNK):
        DependencyWait.update(next_poll_at=past).where(
            DependencyWait.id.in_(wait_ids[start:start + INSERT_CHUNK])).execute()


def waiting_count() -> int:
    return DependencyWait.select().where(DependencyWait.resolved_at.is_null()).count()


# --- measurements --------------------------------------------------------------------------------------


def one_tick(settings: Settings, due_ids: list[str]) -> float:
    make_due(due_ids)
    coordinator = Coordinator(settings, batch=len(due_ids))
    before = NullClient.calls
    try:
        started = time.perf_counter()
        polled = coordinator.tick()
        elapsed = time.perf_counter() - started
    finally:
        coordinator.stop()
    check(polled == len(due_ids), f"the tick polled {polled} of {len(due_ids)} due waits")
    check(NullClient.calls - before == len(due_ids), "every due wait was asked for its task once")
    return elapsed


def worker_peak_mb(url: str, key: str, seconds: float, due_ids: list[str]) -> dict:
    make_due(due_ids)
    env = {**os.environ, "NRLLM_SECRET_KEYS": key}
    proc = subprocess.run([sys.executable, __file__, "--child-worker", url, "--seconds", str(seconds)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=seconds + 120)
    check(proc.returncode == 0, f"the worker process failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child_worker(url: str, seconds: float) -> None:
    """A worker as `nrllm-sidecar worker` makes it, with the null transport; prints its memory as JSON."""
    from sidecar.domain.lease import LeasePolicy
    from sidecar.engine import AgentLoop
    from sidecar.engine.registry import build_registry
    from sidecar.worker import Worker

    settings = settings_for(url, os.environ["NRLLM_SECRET_KEYS"])
    bootstrap.start(settings)
    install_null_transport()
    worker = Worker(AgentLoop(build_registry(settings)), LeasePolicy(settings.lease_seconds), concurrency=4,
                    companions=(Coordinator(settings),))
    worker.start()
    time.sleep(seconds)
    worker.stop(grace=5)
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    mb = {name: int(status[field].split()[0]) / 1024 for name, field in (("peak_mb", "VmHWM"), ("rss_mb", "VmRSS"))}
    print(json.dumps({**mb, "polls": NullClient.calls}))


SCRIPT = [{"tool_calls": [{"id": "call_1", "name": "delegate_to_agent",
                           "arguments": {"agent": AGENT, "message": "work:0.1:forty-two"}}]},
          {"content": "Remote said: {last_tool_result}"}]


def delegate_and_wait(count: int) -> tuple[list[str], float]:
    """Create `count` delegating runs at once; (their ids, seconds until the last one completed)."""
    started = time.perf_counter()
    ids = [runs.create_run("bench", "delegate", spec={"provider": "scripted", "script": SCRIPT}) for _ in range(count)]
    deadline = time.monotonic() + max(60, count)
    while True:
        by_status = {row.status: row.n for row in Run.select(Run.status, fn.COUNT(Run.id).alias("n"))
                     .where(Run.id.in_(ids)).group_by(Run.status)}
        if by_status.get("completed", 0) == count:
            break
        ended = sum(by_status.get(s, 0) for s in ("failed", "cancelled"))
        check(ended == 0 and time.monotonic() < deadline, f"{count} delegating runs completed in time ({by_status})")
        time.sleep(0.02)
    return ids, time.perf_counter() - started


def cycles(dialect: str, peer_url: str, count: int) -> tuple[float, float]:
    """Delegation cycles per second with a real peer (`count` at once), and one cycle alone in seconds (the
    median of three, one after the other), on a fresh database."""
    key = generate_key()
    with scratch_database(dialect) as url, tempfile.TemporaryDirectory() as logs:
        bound = db.bind(url)
        bootstrap.start(settings_for(url, key), bind_database=False, migrate=True)
        consumers.replace_report([])
        remote_agents.create_agent(AGENT, AgentFields(url=peer_url, poll_interval_seconds=0.2, deadline_seconds=600))
        env = {**os.environ, "NRLLM_DATABASE_URL": url, "NRLLM_SECRET_KEYS": key, "NRLLM_REMOTE_ALLOW": "127.0.0.1"}
        log_path = Path(logs) / "worker.log"
        with open(log_path, "w") as log:
            worker = subprocess.Popen([sys.executable, "-m", "sidecar.cli", "worker", "--processes", "1",
                                       "--poll-interval", "0.05"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                      stderr=log)
        try:
            deadline = time.monotonic() + 60
            # The clock starts once the worker process is up (imports and start-up are not a cycle).
            while not WorkerHeartbeat.select().exists():
                check(worker.poll() is None and time.monotonic() < deadline, "the worker process started")
                time.sleep(0.05)
            alone = statistics.median(delegate_and_wait(1)[1] for _ in range(3))
            ids, elapsed = delegate_and_wait(count)
        except CheckFailed as exc:
            raise CheckFailed(f"{exc}; the worker's log ends: {log_path.read_text()[-1500:]}") from None
        finally:
            worker.terminate()
            worker.wait(30)
        done = list(Run.select().where(Run.id.in_(ids)))
        check(all(r.output == "Remote said: forty-two" for r in done), "every run completed with the answer")
        close(bound)
    return count / elapsed, alone


def close(bound) -> None:
    bound.close()
    if hasattr(bound, "close_all"):
        bound.close_all()


@dataclass
class Row:
    dialect: str
    tick_small: float
    tick_big: float
    worker_small: dict
    worker_big: dict
    cycles_per_second: float
    cycle_alone: float


def measure(dialect: str, sizes: Sizes, peer_url: str) -> Row:
    key = generate_key()
    with scratch_database(dialect) as url:
        bound = db.bind(url)
        settings = settings_for(url, key)
        bootstrap.start(settings, bind_database=False, migrate=True)
        remote_agents.create_agent(AGENT, AgentFields(url="http://127.0.0.1:9/", poll_interval_seconds=1,
                                                      deadline_seconds=3600))
        due_ids = seed(sizes.small, sizes.due, keys.sealer())
        tick_small = one_tick(settings, due_ids)
        worker_small = worker_peak_mb(url, key, sizes.worker_seconds, due_ids)
        seed(sizes.big - sizes.small, 0, keys.sealer())
        check(waiting_count() == sizes.big, f"{sizes.big} runs wait")
        tick_big = one_tick(settings, due_ids)
        worker_big = worker_peak_mb(url, key, sizes.worker_seconds, due_ids)
        check(waiting_count() == sizes.big, f"{sizes.big} runs still wait (none resolved by `working`)")
        close(bound)
    rate, alone = cycles(dialect, peer_url, sizes.cycles)
    return Row(dialect, tick_small, tick_big, worker_small, worker_big, rate, alone)


# --- report --------------------------------------------------------------------------------------------


def print_row(row: Row, sizes: Sizes, quick: bool) -> None:
    small, big = row.worker_small, row.worker_big
    verdict = "(floors not checked in a quick run)" if quick else ", ".join(misses([row]) or ["ok"])
    print(f"{row.dialect:<11}{row.tick_small:>10.3f}{row.tick_big:>10.3f}{small['peak_mb']:>10.1f}"
          f"{big['peak_mb']:>10.1f}{big['peak_mb'] - small['peak_mb']:>+8.1f}{small['polls']:>8}{big['polls']:>8}"
          f"{row.cycles_per_second:>10.1f}{row.cycle_alone:>8.2f}  {verdict}", flush=True)


def misses(rows: list[Row]) -> list[str]:
    found = []
    for row in rows:
        if row.tick_big >= TICK_FLOOR_SECONDS:
            found.append(f"{row.dialect}: a tick took {row.tick_big:.3f} s (floor {TICK_FLOOR_SECONDS} s)")
        if row.worker_big["peak_mb"] >= RSS_FLOOR_MB:
            found.append(f"{row.dialect}: worker peak {row.worker_big['peak_mb']:.0f} MB (floor {RSS_FLOOR_MB:.0f} MB)")
        growth = row.worker_big["peak_mb"] - row.worker_small["peak_mb"]
        if growth >= FLAT_MB:
            found.append(f"{row.dialect}: worker memory grew {growth:.1f} MB with the waiting runs (flat: < {FLAT_MB})")
    return found


def start_peer(push: bool = False) -> tuple[subprocess.Popen, str]:
    """A real a2a-sdk peer (tests/support/peers.py) in its own process, until its standard input closes."""
    code = (f"import sys; from tests.support.peers import Peer; p = Peer(card='1.0', push={push}).start(); "
            "print(p.url, flush=True); sys.stdin.read()")
    # Its log is not shown: the benchmark prints its own figures, and the peer's log would bury them.
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    return proc, proc.stdout.readline().strip()


def main() -> int:
    parser = arguments(__doc__, quick_help="small samples; checks the figures exist, not the floors")
    parser.add_argument("--child-worker", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=10, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_worker:
        child_worker(args.child_worker, args.seconds)
        return 0
    sizes = QUICK if args.quick else FULL
    install_null_transport()
    print(f"waiting benchmark ({'quick' if args.quick else 'full'}): {sizes.small} and {sizes.big} waiting, "
          f"{sizes.due} due, worker {sizes.worker_seconds:g} s each, {sizes.cycles} delegation cycles")
    print(f"{'database':<11}{'tick s':>10}{'tick s':>10}{'worker MB':>10}{'worker MB':>10}{'growth':>8}"
          f"{'polls':>8}{'polls':>8}{'cycles/s':>10}{'alone s':>8}")
    print(f"{'(waiting)':<11}{sizes.small:>10}{sizes.big:>10}{sizes.small:>10}{sizes.big:>10}{'':>8}"
          f"{sizes.small:>8}{sizes.big:>8}", flush=True)
    peer, peer_url = start_peer()
    rows, problems = [], []
    try:
        for dialect in args.databases:
            with measuring(dialect, args.quick, problems):
                rows.append(measure(dialect, sizes, peer_url))
                print_row(rows[-1], sizes, args.quick)
    finally:
        peer.stdin.close()
        peer.wait(30)
    if not args.quick:
        problems += misses(rows)
        print(f"floors: tick with {sizes.due} due among {sizes.big} waiting < {TICK_FLOOR_SECONDS} s; worker peak "
              f"< {RSS_FLOOR_MB:.0f} MB and growth < {FLAT_MB:.0f} MB")
    return conclude(problems)


if __name__ == "__main__":
    sys.exit(main())
