"""The worker: claims queued runs and executes their segments on a bounded thread pool.

One loop thread claims (as many runs as there are free slots), one heartbeat thread renews the leases of
every segment in flight and the worker's own row, and the reaper runs at least once per lease period.
The loop wakes at once for runs queued in this process and polls the queue otherwise.
"""

import logging
import os
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from . import logs, metrics, wakeup
from .domain.errors import LeaseLost
from .domain.lease import ClaimBatch, LeasePolicy
from .domain.vocabulary import SegmentOutcome, TerminationReason
from .segment import Segment, SegmentExecutor
from .store import db, leases, runs, workers

log = logging.getLogger("nrllm_sidecar.worker")


class Worker:
    def __init__(
        self,
        executor: SegmentExecutor,
        lease: LeasePolicy,
        *,
        concurrency: int = 4,
        poll_interval: float = 1.0,
        reap_limit: int = 50,
        companions: tuple = (),
    ):
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.executor = executor
        self.lease = lease
        self.concurrency = concurrency
        self.poll_interval = poll_interval
        self.reap_limit = reap_limit
        # Services that live as long as the worker (the coordinator): objects with start() and stop().
        self.companions = tuple(companions)
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="segment")
        self._active: dict[str, Segment] = {}
        self._active_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._lifecycle = threading.Lock()
        self._loop_thread: threading.Thread | None = None
        self._heartbeat_thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the loop and heartbeat threads and return (serve's embedded worker)."""
        with self._lifecycle:  # a SIGTERM during start-up stops what start() started, after it
            self._start()

    def _start(self) -> None:
        wakeup.subscribe(self._wake)
        self._loop_thread = threading.Thread(target=self._loop, name="worker-loop", daemon=True)
        self._heartbeat_thread = threading.Thread(target=self._heartbeat, name="worker-heartbeat", daemon=True)
        self._loop_thread.start()
        self._heartbeat_thread.start()
        for companion in self.companions:
            companion.start()
        log.info("worker %s started with %d threads", self.id, self.concurrency)

    def run(self) -> None:
        """Start and block until stop() is called (the `worker` command)."""
        self.start()
        # Wait with a timeout: a signal delivered to another thread runs its Python handler only when the
        # main thread executes bytecode, which a wait without a timeout would never let it do.
        while not self._stopped.wait(0.5):
            pass

    def stop(self, grace: float) -> None:
        """Stop claiming; let segments in flight finish for `grace` seconds, then release the rest."""
        with self._lifecycle:
            self._stop(grace)

    def _stop(self, grace: float) -> None:
        self._stopping.set()
        self._wake.set()
        try:
            # The loop first: a claim it made just now must reach _active before we look there.
            if self._loop_thread:
                self._loop_thread.join()
            for companion in self.companions:
                companion.stop()
            deadline = time.monotonic() + grace
            while self.active_count() and time.monotonic() < deadline:
                time.sleep(0.05)
            self._release_remaining()
            self._pool.shutdown(wait=True, cancel_futures=True)
            if self._heartbeat_thread:
                self._heartbeat_thread.join(timeout=5)
            wakeup.unsubscribe(self._wake)
            workers.forget(self.id)
            log.info("worker %s stopped", self.id)
        finally:
            self._stopped.set()

    def _release_remaining(self) -> None:
        with self._active_lock:
            remaining = list(self._active.values())
        for segment in remaining:
            segment.lost.set()  # its thread stops at its next write
            try:
                leases.release(segment.claim)
                log.info("released run %s on shutdown", segment.run_id)
            except LeaseLost:
                pass

    def active_count(self) -> int:
        with self._active_lock:
            return len(self._active)

    # -- threads ---------------------------------------------------------------------------------

    def _loop(self) -> None:
        next_reap = 0.0
        database = db.Reconnect("the worker loop")
        while not self._stopping.is_set():
            try:
                if time.monotonic() >= next_reap:
                    self.reap()
                    next_reap = time.monotonic() + self.lease.reap_interval
                free = self.concurrency - self.active_count()
                claims = leases.claim_queued(self.id, free, self.lease) if free > 0 else ClaimBatch()
                database.after_success()
                metrics.CLAIM_CONFLICTS.inc(claims.conflicts)
                for claim in claims:
                    self._submit(claim)
                if claims and len(claims) == free:
                    continue  # there may be more; a finishing segment sets _wake
            except Exception as exc:
                if (pause := database.after_failure(exc)) is not None:
                    self._stopping.wait(pause)
                    continue
                log.exception("worker loop error; retrying after the poll interval")
            self._wake.wait(self.poll_interval)
            self._wake.clear()

    def _heartbeat(self) -> None:
        host, pid = socket.gethostname(), os.getpid()
        database = db.Reconnect("the worker heartbeat")
        while not self._stopping.is_set():
            interval = self.lease.heartbeat_interval
            try:
                workers.beat(self.id, host, pid, self.concurrency)
                database.after_success()
                with self._active_lock:
                    segments = list(self._active.values())
                for segment in segments:
                    if not segment.lost.is_set() and not leases.renew(segment.claim, self.lease):
                        segment.lost.set()
            except Exception as exc:
                if (pause := database.after_failure(exc)) is None:
                    log.exception("heartbeat error")
                else:
                    interval = min(interval, pause)  # to renew leases again soon once the database is back
            self._stopping.wait(interval)

    def reap(self) -> list[leases.Reaped]:
        reaped = leases.reap(self.reap_limit)
        for item in reaped:
            metrics.REAPED.labels(item.action).inc()
            log.warning("reaped run %s of holder %s: %s", item.run_id, item.holder, item.action)
        return reaped

    # -- segments --------------------------------------------------------------------------------

    def _submit(self, claim: leases.Claim) -> None:
        metrics.CLAIMS.inc()
        run = runs.get_run(claim.run_id)
        segment = Segment(claim, run)
        with self._active_lock:
            self._active[claim.run_id] = segment
        self._pool.submit(self._execute, segment)

    def _execute(self, segment: Segment) -> None:
        with logs.context(run_id=segment.run_id):
            try:
                outcome = self._outcome_of(segment)
            finally:
                with self._active_lock:
                    self._active.pop(segment.run_id, None)
                self._wake.set()
                db.release_connection(pooled_only=True)  # the pool checks it before this thread's next segment
            metrics.SEGMENT_OUTCOMES.labels(outcome.value).inc()
            log.info("segment of run %s (epoch %d): %s", segment.run_id, segment.claim.epoch, outcome.value)

    def _outcome_of(self, segment: Segment) -> SegmentOutcome:
        return execute_segment(self.executor, segment)


def execute_segment(executor: SegmentExecutor, segment: Segment) -> SegmentOutcome:
    """Execute one claimed segment (a worker's thread, or a decide-now request's) and say how it ended."""
    with logs.context(run_id=segment.run_id):
        return _execute_logged(executor, segment)


def _execute_logged(executor: SegmentExecutor, segment: Segment) -> SegmentOutcome:
    try:
        return executor.execute(segment)
    except LeaseLost:
        metrics.LEASE_LOSSES.inc()
        return SegmentOutcome.LEASE_LOST
    except Exception as exc:
        if db.is_unavailable(exc):
            # Nothing can be written now: the lease lapses and the reaper hands the run on once the database
            # is back. The worker's loop and heartbeat log the outage once; a segment's lost connection alone
            # (one that slept through a restart) is no outage to log.
            log.debug("segment of run %s lost its database connection: %s", segment.run_id, exc)
            return SegmentOutcome.LEASE_LOST
        # A bug in an executor must not leave the run running until the reaper retries the same bug.
        log.exception("segment of run %s raised", segment.run_id)
        try:
            segment.event("error", {"message": "the segment raised an unexpected error"})
            return segment.fail(TerminationReason.NOT_RETRYABLE)
        except LeaseLost:
            return SegmentOutcome.LEASE_LOST
