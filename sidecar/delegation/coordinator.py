"""The coordinator: inside the worker process, polls the remote tasks that waiting runs wait on.

A tick claims the due waits (advancing each one's next poll is the claim, so coordinators in several
processes never poll one row twice), asks each remote agent for its task on a small thread pool, and
resolves a wait when the task has an answer for the model. A wait's next poll is never later than its
deadline, so the same claim finds deadlines: the delegation's deadline resumes the run with a timeout
result, the run's own deadline ends it `failed`, and both journal a CancelTask that the tick then sends
(delegation/cancels.py). A run that waits holds no thread here between ticks: only due rows cost anything.

Wake-ups: a push or a cancel in this process wakes the loop at once. Across processes, on PostgreSQL, a
dedicated connection LISTENs (store/notify.py) and the loop sleeps until the next due time (at most
IDLE_SECONDS, as a safety net); on SQLite and MariaDB it polls the due index every TICK_SECONDS.
"""

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from .. import metrics, wakeup
from ..domain.clock import utcnow
from ..domain.vocabulary import OutboundOutcome, TerminationReason
from ..store import notify, outbound, remote_agents, resolutions, waits
from ..store.models import DependencyWait
from . import cancels, reconcile, remote
from .results import lost_task_text, refused_text, result_text, timeout_text, unreachable_text
from .types import TASK_NOT_FOUND, RemoteError

log = logging.getLogger("nrllm_sidecar.coordinator")

# Between ticks: the due index is polled at most this often (pushes and same-process wake-ups are sooner).
TICK_SECONDS = 0.25
# With LISTEN/NOTIFY: the longest sleep when nothing is due sooner (a notification lost while the
# listening connection was down is made up for by then).
IDLE_SECONDS = 10.0
_READ = object()  # poll(): read the journal row or the agent itself
# A send lasts at most three call timeouts (connect, first byte, the rest); the fourth is the margin.
LONGEST_SEND_IN_TIMEOUTS = 4


class Coordinator:
    def __init__(self, settings, *, concurrency: int = 4, batch: int = 100, tick_seconds: float = TICK_SECONDS):
        self.settings = settings
        self.batch = batch
        self.tick_seconds = tick_seconds
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="coordinator")
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._listener: notify.Listener | None = None

    def start(self) -> None:
        wakeup.subscribe_coordinator(self._wake)
        if notify.can_listen():
            self._listener = notify.Listener(lambda _payloads: self._wake.set())
            self._listener.start()
        self._thread = threading.Thread(target=self._loop, name="coordinator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        wakeup.unsubscribe_coordinator(self._wake)
        if self._listener:
            self._listener.stop()
        if self._thread:
            self._thread.join(10)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            looked_at = time.monotonic()
            busy = False
            try:
                busy = self.tick() >= self.batch
                self.send_cancels()
            except Exception:
                log.exception("coordinator tick failed; trying again at the next tick")
            if busy:
                continue  # more may be due than one batch
            self._wake.wait(self._sleep_seconds(looked_at))
            self._wake.clear()

    def _sleep_seconds(self, looked_at: float) -> float:
        # The next look at the due index comes tick_seconds after the last one began, not after its work
        # ended: a push on SQLite or MariaDB then waits at most one period, plus the work, for its poll
        # (bench/bench_push.py).
        period = max(0.0, self.tick_seconds - (time.monotonic() - looked_at))
        if self._listener is None or not self._listener.listening:
            return period
        try:
            due = waits.earliest_due()
        except Exception:
            log.exception("reading the next due time failed")
            return period
        until = (due - utcnow()).total_seconds() if due else IDLE_SECONDS
        return min(IDLE_SECONDS, max(period, until))

    def tick(self) -> int:
        """Claim what is due and poll it; returns how many waits were polled."""
        due = waits.claim_due(self.batch)
        metrics.CLAIM_CONFLICTS.inc(due.conflicts)
        # The batch's journal rows and agents in two queries, not two per wait (bench/bench_waiting.py:
        # with 1,000 due those lookups were most of a tick).
        rows = outbound.get_many(wait.outbound_id for wait in due)
        agents = {agent.name: agent for agent in remote_agents.list_agents()} if due else {}
        polls = [self._pool.submit(self.poll, wait, rows.get(wait.outbound_id), agents.get(wait.remote_agent))
                 for wait in due]
        for finished in polls:
            finished.result()
        return len(due)

    def send_cancels(self) -> int:
        """Send the journalled CancelTask rows that are due; returns how many were looked at."""
        rows = cancels.due()
        for finished in [self._pool.submit(cancels.send, row, self.settings) for row in rows]:
            finished.result()
        return len(rows)

    def poll(self, wait: DependencyWait, row=_READ, agent=_READ) -> None:
        """Act on one claimed wait; `row` and `agent` are its journal row and remote agent when the caller
        read them already (None: there is none)."""
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
        if self._deadline(wait, checkpoint):
            return
        agent = remote_agents.get_agent(wait.remote_agent) if agent is _READ else agent
        if agent is None:
            return
        if row.outcome == OutboundOutcome.OUTCOME_UNKNOWN:
            row = self._reconcile(wait, row, agent)
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
            if exc.code == TASK_NOT_FOUND:
                self._resolve(wait, checkpoint, lost_task_text(task_id), {"remote_task_id": task_id})
            else:
                log.warning("run %s: polling %s failed: %s", wait.run_id, agent.name, exc)
            return
        except remote.Unreachable as exc:
            log.warning("run %s: %s unreachable: %s", wait.run_id, agent.name, exc)
            return
        if task.finished:
            self._resolve(wait, checkpoint, result_text(task), {"remote_task_id": task_id, "state": task.state},
                          bytes_received=task.bytes_received)

    def _deadline(self, wait, checkpoint: dict) -> bool:
        """Act on a deadline that passed (True); the CancelTask row is committed with the resolution."""
        now = utcnow()
        run_deadline = waits.run_deadline_of(wait)
        if run_deadline is not None and run_deadline <= now:
            detail = {"run_deadline_at": run_deadline.isoformat()}
            if resolutions.fail(wait, TerminationReason.DEADLINE_EXCEEDED, detail, cancel_remote=True):
                log.info("run %s: its deadline passed while it waited on %s; failed", wait.run_id, wait.remote_agent)
            return True
        if wait.deadline_at <= now:
            detail = {"deadline_at": wait.deadline_at.isoformat()}
            if resolutions.resolve(wait, turn_index=checkpoint["turn_index"], result=timeout_text(wait.deadline_at),
                             resolution="timeout", detail=detail, cancel_remote=True):
                log.info("run %s: delegation to %s timed out", wait.run_id, wait.remote_agent)
            return True
        return False

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
        """An unknown outcome is claimed before its deadline only after a push: look for the task."""
        try:
            found = reconcile.try_find(remote.client_for(agent, self.settings), row)
        except remote.Unreachable as exc:
            log.warning("run %s: %s unreachable: %s", wait.run_id, agent.name, exc)
            found = None
        if found is not None and outbound.record_found(row.id, found.id):
            log.info("run %s: reconciliation found task %s at %s", wait.run_id, found.id, agent.name)
        row = outbound.get(row.id)
        if row.outcome == OutboundOutcome.OUTCOME_UNKNOWN and hasattr(wait, "claimed_next_poll_at"):
            waits.park(wait, waits.earliest(wait.deadline_at, waits.run_deadline_of(wait)))
        return row

    def _resolve(self, wait, checkpoint: dict, text: str, detail: dict, bytes_received: int = 0) -> None:
        if resolutions.resolve(wait, turn_index=checkpoint["turn_index"], result=text, detail=detail,
                               bytes_received=bytes_received):
            log.info("run %s resumed with the answer of %s", wait.run_id, wait.remote_agent)
