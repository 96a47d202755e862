"""SQLite's writers queue on the sidecar's write lock (sidecar/store/write_lock.py): threads and processes
that race each ask SQLite once per transaction, one holds it at a time across processes, and a holder that
dies or forks leaves nobody waiting for nothing."""

import multiprocessing
import os
import signal
import threading
import time

import pytest

from sidecar.store import write_lock
from sidecar.store.db import OperationalError, SidecarSqliteDatabase
from sidecar.store.write_lock import WriteLock

THREADS, TRANSACTIONS = 8, 40
# The children that write with SQLite are spawned: SQLite's connections must not cross a fork (a child copies
# the locks its parent's connections hold, and takes them for its own), and this process has some open. The
# children that show what a fork inherits use the write lock alone.
SPAWN, FORK = multiprocessing.get_context("spawn"), multiprocessing.get_context("fork")


def _database(path, busy_timeout: float = 10.0) -> SidecarSqliteDatabase:
    db = SidecarSqliteDatabase(str(path), busy_timeout=busy_timeout)
    db.execute_sql("CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL)")
    db.execute_sql("INSERT OR IGNORE INTO counter VALUES (1, 0)")
    return db


def _begins_of(db: SidecarSqliteDatabase, seen: list) -> None:
    """Note every BEGIN this thread's connection sends to SQLite (each attempt, failed or not)."""
    db.connection().set_trace_callback(lambda statement: seen.append(1) if statement.startswith("BEGIN") else None)


def _increment(db: SidecarSqliteDatabase) -> None:
    # A read, then a write computed from it: lost updates would show in the total.
    with db.atomic():
        (value,) = db.execute_sql("SELECT value FROM counter WHERE id = 1").fetchone()
        time.sleep(0.0005)  # held a while, so the others find it taken
        db.execute_sql("UPDATE counter SET value = ? WHERE id = 1", (value + 1,))


def test_racing_threads_ask_sqlite_once_per_transaction(tmp_path):
    # Fails with writers that ask SQLite again while another holds its lock: BEGINs outnumber transactions.
    db = _database(tmp_path / "threads.sqlite")
    begins: list = []
    errors: list = []

    def writer():
        try:
            _begins_of(db, begins)
            for _ in range(TRANSACTIONS):
                _increment(db)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=writer) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert db.execute_sql("SELECT value FROM counter").fetchone()[0] == THREADS * TRANSACTIONS
    assert len(begins) == THREADS * TRANSACTIONS


def _process_writer(path: str, ready, results) -> None:
    db = SidecarSqliteDatabase(path, busy_timeout=20.0)
    begins: list = []
    _begins_of(db, begins)
    ready.wait()
    for _ in range(TRANSACTIONS):
        _increment(db)
    db.close()
    results.put(len(begins))


def test_racing_processes_write_one_at_a_time_and_ask_sqlite_once_per_transaction(tmp_path):
    path = tmp_path / "processes.sqlite"
    _database(path).close()
    ready, results = SPAWN.Event(), SPAWN.Queue()
    processes = [SPAWN.Process(target=_process_writer, args=(str(path), ready, results)) for _ in range(3)]
    for process in processes:
        process.start()
    ready.set()
    begins = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(30)
        assert process.exitcode == 0
    assert _database(path).execute_sql("SELECT value FROM counter").fetchone()[0] == 3 * TRANSACTIONS
    assert begins == [TRANSACTIONS] * 3


def _hold_until(path: str, holding, release) -> None:
    db = SidecarSqliteDatabase(path)
    with db.atomic():
        db.execute_sql("UPDATE counter SET value = value + 1")
        holding.set()
        release.wait(60)
    db.close()


def _held_elsewhere(path, seconds: float | None = None):
    """A process holding the write lock until its release event is set (after `seconds`, if given)."""
    holding, release = SPAWN.Event(), SPAWN.Event()
    holder = SPAWN.Process(target=_hold_until, args=(str(path), holding, release))
    holder.start()
    assert holding.wait(30)
    if seconds is not None:
        threading.Timer(seconds, release.set).start()
    return holder, release


def test_a_process_killed_holding_the_lock_leaves_it_free(tmp_path):
    path = tmp_path / "killed.sqlite"
    db = _database(path, busy_timeout=5.0)
    holder, _ = _held_elsewhere(path)  # until killed
    try:
        with pytest.raises(OperationalError, match="database is locked"):  # held by the living holder
            SidecarSqliteDatabase(str(path), busy_timeout=0.2).begin()
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(30)
        started = time.monotonic()
        _increment(db)
        assert time.monotonic() - started < 4  # free at once, not after the busy timeout (5 s)
    finally:
        if holder.is_alive():
            holder.kill()
    assert db.execute_sql("SELECT value FROM counter").fetchone()[0] == 1  # the killed one's write undone


def _lock_in_child(lock: WriteLock, results, seconds: float) -> None:
    results.put("taken" if lock.acquire(seconds) else "held by another")


def test_a_forked_child_does_not_take_its_parents_lock_for_its_own(tmp_path):
    # Fails if the child kept its parent's open file of the lock: that file holds the parent's flock, so the
    # child would take the lock the parent holds and write beside the parent's transaction.
    db = _database(tmp_path / "forked.sqlite")
    results = FORK.Queue()
    with db.atomic():
        db.execute_sql("UPDATE counter SET value = value + 1")
        child = FORK.Process(target=_lock_in_child, args=(db.write_lock, results, 0.3))
        child.start()
        assert results.get(timeout=30) == "held by another"
        child.join(30)
    _increment(db)
    assert db.execute_sql("SELECT value FROM counter").fetchone()[0] == 2


def test_a_transaction_that_fails_to_begin_or_is_rolled_back_leaves_the_lock_free(tmp_path):
    db = _database(tmp_path / "rolled.sqlite", busy_timeout=0.3)
    with pytest.raises(RuntimeError), db.atomic():
        db.execute_sql("UPDATE counter SET value = value + 1")
        raise RuntimeError("undone")
    with pytest.raises(OperationalError):
        db.begin("NONSENSE")  # SQLite refuses the statement: nothing is held after it
    _increment(db)  # not "database is locked"
    assert db.execute_sql("SELECT value FROM counter").fetchone()[0] == 1


def test_an_in_memory_database_needs_no_file(tmp_path):
    db = SidecarSqliteDatabase(":memory:")
    db.execute_sql("CREATE TABLE t (v INTEGER)")
    with db.atomic():
        db.execute_sql("INSERT INTO t VALUES (1)")
    assert db.execute_sql("SELECT count(*) FROM t").fetchone()[0] == 1
    assert not list(tmp_path.iterdir()) and not os.path.exists(":memory:-writer")


def test_a_writer_waits_for_another_process_in_the_kernel_not_by_asking_again(tmp_path, monkeypatch):
    # Fails with a waiter that asks for the file lock again every millisecond: hundreds of flock calls.
    path = tmp_path / "waiting.sqlite"
    db = _database(path)
    calls = []
    real_flock = write_lock.fcntl.flock
    # Only the write lock's own calls (the WAL's checkpointing thread takes a flock of its own file).
    monkeypatch.setattr(write_lock.fcntl, "flock",
                        lambda fd, op: (fd == db.write_lock._fd and calls.append(op)) or real_flock(fd, op))
    holder, _ = _held_elsewhere(path, 0.5)
    _increment(db)
    holder.join(30)
    assert db.execute_sql("SELECT value FROM counter").fetchone()[0] == 2
    assert len(calls) <= 4  # a try, the wait, the release (and an unlock of a grant nobody took)


def test_a_writer_that_gave_up_waiting_leaves_the_lock_to_the_next(tmp_path):
    # Fails if the file lock the kernel grants after the asker's deadline stays with this process.
    path = tmp_path / "gave-up.sqlite"
    db = _database(path, busy_timeout=0.2)
    holder, release = _held_elsewhere(path)
    with pytest.raises(OperationalError, match="database is locked"):
        _increment(db)
    release.set()
    holder.join(30)
    # Another open file of the lock: the kernel tells it apart from this process's first as from another
    # process's.
    other = WriteLock(str(path))
    assert other.acquire(10.0)  # nobody holds it now
    other.release()


def test_the_waiter_thread_ends_when_idle(tmp_path, monkeypatch):
    monkeypatch.setattr(write_lock, "WAITER_IDLE_SECONDS", 0.1)
    path = tmp_path / "idle.sqlite"
    db = _database(path)
    earlier = set(threading.enumerate())  # other tests' waiters wait out the idle time they started with
    holder, _ = _held_elsewhere(path, 0.3)
    _increment(db)  # waited: the waiter thread started
    holder.join(30)
    waiters = [t for t in set(threading.enumerate()) - earlier if t.name == "sqlite-writer-wait"]
    assert waiters
    for thread in waiters:
        thread.join(5)
        assert not thread.is_alive()
    holder, _ = _held_elsewhere(path, 0.3)
    _increment(db)  # a new one is started for the next wait
    holder.join(30)
    assert db.execute_sql("SELECT value FROM counter").fetchone()[0] == 4


def test_a_child_forked_while_its_parents_waiter_runs_waits_with_its_own(tmp_path):
    # Fails if the child took its parent's waiter for its own: no thread of the child would ever hand it
    # the lock, and it would give up after its 3 s although the lock is free after 0.3.
    path = tmp_path / "forked-waiter.sqlite"
    db = _database(path)
    holder, _ = _held_elsewhere(path, 0.3)
    _increment(db)  # the parent's waiter thread runs now (it ends only after seconds without an ask)
    holder.join(30)
    holder, _ = _held_elsewhere(path, 0.3)
    results = FORK.Queue()
    child = FORK.Process(target=_lock_in_child, args=(db.write_lock, results, 3.0))
    child.start()
    assert results.get(timeout=30) == "taken"  # once the holder let go, after 0.3 s
    child.join(30)
    holder.join(30)
