"""One writer at a time on a SQLite file, queued before SQLite is asked.

SQLite lets one connection write at a time and tells the others "busy"; they can only ask again. With a
worker's segment and poll threads, an API's request threads and other processes all writing, most of those
questions failed (a delegation cycle made about 18 failed BEGINs for 9 that succeeded), and each failure
cost a statement, an exception and a sleep. Here the writers queue instead:

- the threads of one process on a lock of the process, handed to the next waiter the moment it is released;
- the processes on an exclusive `flock` of a file beside the database (`<database>-writer`), which the
  kernel releases when a process dies, however it dies. One thread per process asks for it (the holder of
  the process's lock). When another process holds it, a waiting thread of the process (_FileWaiter) blocks
  in the kernel for it and hands it over the moment the kernel grants it, while the asking thread waits for
  that hand-over up to the busy timeout: a blocking `flock` has no timeout of its own. (Asking again every
  millisecond instead left the lock idle for half a millisecond on average at every hand-over between
  processes, with SQLite's one writer the bottleneck of a busy sidecar.)

A writer that does not take part (the sqlite3 shell, a backup) still holds SQLite's own lock; the BEGIN
that follows waits for it with SQLite's busy timeout, as any SQLite client does.
"""

import fcntl
import os
import threading
import time
import weakref

_FORKS = threading.Lock()
SUFFIX = "-writer"
WAITER_IDLE_SECONDS = 5.0  # a file waiter thread nobody asked for that long ends (started again when needed)


class WriteLock:
    """Held by one thread of all processes on the database between its BEGIN and its COMMIT or ROLLBACK."""

    def __init__(self, database_path: str):
        in_memory = database_path == ":memory:" or database_path.startswith("file::memory:")
        self._path = None if in_memory else os.path.realpath(database_path) + SUFFIX
        self._pid = os.getpid()  # the process the lock and the file descriptor belong to (a fork gets new ones)
        self._threads = threading.Lock()
        self._fd = None
        self._holder = None  # the thread holding it
        self._waiter = None  # the _FileWaiter, once another process has been found holding the file lock

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
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        if self._waiter is None:
            self._waiter = _FileWaiter()
        return self._waiter.wait(self, deadline)

    def _forked(self) -> None:
        # A child of a fork must not release its parent's file lock (an inherited descriptor shares it) nor
        # wait on a thread lock a parent's thread held at the fork: it starts with its own. Its parent's
        # waiter thread does not exist in the child.
        self._threads = threading.Lock()
        self._fd, self._holder, self._waiter = None, None, None
        self._pid = os.getpid()


class _FileWaiter:
    """A thread that waits in the kernel for a WriteLock's file lock on behalf of the one thread of the
    process asking for it (the holder of the process's lock), and hands it over when the kernel grants it.
    The asking thread waits for the hand-over with its own deadline; a lock granted after that deadline is
    let go at once."""

    def __init__(self):
        self._changed = threading.Condition(threading.Lock())
        self._asking = None  # the ident of the thread that asks now
        self._granted = None  # the ident of the thread the lock was handed to, until it takes it
        self._running = False

    def wait(self, lock: WriteLock, deadline: float) -> bool:
        """Called by the asking thread: True once the file lock is its, False when `deadline` passes first."""
        me = threading.get_ident()
        with self._changed:
            self._asking, self._granted = me, None
            if not self._running:
                self._running = True
                # The thread keeps `lock` alive, and so its descriptor open, while it runs.
                threading.Thread(target=self._run, args=(lock,), name="sqlite-writer-wait", daemon=True).start()
            self._changed.notify_all()
            while self._granted != me:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._asking = None
                    return False
                self._changed.wait(remaining)
            self._granted = None
            return True

    def _run(self, lock: WriteLock) -> None:
        fd = lock._fd
        try:
            while True:
                with self._changed:
                    if not self._changed.wait_for(lambda: self._asking is not None, WAITER_IDLE_SECONDS):
                        self._running = False
                        return
                fcntl.flock(fd, fcntl.LOCK_EX)  # without the interpreter lock, until the holder lets go
                with self._changed:
                    if self._asking is None:  # the asker's deadline passed meanwhile
                        fcntl.flock(fd, fcntl.LOCK_UN)
                    else:
                        self._granted, self._asking = self._asking, None
                        self._changed.notify_all()
        except BaseException:
            with self._changed:  # the askers meet their deadlines; the next one starts a new thread
                self._running = False
            raise
