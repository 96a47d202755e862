"""The count of pushes a send got (`outbound.pushes_seen`, shown by the console), written a little later.

A push saying the task is still submitted or working, or one that comes after the wait was resolved,
changes nothing but that count. Written alone, each such count was a write transaction of its own: on
SQLite a turn of the one writer's lock, two or three a delegation with a peer that reports every state,
taken while runs were starting and resuming around it (docs/performance.md, "Pushes that change nothing,
counted together"). Here they are added up in the process and written together, one transaction for all
of them, at most FLUSH_SECONDS after the first; and when the HTTP worker stops (serving/http_worker.py).

A count not yet written when the process dies is lost: the figure only tells an operator that pushes
arrive, and it can only under-report. A push that brings a poll forward, or one that comes before the
suspension, is counted in its own transaction as before (store/waits.py, store/outbound.py).
"""

import logging
import os
import threading
from collections import Counter

from ..application import Application, current
from . import db, statements
from .models import Outbound

FLUSH_SECONDS = 1.0

log = logging.getLogger("nrllm_sidecar.push")


class PushCounts:
    """The counts one process of one application has not written yet."""

    def __init__(self, application: Application):
        self.application = application
        self.pid = os.getpid()  # a fork's child starts with none of its parent's counts
        self.lock = threading.Lock()
        self.pending: Counter = Counter()
        self.timer: threading.Timer | None = None

    def add(self, outbound_id: str) -> None:
        with self.lock:
            self.pending[outbound_id] += 1
            self._arm()

    def flush(self) -> int:
        """Write every pending count in one transaction; how many pushes were written. On a failure they stay
        pending and the next flush tries again."""
        with self.lock:
            taken, self.pending = self.pending, Counter()
            if self.timer is not None:  # everything is written now (or the failure arms it again)
                self.timer.cancel()
                self.timer = None
        if not taken:
            return 0
        try:
            self.application.run(_write, taken)
        except Exception as exc:
            with self.lock:
                self.pending.update(taken)
                self._arm()
            if not db.is_unavailable(exc):
                log.exception("writing the count of %d pushes failed; trying again", sum(taken.values()))
            return 0
        return sum(taken.values())

    def _arm(self) -> None:
        # Under self.lock. One timer at a time: the pushes counted while it waits are written with it.
        if self.timer is None:
            self.timer = threading.Timer(FLUSH_SECONDS, self._flush_from_timer)
            self.timer.name, self.timer.daemon = "push-counts", True
            self.timer.start()

    def _flush_from_timer(self) -> None:
        with self.lock:
            self.timer = None
        try:
            self.flush()
        finally:
            self.application.run(db.release_connection)  # the timer's thread ends here


@db.transactional
def _write(counts: Counter) -> None:
    for outbound_id, pushes in sorted(counts.items()):  # one order in every process: no deadlock between them
        statements.add_to(Outbound, "pushes_seen", pushes, id=outbound_id)


def count(outbound_id: str) -> None:
    """One more push for this send, written within FLUSH_SECONDS."""
    _of(current()).add(outbound_id)


def flush() -> int:
    """Write this application's pending counts now (a stopping process; tests); how many pushes were written."""
    counts = current().push_counts
    return counts.flush() if counts is not None and counts.pid == os.getpid() else 0


def _of(application: Application) -> PushCounts:
    with application.lock:
        counts = application.push_counts
        if counts is None or counts.pid != os.getpid():
            counts = application.push_counts = PushCounts(application)
        return counts
