"""Decisions racing for pauses: over many pauses, several deciders take each pause at once (half deciding
now, half storing), and every pause must have exactly one winner.

    .venv/bin/python bench/bench_decisions.py                  # 1,000 pauses, 8 deciders each
    .venv/bin/python bench/bench_decisions.py --quick          # 20 pauses, 4 deciders: proves it works
    .venv/bin/python bench/bench_decisions.py --databases sqlite,postgresql,mysql --pauses 500 --deciders 16

Each pause is a real one: a run driven by the agent loop to a `write_note` turn that waits for approval.
The deciders are threads that meet at a barrier for each pause and then call the decision service (the
checks and the one guarded transaction the HTTP endpoint uses; a "now" winner also claims the run's lease
in it). Reported per database: the winners per pause (a histogram that must read `1: <pauses>`), the
refusal codes of the losers, and the decision attempts per second.

Exits 1 when any pause has another number of winners than 1, a loser got another answer than 409
pause_not_pending, or the database holds another number of decisions than one per pause.
"""

import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from harness import arguments, check, conclude, measuring
from scratch_databases import scratch_database

from sidecar.config import Settings
from sidecar.decisions import service
from sidecar.domain.errors import SidecarError
from sidecar.domain.lease import LeasePolicy
from sidecar.engine import AgentLoop
from sidecar.engine.registry import build_registry
from sidecar.segment import Segment
from sidecar.store import db as store_db
from sidecar.store import leases, migrations, pauses, runs
from sidecar.store.models import Decision, Run, RunEvent

LEASE = LeasePolicy(30)
BARRIER_SECONDS = 60
OWNER = "bench:owner"
SCRIPT = [{"tool_calls": [{"id": "call_1", "name": "write_note", "arguments": {"text": "bench"}}]},
          {"content": "done"}]


@dataclass
class Result:
    dialect: str
    pauses: int
    deciders: int
    seconds: float = 0.0
    winners: Counter = field(default_factory=Counter)  # winners per pause -> number of pauses
    refusals: Counter = field(default_factory=Counter)  # (status, code) of the losers
    problems: list[str] = field(default_factory=list)


def _paused_runs(count: int, settings: Settings) -> list[str]:
    """Create `count` runs and drive each, with the agent loop, to its pause for approval."""
    loop = AgentLoop(build_registry(settings))
    ids = [runs.create_run(OWNER, "bench", wake=False, spec={"provider": "scripted", "script": SCRIPT})
           for _ in range(count)]
    remaining = set(ids)
    while remaining:
        for claim in leases.claim_queued("bench-driver", 50, LEASE):
            loop.execute(Segment(claim, runs.get_run(claim.run_id)))
            remaining.discard(claim.run_id)
    waiting = Run.select().where(Run.id.in_(ids), Run.status == "waiting_for_approval").count()
    check(waiting == count, f"{waiting} of {count} runs reached their pause")
    store_db.database.close()
    return ids


def _race(result: Result, run_ids: list[str]) -> None:
    """K threads decide every pause together (a barrier per pause); count the winners of each."""
    requests = []
    for run_id in run_ids:
        pause = pauses.person_view(runs.get_run(run_id))
        requests.append([
            service.DecisionRequest(run_id=run_id, actor=OWNER, workspace="0", pause_id=pause["pause_id"],
                                    generation=pause["generation"], decision="approve",
                                    mode="now" if k % 2 else "store", turn_digest=pause["turn_digest"],
                                    comment=f"decider {k}")
            for k in range(result.deciders)
        ])
    store_db.database.close()
    barrier = threading.Barrier(result.deciders)
    outcomes: list[list] = [[None] * result.deciders for _ in run_ids]

    def decider(k: int) -> None:
        try:
            for index, per_pause in enumerate(requests):
                barrier.wait(BARRIER_SECONDS)  # a decider that died breaks it: an error, not a hang
                request = per_pause[k]
                try:
                    holder = f"bench-now-{k}" if request.mode == "now" else None
                    service.accept_decision(request, holder=holder, lease=LEASE)
                    outcomes[index][k] = "won"
                except SidecarError as refused:  # a refusal of the decisions service: its status and code
                    outcomes[index][k] = (refused.http_status, refused.code)
        finally:
            store_db.database.close()

    started = time.monotonic()
    threads = [threading.Thread(target=decider, args=(k,)) for k in range(result.deciders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.seconds = time.monotonic() - started
    for run_id, answers in zip(run_ids, outcomes, strict=True):
        won = answers.count("won")
        result.winners[won] += 1
        result.refusals.update(a for a in answers if a != "won")
        if won != 1:
            result.problems.append(f"pause of run {run_id}: {won} winners")


def _check_database(result: Result, run_ids: list[str]) -> None:
    decisions = Counter(d.run_id for d in Decision.select(Decision.run))
    events = Counter(e.run_id for e in RunEvent.select(RunEvent.run).where(RunEvent.kind == "decision"))
    for run_id in run_ids:
        if decisions[run_id] != 1 or events[run_id] != 1:
            result.problems.append(f"run {run_id}: {decisions[run_id]} decisions, {events[run_id]} decision events")
    unexpected = {answer: n for answer, n in result.refusals.items() if answer != (409, "pause_not_pending")}
    if unexpected:
        result.problems.append(f"losers answered other than 409 pause_not_pending: {unexpected}")


def measure(dialect: str, url: str, pauses_count: int, deciders: int) -> Result:
    store_db.bind(url)
    migrations.upgrade()
    settings = Settings(instance_path=Path("/nonexistent"), database_url=url)
    result = Result(dialect, pauses_count, deciders)
    try:
        run_ids = _paused_runs(pauses_count, settings)
        _race(result, run_ids)
        _check_database(result, run_ids)
    finally:
        store_db.database.close()
        if hasattr(store_db.database.obj, "close_all"):
            store_db.database.obj.close_all()
    return result


def print_result(r: Result) -> None:
    attempts = r.pauses * r.deciders
    histogram = ", ".join(f"{winners}: {n}" for winners, n in sorted(r.winners.items()))
    losers = ", ".join(f"{status} {code}: {n}" for (status, code), n in sorted(r.refusals.items()))
    print(f"{r.dialect:<11} {r.pauses:>6} {r.deciders:>8} {attempts / r.seconds:>10.0f}   winners per pause "
          f"{{{histogram}}}   losers {{{losers}}}", flush=True)


def main() -> int:
    parser = arguments(__doc__, quick_help="20 pauses, 4 deciders each", databases="sqlite,postgresql,mysql")
    parser.add_argument("--pauses", type=int, help="pauses to race for (default 1000; quick 20)")
    parser.add_argument("--deciders", type=int, help="deciders per pause (default 8; quick 4)")
    args = parser.parse_args()
    pauses_count = args.pauses or (20 if args.quick else 1000)
    deciders = args.deciders or (4 if args.quick else 8)
    if pauses_count < 1 or deciders < 2:
        parser.error("at least 1 pause and 2 deciders")
    print(f"decisions benchmark ({'quick' if args.quick else 'full'}): {pauses_count} pauses, {deciders} "
          "deciders per pause (half now, half store)")
    print(f"{'database':<11} {'pauses':>6} {'deciders':>8} {'attempts/s':>10}", flush=True)
    problems: list[str] = []
    for dialect in args.databases:
        with measuring(dialect, args.quick, problems), scratch_database(dialect) as url:
            result = measure(dialect, url, pauses_count, deciders)
            print_result(result)
            problems += [f"{dialect}: {p}" for p in result.problems]
    return conclude(problems, ok="OK: exactly one winner per pause")

if __name__ == "__main__":
    sys.exit(main())
