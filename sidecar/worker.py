"""The worker: claims queued runs and executes their segments on a bounded thread pool.

One loop thread claims (as many runs as there are free slots), one heartbeat thread renews the leases of
every segment in flight and the worker's own row (also while a stopping worker lets them finish), and the
reaper runs at least once per lease period.
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
from .application import current, enter, thread
from .domain.errors import LeaseLost
from .domain.lease import ClaimBatch, LeasePolicy
from .domain.vocabulary import SegmentOutcome
from .segment import Segment, SegmentExecutor, execute_segment
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
        application=None,
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
        # The application whose runs this worker executes (by default the one that makes it): its threads and
        # its pool's run in it.
        self.application = application or current()
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="segment", initializer=enter,
                                        initargs=(self.application,))
        self._active: dict[str, Segment] = {}
        self._reserved = 0  # slots held for runs a companion is claiming (reserve_slot)
        # Whether a queued run may be waiting for a free thread: the loop's last look found none free, or
        # filled every free one. Only then does a finishing segment wake the loop; a run queued meanwhile
        # wakes it anyway (wakeup.runs_queued, the doorbell).
        self._run_may_wait = False
        # Companions told whether a thread is free when that changes (the doorbell: a queued run rings a
        # process with one first, store/doorbell.py), and what they were told last.
        self._told_free = [c.threads_free for c in self.companions if hasattr(c, "threads_free")]
        self._free_as_told = True
        self._active_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._heartbeats_end = threading.Event()  # later than _stopping: leases held are renewed until handed back
        self._lifecycle = threading.Lock()
        self._loop_thread: threading.Thread | None = None
        self._heartbeat_thread: threading.Thread | None = None
        for companion in self.companions:
            # A coordinator hands this worker the runs it resumes (delegation/coordinator.py, resume_with).
            if hasattr(companion, "resume_with"):
                companion.resume_with(self)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the loop and heartbeat threads and return (serve's embedded worker)."""
        with self._lifecycle:  # a SIGTERM during start-up stops what start() started, after it
            self.application.run(self._start)  # its companions' threads too

    def _start(self) -> None:
        wakeup.subscribe(self._wake)
        self._loop_thread = thread(self._loop, name="worker-loop", application=self.application)
        self._heartbeat_thread = thread(self._heartbeat, name="worker-heartbeat",
                                        application=self.application)
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
        """Stop claiming; let segments in flight finish for `grace` seconds, then hand the rest back."""
        with self._lifecycle:
            self.application.run(self._stop, grace)

    def _stop(self, grace: float) -> None:
        # The order matters (docs/runs-and-leases.md, "Graceful stop"): claiming stops at once, the heartbeat
        # goes on renewing the leases held until they are handed back, so no other worker can take a run
        # over during the grace, however short the lease.
        deadline = time.monotonic() + grace
        self._stopping.set()
        self._wake.set()
        try:
            # The loop first: a claim it made just now must reach _active before we look there.
            if self._loop_thread:
                self._loop_thread.join()
            for companion in self.companions:
                companion.stop()
            while self.active_count() and time.monotonic() < deadline:
                time.sleep(0.05)
            # Everything else before the hand-back, which is the last thing this worker does: a thread still
            # executing a handed-back segment then lives on only for as long as the process takes to exit.
            self._heartbeats_end.set()
            if self._heartbeat_thread:
                self._heartbeat_thread.join(timeout=5)
            wakeup.unsubscribe(self._wake)
            try:
                workers.forget(self.id)
            except Exception:  # the row ages out of health's window anyway; the hand-back matters more
                log.exception("removing the heartbeat row of worker %s failed", self.id)
            abandoned = self._hand_back_remaining(grace)
            # Threads still in a handed-back segment are not waited for: they are fenced, and end with the process.
            self._pool.shutdown(wait=not abandoned, cancel_futures=True)
            log.info("worker %s stopped", self.id)
        finally:
            self._stopped.set()

    def _hand_back_remaining(self, grace: float) -> int:
        """Hand back every segment still in flight; returns how many threads are left executing them."""
        with self._active_lock:
            remaining = list(self._active.values())
        for segment in remaining:
            # Before the hand-back: the thread stops at its next write, and a write already under way when
            # the hand-back commits finds the epoch moved on (store/leases.py), so nothing lands after it.
            segment.lost.set()
            try:
                action = leases.hand_back(segment.claim, grace)
            except LeaseLost:
                continue  # it ended (finished, suspended) between the grace's end and now
            except Exception:  # the database is away: the run waits for its lease to expire, then the reaper
                log.exception("handing back run %s failed", segment.run_id)
                continue
            metrics.HANDED_BACK.labels(action).inc()
            log.warning("handed back run %s (epoch %d) unfinished after a grace of %ss: %s",
                        segment.run_id, segment.claim.epoch, grace, action)
        return len(remaining)

    def active_count(self) -> int:
        with self._active_lock:
            return len(self._active)

    def _free_slots_for_a_look(self) -> int:
        """The free threads, counted for the loop's look at the queue; with none free, a finishing segment is
        to wake the loop (set under the lock the segment's end takes, so the end comes either before this
        count or after the flag)."""
        with self._active_lock:
            free = self._free_slots_held()
            if free <= 0:
                self._run_may_wait = True
            return free

    def _free_slots_held(self) -> int:
        """Threads neither busy nor held for a claim; the caller holds _active_lock."""
        return self.concurrency - len(self._active) - self._reserved

    def _slots_changed(self) -> None:
        """After a thread was taken or freed, under _active_lock: the companions learn whether one is free
        when that changed (under the lock, so they learn the changes in their order)."""
        free = self._free_slots_held() > 0
        if free != self._free_as_told:
            self._free_as_told = free
            for tell in self._told_free:
                tell(free)

    def reserve_slot(self) -> bool:
        """Hold a thread for a run that this process is about to claim itself (a resolution that resumes it);
        False when none is free or the worker is stopping. A True is followed by take_reserved()."""
        with self._active_lock:
            if self._stopping.is_set() or self._free_slots_held() <= 0:
                return False
            self._reserved += 1
            self._slots_changed()
            return True

    def take_reserved(self, claimed: "tuple[leases.Claim, object] | None") -> None:
        """Execute the run claimed with the slot reserve_slot() held (`claimed`: the claim and the run as
        written, or None when there was no claim, which frees the slot)."""
        segment = None
        try:
            if claimed is not None:
                segment = self._segment(*claimed)
        finally:
            with self._active_lock:  # the slot passes from held to busy at once: the loop never counts it free
                self._reserved -= 1
                if segment is not None:
                    self._active[segment.run_id] = segment
                self._slots_changed()
        if segment is None:
            self._wake.set()  # a free slot again, for the loop (the slot was held, not counted free)
            return
        self._begin(segment)

    # -- threads ---------------------------------------------------------------------------------

    def _loop(self) -> None:
        next_reap = 0.0
        database = db.Reconnect("the worker loop")
        while not self._stopping.is_set():
            try:
                if time.monotonic() >= next_reap:
                    self.reap()
                    next_reap = time.monotonic() + self.lease.reap_interval
                free = self._free_slots_for_a_look()
                wanted = free > 0 and leases.worth_claiming()
                claims = leases.claim_queued(self.id, free, self.lease) if wanted else ClaimBatch()
                database.after_success()
                metrics.CLAIM_CONFLICTS.inc(claims.conflicts)
                for claim in claims:
                    self._submit(claim, claims.rows.get(claim.run_id))
                if free > 0:
                    self._run_may_wait = len(claims) == free
                if claims and len(claims) == free:
                    continue  # there may be more
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
        while not self._heartbeats_end.is_set():
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
            self._heartbeats_end.wait(interval)

    def reap(self) -> list[leases.Reaped]:
        reaped = leases.reap(self.reap_limit)
        for item in reaped:
            metrics.REAPED.labels(item.action).inc()
            log.warning("reaped run %s of holder %s: %s", item.run_id, item.holder, item.action)
        return reaped

    # -- segments --------------------------------------------------------------------------------

    def _submit(self, claim: leases.Claim, run=None) -> None:
        segment = self._segment(claim, run)
        with self._active_lock:
            self._active[claim.run_id] = segment
            self._slots_changed()
        self._begin(segment)

    @staticmethod
    def _segment(claim: leases.Claim, run=None) -> Segment:
        if run is None:  # the claim did not return its row (MariaDB)
            run = runs.get_run(claim.run_id)
        return Segment(claim, run)

    def _begin(self, segment: Segment) -> None:
        metrics.CLAIMS.inc()
        self._pool.submit(self._execute, segment)

    def _execute(self, segment: Segment) -> None:
        with logs.context(run_id=segment.run_id):
            try:
                outcome = self._outcome_of(segment)
            finally:
                with self._active_lock:
                    self._active.pop(segment.run_id, None)
                    self._slots_changed()
                    wake = self._run_may_wait
                if wake:
                    self._wake.set()  # a thread free for a run that may be waiting
                db.release_connection(pooled_only=True)  # the pool checks it before this thread's next segment
            metrics.SEGMENT_OUTCOMES.labels(outcome.value).inc()
            log.info("segment of run %s (epoch %d): %s", segment.run_id, segment.claim.epoch, outcome.value)

    def _outcome_of(self, segment: Segment) -> SegmentOutcome:
        return execute_segment(self.executor, segment)
