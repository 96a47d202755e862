"""How a dependency wait ends: resolved with a result, failed, or cancelled; each exactly once.

Each is one guarded transaction: `resolved_at IS NULL` and the run still waiting on this wait, then the
tool result is stored for exactly the suspended tool-call id and the run is queued (or claimed at once by
the resolving process's worker, or ends); any racing resolver finds zero rows. A deadline or a cancel
journals its CancelTask in that same transaction.
"""

from datetime import datetime

from .. import wakeup
from ..domain.clock import utcnow
from ..domain.lease import LeasePolicy
from ..domain.vocabulary import RunStatus, TerminationReason
from . import events, notify, outbound, statements
from .db import database, supports_returning, transactional
from .leases import QUEUED, RUNNING, Claim
from .models import DependencyWait, Run, ToolResult
from .waits import WAITING


class _Lost(Exception):
    """The run no longer waits on this wait: undo the resolution."""


def _close(wait: DependencyWait, resolution: str, now) -> list:
    """Mark the wait resolved (guarded); the run guard the caller must apply next."""
    closed = statements.update_where(DependencyWait, {"id": wait.id, "resolved_at": None},
                                     {"resolved_at": now, "resolution": resolution})
    if closed != 1:
        raise _Lost()
    return [Run.id == wait.run_id, Run.status == WAITING, Run.waiting_on == wait.id]


def _cancel_remote(wait: DependencyWait, guard, now) -> None:
    """Journal the CancelTask of the wait's remote task (a deadline, a cancel): committed with the
    resolution, sent after it (delegation/cancels.py)."""
    send_row = outbound.get(wait.outbound_id)
    if send_row is not None and outbound.journal_cancel(send_row, guard, now) is not None:
        notify.notify_unless_heard_here()
        database.after_commit(wakeup.dependencies_due)


@transactional
def _resolve(wait: DependencyWait, turn_index: int, result: str, resolution: str, detail: dict,
             cancel_remote: bool, bytes_received: int, taker: tuple[str, LeasePolicy] | None) -> tuple | None:
    now = utcnow()
    guard = _close(wait, resolution, now)
    resumed = {"pause_id": wait.id, "resolution": resolution, **detail}
    tool = {"turn_index": turn_index, "tool_call_id": wait.tool_call_id, "name": "delegate_to_agent", "result": result}
    described = [("resume", resumed), ("status", {"from": WAITING, "to": QUEUED}), ("tool", tool)]
    values = {"status": QUEUED, "waiting_on": None, "queued_at": now, "updated_at": now}
    if taker is not None:
        # Claimed in the same transaction, as claim_queued would: the run passes through queued (its event says
        # so) but no other worker can see it there.
        holder, lease = taker
        described.append(("status", {"from": QUEUED, "to": RUNNING}))
        values.update(status=RUNNING, lease_holder=holder, lease_expires_at=lease.expiry(now), queued_at=None)
    if cancel_remote:
        # A deadline: the CancelTask's journal row and its event come between the resumption and the status.
        if events.append(wait.run_id, guard, "resume", resumed) is None:
            raise _Lost()
        _cancel_remote(wait, guard, now)
        for kind, payload in described[1:]:
            events.append(wait.run_id, guard, kind, payload)
    events_taken = 0 if cancel_remote else len(described)
    whole_row = taker is not None and supports_returning()
    returning = statements.RUN_COLUMNS if whole_row else ("lease_epoch", "last_event_sequence")
    # The run queued (or claimed) under the guard; without a cancel it also takes its events' sequences.
    written = statements.update_run(
        wait.run_id, where={"status": WAITING, "waiting_on": wait.id}, values=values,
        add={"lease_epoch": 1, "bytes_used": bytes_received, "last_event_sequence": events_taken},
        returning=returning,
    )
    if written is None:
        raise _Lost()
    run = statements.run_from_row(returning, written) if whole_row else None
    epoch, sequence = (run.lease_epoch, run.last_event_sequence) if run else written
    if not cancel_remote:
        events.record_many(events.numbered(wait.run_id, sequence, described))
    statements.insert_values(ToolResult, {"run_id": wait.run_id, "tool_call_id": wait.tool_call_id,
                                          "turn_index": turn_index, "name": "delegate_to_agent", "result": result,
                                          "created_at": now}, deferred=True)
    return (Claim(wait.run_id, epoch, taker[0]), run) if taker is not None else None


def resolve_wait(wait: DependencyWait, *, turn_index: int, result: str, resolution: str = "result",
                 detail: dict | None = None, cancel_remote: bool = False, bytes_received: int = 0) -> bool:
    """Answer the suspended tool call with `result` and queue the run. True for the one caller that wins.
    With `cancel_remote` (a deadline) the remote task's CancelTask is journalled in the same transaction;
    `bytes_received`, the size of the answer that carried the result, is added to the run's transfer count
    by the winner only."""
    try:
        _resolve(wait, turn_index, result, resolution, detail or {}, cancel_remote, bytes_received, None)
    except _Lost:
        return False
    wakeup.runs_queued()
    return True


def resolve_and_claim(wait: DependencyWait, holder: str, lease: LeasePolicy, *, turn_index: int, result: str,
                      resolution: str = "result", detail: dict | None = None, cancel_remote: bool = False,
                      bytes_received: int = 0) -> tuple[Claim, Run | None] | None:
    """resolve_wait(), and the run claimed for `holder` in the same transaction instead of queued: one
    transaction where a resolution and a claim were two. Returns the claim and, where UPDATE ... RETURNING
    exists, the run as written (else None: the caller reads it); None for a caller that did not win."""
    try:
        return _resolve(wait, turn_index, result, resolution, detail or {}, cancel_remote, bytes_received,
                        (holder, lease))
    except _Lost:
        return None


@transactional
def _fail(wait: DependencyWait, reason: TerminationReason, detail: dict, cancel_remote: bool) -> None:
    now = utcnow()
    guard = _close(wait, reason.value, now)
    if events.append(wait.run_id, guard, "resume", {"pause_id": wait.id, "resolution": reason.value, **detail}) is None:
        raise _Lost()
    if cancel_remote:
        _cancel_remote(wait, guard, now)
    events.append(wait.run_id, guard, "status", {"from": WAITING, "to": RunStatus.FAILED.value})
    Run.update(status=RunStatus.FAILED.value, termination_reason=reason.value, waiting_on=None, finished_at=now,
               updated_at=now, lease_epoch=Run.lease_epoch + 1).where(*guard).execute()


def fail(wait: DependencyWait, reason: TerminationReason, detail: dict | None = None,
         cancel_remote: bool = False) -> bool:
    """End the waiting run `failed` (a tampered checkpoint, the run's deadline). True for the one winner."""
    try:
        _fail(wait, reason, detail or {}, cancel_remote)
    except _Lost:
        return False
    return True


def cancel_dependency(run: Run, by: str, now: datetime) -> bool:
    """Inside the caller's transaction (store/runs.py's cancel): end a run waiting for a dependency as
    `cancelled`, with the resolution's guard (the wait unresolved and the run still waiting on it) and a
    pending CancelTask row. False, with nothing written, when a resolution got there first."""
    wait = DependencyWait.get_or_none(DependencyWait.id == run.waiting_on) if run.waiting_on else None
    if wait is None:
        return False
    try:
        with database.atomic():  # a savepoint: a lost guard undoes the wait's closing too
            guard = _close(wait, "cancelled", now)
            change = {"from": WAITING, "to": RunStatus.CANCELLED.value, "by": by}
            if events.append(run.id, guard, "resume", {"pause_id": wait.id, "resolution": "cancelled"}) is None:
                raise _Lost()
            _cancel_remote(wait, guard, now)
            events.append(run.id, guard, "status", change)
            Run.update(status=RunStatus.CANCELLED.value, termination_reason=TerminationReason.CANCELLED.value,
                       cancel_requested_at=run.cancel_requested_at or now, finished_at=now, waiting_on=None,
                       queued_at=None, lease_epoch=Run.lease_epoch + 1, updated_at=now).where(*guard).execute()
    except _Lost:
        return False
    return True
