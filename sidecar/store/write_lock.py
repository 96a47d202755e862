"""One writer at a time on a SQLite file, queued before SQLite is asked.

SQLite lets one connection write at a time and tells the others "busy"; they can only ask again. With a
worker's segment and poll threads, an API's request threads and other processes all writing, most of those
questions failed (a delegation cycle made about 18 failed BEGINs for 9 that succeeded), and each failure
cost a statement, an exception and a sleep. Here the writers queue instead:

- the threads of one process on a lock of the process, handed to the next waiter the moment it is released;
- the processes on an exclusive `flock` of a file beside the database (`<database>-writer`), which the
  kernel releases when a process dies, however it dies. One thread per process asks for it (the holder of
  the process's lock), about every millisecond, up to the busy timeout.

A writer that does not take part (the sqlite3 shell, a backup) still holds SQLite's own lock; the BEGIN
that follows waits for it with SQLite's busy timeout, as any SQLite client does.
"""

import fcntl
import os
import threading
import time
import weakref

_FORKS = threading.Lock()
RETRY_SECONDS = 0.001  # how often a process asks again for the file lock another process holds
SUFFIX = "-writer"


class WriteLock:
    """Held by one thread of all processes on the database between its BEGIN and its COMMIT or ROLLBACK."""

    def __init__(self, database_path: str):
        in_memory = database_path == ":memory:" or database_path.startswith("file::memory:")
        self._path = None if in_memory else os.path.realpath(database_path) + SUFFIX
        self._pid = os.getpid()  # the process the lock and the file descriptor belong to (a fork gets new ones)
        self._threads = threading.Lock()
        self._fd = None
        self._holder = None  # the thread holding it

    def acquire(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds; False if it was not free by then."""
        deadline = time.monotonic() + timeout
        if self._pid != os.getpid():
            with _FORKS:
                if self._pid != os.getpid():
                    self._forked()
        if not self._threads.acquire(timeout=max(timeout, 0)):
            return False
        try:
            if not self._lock_file(deadline):
                self._threads.release()
                return False
        except BaseException:
            self._threads.release()
            raise
        self._holder = threading.get_ident()
        return True

    def release(self) -> None:
        """Release it if the calling thread holds it; otherwise nothing (a COMMIT outside a transaction)."""
        if self._holder != threading.get_ident() or self._pid != os.getpid():
            return
        self._holder = None
        try:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def _lock_file(self, deadline: float) -> bool:
        if self._fd is None:
            if self._path is None:
                return True
            try:
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:  # a read-only folder: SQLite's own lock is all there is
                self._path = None
                return True
            weakref.finalize(self, os.close, self._fd)
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(RETRY_SECONDS)

    def _forked(self) -> None:
        # A child of a fork must not release its parent's file lock (an inherited descriptor shares it) nor
        # wait on a thread lock a parent's thread held at the fork: it starts with its own.
        self._threads = threading.Lock()
        self._fd, self._holder = None, None
        self._pid = os.getpid()
