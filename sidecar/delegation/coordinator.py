"""The coordinator: inside the worker process, polls the remote tasks that waiting runs wait on.

A tick claims the due waits (advancing each one's next poll is the claim, so coordinators in several
processes never poll one row twice), asks each remote agent for its task on a small thread pool, and
resolves a wait when the task has an answer for the model; a send whose outcome is unknown is reconciled
instead, at each poll, until its task is found. A failed poll or reconciliation backs the wait off
(exponential, jittered, capped; agent_failures.py keeps the agent's count and logs). A wait's next poll
is never later than its deadline, so the same claim finds deadlines: the delegation's deadline takes a
last look (reconciliation, GetTask) and resumes the run with the task's result if it has finished, with
a timeout result otherwise; the run's own deadline ends it `failed`; a timeout and a failure journal a
CancelTask that the tick then sends (delegation/cancels.py). A run that waits holds no thread here
between ticks: only due rows cost anything.

Wake-ups: a push or a cancel in this process wakes the loop at once, and another process's through this
one's doorbell (store/doorbell.py). On PostgreSQL a dedicated connection LISTENs too (store/notify.py), and
the loop sleeps until the next due time of a wait or of a cancel's next attempt (at most IDLE_SECONDS, as a
safety net); a suspension in this process tells it the wait's first poll (`Alarm.due_at`), and wakes it
only if it would sleep past that. Waits suspended elsewhere are that process's coordinator's to poll, and
every coordinator's once it stops (it notifies the others then) or at their next look. On SQLite and
MariaDB it polls the due index every TICK_SECONDS, or sooner when something is due sooner. Every look reads
both due times at once.
"""

import logging
import math
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

from .. import logs, metrics, wakeup
from ..application import current, enter, thread
from ..domain.backoff import Backoff
from ..domain.clock import utcnow
from ..domain.vocabulary import OutboundOutcome, TerminationReason
from ..store import db, notify, outbound, remote_agents, resolutions, waits
from ..store.models import DependencyWait
from . import agent_failures, cancels, reconcile, remote
from .results import lost_task_text, refused_text, result_text, timeout_text, unreachable_text
from .types import TASK_NOT_FOUND, RemoteError

log = logging.getLogger("nrllm_sidecar.coordinator")

# Between ticks: the due index is polled at most this often (pushes and same-process wake-ups are sooner).
TICK_SECONDS = 0.25
# Between two ticks, however soon a wait is due.
MIN_PAUSE_SECONDS = 0.02
# With LISTEN/NOTIFY: the longest sleep when nothing is due sooner (a notification lost while the
# listening connection was down is made up for by then).
IDLE_SECONDS = 10.0
# Threads that poll remote agents. A poll mostly waits on the network, so more threads shorten the queue a
# burst of due waits makes, and a pushed wait waits behind that queue (bench/bench_push.py: push-to-resume p99
# on SQLite 490 to 620 ms with 4, 99 to 134 with 8). On PostgreSQL and MariaDB each polling thread holds one
# of the process's pooled connections (db.POOL_SIZE) beside the segments', the loop's and the heartbeat's, so
# it stays at 4 there.
POLL_THREADS = {"sqlite": 8}
DEFAULT_POLL_THREADS = 4
_READ = object()  # poll(): read the journal row or the agent itself
_UNREAD = object()  # _sleep_seconds(): read the next due times itself
# A send lasts at most three call timeouts (connect, first byte, the rest); the fourth is the margin.
LONGEST_SEND_IN_TIMEOUTS = 4
# A failed poll or reconciliation: the next one after the agent's interval, then twice as long each time,
# at most POLL_BACKOFF_CAP_SECONDS, spread by 20 % either way (domain/backoff.py); never past the deadline.
POLL_BACKOFF_CAP_SECONDS = 300.0
POLL_BACKOFF_JITTER = 0.2


class Coordinator:
    def __init__(self, settings, *, concurrency: int | None = None, batch: int = 100,
                 tick_seconds: float = TICK_SECONDS):
        concurrency = concurrency or POLL_THREADS.get(db.dialect(), DEFAULT_POLL_THREADS)
        self.settings = settings
        self.batch = batch
        self.tick_seconds = tick_seconds
        self._application = None  # the one start() ran in: the pool's threads (made on first use) run there too
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="coordinator",
                                        initializer=lambda: enter(self._application or current()))
        self._stopping = threading.Event()
        self._wake = Alarm(listening=lambda: self._listener is not None and self._listener.listening)
        self._thread: threading.Thread | None = None
        self._listener: notify.Listener | None = None
        self._worker = None  # the worker that executes the runs this coordinator resumes (resume_with)

    def resume_with(self, worker) -> None:
        """Claim each run this coordinator resumes for `worker` (the one it is a companion of) in the
        resolution's own transaction, when the worker has a free thread: the run's next segment then starts
        at once, without a claim of its own (docs/delegation.md). Otherwise the run is queued for any worker."""
        self._worker = worker

    def start(self) -> None:
        self._application = current()
        wakeup.subscribe_coordinator(self._wake)
        if notify.can_listen():
            self._listener = notify.Listener(self._wake.set)
            self._listener.start()
        self._thread = thread(self._loop, name="coordinator")
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        wakeup.unsubscribe_coordinator(self._wake)
        if self._listener:
            self._listener.stop()
            # The waits suspended in this process were only this coordinator's to know of: the others look.
            db.releasing_connection(notify.notify_now)()
        if self._thread:
            self._thread.join(10)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        database = db.Reconnect("the delegation coordinator")
        while not self._stopping.is_set():
            looked_at = time.monotonic()
            busy, due = False, _UNREAD
            try:
                busy, due = self.look()
                database.after_success()
            except Exception as exc:
                if (pause := database.after_failure(exc)) is not None:
                    self._stopping.wait(pause)
                    continue
                log.exception("coordinator tick failed; trying again at the next tick")
            if busy:
                continue  # more may be due than one batch
            self._wake.sleep(self._sleep_seconds(looked_at, due), MIN_PAUSE_SECONDS)

    def look(self) -> tuple[bool, object]:
        """One look at what is due: the due waits claimed and polled (a batch), the due cancels sent. Woken by
        a NOTIFY, or ticking with nothing due, it costs one indexed read of both, not a claim's write
        transaction (which on SQLite holds the only writer's lock). Returns whether a whole batch was due
        (more may be), and, when it did nothing, that read, which also sets the sleep."""
        due = waits.next_due(cancels.MAX_ATTEMPTS)
        busy = worked = False
        if self._is_due(due.poll):
            busy, worked = self.tick() >= self.batch, True
        if self._is_due(due.cancel):
            self.send_cancels()
            worked = True
        return busy, _UNREAD if worked else due  # what was done moved the due times: read again for the sleep

    @staticmethod
    def _is_due(due: datetime | None) -> bool:
        return due is not None and due <= utcnow()

    def _sleep_seconds(self, looked_at: float, due=_UNREAD) -> float:
        """Until the next look; `due`: the NextDue the caller just read, if it did."""
        # The next look at the due index comes tick_seconds after the last one began, not after its work
        # ended: a push on SQLite or MariaDB then waits at most one period, plus the work, for its poll
        # (bench/bench_push.py). A wait due sooner than that is looked at when it is due (not a period
        # later: a delegation's first poll comes its agent's interval after the suspension, and each
        # period added to it was end-to-end latency, bench/bench_cycle.py), but ticks are at least
        # MIN_PAUSE_SECONDS apart, so waits coming due one by one are claimed a few at a time. A cancel's
        # next attempt is looked at when it is due too (while listening, rather than at a wake-up's look).
        period = max(0.0, self.tick_seconds - (time.monotonic() - looked_at))
        listening = self._listener is not None and self._listener.listening
        if due is _UNREAD:
            try:
                due = waits.next_due(cancels.MAX_ATTEMPTS)
            except Exception as exc:
                if not db.is_unavailable(exc):  # an outage: the next tick finds it and waits for the database
                    log.exception("reading the next due time failed")
                return period
        earliest = due.earliest
        until = max(MIN_PAUSE_SECONDS, (earliest - utcnow()).total_seconds()) if earliest else IDLE_SECONDS
        return min(IDLE_SECONDS, until) if listening else min(period, until)

    def tick(self) -> int:
        """Claim what is due and poll it; returns how many waits were polled."""
        due = waits.claim_due(self.batch)
        metrics.CLAIM_CONFLICTS.inc(due.conflicts)
        # Each wait comes with its journal row and its agent, read by the claim's own statement: no lookups
        # per wait (bench/bench_waiting.py: with 1,000 due those were most of a tick), nor for the batch.
        # Each task hands its pooled connection back: the pool checks it before lending it again (after a
        # database restart, the pool's threads would otherwise keep connections the server has closed).
        poll = db.releasing_connection(self.poll)
        polls = [self._pool.submit(poll, wait, wait.journal_row, wait.agent) for wait in due]
        for finished in polls:
            finished.result()
        return len(due)

    def send_cancels(self) -> int:
        """Send the journalled CancelTask rows that are due; returns how many were looked at."""
        rows = cancels.due()
        send = db.releasing_connection(self._send_cancel)
        for finished in [self._pool.submit(send, row) for row in rows]:
            finished.result()
        return len(rows)

    def _send_cancel(self, row) -> None:
        with logs.context(run_id=row.run_id, remote_agent=row.remote_agent):
            cancels.send(row, self.settings)

    def poll(self, wait: DependencyWait, row=_READ, agent=_READ) -> None:
        """Act on one claimed wait; `row` and `agent` are its journal row and remote agent when the caller
        read them already (None: there is none)."""
        with logs.context(run_id=wait.run_id, remote_agent=wait.remote_agent):
            self._poll(wait, row, agent)

    def _poll(self, wait: DependencyWait, row, agent) -> None:
        try:
            checkpoint = remote.unseal_checkpoint(wait)
        except remote.KeyMissing:
            # An operator removed the key: the run stays waiting and health says so.
            waits.mark_unsealable(wait.id, True)
            return
        except remote.Tampered:
            detail = {"reason": "the checkpoint failed authentication"}
            if resolutions.fail(wait, TerminationReason.CHECKPOINT_INVALID, detail):
                log.error("run %s: checkpoint of wait %s failed authentication; run failed", wait.run_id, wait.id)
            return
        if wait.unsealable:
            waits.mark_unsealable(wait.id, False)
        # The wait names the journal row it waits on now (an operator's resend moves it on); it must be the
        # row the sealed checkpoint names, or a resend of it.
        row = outbound.get(wait.outbound_id) if row is _READ else row
        if row is None or not outbound.descends_from(row, checkpoint["outbound_id"]):
            log.error("run %s: wait %s names a journal row its checkpoint does not", wait.run_id, wait.id)
            return
        if row.outcome == OutboundOutcome.PENDING:
            row = self._settle_abandoned(wait, row)
        agent = remote_agents.get_agent(wait.remote_agent) if agent is _READ else agent
        if self._deadline(wait, checkpoint, row, agent):
            return
        if agent is None:
            return
        if row.outcome == OutboundOutcome.OUTCOME_UNKNOWN:
            row = self._reconcile(wait, row, agent)
            if row is None:
                return
        if row.outcome in (OutboundOutcome.REJECTED, OutboundOutcome.NOT_DELIVERED):
            # Only an operator's resend leaves a wait on such a row: answer as the first send would have.
            text_of = refused_text if row.outcome == OutboundOutcome.REJECTED else unreachable_text
            text = text_of(agent.name, row.error)
            self._resolve(wait, checkpoint, text, {"outbound_id": row.id, "outcome": row.outcome})
            return
        task_id = row.remote_task_id
        if row.outcome != OutboundOutcome.ACCEPTED or not task_id:
            return
        metrics.POLLS.inc()
        try:
            task = remote.client_for(agent, self.settings).get_task(task_id)
        except RemoteError as exc:
            if exc.code != TASK_NOT_FOUND:
                self._failed(wait, agent, f"polling failed: {exc}")
                return
            self._answered(wait, agent)
            self._resolve(wait, checkpoint, lost_task_text(task_id), {"remote_task_id": task_id})
            return
        except remote.Unreachable as exc:
            self._failed(wait, agent, f"unreachable: {exc}")
            return
        self._answered(wait, agent)
        if task.finished:
            self._resolve(wait, checkpoint, result_text(task), {"remote_task_id": task_id, "state": task.state},
                          bytes_received=task.bytes_received)

    def _deadline(self, wait, checkpoint: dict, row, agent) -> bool:
        """Act on a deadline that passed (True); the CancelTask row is committed with the resolution.

        The delegation's deadline first takes a last look: an unknown outcome is reconciled once more and a
        known task asked for once more (GetTask), and a task found finished resolves the wait with its
        result. Only otherwise, or when the look fails, is the answer "timeout"."""
        now = utcnow()
        run_deadline = waits.run_deadline_of(wait)
        if run_deadline is not None and run_deadline <= now:
            detail = {"run_deadline_at": run_deadline.isoformat()}
            if resolutions.fail(wait, TerminationReason.DEADLINE_EXCEEDED, detail, cancel_remote=True):
                log.info("run %s: its deadline passed while it waited on %s; failed", wait.run_id, wait.remote_agent)
            return True
        if wait.deadline_at > now:
            return False
        if (task := self._last_look(wait, row, agent)) is not None:
            self._resolve(wait, checkpoint, result_text(task),
                          {"remote_task_id": task.id, "state": task.state, "at_deadline": True},
                          bytes_received=task.bytes_received)
            return True
        detail = {"deadline_at": wait.deadline_at.isoformat()}
        if self._resume(wait, turn_index=checkpoint["turn_index"], result=timeout_text(wait.deadline_at),
                        resolution="timeout", detail=detail, cancel_remote=True):
            log.info("run %s: delegation to %s timed out", wait.run_id, wait.remote_agent)
        return True

    def _last_look(self, wait, row, agent):
        """The remote task, if it has finished, asked for once more at the deadline; None otherwise (not
        found, not finished, or the peer does not answer)."""
        if agent is None or row.outcome not in (OutboundOutcome.ACCEPTED, OutboundOutcome.OUTCOME_UNKNOWN):
            return None
        try:
            client = remote.client_for(agent, self.settings)
            if row.outcome == OutboundOutcome.OUTCOME_UNKNOWN:
                found = reconcile.find(client, row)
                if found is None or not outbound.record_found(row.id, found.id):
                    return None
                row = outbound.get(row.id)
            if not row.remote_task_id:
                return None
            metrics.POLLS.inc()
            task = client.get_task(row.remote_task_id)
        except (remote.Unreachable, reconcile.Impossible, RemoteError) as exc:
            log.info("run %s: the last look at %s before its deadline failed: %s", wait.run_id, agent.name, exc)
            return None
        return task if task.finished else None

    def _settle_abandoned(self, wait, row):
        """A wait names a `pending` send only after an operator's resend (a segment's own sends are settled
        before it suspends). Past the longest a send can take, its sender has stopped (a crash mid-resend):
        the row becomes `outcome_unknown`, to be reconciled, cancelled at the deadline, or resent."""
        longest_send = LONGEST_SEND_IN_TIMEOUTS * remote.call_timeout(self.settings)
        if outbound.settle_abandoned(row.id, utcnow() - timedelta(seconds=longest_send)):
            log.warning("run %s: the resend %s was never settled by its sender; its outcome is unknown",
                        wait.run_id, row.id)
        return outbound.get(row.id)

    def _reconcile(self, wait, row, agent):
        """Look for the task of a send whose outcome is unknown, at each poll until found or the deadline.
        Returns the row as it is now, or None when there is nothing more to do at this poll."""
        try:
            found = reconcile.find(remote.client_for(agent, self.settings), row)
        except remote.Unreachable as exc:
            self._failed(wait, agent, f"unreachable: {exc}")
            return None
        except reconcile.Impossible as exc:
            if exc.transient:
                self._failed(wait, agent, f"reconciliation failed: {exc}")
                return None
            # The peer answered that it has no ListTasks (an A2A 0.3 peer): asking again cannot help.
            log.info("run %s: reconciliation of %s impossible: %s", wait.run_id, row.id, exc)
            if hasattr(wait, "claimed_next_poll_at"):
                waits.park(wait, self._deadline_of(wait))
            return None
        self._answered(wait, agent)
        if found is not None and outbound.record_found(row.id, found.id):
            log.info("run %s: reconciliation found task %s at %s", wait.run_id, found.id, agent.name)
        return outbound.get(row.id)

    @staticmethod
    def _deadline_of(wait):
        return waits.earliest(wait.deadline_at, waits.run_deadline_of(wait))

    def _failed(self, wait, agent, error: str) -> None:
        """A poll or reconciliation got no usable answer: count it for the agent, and poll this wait again
        later and later (never past its deadline, so the deadline is still acted on in time)."""
        agent_failures.failed(agent, error)
        if not hasattr(wait, "claimed_next_poll_at"):
            return  # polled outside a claim (a test, a tool): nothing to reschedule
        backoff = Backoff(initial=agent.poll_interval_seconds, cap=max(agent.poll_interval_seconds,
                          POLL_BACKOFF_CAP_SECONDS), jitter=POLL_BACKOFF_JITTER)
        delay = backoff.delay(wait.failed_polls + 1, random.random())
        waits.back_off(wait, min(utcnow() + timedelta(seconds=delay), self._deadline_of(wait)))

    def _answered(self, wait, agent) -> None:
        if wait.failed_polls:
            waits.polled_fine(wait.id)
        agent_failures.answered(agent)

    def _resolve(self, wait, checkpoint: dict, text: str, detail: dict, bytes_received: int = 0) -> None:
        if self._resume(wait, turn_index=checkpoint["turn_index"], result=text, detail=detail,
                        bytes_received=bytes_received):
            log.info("run %s resumed with the answer of %s", wait.run_id, wait.remote_agent)

    def _resume(self, wait, **resolution) -> bool:
        """Resolve the wait (True for the one winner): the run claimed for this process's worker if it has a
        free thread, queued otherwise."""
        worker = self._worker
        if worker is None or not worker.reserve_slot():
            return resolutions.resolve_wait(wait, **resolution)
        claimed = None
        try:
            claimed = resolutions.resolve_and_claim(wait, worker.id, worker.lease, **resolution)
        finally:
            worker.take_reserved(claimed)
        return claimed is not None


class Alarm(threading.Event):
    """A coordinator's wake-up. `set()`: look now (a push, a notification, a ring, a stop). `due_at(when)`: a
    wait of this process comes due at `when` (a suspension's first poll): due now, look now; due later, a
    listening coordinator, which sleeps until the next due time it read, is woken only if it would sleep past
    `when`, and a time told while it is awake shortens its next sleep. A ticking one (not listening) finds the
    wait at a tick."""

    def __init__(self, listening):
        super().__init__()
        self._listening = listening
        self._guard = threading.Lock()
        self._sleeps_until = -math.inf  # time.monotonic() at which the sleep under way ends; -inf: awake
        self._told: datetime | None = None  # the earliest due time told while awake

    def due_at(self, when: datetime) -> None:
        seconds = (when - utcnow()).total_seconds()
        if seconds > 0 and not self._listening():
            return
        with self._guard:
            if self._sleeps_until == -math.inf and seconds > 0:
                self._told = when if self._told is None else min(self._told, when)
                return
            wake = seconds <= 0 or time.monotonic() + seconds < self._sleeps_until
        if wake:
            self.set()

    @property
    def sleeping(self) -> bool:
        return self._sleeps_until != -math.inf

    def sleep(self, seconds: float, shortest: float) -> None:
        """Sleep `seconds` (not past a time told while awake, but at least `shortest`), or until woken."""
        with self._guard:
            if self._told is not None:
                seconds = min(seconds, max(shortest, (self._told - utcnow()).total_seconds()))
                self._told = None
            self._sleeps_until = time.monotonic() + seconds
        self.wait(seconds)
        with self._guard:
            self._sleeps_until = -math.inf
        self.clear()
