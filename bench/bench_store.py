"""The run store under load: claims per second and empty segments per second with 1, 2 and 4 threads, beside
the raw commit rate of the same database measured in the same run (the bound).

    .venv/bin/python bench/bench_store.py                  # full run, compared with the floors
    .venv/bin/python bench/bench_store.py --quick          # a few seconds: proves it works, checks no floor
    .venv/bin/python bench/bench_store.py --databases sqlite,postgresql,mysql

commits/s   one trivial transaction per commit (UPDATE of one row the thread owns), through the store's own
            database object: the most write transactions per second this database gives these threads.
claims/s    threads calling leases.claim_queued(limit=1) on pre-seeded queued runs until none is left.
segments/s  a real Worker (StepExecutor, `concurrency` = threads) draining pre-seeded runs whose input
            completes at once: per run a claim, a read of the run and a fenced finish as completed.

Exits 1 when a floor is missed or a check fails (every run claimed once, every run completed).
"""

import contextlib
import sys
import threading
import time
from dataclasses import dataclass

from harness import arguments, check, close_connections, conclude, measuring, verdict
from scratch_databases import scratch_database

from sidecar.domain.lease import LeasePolicy
from sidecar.domain.vocabulary import RunStatus
from sidecar.store import db as store_db
from sidecar.store import leases, migrations, runs
from sidecar.store.models import Run, RunEvent, WorkerHeartbeat
from sidecar.testing import StepExecutor
from sidecar.worker import Worker

# Empty segments per second with 2 threads (issue 2). Other figures are reported, not judged.
SEGMENT_FLOORS = {"sqlite": 300, "postgresql": 150}
FLOOR_THREADS = 2
THREAD_COUNTS = (1, 2, 4)
# The default lease: the heartbeat renews every 10 s, as in production, not in the middle of every segment.
LEASE = LeasePolicy(30)
# Not JSON, so StepExecutor completes the run at once with this as its output: the empty segment.
EMPTY_SEGMENT_INPUT = "empty segment"


@dataclass(frozen=True)
class Sizes:
    runs: int  # per claims and per segments measurement
    commits: int  # per commit-rate measurement, shared by the threads


FULL = Sizes(runs=2000, commits=3000)
QUICK = Sizes(runs=40, commits=80)


@dataclass
class Row:
    dialect: str
    threads: int
    commits_per_second: float
    claims_per_second: float
    segments_per_second: float


def timed_in_threads(threads: int, work) -> float:
    """Run work(thread_index) in `threads` threads released together; seconds until the last one ends."""
    database = store_db.database
    released = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            database.connect(reuse_if_open=True)  # connecting is not what is measured
            released.wait()
            work(index)
        except BaseException as exc:
            errors.append(exc)
            released.abort()
        finally:
            database.close()

    workers = [threading.Thread(target=body, args=(i,), name=f"bench-{i}") for i in range(threads)]
    for thread in workers:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a thread failed before the start: see errors
        released.wait()
    started = time.perf_counter()
    for thread in workers:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return elapsed


def empty_tables() -> None:
    if store_db.dialect() == "postgresql":
        # A new, empty relation: no dead rows of the previous measurement for the next one to step over.
        store_db.database.execute_sql("TRUNCATE runs, worker_heartbeats, bench_commits CASCADE")
    else:
        for model in (RunEvent, Run, WorkerHeartbeat):
            model.delete().execute()
        store_db.database.execute_sql("DELETE FROM bench_commits")


def seed_queued_runs(count: int) -> set[str]:
    return {runs.create_run("bench", EMPTY_SEGMENT_INPUT) for _ in range(count)}


def commit_rate(threads: int, commits: int) -> float:
    database = store_db.database
    param = database.obj.param
    for index in range(threads):
        # A row per thread: on a server database the threads contend for commits, not for a row lock.
        database.execute_sql(f"INSERT INTO bench_commits (id, n) VALUES ({param}, 0)", (index,))
    per_thread = commits // threads

    def commit_one_row_repeatedly(index: int) -> None:
        for _ in range(per_thread):
            with database.atomic():  # BEGIN IMMEDIATE on SQLite, as every store write
                database.execute_sql(f"UPDATE bench_commits SET n = n + 1 WHERE id = {param}", (index,))

    elapsed = timed_in_threads(threads, commit_one_row_repeatedly)
    total = database.execute_sql("SELECT SUM(n) FROM bench_commits").fetchone()[0]
    check(total == per_thread * threads, f"{per_thread * threads} commits landed")
    return per_thread * threads / elapsed


def claim_rate(threads: int, count: int) -> float:
    seeded = seed_queued_runs(count)
    claimed: list[list[str]] = [[] for _ in range(threads)]

    def claim_until_none_is_queued(index: int) -> None:
        while True:
            batch = leases.claim_queued(f"bench-claimer-{index}", 1, LEASE)
            claimed[index].extend(claim.run_id for claim in batch)
            # On a server an empty batch may only mean the rest is locked by other claimers right now.
            if not batch and not Run.select().where(Run.status == RunStatus.QUEUED.value).exists():
                return

    elapsed = timed_in_threads(threads, claim_until_none_is_queued)
    ids = [run_id for part in claimed for run_id in part]
    check(len(ids) == count and set(ids) == seeded, f"each of {count} runs claimed exactly once")
    return count / elapsed


class CountingExecutor:
    """StepExecutor that signals when the expected number of segments has ended, whatever their outcome."""

    def __init__(self, expected: int):
        self.steps = StepExecutor()
        self.remaining = expected
        self.lock = threading.Lock()
        self.all_ended = threading.Event()

    def execute(self, segment):
        try:
            return self.steps.execute(segment)
        finally:
            with self.lock:
                self.remaining -= 1
                if self.remaining == 0:
                    self.all_ended.set()


def segment_rate(threads: int, count: int) -> float:
    seed_queued_runs(count)
    executor = CountingExecutor(count)
    worker = Worker(executor, LEASE, concurrency=threads)
    started = time.perf_counter()
    worker.start()
    # Generous: ten segments a second would be a failure long before this, but a reported one.
    ended = executor.all_ended.wait(timeout=max(60.0, count / 10))
    elapsed = time.perf_counter() - started
    worker.stop(grace=10)
    check(ended, f"the worker ended {count} segments")
    by_status = runs.count_by_status()
    check(by_status == {RunStatus.COMPLETED.value: count}, f"all {count} runs completed (found {by_status})")
    # Per run: queued, running, completed; a segment that wrote more or less is not an empty segment.
    check(RunEvent.select().count() == 3 * count, "three status events per run")
    return count / elapsed


def measure(dialect: str, url: str, sizes: Sizes, quick: bool) -> list[Row]:
    bound = store_db.bind(url)
    migrations.upgrade()
    store_db.database.execute_sql("CREATE TABLE bench_commits (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
    measurements = ((commit_rate, sizes.commits), (claim_rate, sizes.runs), (segment_rate, sizes.runs))
    rows = []
    try:
        for threads in THREAD_COUNTS:
            figures = []
            for measurement, size in measurements:
                empty_tables()
                figures.append(measurement(threads, size))
                close_connections(bound)
            rows.append(Row(dialect, threads, *figures))
            print_row(rows[-1], quick)
    finally:
        close_connections(bound)
    return rows


COLUMNS = f"{'database':<11}{'threads':>8}{'commits/s':>11}{'claims/s':>10}{'segments/s':>12}{'seg/commit':>12}"
HEADER = f"{COLUMNS}  floor (segments/s)"
LEGEND = """\
commits/s   the bound: one-row transactions committed per second by the same database and threads, this run
claims/s    leases.claim_queued(limit=1) on queued runs
segments/s  empty segments (claim, read, finish as completed) by a Worker with that many threads
seg/commit  segments/s divided by commits/s: the share of the database's commit rate the store reaches"""


def print_row(row: Row, quick: bool) -> None:
    floor = SEGMENT_FLOORS.get(row.dialect) if row.threads == FLOOR_THREADS else None
    met = floor is not None and row.segments_per_second >= floor
    print(
        f"{row.dialect:<11}{row.threads:>8}{row.commits_per_second:>11.0f}{row.claims_per_second:>10.0f}"
        f"{row.segments_per_second:>12.0f}{row.segments_per_second / row.commits_per_second:>12.3f}"
        f"  {verdict(floor, met, quick)}",
        flush=True,
    )


def misses(rows: list[Row], quick: bool) -> list[str]:
    found = []
    for row in rows:
        figures = (row.commits_per_second, row.claims_per_second, row.segments_per_second)
        if not all(figure > 0 for figure in figures):
            found.append(f"{row.dialect} with {row.threads} threads: a figure is not > 0: {figures}")
        floor = SEGMENT_FLOORS.get(row.dialect)
        if not quick and floor and row.threads == FLOOR_THREADS and row.segments_per_second < floor:
            found.append(
                f"{row.dialect}: {row.segments_per_second:.0f} empty segments/s with {row.threads} threads, "
                f"below the floor of {floor}"
            )
    return found


def main() -> int:
    args = arguments(__doc__, quick_help="small samples; checks figures > 0, not the floors").parse_args()
    sizes = QUICK if args.quick else FULL
    print(
        f"store benchmark ({'quick' if args.quick else 'full'}): {sizes.runs} runs per claims and segments "
        f"measurement, {sizes.commits} commits per commit-rate measurement"
    )
    print(LEGEND)
    print(HEADER, flush=True)
    rows: list[Row] = []
    problems: list[str] = []
    for dialect in args.databases:
        with measuring(dialect, args.quick, problems), scratch_database(dialect) as url:
            rows += measure(dialect, url, sizes, args.quick)
    problems += misses(rows, args.quick)
    if args.quick:
        print("quick run: samples too small to compare with the floors; checked only that every figure is > 0")
    else:
        print("floors (empty segments/s, 2 threads): " + ", ".join(f"{d} {f}" for d, f in SEGMENT_FLOORS.items()))
    return conclude(problems)


if __name__ == "__main__":
    sys.exit(main())
