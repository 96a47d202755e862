"""Chaos suite: seeded, randomized fault schedules over real worker processes, a real A2A peer and real databases.

    .venv/bin/python bench/chaos.py --seed 1 --schedules 200 --databases sqlite,postgresql
    .venv/bin/python bench/chaos.py --seed 1 --schedules 6 --quick --faults kill,peer-500
    .venv/bin/python bench/chaos.py --seed 1 --only 17 --databases postgresql --faults ...   # one schedule again
    .venv/bin/python bench/chaos.py --seed 1 --first 100 --schedules 100     # schedules 100 to 199 of seed 1

A schedule (drawn from a random generator seeded with the seed and its number) is: a fresh database, 2 or 3
`nrllm-sidecar worker` processes, a real a2a-sdk peer process (tests/support/peers.py) behind a proxy that injects
faults, on half of the schedules an API process that takes the peer's pushes, 10 to 24 runs (half of them
delegate to the peer, the others use local tools only), and 1 to 4 faults at random times of the first
seconds. Fault kinds (--faults, any combination):

  kill           SIGKILL of a worker at a random moment; it is started again after a while
  kill-journal   a worker starts armed to kill itself right after a delegation's journal commit
  kill-send      ... right after a delegation's request was sent, before its outcome is recorded
  term           SIGTERM of a worker (graceful stop, --grace 1); started again after it exited
  db             the database server (a private PostgreSQL cluster or MariaDB instance) stopped, then started
  peer-500       the proxy answers HTTP 500 (the peer never sees the request)
  peer-close     the proxy closes the connection without answering (the peer never sees the request)
  peer-json      the proxy answers 200 with a body that is not JSON (the peer never sees the request)
  peer-hang      the request reaches the peer, its answer is held past the caller's timeout
  peer-lose      the request reaches the peer, its answer is dropped (a lost answer)
  peer-restart   the peer process is killed and a new one, which knows no task, starts on the same port

Once the faults stop, the workers keep running for a bounded settle period; then the checks:
  terminal     every run created exists and is terminal (nothing lost, nothing stuck)
  message ids  no message id reached the peer twice (the peer records every request it receives)
  effects      no `tally` call ran twice (every execution appends to a file), and every completed run's ran
  events       every run's event sequence is 1..n without a gap, n its last_event_sequence
  timeouts     no delegation resolved `timeout` while its remote task had finished (and the peer still knew
               it) well before the deadline
  answers      every completed delegating run got its own remote answer, an `error:` or a `timeout:`
  workers      no worker process exited by itself, and every one still beats once the runs settled
A failed check prints the seed, the schedule and what failed (the schedule's logs are kept); exit status 1.
"""

import argparse
import collections
import os
import random
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta

import chaos_parts
from chaos_parts import (
    WORKER_GRACE,
    ApiProcess,
    Databases,
    PeerProcess,
    Unavailable,
    WorkerSlot,
    schedule_directory,
)
from harness import DIALECTS, IN_CI, close_connections

from sidecar import bootstrap
from sidecar.config import Settings
from sidecar.domain.clock import utcnow
from sidecar.domain.sealing import generate_key
from sidecar.store import consumers, db, remote_agents, runs
from sidecar.store.models import Run, WorkerHeartbeat
from sidecar.store.remote_agents import AgentFields
from tests.support.network import FaultyProxy

FAULT_KINDS = ("kill", "kill-journal", "kill-send", "term", "db", "peer-500", "peer-close", "peer-json",
               "peer-hang", "peer-lose", "peer-restart")
FAILPOINTS = {"kill-journal": "delegation.after_journal", "kill-send": "delegation.after_send"}
FAILPOINT_KINDS = {name: kind for kind, name in FAILPOINTS.items()}
WORKER_FAULTS = ("kill", "term", *FAILPOINTS)
POLL = 0.2  # the remote agent's poll interval
# A task that finished this long before a delegation's deadline should have been seen by then.
SEEN_WITHIN = 2.0
RESTART_SLACK = 2.0  # seconds a restarted process needs before it works again
STARTUP_LIMIT = 300.0  # seconds the worker processes may take to start on a busy machine
AGENT = "chaos"


@dataclass(frozen=True)
class Timing:
    """The times of a schedule follow the lease: every remote call's timeout is a quarter of it (longer
    leases let a busy machine answer in time; shorter ones make schedules quicker)."""

    lease: float = 3.0

    @property
    def deadline(self) -> float:
        """The remote agent's deadline_seconds."""
        return 2 * self.lease

    @property
    def hang(self) -> float:
        """How long the proxy holds an answer: past the timeout of a call's first byte."""
        return self.lease

    @property
    def settle(self) -> float:
        """The settle period: a deadline, four leases (expiry, reaper, retries), and 20 s to finish."""
        return self.deadline + 4 * self.lease + 20


@dataclass(frozen=True)
class RunPlan:
    at: float  # seconds after every worker is up: runs start while the faults happen
    delegates: bool
    sleep: float  # the `sleep` tool's seconds (local runs), so that faults land in the middle of segments
    slow: float  # seconds the second `tally` of a local run takes after its effect (longer than a stop's grace)
    message: str  # what the peer is asked (delegating runs): work:<s>:<answer> or complete:<answer>
    answer: str


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after every worker is up
    kind: str
    duration: float  # how long the worker, the database or the peer stays down, or the proxy fault stays on
    worker: int
    probability: float  # of each request, for the proxy's faults

    def describe(self) -> str:
        if self.kind in FAILPOINTS:
            return f"{self.kind} w{self.worker} armed"
        target = f" w{self.worker}" if self.kind in WORKER_FAULTS else ""
        chance = f" p={self.probability:g}" if self.kind.startswith("peer-") and self.kind != "peer-restart" else ""
        return f"{self.at:.1f}s {self.kind}{target} {self.duration:.1f}s{chance}"


@dataclass(frozen=True)
class Schedule:
    seed: int
    index: int
    dialect: str
    workers: int
    push: bool
    runs: tuple[RunPlan, ...]
    faults: tuple[Fault, ...]

    def describe(self) -> str:
        delegating = sum(plan.delegates for plan in self.runs)
        return (f"{self.dialect} workers={self.workers} push={'yes' if self.push else 'no'} runs={len(self.runs)} "
                f"({delegating} delegating) faults=[{'; '.join(f.describe() for f in self.faults)}]")


def draw(seed: int, index: int, dialect: str, kinds: list[str], quick: bool) -> Schedule:
    """The schedule number `index` of `seed`: the same for the same seed, number and fault kinds."""
    rng = random.Random(f"{seed}/{index}")
    workers = 2 if quick else rng.choice((2, 3))
    push = rng.random() < 0.5
    phase = 3.0 if quick else 5.0
    plans = []
    for number in range(rng.randint(6, 10) if quick else rng.randint(10, 24)):
        answer = f"answer-{number}-{rng.randrange(10**6)}"
        work = rng.choice((0.0, 0.3, 1.0, 2.0))
        message = f"work:{work}:{answer}" if work else f"complete:{answer}"
        at = 0.0 if rng.random() < 0.3 else round(rng.uniform(0, phase), 1)
        plans.append(RunPlan(at, rng.random() < 0.5, rng.choice((0.0, 0.2, 0.8)), rng.choice((0.0, 0.0, 1.5)),
                             message, answer))
    faults = sorted((Fault(round(rng.uniform(0.2, phase), 1), rng.choice(kinds), round(rng.uniform(0.2, 2.5), 1),
                           rng.randrange(workers), rng.choice((0.5, 1.0)))
                     for _ in range(rng.randint(1, 3) if quick else rng.randint(1, 4))), key=lambda f: f.at)
    return Schedule(seed, index, dialect, workers, push, tuple(plans), tuple(faults))


def script(plan: RunPlan) -> list[dict]:
    """What the scripted provider says: local tools only, or a tally then a delegation."""
    def call(name: str, **arguments) -> dict:
        return {"tool_calls": [{"id": "call_1", "name": name, "arguments": arguments}]}

    if plan.delegates:
        return [call("tally", label="before"), call("delegate_to_agent", agent=AGENT, message=plan.message),
                {"content": "Remote said: {last_tool_result}"}]
    return [call("tally", label="first"), call("sleep", seconds=plan.sleep),
            call("tally", label="second", seconds=plan.slow), {"content": "done"}]


def tally_labels(plan: RunPlan) -> list[str]:
    return ["before"] if plan.delegates else ["first", "second"]


# --- one schedule ---------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    problems: list[str] = field(default_factory=list)
    injected: collections.Counter = field(default_factory=collections.Counter)
    seconds: float = 0.0
    runs: int = 0
    phases: str = ""


class Chaos:
    """Runs one schedule's parts, applies its faults at their times and keeps the workers supervised."""

    def __init__(self, schedule: Schedule, timing: Timing, databases: Databases, directory, url: str, key: str):
        self.schedule = schedule
        self.timing = timing
        self.databases = databases
        self.directory = directory
        self.outcome = Outcome()
        self.peer = PeerProcess(directory)
        self.proxy = FaultyProxy(self.peer.url, seed=schedule.index, hang_seconds=timing.hang)
        env = {**os.environ, "NRLLM_DATABASE_URL": url, "NRLLM_SECRET_KEYS": key,
               "NRLLM_LEASE_SECONDS": str(timing.lease), "NRLLM_REMOTE_ALLOW": "127.0.0.1",
               chaos_parts.TALLY_ENV: str(directory / "tally.jsonl")}
        env.pop("NRLLM_FAILPOINT", None)
        self.api = ApiProcess(env, directory) if schedule.push else None
        if self.api:
            env["NRLLM_PUBLIC_URL"] = self.api.url
        self.slots = [WorkerSlot(number, env, directory) for number in range(schedule.workers)]
        self.db_down = False
        self.fault_windows: list[tuple[float, float]] = []  # (from, to) in time.time(): while a fault acted
        self.plans: dict[str, RunPlan] = {}  # the runs created so far, by id
        self._restarting: dict[int, int] = {}  # worker -> its fault window, open until a new process works
        self._uncreated = sorted(enumerate(schedule.runs), key=lambda item: item[1].at)

    # -- faults ---------------------------------------------------------------------------------------------

    def timeline(self) -> list[tuple[float, Fault | None, object]]:
        """(seconds, what, action) in order: each fault's start, and its end where it has one."""
        steps = []
        for fault in self.schedule.faults:
            start, end = self._fault_actions(fault)
            steps.append((fault.at, fault, start))
            if end is not None:
                steps.append((fault.at + fault.duration, None, end))
        return sorted(steps, key=lambda step: step[0])

    def _fault_actions(self, fault: Fault):
        slot = self.slots[fault.worker]
        if fault.kind == "kill":
            return lambda: slot.signal(signal.SIGKILL, fault.duration), None
        if fault.kind == "term":
            return lambda: slot.signal(signal.SIGTERM, fault.duration), None
        if fault.kind in FAILPOINTS:
            return (lambda: False), None  # armed from the start (see start())
        if fault.kind == "db":
            return self._stop_database, self._start_database
        if fault.kind == "peer-restart":
            return self.peer.kill, lambda: self.peer.alive() or self.peer.start(wait=False)
        kind = fault.kind.removeprefix("peer-")
        return (lambda: self.proxy.switch_on(kind, fault.probability)), (lambda: self.proxy.switch_off(kind))

    def _stop_database(self) -> bool:
        if self.schedule.dialect == "sqlite" or self.db_down:
            return False  # an embedded database has no server to stop; one already down stays down
        self.databases.server(self.schedule.dialect).stop()
        self.db_down = True
        return True

    def _start_database(self) -> None:
        if self.db_down:
            self.databases.server(self.schedule.dialect).start()
            self.db_down = False

    def supervise(self) -> None:
        for number, index in list(self._restarting.items()):
            slot = self.slots[number]
            if not slot.failpoint and not slot.armings and slot.working():
                opened, closed = self.fault_windows[index]
                self.fault_windows[index] = (opened, max(closed, time.time() + RESTART_SLACK))
                del self._restarting[number]
        for slot in self.slots:
            ended = slot.supervise()
            if ended and ended[0] == "failpoint":
                self.outcome.injected[f"{FAILPOINT_KINDS[ended[1]]} fired"] += 1
            elif ended:
                self.outcome.problems.append(f"workers: {ended[1]} (see {slot.log})")

    def wait_until_working(self) -> None:
        """Until every worker process runs, was sent no signal (one that was is about to end) and got as far as
        working (on a busy machine that may take long)."""
        limit = time.monotonic() + STARTUP_LIMIT
        while not all(slot.working() for slot in self.slots) and time.monotonic() < limit:
            self.supervise()
            time.sleep(0.1)

    def create_due_runs(self, since: float) -> None:
        """Create the runs whose time has come (later, while the database is down)."""
        while self._uncreated and time.monotonic() >= since + self._uncreated[0][1].at and not self.db_down:
            number, plan = self._uncreated[0]
            try:
                run_id = runs.create_run("chaos", f"chaos run {number}",
                                         spec={"provider": "scripted", "script": script(plan)})
            except Exception:  # noqa: BLE001 - a connection a database restart broke: the next tick tries again
                close_connections(db.database.obj)
                return
            self.plans[run_id] = plan
            self._uncreated.pop(0)

    def run_faults(self) -> None:
        started = time.monotonic()
        for slot in self.slots:
            if slot.failpoint:  # armed from the start: a fault window until a process without one works
                self.fault_windows.append((time.time(), time.time() + RESTART_SLACK))
                self._restarting[slot.number] = len(self.fault_windows) - 1
        for at, fault, action in self.timeline():
            while time.monotonic() < started + at:
                self.supervise()
                self.create_due_runs(started)
                time.sleep(0.05)
            if action() is not False and fault is not None:
                self.outcome.injected[fault.kind] += 1
                now = time.time()
                # A SIGTERM takes its grace; a worker's window lasts until its next process works (below).
                self.fault_windows.append((now, now + fault.duration + WORKER_GRACE + RESTART_SLACK))
                if fault.kind in WORKER_FAULTS:
                    self._restarting[fault.worker] = len(self.fault_windows) - 1
        while self._uncreated:  # the runs of the last seconds
            self.supervise()
            self.create_due_runs(started)
            time.sleep(0.05)
        # Every fault stops: the database and the peer are up, the proxy relays, no failpoint is armed.
        self._start_database()
        self.proxy.switch_off()
        if not self.peer.alive():
            self.peer.start(wait=False)
        for slot in self.slots:
            slot.armings.clear()
            # An armed worker that is still starting gets the chance to meet a delegation first.
            while slot.failpoint and slot.alive() and not slot.started():
                self.supervise()
                time.sleep(0.05)
            if slot.failpoint and slot.alive():
                slot.kill_now()
            slot.down_until = 0.0
        self.supervise()
        for slot in self.slots:
            for failpoint, count in slot.armed.items():
                self.outcome.injected[FAILPOINT_KINDS[failpoint]] += count

    # -- the schedule ---------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start every process at once (their start-up is most of a schedule's time); wait for the peer. A
        worker with failpoint faults starts armed with the first, and each one that fires is replaced by one
        armed with the next: a worker started in the middle of the faults would often meet no delegation."""
        self.peer.start(wait=False)
        for fault in self.schedule.faults:
            if fault.kind in FAILPOINTS:
                self.slots[fault.worker].armings.append(FAILPOINTS[fault.kind])
        for slot in self.slots:
            slot.start()
        self.proxy.start()
        self.peer.wait_until_up()

    def stop(self) -> None:
        for slot in self.slots:
            if slot.alive():
                slot.expected_exit = True
                slot.proc.terminate()
        for slot in self.slots:
            slot.stop()
        if self.api:
            self.api.stop()
        self.proxy.stop()
        self.peer.stop()


def wait_for_workers(count: int, slots: list[WorkerSlot]) -> None:
    deadline = time.monotonic() + STARTUP_LIMIT
    while WorkerHeartbeat.select().count() < count:
        if time.monotonic() > deadline or any(not slot.alive() for slot in slots):
            raise RuntimeError(f"the workers did not start: {slots[0].log.read_text()[-1500:]}")
        time.sleep(0.05)


def unfinished(ids: list[str]) -> int | None:
    """How many of these runs are not terminal; None while the database does not answer (it was restarted)."""
    try:
        return Run.select().where(Run.id.in_(ids), Run.status.not_in(("completed", "failed", "cancelled"))).count()
    except Exception:  # noqa: BLE001 - a connection the restart broke: drop it, ask again next time
        close_connections(db.database.obj)
        return None


def settle(chaos: Chaos, ids: list[str]) -> float:
    """Keep the workers running until every run is terminal or the settle period is over; its length. The
    period starts once every worker process started again works (on a busy machine that may take long)."""
    limit = chaos.timing.settle
    chaos.wait_until_working()
    started = time.monotonic()
    while time.monotonic() - started < limit:
        chaos.supervise()
        if unfinished(ids) == 0:
            break
        time.sleep(0.1)
    return time.monotonic() - started


def silent_workers(chaos: Chaos) -> list[str]:
    """Every worker process works once the faults are over: its heartbeat is at most two leases old (a worker
    that lost its database for good no longer beats), waiting up to two leases for it."""
    chaos.wait_until_working()  # a worker killed at the very end may have been started again only now
    deadline = time.monotonic() + 2 * chaos.timing.lease
    while True:
        try:
            fresh = utcnow() - timedelta(seconds=2 * chaos.timing.lease)
            beating = {pid for (pid,) in WorkerHeartbeat.select(WorkerHeartbeat.pid)
                       .where(WorkerHeartbeat.seen_at >= fresh).tuples()}
        except Exception:  # noqa: BLE001 - a connection the restart broke: ask again
            close_connections(db.database.obj)
            beating = set()
        silent = [slot for slot in chaos.slots if slot.alive() and slot.proc.pid not in beating]
        if not silent or time.monotonic() > deadline:
            return [f"workers: worker {slot.number} (pid {slot.proc.pid}) has not beaten for two leases after the "
                    f"faults (see {slot.log})" for slot in silent]
        time.sleep(0.2)


def run_schedule(schedule: Schedule, timing: Timing, databases: Databases) -> Outcome:
    from chaos_checks import check_schedule

    directory = schedule_directory(schedule.seed, schedule.index)
    key = generate_key()
    begun = time.monotonic()
    with databases.fresh(schedule.dialect, f"chaos_{schedule.seed}_{schedule.index}", directory) as url:
        bound = db.bind(url)
        bootstrap.start(Settings(instance_path=directory, database_url=url, lease_seconds=timing.lease,
                                 remote_allow=("127.0.0.1",), secret_keys=(key,)), bind_database=False, migrate=True)
        consumers.replace_report([])  # an empty report: delegation is offered
        chaos = Chaos(schedule, timing, databases, directory, url, key)
        try:
            chaos.start()
            remote_agents.create_agent(AGENT, AgentFields(url=chaos.proxy.url, poll_interval_seconds=POLL,
                                                          deadline_seconds=timing.deadline, push=schedule.push))
            wait_for_workers(schedule.workers, chaos.slots)
            up = time.monotonic()
            chaos.run_faults()
            faulted = time.monotonic()
            settled = settle(chaos, list(chaos.plans))
            chaos.outcome.problems += silent_workers(chaos)
        finally:
            chaos.stop()
        outcome = chaos.outcome
        outcome.problems += check_schedule(chaos.plans, chaos, settled)
        outcome.runs = len(chaos.plans)
        outcome.phases = f"start {up - begun:.1f}s, faults {faulted - up:.1f}s, settle {settled:.1f}s"
        close_connections(bound)
    outcome.seconds = time.monotonic() - begun
    if outcome.problems:
        outcome.problems.append(f"logs kept in {directory}")
    else:
        shutil.rmtree(directory, ignore_errors=True)
    return outcome


# --- the command ----------------------------------------------------------------------------------------------


def _kinds(text: str) -> list[str]:
    kinds = [kind for kind in text.split(",") if kind]
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"unknown fault kinds: {', '.join(unknown)} (known: {','.join(FAULT_KINDS)})")
    return kinds


def _databases(text: str) -> list[str]:
    dialects = text.split(",")
    if unknown := sorted(set(dialects) - set(DIALECTS)):
        raise argparse.ArgumentTypeError(f"unknown databases: {', '.join(unknown)} (known: {', '.join(DIALECTS)})")
    return dialects


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--schedules", type=int, default=20, help="schedules to run (databases take turns)")
    parser.add_argument("--first", type=int, default=0,
                        help="the number of the first schedule (to share a long run among processes)")
    parser.add_argument("--only", type=int, help="run only the schedule with this number (to see a failure again)")
    parser.add_argument("--databases", type=_databases, default=["sqlite", "postgresql"],
                        help=f"comma-separated: {','.join(DIALECTS)}")
    parser.add_argument("--faults", type=_kinds, default=list(FAULT_KINDS),
                        help=f"comma-separated fault kinds: {','.join(FAULT_KINDS)}")
    parser.add_argument("--quick", action="store_true", help="smaller schedules: fewer runs, workers and faults")
    parser.add_argument("--lease", type=float, default=Timing.lease,
                        help="the workers' lease in seconds; a remote call's timeout is a quarter of it, the remote "
                             "agent's deadline two leases")
    return parser.parse_args()


def main() -> int:
    args = arguments()
    # A SIGTERM ends the run like Ctrl-C: the processes of the schedule and the private servers are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    numbers = [args.only] if args.only is not None else list(range(args.first, args.first + args.schedules))
    print(f"chaos: seed {args.seed}, {len(numbers)} schedules{' (quick)' if args.quick else ''}, lease "
          f"{args.lease:g} s, databases {','.join(args.databases)}, faults {','.join(args.faults)}", flush=True)
    databases = Databases()
    injected, failures, per_database = collections.Counter(), [], collections.Counter()
    total_runs, unavailable = 0, {}
    try:
        for number in numbers:
            dialect = args.databases[number % len(args.databases)]
            schedule = draw(args.seed, number, dialect, args.faults, args.quick)
            if dialect in unavailable:
                continue
            try:
                outcome = run_schedule(schedule, Timing(args.lease), databases)
            except Unavailable as exc:
                # Like the tests: skipped in a workstation's quick run, a failure in CI and in a full run.
                unavailable[dialect] = str(exc)
                print(f"SKIPPED {dialect}: {exc}", flush=True)
                if not args.quick or IN_CI:
                    failures.append((number, schedule, [f"databases: {exc}", "no logs"], "-"))
                continue
            injected.update(outcome.injected)
            total_runs += outcome.runs
            per_database[dialect] += 1
            verdict = "ok" if not outcome.problems else f"FAILED ({len(outcome.problems) - 1} problems)"
            print(f"#{number:<4} {schedule.describe()}  {outcome.seconds:.1f}s ({outcome.phases})  {verdict}",
                  flush=True)
            if outcome.problems:
                rerun = (f"python bench/chaos.py --seed {args.seed} --only {number} --databases {dialect} "
                         f"--faults {','.join(args.faults)} --lease {args.lease:g}{' --quick' if args.quick else ''}")
                failures.append((number, schedule, outcome.problems, rerun))
                for problem in outcome.problems:
                    print(f"     {problem}", flush=True)
    finally:
        databases.cleanup()
    print(f"schedules run: {len(numbers)} ({', '.join(f'{d} {n}' for d, n in per_database.items())}); "
          f"runs: {total_runs}")
    print("faults injected: " + (", ".join(f"{kind} {count}" for kind, count in sorted(injected.items())) or "none"))
    by_check = collections.Counter(problem.partition(":")[0] for _, _, problems, _ in failures
                                   for problem in problems[:-1])
    print(f"checks failed: {sum(by_check.values())} in {len(failures)} schedules"
          + (f" ({', '.join(f'{check} {n}' for check, n in sorted(by_check.items()))})" if by_check else ""))
    for number, schedule, problems, rerun in failures:
        print(f"FAIL seed {args.seed} schedule {number}: {schedule.describe()}")
        for problem in problems:
            print(f"     {problem}")
        print(f"     again: {rerun}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
