"""SQLite's WAL copied into the database file by a thread of its own, never inside a writer's transaction.

Left to SQLite, the commit that grows the WAL past 1,000 pages copies the WAL into the database file and
waits for the disk to flush it (an automatic checkpoint), still holding the one writer's lock of every
sidecar process (write_lock.py). A delegation cycle adds about 75 pages, so a busy sidecar did that every
dozen cycles, and every waiting writer waited for the disk too: the slowest runs' time (docs/performance.md,
"Checkpoints outside the writers"). Here a writer's connection checkpoints only past AUTOCHECKPOINT_PAGES,
a safety net that a running checkpointer keeps the WAL far below, and one thread checkpoints every
INTERVAL_SECONDS on a connection of its own. A passive checkpoint takes no writer's lock: writers go on
appending to the WAL while it copies, and the first writer after a complete copy starts the WAL over.

One checkpointing thread a database file, however many processes write to it: the thread holding an
exclusive `flock` of `<database>-checkpointer` checkpoints, the others only try to take it at each
interval, so one of them takes over within an interval when the holder's process ends, however it ends.
A process's thread runs while the process commits and ends after IDLE_SECONDS without a commit (the next
commit starts it again), before the process forks (a child must not inherit an open SQLite connection),
and at exit: the last connection to close then copies the WAL and removes it, as SQLite does without a
checkpointer.
"""

import atexit
import fcntl
import logging
import os
import sqlite3
import threading
import time
import weakref

log = logging.getLogger("nrllm_sidecar.store")

SUFFIX = "-checkpointer"
INTERVAL_SECONDS = 0.1
IDLE_SECONDS = 5.0
STOP_SECONDS = 2.0  # at exit, how long a checkpoint under way may take to end
# A writer's connection checkpoints itself only past this many WAL pages (SQLite's default is 1,000).
AUTOCHECKPOINT_PAGES = 10_000
# Past this many, the rest of the WAL is copied with the writers held back (_copy_the_rest).
RESTART_PAGES = 2_000
WRITE_LOCK_SECONDS = 1.0  # how long the checkpointer waits for the writers' lock before trying later

# Held while a lock file is opened and while the process forks, so that a child never inherits a
# checkpointer's descriptor unnoticed: it would hold the parent's flock, with no thread of its own using it.
_FORKS = threading.Lock()
_LIVE: "weakref.WeakSet[Checkpointer]" = weakref.WeakSet()
_exiting = False  # set at exit: no thread starts after the last ones were closed


class Checkpointer:
    """The checkpoints of one SQLite file, for the process's writers through one database object."""

    def __init__(self, database_path: str, write_lock):
        self._path = database_path
        self._write_lock = write_lock
        self._state = threading.Lock()
        self._pid = None  # the process whose thread runs (a fork's child starts its own)
        self._lock_fd = None  # the running thread's descriptor of the lock file
        self._thread = None
        self._stopping = threading.Event()  # the running thread's (each thread gets its own)
        self._last_commit = 0.0
        _LIVE.add(self)

    def committed(self) -> None:
        """Called after every commit: keeps this process's thread running, or starts it."""
        self._last_commit = time.monotonic()
        if self._pid == os.getpid() or _exiting:
            return
        with self._state:
            if self._pid == os.getpid() or _exiting:
                return
            with _FORKS:
                try:
                    self._lock_fd = os.open(self._path + SUFFIX, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                except OSError as exc:
                    # A read-only folder: SQLite's own checkpoints at AUTOCHECKPOINT_PAGES are all there is.
                    log.warning("no WAL checkpoints of %s outside commits: %s", self._path, exc)
                    self._pid = os.getpid()  # not asked again in this process
                    return
            self._pid = os.getpid()
            self._stopping = threading.Event()
            self._thread = threading.Thread(target=self._run, args=(self._lock_fd, self._stopping),
                                            name="sqlite-checkpointer", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """End this process's thread and close its connection; the next commit starts another.

        Called before the process forks: SQLite keeps the locks its connections hold in the process's
        memory, and a child that copied them would take its parent's locks for its own. And at exit, where
        the last connection to close copies the WAL and removes it."""
        with self._state:
            thread, stopping = self._thread, self._stopping
        stopping.set()
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(STOP_SECONDS)

    def _run(self, lock_fd: int, stopping: threading.Event) -> None:
        try:
            self._checkpoint_until_done(lock_fd, stopping)
        except Exception:
            # Not started again in this process (it would fail the same way at every commit); another
            # process's thread takes over, and SQLite's own checkpoints remain.
            log.exception("the WAL checkpoints of %s stopped in this process", self._path)
        finally:
            with self._state, _FORKS:
                if self._lock_fd == lock_fd:
                    self._lock_fd = None
                os.close(lock_fd)  # the flock goes with it

    def _checkpoint_until_done(self, lock_fd: int, stopping: threading.Event) -> None:
        """Until the thread is closed or its process has not committed for IDLE_SECONDS."""
        connection = sqlite3.connect(self._path, check_same_thread=False)
        try:
            connection.execute("PRAGMA synchronous = NORMAL")  # the writers' setting: the same flushes
            failing = False
            while not stopping.wait(INTERVAL_SECONDS):
                if _holds(lock_fd):
                    try:
                        if checkpoint(connection)[0] >= RESTART_PAGES:
                            self._copy_the_rest(connection)
                        failing = False
                    except sqlite3.OperationalError as exc:  # a full disk, say: tried again at the next interval
                        if not failing:
                            log.warning("checkpointing the WAL of %s failed: %s", self._path, exc)
                        failing = True
                if time.monotonic() - self._last_commit > IDLE_SECONDS and self._ends_idle():
                    return
            with self._state:
                self._pid = None  # closed: the next commit starts another thread
        finally:
            connection.close()

    def _copy_the_rest(self, connection: sqlite3.Connection) -> None:
        # SQLite starts the WAL over only when a writer begins with all of it copied. Writers append while a
        # checkpoint copies, so under steady writes that moment rarely comes, and the WAL grew to 9,500 pages
        # in a few seconds of bench/bench_cycle.py; past AUTOCHECKPOINT_PAGES every commit would checkpoint
        # again. The pages appended since the copy just made are few: copied with the writers held back on
        # their lock (write_lock.py), the next writer finds all of it copied.
        if not self._write_lock.acquire(WRITE_LOCK_SECONDS):
            return
        try:
            checkpoint(connection)
        finally:
            self._write_lock.release()

    def _ends_idle(self) -> bool:
        """Whether the thread ends for want of commits; the next commit starts another."""
        with self._state:
            if time.monotonic() - self._last_commit <= IDLE_SECONDS:
                return False  # a commit came meanwhile and saw this thread running
            self._pid = None
            return True

    def _forget_inherited(self) -> None:
        # In a fork's child: the descriptor belongs to the parent's thread, which the child does not have.
        if self._lock_fd is not None:
            os.close(self._lock_fd)
        self._lock_fd, self._pid, self._thread = None, None, None
        self._state = threading.Lock()


def _holds(fd: int) -> bool:
    """Whether this descriptor holds the lock file's flock: taken now, or held since an earlier interval."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def checkpoint(connection: sqlite3.Connection) -> tuple[int, int]:
    """A passive checkpoint: (pages in the WAL, of them in the database file now). It copies what no reader
    still needs, without waiting for any writer or reader."""
    _busy, pages, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return pages, copied


def _after_fork_in_child() -> None:
    _FORKS.release()
    for checkpointer in list(_LIVE):
        checkpointer._forget_inherited()


def _close_all_at_exit() -> None:
    global _exiting
    _exiting = True
    for checkpointer in list(_LIVE):
        checkpointer.close()


atexit.register(_close_all_at_exit)
os.register_at_fork(before=_FORKS.acquire, after_in_parent=_FORKS.release, after_in_child=_after_fork_in_child)
