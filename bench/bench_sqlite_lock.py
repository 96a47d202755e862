"""Writers taking turns on one SQLite file: how long a transaction waits for the write lock.

Three processes each run transactions that hold the lock about 2 ms (as a segment's write does) with up to
6 ms of other work between them, once with SQLite's own busy handler (its sleeps grow to 100 ms) and once
with the store's BEGIN (SidecarSqliteDatabase.begin: writers queue on the sidecar's write lock,
sidecar/store/write_lock.py). Prints the
lock waits' p50, p99 and maximum, and the wall time for all transactions. No floor: it shows why the
store takes the lock itself (docs/performance.md, "Waiting for SQLite's write lock").
"""

import argparse
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from peewee import SqliteDatabase  # noqa: E402

from sidecar.store.db import SidecarSqliteDatabase  # noqa: E402

PROCESSES = 3
HOLD_SECONDS = 0.002
BETWEEN_SECONDS = 0.006


class SqliteHandlerDatabase(SidecarSqliteDatabase):
    """The store's database with peewee's plain BEGIN: SQLite's own busy handler does the waiting."""

    begin, commit, rollback = SqliteDatabase.begin, SqliteDatabase.commit, SqliteDatabase.rollback


def writer(kind: str, path: str, transactions: int, seed: int, results) -> None:
    db = SidecarSqliteDatabase(path) if kind == "store" else SqliteHandlerDatabase(path)
    db.connect()
    draw = random.Random(seed)
    waits = []
    for _ in range(transactions):
        started = time.perf_counter()
        with db.atomic():
            waits.append(time.perf_counter() - started)
            db.execute_sql("INSERT INTO writes (payload) VALUES (?)", ("x" * 100,))
            time.sleep(HOLD_SECONDS)
        time.sleep(draw.random() * BETWEEN_SECONDS)
    db.close()
    results.put(waits)


def measure(kind: str, transactions: int, directory: str) -> tuple:
    path = str(Path(directory) / f"{kind}.sqlite")
    setup = SidecarSqliteDatabase(path)
    setup.execute_sql("CREATE TABLE writes (id INTEGER PRIMARY KEY, payload TEXT)")
    setup.close()
    results = multiprocessing.Queue()
    processes = [multiprocessing.Process(target=writer, args=(kind, path, transactions, n, results))
                 for n in range(PROCESSES)]
    started = time.perf_counter()
    for process in processes:
        process.start()
    waits = sorted(wait * 1000 for _ in processes for wait in results.get())
    for process in processes:
        process.join()
    wall = time.perf_counter() - started
    p99 = waits[min(len(waits) - 1, int(len(waits) * 0.99))]
    return kind, len(waits), statistics.median(waits), p99, waits[-1], wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="150 transactions per process instead of 1,000")
    args = parser.parse_args()
    transactions = 150 if args.quick else 1000
    print(f"{'waiting by':<16} {'transactions':>12} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'wall s':>7}")
    with tempfile.TemporaryDirectory() as directory:
        for kind in ("sqlite-handler", "store"):
            name, count, p50, p99, most, wall = measure(kind, transactions, directory)
            print(f"{name:<16} {count:>12} {p50:>7.1f} {p99:>7.1f} {most:>7.1f} {wall:>7.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
