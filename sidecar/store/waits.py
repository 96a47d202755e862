"""Dependency waits: a run suspended on a remote task, polled by coordinators, resolved exactly once.

Suspension, polling claims and resolution are each one guarded transaction:
- suspend: the wait row, the run's pause counters and budget, and `waiting_for_dependency` (gate-checked);
  for a send answered with a task at work, also the send's outcome;
- claim_due: advancing a due row's next poll time is the claim, so several coordinators never poll one
  row twice. The next poll is never later than the wait's deadline (the earlier of the delegation's and
  the run's), so the same index and the same claim find the deadlines too;
- resolve, fail, cancel: in store/resolutions.py.
"""

import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import NamedTuple

from .. import wakeup
from ..domain.clock import utcnow
from ..domain.errors import LeaseLost
from ..domain.lease import ClaimBatch
from ..domain.vocabulary import OutboundOutcome, RunStatus
from . import events, leases, notify, outbound, statements, status_guard
from .db import database, dialect, retried, transactional
from .leases import Claim
from .models import DependencyWait, Outbound, Run

WAITING = RunStatus.WAITING_FOR_DEPENDENCY.value


@dataclass(frozen=True)
class Suspension:
    tool_call_id: str
    turn_index: int
    remote_agent: str
    outbound_id: str
    outcome: str
    remote_task_id: str | None
    checkpoint: str
    key_fingerprint: str
    deadline_at: datetime
    next_poll_at: datetime | None  # None: first due at the deadline
    push_token_sha256: str | None = None


def earliest(delegation_deadline: datetime, run_deadline: datetime | None) -> datetime:
    return min(delegation_deadline, run_deadline) if run_deadline is not None else delegation_deadline


class SuspendedOn(NamedTuple):
    pause_id: str
    # Whether the run carried a cancel mark when its suspension wrote it (the same UPDATE returns it): a cancel
    # that marked the running run before then is finished after the commit (runs.cancel_requested_meanwhile);
    # one that comes after finds the run waiting and ends it itself.
    cancel_marked: bool


@transactional
def suspend(claim: Claim, s: Suspension, *, delegations: int, bytes_used: int, record_outcome: bool = False
            ) -> SuspendedOn:
    """Store the wait and suspend the run on it. Raises LeaseLost or StatusNotWritable.

    One fenced UPDATE of the run (the lease released, the pause generation, the budget, the events'
    sequences) that returns what the wait needs; then the wait's INSERT and the `pause` and `status` events.
    `waiting_for_dependency` is outside the base vocabulary: the gate is asked for the run's origin in this
    transaction, and a refusal undoes all of it.

    With `record_outcome`, the suspension's outcome and task id are the send's answer, recorded first on its
    still pending journal row, with its `outbound` event (outbound.record_outcome), in this transaction: the
    send's answer and the wait on it are committed together, one transaction a delegation instead of two.
    Undone with the rest on a refusal or a lost lease (the row stays `pending`)."""
    wait_id = str(uuid.uuid4())
    now = utcnow()
    # First: on a server database this locks the send's row (a push noting itself waits for this commit).
    if record_outcome:
        row, recorded = outbound.write_outcome(s.outbound_id, s.outcome, remote_task_id=s.remote_task_id)
        pushed_early = row.push_received_at is not None if recorded else outbound.pushed_early(s.outbound_id)
        s = replace(s, outcome=row.outcome, remote_task_id=row.remote_task_id)  # a row settled already wins
    else:
        pushed_early = outbound.pushed_early(s.outbound_id)
    events_written = 3 if record_outcome else 2
    written = statements.update_run(
        claim.run_id,
        where={"lease_epoch": claim.epoch, "status": leases.RUNNING},
        values={"status": WAITING, "lease_holder": None, "lease_expires_at": None, "waiting_on": wait_id,
                "updated_at": now},
        add={"pause_generation": 1, "delegations_used": delegations, "bytes_used": bytes_used,
             "last_event_sequence": events_written},
        returning=("pause_generation", "last_event_sequence", "deadline_at", "origin", "cancel_requested_at"),
        with_report_time=True,
    )
    if written is None:
        raise LeaseLost(claim.run_id, claim.epoch)
    generation, sequence, run_deadline, origin, cancel_requested_at, reported_at = written
    status_guard.check(WAITING, origin, reported_at)
    due = earliest(s.deadline_at, Run.deadline_at.python_value(run_deadline))
    next_poll_at = min(s.next_poll_at, due) if s.next_poll_at is not None else due
    if pushed_early:
        next_poll_at = now  # the remote agent said something already: look at once (or reconcile)
    statements.insert_row(DependencyWait, dict(
        id=wait_id, run=claim.run_id, generation=generation, tool_call_id=s.tool_call_id,
        remote_agent=s.remote_agent, outbound_id=s.outbound_id, checkpoint=s.checkpoint,
        key_fingerprint=s.key_fingerprint, since=now, deadline_at=s.deadline_at, next_poll_at=next_poll_at,
        push_token_sha256=s.push_token_sha256,
    ), deferred=True)
    described = [("outbound", outbound.outbound_payload(row, outbound.SENT_NOTE))] if record_outcome else []
    described += [
        ("pause", {"kind": "dependency", "pause_id": wait_id, "generation": generation,
                   "tool_call_id": s.tool_call_id, "remote_agent": s.remote_agent, "outbound_id": s.outbound_id,
                   "outcome": s.outcome, "remote_task_id": s.remote_task_id}),
        ("status", {"from": leases.RUNNING, "to": WAITING}),
    ]
    events.record_many(events.numbered(claim.run_id, sequence, described))
    # A coordinator sleeping past the first poll must learn of it: this process's own, told the time after
    # the commit; every one through the database only when this process has none (store/notify.py).
    notify.notify_unless_heard_here()
    database.after_commit(lambda: wakeup.dependencies_due_at(next_poll_at))
    return SuspendedOn(wait_id, cancel_requested_at is not None)


def current_wait(run_id: str) -> DependencyWait | None:
    """The wait a run is suspended on now, if it waits for a dependency."""
    run = Run.get_or_none(Run.id == run_id)
    if run is None or run.status != WAITING or not run.waiting_on:
        return None
    return DependencyWait.get_or_none(DependencyWait.id == run.waiting_on)


def open_wait_on(run_id: str, outbound_id: str) -> DependencyWait | None:
    """The run's unresolved wait on a journalled send, if its suspension on it is committed."""
    return statements.select_one(DependencyWait, run_id=run_id, outbound_id=outbound_id, resolved_at=None)


def claim_due(limit: int, now: datetime | None = None) -> ClaimBatch:
    """Claim up to `limit` due waits by moving each one's next poll to now + its agent's interval (but
    not past its deadline). Each claimed wait carries what its poll acts on (statements.due_waits): `agent`,
    `journal_row` and `run_deadline_at`, the run's own deadline."""
    return _claim_due(limit, now or utcnow())


@transactional
def _claim_due(limit: int, now: datetime) -> ClaimBatch:
    # One transaction and a few statements for the batch, not a commit per row: 1,000 due cost over a
    # second on PostgreSQL that way (bench/bench_waiting.py). The batch is ours until the commit: on
    # PostgreSQL its rows are locked as they are read (rows another coordinator holds are skipped), on
    # SQLite the transaction holds the database from its start (BEGIN IMMEDIATE). MariaDB/MySQL keep a
    # guarded UPDATE per row (a due time another coordinator moved meanwhile is not ours).
    # Read the whole batch before writing: on SQLite a connection that writes while its own read is
    # still open works on a stale snapshot and fails at once ("database is locked") instead of waiting.
    kind = dialect()
    due = statements.due_waits(now, limit)
    by_time: dict[datetime, list[str]] = {}
    for wait in due:
        deadline = earliest(wait.deadline_at, wait.run_deadline_at)
        after_interval = now + timedelta(seconds=wait.agent.poll_interval_seconds)
        # Once the deadline has passed, the interval paces further attempts at acting on it (a key may be
        # missing meanwhile); before it, the deadline caps the wait so it is acted on in time.
        wait.claimed_next_poll_at = after_interval if deadline <= now else min(after_interval, deadline)
        by_time.setdefault(wait.claimed_next_poll_at, []).append(wait.id)
    if kind != "mysql":
        for following, ids in by_time.items():
            statements.update_in(DependencyWait, "id", ids, {"next_poll_at": following})
        return ClaimBatch(due)
    taken = [wait for wait in due if DependencyWait.update(next_poll_at=wait.claimed_next_poll_at).where(
        DependencyWait.id == wait.id, DependencyWait.next_poll_at == wait.next_poll_at,
        DependencyWait.resolved_at.is_null()).execute() == 1]
    return ClaimBatch(taken, conflicts=len(due) - len(taken))


def run_deadline_of(wait: DependencyWait) -> datetime | None:
    """The run's own deadline (claim_due attaches it; a wait read otherwise asks the run)."""
    if hasattr(wait, "run_deadline_at"):
        return wait.run_deadline_at
    return Run.select(Run.deadline_at).where(Run.id == wait.run_id).scalar()


class NextDue(NamedTuple):
    """When a coordinator has something to do next: a wait's poll, a journalled CancelTask's attempt."""

    poll: datetime | None
    cancel: datetime | None

    @property
    def earliest(self) -> datetime | None:
        return min((at for at in self if at is not None), default=None)


def next_due(max_cancel_attempts: int) -> NextDue:
    """The next poll of any open wait (the due index's first entry) and the next attempt of any pending
    cancel row with attempts left, in one read: what a coordinator looks at on waking, and how long it may
    sleep."""
    return NextDue(*statements.earliest_poll_and_attempt(outbound.PENDING, outbound.CANCEL, max_cancel_attempts))


def _poll_now(wait_id: str, pushed_outbound_id: str | None = None) -> bool:
    if dialect() == "postgresql":
        # The same in one statement, its own transaction: one round trip instead of two (BEGIN with the
        # UPDATEs, then NOTIFY with the COMMIT).
        channel = None if wakeup.dependencies_heard_here() else notify.CHANNEL  # see notify_unless_heard_here
        return _make_due_notifying(wait_id, pushed_outbound_id, channel)
    return _poll_now_in_a_transaction(wait_id, pushed_outbound_id)


_make_due_notifying = retried(statements.make_due_since_start_notifying)


@transactional
def _poll_now_in_a_transaction(wait_id: str, pushed_outbound_id: str | None) -> bool:
    if pushed_outbound_id is not None:
        statements.add_to(Outbound, "pushes_seen", 1, id=pushed_outbound_id)
    # Due as of the wait's start, not as of now: the coordinator claims due waits earliest first, and a burst
    # of routine polls (many delegations started together) would otherwise be claimed before this one, the
    # push waiting for all of their polls (bench/bench_push.py). Routine polls of waits that started later
    # are all due after this time.
    moved = statements.make_due_since_start(wait_id)
    if moved:
        notify.notify_unless_heard_here()
    return moved


def poll_now(wait_id: str) -> bool:
    """Make the wait due (as of its start, _poll_now) and wake the coordinators (a push, a resend, a test); True
    if the wait is still open."""
    moved = _poll_now(wait_id)
    if moved:
        wakeup.dependencies_due()
    return moved


def pushed(wait_id: str, outbound_id: str) -> bool:
    """A push for the send `outbound_id` the wait is on: count it and bring the poll forward (poll_now), in
    one transaction instead of two. True if the wait is still open."""
    moved = _poll_now(wait_id, outbound_id)
    if moved:
        wakeup.dependencies_due()
    return moved


def park(wait: DependencyWait, until: datetime) -> None:
    """Nothing to poll before `until` (an unknown outcome that reconciliation could not settle). Only if
    the wait is still where this claim put it: a push that came meanwhile keeps its earlier time."""
    DependencyWait.update(next_poll_at=until).where(
        DependencyWait.id == wait.id, DependencyWait.resolved_at.is_null(),
        DependencyWait.next_poll_at == wait.claimed_next_poll_at).execute()


def back_off(wait: DependencyWait, until: datetime) -> None:
    """A poll or reconciliation of this claimed wait failed: count it and look again at `until` (the
    caller keeps it within the deadline). Only if the wait is still where its claim put it: a push that
    came meanwhile keeps its earlier time."""
    DependencyWait.update(failed_polls=DependencyWait.failed_polls + 1, next_poll_at=until).where(
        DependencyWait.id == wait.id, DependencyWait.resolved_at.is_null(),
        DependencyWait.next_poll_at == wait.claimed_next_poll_at).execute()


def polled_fine(wait_id: str) -> None:
    """The wait's poll was answered: its backoff starts again from the agent's interval."""
    DependencyWait.update(failed_polls=0).where(DependencyWait.id == wait_id,
                                                 DependencyWait.failed_polls > 0).execute()


@transactional
def poll_backed_off_now(remote_agent: str) -> int:
    """The agent answers again: every open wait on it that backs off is due now, its count reset.
    Returns how many were brought forward."""
    moved = DependencyWait.update(next_poll_at=utcnow(), failed_polls=0).where(
        DependencyWait.remote_agent == remote_agent, DependencyWait.resolved_at.is_null(),
        DependencyWait.failed_polls > 0).execute()
    if moved:
        notify.notify()
    return moved


def mark_unsealable(wait_id: str, unsealable: bool) -> None:
    DependencyWait.update(unsealable=int(unsealable)).where(DependencyWait.id == wait_id).execute()


def dependency_view(run: Run) -> dict | None:
    """What the Run document shows of a dependency wait (times as datetimes; the API formats them)."""
    if run.status != WAITING or not run.waiting_on:
        return None
    wait = DependencyWait.get_or_none(DependencyWait.id == run.waiting_on)
    if wait is None:
        return None
    row = Outbound.get_or_none(Outbound.id == wait.outbound_id)
    outcome = row.outcome if row else None
    deadline = min(d for d in (wait.deadline_at, run.deadline_at) if d is not None)
    return {
        "pause_id": wait.id, "generation": wait.generation, "since": wait.since, "tool_call_id": wait.tool_call_id,
        "remote_agent": wait.remote_agent,
        # Unknown outcome: no task is known to exist (even if reconciliation is about to find one).
        "remote_task_id": None if outcome in (None, OutboundOutcome.OUTCOME_UNKNOWN.value) else row.remote_task_id,
        "outbound_id": wait.outbound_id, "outcome": outcome, "next_poll_at": wait.next_poll_at,
        "deadline_at": deadline,
    }
