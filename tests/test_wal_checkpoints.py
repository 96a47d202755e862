"""SQLite's WAL is copied into the database file by the checkpointing thread, not by a writer's commit
(sidecar/store/wal_checkpoints.py): one thread a database file across processes, handed over when its
process dies, never inherited by a fork, and ended when its process stops writing."""

import contextlib
import multiprocessing
import os
import signal
import sqlite3
import time

from sidecar.store import wal_checkpoints
from sidecar.store.db import SidecarSqliteDatabase
from tests.support.databases import file_lock_is_free, sqlite_files_open_in

# The child that writes is spawned: SQLite's connections must not cross a fork (a child copies the locks its
# parent's connections hold, and takes them for its own). The forked child shows what a fork inherits.
SPAWN, FORK = multiprocessing.get_context("spawn"), multiprocessing.get_context("fork")


def _database(path) -> SidecarSqliteDatabase:
    db = SidecarSqliteDatabase(str(path))
    db.execute_sql("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
    return db


def _write(db: SidecarSqliteDatabase, text: str) -> None:
    with db.atomic():
        db.execute_sql("INSERT INTO notes (text) VALUES (?)", (text,))


def _until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _in_database_file(path) -> set[str]:
    """The notes the database file itself holds, the WAL ignored (`immutable`: no lock, no WAL)."""
    for _ in range(50):  # a checkpoint writing the file meanwhile can make one read fail
        try:
            with contextlib.closing(sqlite3.connect(f"file:{path}?immutable=1", uri=True)) as reader:
                return {text for (text,) in reader.execute("SELECT text FROM notes")}
        except sqlite3.DatabaseError:
            time.sleep(0.02)
    raise AssertionError("the database file could not be read")


def _reaches_database_file(path, text: str) -> bool:
    return _until(lambda: text in _in_database_file(path))


def _checkpointing_lock_is_free(path) -> bool:
    return file_lock_is_free(f"{path}{wal_checkpoints.SUFFIX}")


def test_a_commit_leaves_the_wal_to_the_checkpointing_thread(tmp_path):
    path = tmp_path / "notes.sqlite"
    db = _database(path)
    assert db.execute_sql("PRAGMA wal_autocheckpoint").fetchone()[0] == wal_checkpoints.AUTOCHECKPOINT_PAGES
    _write(db, "first")
    # Nothing commits after this: only the thread can copy the note into the file (SQLite's own
    # checkpoints come with a commit past AUTOCHECKPOINT_PAGES, or when the last connection closes).
    assert _reaches_database_file(path, "first")
    assert os.path.getsize(f"{path}-wal") > 0  # the connection is still open: the WAL was not removed by a close


def test_under_steady_writes_the_wal_starts_over_instead_of_growing(tmp_path, monkeypatch):
    # Writers append while a checkpoint copies, so without the copy of the rest with the writers held back
    # the WAL is never all copied when a writer begins, and grows until a commit checkpoints it itself (past
    # AUTOCHECKPOINT_PAGES): here to several thousand pages in the four seconds.
    monkeypatch.setattr(wal_checkpoints, "RESTART_PAGES", 300)
    path = tmp_path / "notes.sqlite"
    db = _database(path)
    page = db.execute_sql("PRAGMA page_size").fetchone()[0]
    deadline = time.monotonic() + 4
    written = 0
    while time.monotonic() < deadline:
        _write(db, f"note {written} " + "x" * 200)
        written += 1
        time.sleep(0.0005)
    pages_at_most = os.path.getsize(f"{path}-wal") // (page + 24)  # the WAL file keeps its largest size
    assert written > 2000  # enough pages for the WAL to grow past the bound below without starting over
    assert pages_at_most < 2000, f"the WAL grew to {pages_at_most} pages over {written} commits"


def _commit_every_50_ms(path: str, ready) -> None:
    db = _database(path)
    while True:  # until killed
        _write(db, "child")
        ready.set()
        time.sleep(0.05)


def test_one_process_checkpoints_and_another_takes_over_when_it_is_killed(tmp_path):
    path = tmp_path / "notes.sqlite"
    _database(path).close()
    ready = SPAWN.Event()
    child = SPAWN.Process(target=_commit_every_50_ms, args=(str(path), ready))
    child.start()
    try:
        assert ready.wait(30)
        assert _until(lambda: not _checkpointing_lock_is_free(path))  # the child's thread took it
        db = _database(path)
        _write(db, "while the child checkpoints")
        assert _reaches_database_file(path, "while the child checkpoints")  # copied by the child's thread
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
        _write(db, "after the child died")
        assert _reaches_database_file(path, "after the child died")  # this process's thread took over
        assert not _checkpointing_lock_is_free(path)  # held by it
    finally:
        if child.is_alive():
            os.kill(child.pid, signal.SIGKILL)
            child.join(30)


def _sleep_in_child(results) -> None:
    results.put("forked")
    time.sleep(30)  # keeps whatever descriptors it has open: it would hold an inherited flock


def test_a_forked_child_keeps_no_lock_of_its_parents_checkpointing_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(wal_checkpoints, "IDLE_SECONDS", 0.3)
    path = tmp_path / "notes.sqlite"
    db = _database(path)
    _write(db, "the parent's")  # the parent's thread starts and takes the checkpointing lock
    assert _until(lambda: not _checkpointing_lock_is_free(path))
    results = FORK.Queue()
    child = FORK.Process(target=_sleep_in_child, args=(results,))
    child.start()  # forked while the parent's thread holds the lock
    try:
        assert results.get(timeout=30) == "forked"
        # The parent writes no more: its thread ends, and nobody holds the lock once it has.
        assert _until(lambda: _checkpointing_lock_is_free(path)), "a descriptor the child inherited kept the lock"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)


def test_the_thread_ends_when_its_process_stops_writing_and_starts_with_the_next_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(wal_checkpoints, "IDLE_SECONDS", 0.3)
    path = tmp_path / "notes.sqlite"
    db = _database(path)
    _write(db, "one")
    first = db.checkpointer._thread
    assert first.is_alive()
    assert _until(lambda: not first.is_alive()), "the idle thread did not end"
    assert _checkpointing_lock_is_free(path)
    _write(db, "two")
    assert db.checkpointer._thread is not first and db.checkpointer._thread.is_alive()
    assert _reaches_database_file(path, "two")


def test_closing_all_before_a_fork_closes_the_checkpointing_threads_connection_too(tmp_path):
    # Fails if the thread's connection outlives close_all: a child forked next would copy the locks SQLite
    # keeps in the parent's memory for it. The next commit starts another thread.
    path = tmp_path / "notes.sqlite"
    db = _database(path)
    _write(db, "before the fork")
    first = db.checkpointer._thread
    assert first.is_alive() and sqlite_files_open_in(os.getpid(), path)
    db.close_all()
    assert not first.is_alive()
    assert sqlite_files_open_in(os.getpid(), path) == []
    _write(db, "after the fork")
    assert db.checkpointer._thread is not first and db.checkpointer._thread.is_alive()
    assert _reaches_database_file(path, "after the fork")


def test_a_failed_checkpoint_is_tried_again_at_the_next_interval(tmp_path, monkeypatch, caplog):
    path = tmp_path / "notes.sqlite"
    db = _database(path)
    real = wal_checkpoints.checkpoint
    failures = []

    def failing_twice(connection):
        if connection.execute("PRAGMA database_list").fetchone()[2] == str(path) and len(failures) < 2:
            failures.append(1)
            raise sqlite3.OperationalError("disk I/O error")
        return real(connection)

    monkeypatch.setattr(wal_checkpoints, "checkpoint", failing_twice)
    _write(db, "after two failures")
    assert _reaches_database_file(path, "after two failures")
    assert len(failures) == 2
    assert [r.message for r in caplog.records if "checkpointing the WAL" in r.message] == [
        f"checkpointing the WAL of {os.path.realpath(path)} failed: disk I/O error"]  # once per run of failures


def test_an_in_memory_database_has_no_checkpointer():
    assert SidecarSqliteDatabase(":memory:").checkpointer is None

