"""Waking the worker processes of this machine from another process: unix datagram sockets, one byte each.

The API's processes queue runs (a POST, a decision stored for the run to continue) and bring waits' polls
forward (a push, a CancelTask to send), but the workers that act on them live in other processes. Nothing
told a worker's loop that a run was queued, nor, on SQLite and MariaDB, a coordinator that a wait was due:
they found out at their next poll of the queue or look at the due index. A doorbell rings them at once. On
PostgreSQL too: a wait due rings one, and only when no doorbell answers does the API notify (store/notify.py),
for the coordinators of other machines.

Every worker process binds a datagram socket in one directory per database (under the temporary
directory, private to the user, named by a digest of the SQLite file's real path or the server's
address and database), and serves it with a thread (`Doorbell`, a companion of the worker). A process
that has no worker of its own (the API's) rings after its commits (`ring_other_processes`): a
non-blocking send of one byte to one socket of that directory, in turn, `d` for waits due, `q` for runs
queued; a socket whose process is gone is removed (and the next one rung instead). Any coordinator claims
every wait that is due, so one woken is enough: woken all, every other one made a claim that found
nothing, a write transaction each (on SQLite a turn of the one writer's lock). A queued run is claimed by
one process with a thread free, so it rings one of those: a process whose threads are all busy marks its
doorbell with a file beside it (`<socket>.busy`, `Doorbell.threads_free`). When every process is marked,
all are rung: each then looks again as soon as a thread of its own is free. A ring is only a hint, as an
in-process wake-up is: a lost one (a full buffer, a worker started a moment later, processes on other
machines) costs what it cost before, the next poll; nothing is ever taken from the datagram but the
reason to look.
"""

import bisect
import contextlib
import hashlib
import logging
import os
import socket
import tempfile
import threading
import uuid
from pathlib import Path

from .. import wakeup
from ..application import thread
from . import notify
from .db import database, dialect

log = logging.getLogger("nrllm_sidecar.doorbell")

RUNS_QUEUED = b"q"
DEPENDENCIES_DUE = b"d"
SUFFIX = ".bell"
BUSY_SUFFIX = ".busy"  # appended to a doorbell's name: that process has no thread free for a queued run
_STOP = b"s"  # a doorbell's own thread, told to end


_known: tuple[object, Path | None] = (None, None)  # the bound database object and its directory


def directory() -> Path | None:
    """The directory of the doorbells of the bound database's worker processes; None for an in-memory SQLite
    database (no other process shares it)."""
    global _known
    db = database.obj
    if db is None:
        return None
    known_db, known = _known
    if known_db is db:
        return known
    found = _directory_of(db)
    _known = (db, found)
    return found


def _directory_of(db) -> Path | None:
    if dialect() == "sqlite":
        if db.database in ("", ":memory:") or str(db.database).startswith("file::memory:"):
            return None
        identity = "sqlite:" + os.path.realpath(db.database)
    else:
        params = db.connect_params
        identity = f"{dialect()}:{params.get('host')}:{params.get('port')}:{db.database}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:20]
    # Short on purpose: a socket's path has at most about 100 bytes.
    return Path(tempfile.gettempdir()) / f"nrllm-doorbell-{os.getuid()}-{digest}"


def _busy_mark(bell) -> str:
    """The path of the file that marks the doorbell at `bell` busy."""
    return f"{bell}{BUSY_SUFFIX}"


def _private_directory(path: Path) -> bool:
    """Create `path` (0700) if needed; False unless it is a directory of this user that nobody else can
    write to (another user could otherwise place sockets, or read which processes run)."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not path.is_dir() or path.is_symlink() or info.st_uid != os.getuid() or info.st_mode & 0o077:
        log.warning("doorbell directory %s is not a private directory of this user: not used", path)
        return False
    return True


class _Ringer:
    """Rings the doorbells of the bound database (a socket per process, made after a fork)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._pid = 0
        # The doorbell last rung alone: the next ring for one starts after it by name, so the turn passes on
        # in order even when processes start or end between rings (a position would skip or repeat one).
        self._last = ""

    def ring(self, what: bytes, *, one: bool = False) -> int:
        """Send `what` to every doorbell of the bound database, or with `one` to the next one in turn that
        can be rung (for RUNS_QUEUED, among those not marked busy; all if every one is); returns how many
        were rung."""
        folder = directory()
        if folder is None:
            return 0
        try:
            names = [e.name for e in os.scandir(folder)]
        except FileNotFoundError:
            return 0  # no worker process has one
        bells = sorted(name for name in names if name.endswith(SUFFIX))
        if one and what == RUNS_QUEUED:
            # One process with a thread free claims it; woken all, the others' claims would find nothing.
            busy = {name.removesuffix(BUSY_SUFFIX) for name in names if name.endswith(BUSY_SUFFIX)}
            free = [name for name in bells if name not in busy]
            if free:
                bells = free
            else:
                one = False  # every one looks again when a thread of its own is free
        rung = 0
        with self._lock:
            sender = self._sender()
            if one and bells:
                first = bisect.bisect_right(bells, self._last) % len(bells)
                bells = bells[first:] + bells[:first]
            for name in bells:
                if one and rung:
                    break
                path = os.path.join(folder, name)
                try:
                    sender.sendto(what, path)
                except BlockingIOError:
                    pass  # its buffer is full of rings it has yet to read: it will look anyway
                except (ConnectionRefusedError, FileNotFoundError):
                    for leftover in (path, _busy_mark(path)):  # its process ended without removing them (killed)
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(leftover)
                    continue
                except OSError as exc:
                    log.debug("ringing %s failed: %s", path, exc)
                    continue
                rung += 1
                self._last = name
        return rung

    def _sender(self) -> socket.socket:
        if self._socket is None or self._pid != os.getpid():
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._socket.setblocking(False)
            self._pid = os.getpid()
        return self._socket


_ringer = _Ringer()


def ring(what: bytes, *, one: bool = False) -> int:
    return _ringer.ring(what, one=one)


class _RingOnSet:
    """Stands in for an in-process worker's or coordinator's event (wakeup.py calls `set()`): rings the
    worker processes instead. Never from a doorbell's own thread: two processes would ring each other
    for ever."""

    def __init__(self, what: bytes):
        self.what = what

    def set(self) -> None:
        if getattr(_in_doorbell, "active", False):
            return
        rung = 0
        try:
            rung = ring(self.what, one=True)
        except Exception:  # a wake-up is a hint: the commit it follows stands, and the next poll finds it
            log.exception("ringing the worker processes failed")
        if not rung and self.what == DEPENDENCIES_DUE:
            notify.notify_now()  # no worker process here: on PostgreSQL, the coordinators of other machines


_in_doorbell = threading.local()


def ring_other_processes() -> None:
    """From now on, the application rings the worker processes' doorbells whenever it would wake a worker
    or a coordinator of its own (the API's, which has none). Once per application (create_app)."""
    wakeup.subscribe(_RingOnSet(RUNS_QUEUED))  # type: ignore[arg-type] - wakeup only calls set()
    wakeup.subscribe_coordinator(_RingOnSet(DEPENDENCIES_DUE))  # type: ignore[arg-type]


class Doorbell:
    """A worker process's doorbell: a thread that wakes this process's worker loop and coordinators
    (through wakeup.py) when another process rings. A companion of the worker: start() and stop()."""

    def __init__(self):
        self.path: Path | None = None
        self._socket: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> None:
        folder = directory()
        try:
            if folder is None or not _private_directory(folder):
                return
            path = folder / f"{os.getpid()}-{uuid.uuid4().hex[:8]}{SUFFIX}"
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(str(path))
        except OSError as exc:  # without it the worker polls, as it always did
            log.warning("no doorbell for this worker process (%s): it finds work by polling only", exc)
            return
        self.path, self._socket = path, sock
        self._thread = thread(self._serve, name="doorbell")  # wakes the application that started it
        self._thread.start()

    def threads_free(self, free: bool) -> None:
        """The worker says whether it has a thread free (it says so when that changes): a queued run rings
        processes with one first. Marked busy by a file beside the socket, which a ring reads with the
        directory it reads anyway."""
        if self.path is None:
            return
        marker = Path(_busy_mark(self.path))
        try:
            if free:
                marker.unlink(missing_ok=True)
            else:
                marker.touch(mode=0o600)
        except OSError as exc:  # a hint only: unmarked, this process is rung and finds no thread free
            log.debug("doorbell mark %s failed: %s", marker, exc)

    def stop(self) -> None:
        if self._socket is None:
            return
        self._stopping.set()
        # Its own ring ends the thread's wait at once (the timeout would, later).
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as poke:
            poke.sendto(_STOP, str(self.path))
        if self._thread is not None:
            self._thread.join(5)
        for leftover in (self.path, _busy_mark(self.path)):
            with contextlib.suppress(OSError):
                os.unlink(leftover)
        self._socket.close()
        self._socket = None

    def _serve(self) -> None:
        sock = self._socket
        sock.settimeout(0.5)  # so a stop is noticed even if its ring were lost
        _in_doorbell.active = True
        while not self._stopping.is_set():
            try:
                rung = set(sock.recv(64))
            except TimeoutError:
                continue
            except OSError:
                return
            # Rings that come while the woken threads are still busy only set events already set.
            if RUNS_QUEUED[0] in rung:
                wakeup.runs_queued()
            if DEPENDENCIES_DUE[0] in rung:
                wakeup.dependencies_due()
