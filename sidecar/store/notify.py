"""Waking coordinators in other processes: PostgreSQL LISTEN/NOTIFY (docs/architecture.md, "The coordinator").

A write that makes a wait due sooner (a push, a new suspension, a cancel to send) wakes a coordinator after
its commit: its own process's if it has one (wakeup.py; a suspension only tells it when the wait is due),
else one worker process of this machine through its doorbell (store/doorbell.py). Only a process with
neither, or whose ring reached nobody, notifies every coordinator through the database (`notify()` inside
its transaction: PostgreSQL delivers the notification at commit, and never for a transaction rolled back;
`notify_now()` after it). Any coordinator claims every wait that is due, so one woken is enough; a
notification woke the LISTEN thread and the coordinator of every worker process, and made its commit wait
for every other one that notified (docs/performance.md, "One coordinator told, not all"). Every
coordinator holds a `Listener`: a dedicated autocommit connection (a pooled one would be handed to other
threads, and LISTEN belongs to a session), watched with select(). SQLite and MariaDB have nothing of the
kind: there the coordinator polls the due index at most every 250 ms instead.

The API's event streams do not use it: they poll (sidecar/api/event_hub.py). A notification makes every
transaction that sends one commit in turn with all others that do, on the whole server, and one for
every event written cost about a tenth of the delegation cycle's throughput (docs/performance.md, "Event
streams poll on PostgreSQL too").
"""

import contextlib
import logging
import select
import threading

from .. import wakeup
from ..application import thread
from .db import Reconnect, database, dialect

log = logging.getLogger("nrllm_sidecar.notify")

CHANNEL = "nrllm_dependency_due"
RECONNECT_SECONDS = 1.0
MIN_RECONNECT_SECONDS = 0.1


def notify() -> None:
    """Inside a write transaction: wake every listening coordinator once it commits (PostgreSQL only)."""
    if dialect() == "postgresql":
        database.defer(f"NOTIFY {CHANNEL}")  # sent with the transaction's next statement or its COMMIT


def notify_unless_heard_here() -> None:
    """Inside a write transaction that makes a wait due: notify(), unless this process wakes a coordinator
    of its own, or rings one, after the commit (wakeup.dependencies_heard_here)."""
    if dialect() == "postgresql" and not wakeup.dependencies_heard_here():
        notify()


def notify_now() -> None:
    """Outside a transaction: wake every listening coordinator, in a statement of its own (PostgreSQL only).
    For a wake-up that reached nobody on this machine; a hint, so a failure is only logged."""
    if dialect() != "postgresql":
        return
    try:
        database.execute_sql(f"NOTIFY {CHANNEL}")
    except Exception as exc:  # noqa: BLE001 - the commit it follows stands; the next look finds the wait
        log.warning("notifying the coordinators failed (%s); they find the wait at their next look", exc)


def can_listen() -> bool:
    return dialect() == "postgresql"


class Listener:
    """Calls `on_notify()` (from its own thread) for every batch of notifications on CHANNEL, and after every
    (re)connection: notifications sent while it was not listening are lost, so its owner must look at
    everything anyway.
    """

    def __init__(self, on_notify):
        self.on_notify = on_notify
        self._stopping = threading.Event()
        self._listening = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def listening(self) -> bool:
        return self._listening.is_set()

    def start(self) -> None:
        self._thread = thread(self._run, name="coordinator-listen")
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread:
            self._thread.join(5)

    def _connect(self):
        import psycopg2

        db = database.obj
        conn = psycopg2.connect(dbname=db.database, **db.connect_params)
        conn.autocommit = True  # a LISTEN inside an open transaction would hear nothing until it ends
        with conn.cursor() as cur:
            cur.execute(f"LISTEN {CHANNEL}")
        return conn

    def _run(self) -> None:
        reconnect = Reconnect("the coordinator's LISTEN connection")
        while not self._stopping.is_set():
            conn = None
            pause = RECONNECT_SECONDS
            try:
                conn = self._connect()
                reconnect.after_success()
                self._listening.set()
                self.on_notify()
                while not self._stopping.is_set():
                    # A timeout, so stop() is noticed; a notification ends the select at once.
                    if select.select([conn], [], [], 0.5)[0]:
                        conn.poll()
                        if conn.notifies:
                            conn.notifies.clear()
                            self.on_notify()
            except Exception as exc:  # any lost connection: listen again, and meanwhile poll
                if (pause := reconnect.after_failure(exc)) is None:  # None: not an outage (logged once)
                    pause = RECONNECT_SECONDS
                    log.warning("coordinator-listen: listening on %s failed (%s); reconnecting", CHANNEL, exc)
            finally:
                self._listening.clear()
                if conn is not None:
                    with contextlib.suppress(Exception):  # closing a broken connection may fail too
                        conn.close()
            # Never at once: a connection the server drops right after LISTEN must not make this loop spin.
            self._stopping.wait(max(pause, MIN_RECONNECT_SECONDS))
