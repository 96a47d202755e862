"""Decide-now: the request that won a pause continues the run's segment itself, in a thread of its own.

The thread holds the lease the decision's transaction claimed and renews it (every third of the lease)
while the segment runs, exactly as a worker does. It is not tied to the request: a client that goes away
stops only its own response; the segment goes on. If the whole process dies, the lease expires, the
reaper requeues the run and a worker continues from the stored decision.
"""

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable

from .. import metrics
from ..application import thread
from ..domain.lease import LeasePolicy
from ..domain.vocabulary import SegmentOutcome
from ..segment import Segment, SegmentExecutor, execute_segment
from ..store import leases, runs
from ..store.db import database
from ..store.leases import Claim

log = logging.getLogger("nrllm_sidecar.decisions")


def holder_name() -> str:
    """Who holds a decide-now lease (shown in the Run's `lease` and in `lease_lost` events)."""
    return f"decide-now:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Continuation:
    """One decide-now segment: start() it, then wait() for it (or don't: it runs to its end either way)."""

    def __init__(self, executor: SegmentExecutor, claim: Claim, lease: LeasePolicy,
                 on_end: Callable[[SegmentOutcome], None] | None = None):
        self.executor = executor
        self.claim = claim
        self.lease = lease
        self.on_end = on_end
        self.outcome: SegmentOutcome | None = None
        self._done = threading.Event()
        self._thread = thread(self._run, name=f"decide-now-{claim.run_id[:8]}")

    def start(self) -> "Continuation":
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> SegmentOutcome | None:
        self._done.wait(timeout)
        return self.outcome

    def _run(self) -> None:
        segment = Segment(self.claim, runs.get_run(self.claim.run_id))
        beat = thread(self._heartbeat, args=(segment,), name="decide-now-heartbeat")
        beat.start()
        try:
            self.outcome = execute_segment(self.executor, segment)
            metrics.SEGMENT_OUTCOMES.labels(self.outcome.value).inc()
            log.info("decide-now segment of run %s (epoch %d): %s", self.claim.run_id, self.claim.epoch,
                     self.outcome.value)
            if self.on_end is not None:
                self.on_end(self.outcome)
        except Exception:
            log.exception("decide-now segment of run %s failed to end cleanly", self.claim.run_id)
        finally:
            self._done.set()
            beat.join(timeout=5)
            if not database.is_closed():
                database.close()  # this thread's connection, back to the pool

    def _heartbeat(self, segment: Segment) -> None:
        try:
            while not self._done.wait(self.lease.heartbeat_interval):
                if not leases.renew(self.claim, self.lease):
                    segment.lost.set()
                    return
        except Exception:
            log.exception("decide-now heartbeat of run %s failed", self.claim.run_id)
        finally:
            if not database.is_closed():
                database.close()
