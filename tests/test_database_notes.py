"""Promises of sidecar/store/db.py that hold per database, proven on the real databases: SQLite's WAL, busy
timeout and BEGIN IMMEDIATE; MariaDB's long texts and microsecond times; the whole-transaction retry of
`transactional` after a real deadlock on PostgreSQL and MariaDB."""

import collections
import sqlite3
import threading
import time
from datetime import datetime

import pytest

from sidecar.domain.lease import LeasePolicy
from sidecar.store import db as store_db
from sidecar.store import leases, runs, turns
from sidecar.store.db import SQLITE_BUSY_TIMEOUT_SECONDS, SQLITE_MMAP_BYTES, transactional
from sidecar.store.models import Run
from sidecar.testing import StepExecutor
from tests.support.api import ACTOR
from tests.support.runs import steps_input
from tests.support.waiting import wait_until
from tests.support.workers import worker_in_thread

sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
mysql_only = pytest.mark.parametrize("database_url", ["mysql"], indirect=True)
# SQLite cannot deadlock: with BEGIN IMMEDIATE the second writer waits at BEGIN (proven above instead).
server_databases = pytest.mark.parametrize("database_url", ["postgresql", "mysql"], indirect=True)

RAW_TIMEOUT = 0.3  # how long a raw connection of these tests waits for a lock before it reports busy


def _sqlite_path() -> str:
    return store_db.database.obj.database


def _raw_sqlite(timeout: float = RAW_TIMEOUT) -> sqlite3.Connection:
    """A connection of its own, outside the store (autocommit: each statement is its own transaction)."""
    return _raw_sqlite_at(_sqlite_path(), timeout)


def _raw_sqlite_at(path, timeout: float = RAW_TIMEOUT) -> sqlite3.Connection:
    return sqlite3.connect(str(path), timeout=timeout, isolation_level=None)


def _in_thread(target, *args) -> tuple[threading.Thread, list]:
    """Run target in a thread that closes its own store connection; exceptions are collected, not lost."""
    errors: list = []

    def body():
        try:
            target(*args)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            store_db.database.close()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, errors


def _pragmas() -> dict:
    db = store_db.database
    return {name: db.execute_sql(f"PRAGMA {name}").fetchone()[0]
            for name in ("journal_mode", "busy_timeout", "foreign_keys", "mmap_size")}


# --- SQLite: WAL, a busy timeout, BEGIN IMMEDIATE ------------------------------------------------------


@sqlite_only
def test_sqlite_connections_are_in_wal_mode_with_the_busy_timeout(database_url):
    # Fails if SidecarSqliteDatabase lost its pragmas: journal_mode would read "delete", busy_timeout 0 (or
    # another value), foreign_keys 0, mmap_size 0 (reads through read() again); and on every connection, not
    # only the first one a process opens.
    expected = {"journal_mode": "wal", "busy_timeout": SQLITE_BUSY_TIMEOUT_SECONDS * 1000, "foreign_keys": 1,
                "mmap_size": SQLITE_MMAP_BYTES}
    assert SQLITE_BUSY_TIMEOUT_SECONDS >= 1
    assert _pragmas() == expected
    seen = []
    thread, errors = _in_thread(lambda: seen.append(_pragmas()))  # a second connection, of another thread
    thread.join(10)
    assert errors == [] and seen == [expected]
    # WAL is a property of the file: a connection that set nothing finds it too.
    with _raw_sqlite() as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@sqlite_only
def test_a_store_transaction_takes_the_write_lock_at_begin_even_if_it_only_read(database_url):
    run_id = runs.create_run(ACTOR, "a row to read", wake=False)
    raw = _raw_sqlite()
    try:
        # The control: in WAL mode an open deferred transaction that has only read blocks no writer, so the
        # busy errors below come from BEGIN IMMEDIATE alone.
        reader = _raw_sqlite()
        reader.execute("BEGIN DEFERRED")
        assert reader.execute("SELECT owner FROM runs WHERE id = ?", (run_id,)).fetchone() == (ACTOR,)
        raw.execute("UPDATE runs SET origin = 'while a deferred reader is open' WHERE id = ?", (run_id,))
        reader.execute("COMMIT")
        reader.close()

        # The store's own transaction, after only a read, already holds the write lock: another connection's
        # write waits its whole timeout and fails busy. Fails if the store's transactions began DEFERRED.
        with store_db.database.atomic():
            assert runs.get_run(run_id).owner == ACTOR
            started = time.monotonic()
            with pytest.raises(sqlite3.OperationalError, match="database is locked"):
                raw.execute("UPDATE runs SET origin = 'during the atomic block' WHERE id = ?", (run_id,))
            assert time.monotonic() - started >= RAW_TIMEOUT * 0.8  # it waited, then gave up
        raw.execute("UPDATE runs SET origin = 'after it' WHERE id = ?", (run_id,))  # the lock went with it

        # The same for a function of the store (`transactional`), on a thread of its own as a worker runs it.
        has_read, may_finish = threading.Event(), threading.Event()

        @transactional
        def read_and_hold():
            runs.get_run(run_id)
            has_read.set()
            assert may_finish.wait(10)

        thread, errors = _in_thread(read_and_hold)
        assert has_read.wait(10)
        try:
            with pytest.raises(sqlite3.OperationalError, match="database is locked"):
                raw.execute("UPDATE runs SET origin = 'during the store function' WHERE id = ?", (run_id,))
        finally:
            may_finish.set()
            thread.join(10)
        assert errors == []
        raw.execute("UPDATE runs SET origin = 'after the store function' WHERE id = ?", (run_id,))
        assert runs.get_run(run_id).origin == "after the store function"
    finally:
        raw.close()


@sqlite_only
def test_a_store_writer_waits_for_the_lock_instead_of_failing(database_url):
    # The busy timeout at work: a second writer queues behind the first. Fails if the busy timeout were 0
    # (BEGIN IMMEDIATE would fail at once with "database is locked") or shorter than the hold.
    run_id = runs.create_run(ACTOR, "two writers", wake=False)
    holding, hold = threading.Event(), 0.6

    def first_writer():
        with store_db.database.atomic():
            Run.update(bytes_used=Run.bytes_used + 1).where(Run.id == run_id).execute()
            holding.set()
            time.sleep(hold)

    thread, errors = _in_thread(first_writer)
    assert holding.wait(10)
    started = time.monotonic()
    with store_db.database.atomic():  # not `transactional`: no retry may hide a busy error here
        Run.update(bytes_used=Run.bytes_used + 10).where(Run.id == run_id).execute()
    waited = time.monotonic() - started
    thread.join(10)
    assert errors == []
    assert waited >= hold * 0.5  # it queued behind the first writer's transaction
    assert runs.get_run(run_id).bytes_used == 11
    # The wait was the store's own (SidecarSqliteDatabase.begin): SQLite's busy timeout is back for the
    # connection's other statements.
    assert _pragmas()["busy_timeout"] == SQLITE_BUSY_TIMEOUT_SECONDS * 1000


def test_a_writer_gives_up_after_the_busy_timeout_with_database_is_locked(tmp_path):
    path = tmp_path / "locked.sqlite"
    waiting = store_db.SidecarSqliteDatabase(str(path), busy_timeout=0.3)
    waiting.execute_sql("CREATE TABLE t (v TEXT)")
    holder = _raw_sqlite_at(path)
    holder.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(store_db.OperationalError, match="database is locked"):
            waiting.begin()
        assert 0.25 <= time.monotonic() - started < 10
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert waiting.execute_sql("PRAGMA busy_timeout").fetchone()[0] == 300
    with waiting.atomic():  # free again: taken at once
        waiting.execute_sql("INSERT INTO t VALUES ('after')")
    waiting.close()


# --- MariaDB: LONGTEXT and DATETIME(6) -----------------------------------------------------------------


def _long_text(label: str, length: int = 200_000) -> str:
    """`length` characters of mixed widths (1 to 4 bytes in utf8mb4): far over TEXT's 65,535 bytes."""
    text = "".join(f"{label} {i} ü € 😀 | " for i in range(length // 10 + 1))[:length]
    assert len(text) == length and len(text.encode()) > 3 * 65_535
    return text


@mysql_only
def test_long_inputs_and_tool_results_round_trip_unchanged_on_mariadb(database_url):
    # Fails if a TextField became TEXT on MariaDB: strict mode refuses the insert, a lenient one cuts it at
    # 65,535 bytes; either way the text read back is not the one written.
    run_input, result = _long_text("input"), _long_text("result")
    run = runs.new_run(ACTOR, run_input, spec={"provider": "scripted"}, wake=False)
    assert runs.get_run(run.id).input == run_input

    (claim,) = leases.claim_queued("holder-1", 1, LeasePolicy(30))
    turns.save_tool_result(claim, 0, "call_1", "echo", result, {"name": "echo"}, clear_pending_effect=False)
    _, results = turns.load(run.id)
    assert results == {"call_1": result}

    # Every text column of every table is LONGTEXT, every time DATETIME(6): not only the two used above.
    cursor = store_db.database.execute_sql(
        "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE, DATETIME_PRECISION FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = DATABASE() AND DATA_TYPE IN ('text', 'mediumtext', 'longtext', 'datetime')")
    columns = {(table, column): (kind, precision) for table, column, kind, precision in cursor.fetchall()}
    assert columns[("runs", "input")][0] == "longtext" and columns[("tool_results", "result")][0] == "longtext"
    short = {key: kind for key, (kind, _) in columns.items() if kind in ("text", "mediumtext")}
    coarse = {key: precision for key, (kind, precision) in columns.items() if kind == "datetime" and precision != 6}
    assert (short, coarse) == ({}, {})


@mysql_only
def test_times_keep_their_microseconds_on_mariadb(database_url):
    # Fails if DATETIME lost its (6): MariaDB would store whole seconds, and the times read back would have
    # microsecond 0 (or be rounded to another second) instead of the ones written.
    run = runs.new_run(ACTOR, "microseconds", wake=False, budget={"deadline_seconds": 3600.123456})
    while run.created_at.microsecond == 0:  # one time in a million; the check needs microseconds to lose
        run = runs.new_run(ACTOR, "microseconds", wake=False, budget={"deadline_seconds": 3600.123456})
    stored = runs.get_run(run.id)
    assert (stored.created_at, stored.queued_at, stored.deadline_at) == (run.created_at, run.queued_at,
                                                                          run.deadline_at)
    assert stored.created_at.microsecond == run.created_at.microsecond != 0

    exact = datetime(2031, 5, 6, 7, 8, 9, 123456)
    Run.update(cancel_requested_at=exact).where(Run.id == run.id).execute()
    assert runs.get_run(run.id).cancel_requested_at == exact
    # Ordering at microsecond resolution: a time one microsecond later compares as later in SQL.
    later = Run.select(Run.id).where(Run.cancel_requested_at > datetime(2031, 5, 6, 7, 8, 9, 123455))
    assert [row.id for row in later] == [run.id]


# --- transactional: a deadlock is retried whole --------------------------------------------------------


@server_databases
@pytest.mark.parametrize("nested", [False, True], ids=["outermost", "nested"])
def test_a_real_deadlock_is_retried_whole_and_each_transaction_applies_once(database_url, nested):
    # Nested: the deadlocking function runs as a savepoint of an outer transactional function. Only the
    # outer one may start again; on MariaDB undoing the inner savepoint itself fails after the deadlock
    # ("SAVEPOINT does not exist"), and that error must still be recognised as the deadlock's.
    # Two transactions update the same two rows in opposite orders; a barrier makes each hold its first row
    # before it asks for the second, so the database must abort one (PostgreSQL 40P01 after deadlock_timeout,
    # MariaDB 1213 at once). Fails if `transactional` did not retry a deadlock (the victim's thread would end
    # with OperationalError), or retried only part of it / kept the aborted attempt's work (a row would not
    # be 11: the victim's first update counted twice or not at all).
    first, second = (runs.create_run(ACTOR, f"row {n}", wake=False) for n in (1, 2))
    barrier = threading.Barrier(2, timeout=30)
    attempts: collections.Counter = collections.Counter()

    @transactional
    def add_to_both(name: str, one: str, other: str, amount: int) -> None:
        attempts[name] += 1
        Run.update(bytes_used=Run.bytes_used + amount).where(Run.id == one).execute()
        if attempts[name] == 1:
            barrier.wait()  # both hold their first row now; a retry does not wait for the other
        Run.update(bytes_used=Run.bytes_used + amount).where(Run.id == other).execute()

    @transactional
    def around(*args) -> None:
        add_to_both(*args)

    entry = around if nested else add_to_both
    ones, errors_one = _in_thread(entry, "one", first, second, 1)
    tens, errors_ten = _in_thread(entry, "ten", second, first, 10)
    ones.join(60)
    tens.join(60)
    assert not ones.is_alive() and not tens.is_alive()
    assert errors_one + errors_ten == []
    # One ran once; the other was the deadlock's victim and ran again. How often it ran again is not the
    # point (a loaded machine once gave a victim a third attempt); that each attempt's work was undone is.
    fewest, most = sorted(attempts.values())
    assert fewest == 1 and most >= 2
    # Each function's work is there exactly once: 1 + 10 on both rows.
    assert [runs.get_run(run_id).bytes_used for run_id in (first, second)] == [11, 11]


@sqlite_only
def test_a_worker_waiting_for_runs_takes_the_write_lock_only_to_claim_one(database_url, settings, monkeypatch):
    # On SQLite a claim is a write transaction: it holds the one writer's lock. Every look at an empty queue
    # (each poll, each wake-up that another worker process answered first) took it for nothing, beside the
    # segments' writes. Fails if the worker's loop claims without a run being queued.
    db = store_db.database.obj
    begins: collections.Counter = collections.Counter()
    begin, worth_claiming = db.begin, leases.worth_claiming
    looks: list = []

    def counted(*args, **kwargs):
        begins[threading.current_thread().name] += 1
        return begin(*args, **kwargs)

    def looked() -> bool:
        looks.append(1)
        return worth_claiming()

    db.begin = counted
    monkeypatch.setattr(leases, "worth_claiming", looked)
    worker = worker_in_thread(settings, StepExecutor(), coordinators=0)  # the queue polled every 0.05 s
    try:
        wait_until(lambda: len(looks) >= 5, what="the loop to look at the empty queue five times")
        assert begins["worker-loop"] == 0  # (its first pass reaps: a read, with nothing expired)
        run_id = runs.create_run(ACTOR, steps_input({"event": "work"}, output="claimed"))
        wait_until(lambda: runs.get_run(run_id).status == "completed", what="the run to complete")
        assert begins["worker-loop"] == 1  # the claim
    finally:
        worker.stop(5)
