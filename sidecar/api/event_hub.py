"""One feed of "this run has new events" per process, fanned out to every open event stream.

A stream does not poll the table: it registers a Watch for its run and blocks on it, so an idle stream
costs nothing until its run moves or its keep-alive is due. What wakes the watches is one poll loop per
process, on every database: it reads the last event sequence of every watched run (one indexed read per
500 runs, every POLL_SECONDS) and wakes the watches of the runs whose sequence changed. On SQLite it first
asks the file whether anything was committed since its last look (PRAGMA data_version), and reads nothing
more while nothing was. (PostgreSQL's LISTEN/NOTIFY would wake them sooner, but a NOTIFY for every event
written made the writers' commits wait for one another: docs/performance.md, "Event streams poll on
PostgreSQL too".)

A wake only says "read again": the stream reads its run's events after the last one it sent, so a
spurious wake costs one read and a missed one cannot happen while the poll runs.
The feed starts with the first watch (importing this module starts nothing) and stops after the last.
"""

import logging
import threading

from ..application import current, thread
from ..store import db, events

log = logging.getLogger("nrllm_sidecar.streams")

POLL_SECONDS = 0.1


class Watch:
    """One stream's view of the feed: wait() returns when its run may have moved or the server stops."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self._woken = threading.Event()
        self.closing = False

    def wake(self) -> None:
        self._woken.set()

    def close(self) -> None:
        self.closing = True
        self._woken.set()

    def wait(self, timeout: float) -> bool:
        """True when woken (the flag is cleared), False when `timeout` passed first."""
        woken = self._woken.wait(timeout)
        self._woken.clear()  # before the stream reads: a commit after this wakes it again
        return woken


class EventHub:
    def __init__(self, poll_seconds: float = POLL_SECONDS):
        self.poll_seconds = poll_seconds
        self._lock = threading.Lock()
        self._watches: dict[str, set[Watch]] = {}
        self._seen: dict[str, int] = {}  # polling: the last event sequence of each run at the last look
        self._marker: int | None = None  # polling on SQLite: the file's data_version at the last look
        self._thread: threading.Thread | None = None
        self._closed = False
        self._tick = threading.Event()

    def watch(self, run_id: str) -> Watch:
        watch = Watch(run_id)
        with self._lock:
            if self._closed:
                watch.close()
                return watch
            self._watches.setdefault(run_id, set()).add(watch)
            if self._thread is None:
                self._start()
        return watch

    def unwatch(self, watch: Watch) -> None:
        with self._lock:
            watchers = self._watches.get(watch.run_id)
            if watchers is not None:
                watchers.discard(watch)
                if not watchers:
                    del self._watches[watch.run_id]
                    self._seen.pop(watch.run_id, None)

    def close(self) -> None:
        """The process stops serving: every stream ends now (its client resumes with Last-Event-ID elsewhere)."""
        with self._lock:
            self._closed = True
            watches = [w for watchers in self._watches.values() for w in watchers]
        for watch in watches:
            watch.close()
        self._tick.set()

    def watched(self) -> int:
        with self._lock:
            return sum(len(w) for w in self._watches.values())

    # -- the feed ------------------------------------------------------------------------------

    def _start(self) -> None:
        self._thread = thread(self._run, name="event-streams-feed")
        self._thread.start()

    def _wake(self, run_ids: set[str]) -> None:
        with self._lock:
            targets = [w for run_id in run_ids for w in self._watches.get(run_id, ())]
        for watch in targets:
            watch.wake()

    def _run(self) -> None:
        while not self._closed:
            if self._stopped_for_want_of_watches():
                return
            try:
                self._poll()
            except Exception as exc:  # the database is away: the streams wait, the next poll tries again
                self._marker = None
                log.warning("event streams could not read the runs they follow (%s)", exc)
            finally:
                db.release_connection(pooled_only=True)  # SQLite keeps it: data_version speaks of one connection
            self._tick.wait(self.poll_seconds)

    def _stopped_for_want_of_watches(self) -> bool:
        """The last stream has ended: the feed stops, and the next watch starts it again. An application no
        longer serving leaves no thread behind reading its database."""
        with self._lock:
            if self._watches:
                return False
            self._thread = None
            self._seen.clear()
            self._marker = None
        return True

    def _poll(self) -> None:
        with self._lock:
            run_ids = list(self._watches)
        if not run_ids:
            return
        marker = events.change_marker()
        new_runs = any(run_id not in self._seen for run_id in run_ids)
        if marker is not None and marker == self._marker and not new_runs:
            return  # nothing was committed since the last look
        self._marker = marker
        found = events.positions(run_ids)
        moved = set()
        with self._lock:
            for run_id in run_ids:
                position = found.get(run_id, -1)  # a deleted run: its streams read again and end
                if self._seen.get(run_id) != position:
                    if run_id in self._watches:
                        self._seen[run_id] = position
                    moved.add(run_id)
        if moved:
            self._wake(moved)


def hub() -> EventHub:
    """The application's hub (made on first use; a forked server worker makes its own)."""
    app = current()
    with app.lock:
        if app.event_hub is None:
            app.event_hub = EventHub()
        return app.event_hub


def close() -> None:
    """End every stream of the application (the server is stopping); streams opened later end at once too."""
    hub().close()  # made here if no stream came yet: one accepted during the stop must end too
