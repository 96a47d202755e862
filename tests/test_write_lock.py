"""SQLite's writers queue on the sidecar's write lock (sidecar/store/write_lock.py): threads and processes
that race each ask SQLite once per transaction, one holds it at a time across processes, and a holder that
dies or forks leaves nobody waiting for nothing."""

import multiprocessing
import os
import signal
import threading
import time

import pytest

from sidecar.store.db import OperationalError, SidecarSqliteDatabase

THREADS, TRANSACTIONS = 8, 40
FORK = multiprocessing.get_context("fork")


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
    ready, results = FORK.Event(), FORK.Queue()
    processes = [FORK.Process(target=_process_writer, args=(str(path), ready, results)) for _ in range(3)]
    for process in processes:
        process.start()
    ready.set()
    begins = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(30)
        assert process.exitcode == 0
    assert _database(path).execute_sql("SELECT value FROM counter").fetchone()[0] == 3 * TRANSACTIONS
    assert begins == [TRANSACTIONS] * 3


def _hold_then_wait(path: str, holding) -> None:
    db = SidecarSqliteDatabase(path)
    db.begin()
    db.execute_sql("UPDATE counter SET value = value + 1")
    holding.set()
    time.sleep(60)  # killed before this ends


def test_a_process_killed_holding_the_lock_leaves_it_free(tmp_path):
    path = tmp_path / "killed.sqlite"
    db = _database(path, busy_timeout=5.0)
    holding = FORK.Event()
    holder = FORK.Process(target=_hold_then_wait, args=(str(path), holding))
    holder.start()
    try:
        assert holding.wait(30)
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


def _begin_in_child(db: SidecarSqliteDatabase, results) -> None:
    db.busy_timeout = 0.3
    try:
        db.begin()
        results.put("began while the parent held the lock")
    except OperationalError as exc:
        results.put(str(exc))


def test_a_forked_child_does_not_take_its_parents_lock_for_its_own(tmp_path):
    # Fails if the child inherited the parent's lock as held (it would write beside the parent's
    # transaction) or waited on the parent's thread lock for ever.
    db = _database(tmp_path / "forked.sqlite")
    results = FORK.Queue()
    with db.atomic():
        db.execute_sql("UPDATE counter SET value = value + 1")
        child = FORK.Process(target=_begin_in_child, args=(db, results))
        child.start()
        assert results.get(timeout=30) == "database is locked"
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
