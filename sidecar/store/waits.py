"""Dependency waits: a run suspended on a remote task, polled by coordinators, resolved exactly once.

Suspension, polling claims and resolution are each one guarded transaction:
- suspend: the wait row, the run's pause counters and budget, and `waiting_for_dependency` (gate-checked);
- claim_due: advancing a due row's next poll time is the claim, so several coordinators never poll one
  row twice;
- resolve: `resolved_at IS NULL` and the run still waiting on this wait, then the tool result is stored
  for exactly the suspended tool-call id and the run is queued; any racing resolver finds zero rows.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from .. import wakeup
from ..domain.clock import utcnow
from ..domain.vocabulary import OutboundOutcome, RunStatus, TerminationReason
from . import events, leases
from .db import transactional
from .leases import Claim, fence
from .models import DependencyWait, Outbound, RemoteAgent, Run, ToolResult

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
    next_poll_at: datetime | None
    push_token_sha256: str | None = None


@transactional
def suspend(claim: Claim, s: Suspension, *, delegations: int, bytes_used: int) -> str:
    """Store the wait and suspend the run on it; returns the pause id. Raises LeaseLost or StatusNotWritable."""
    wait_id = str(uuid.uuid4())
    leases.fenced_update(
        claim,
        pause_generation=Run.pause_generation + 1,
        waiting_on=wait_id,
        delegations_used=Run.delegations_used + delegations,
        bytes_used=Run.bytes_used + bytes_used,
    )
    generation = Run.select(Run.pause_generation).where(Run.id == claim.run_id).scalar()
    now = utcnow()
    DependencyWait.insert(
        id=wait_id, run=claim.run_id, generation=generation, tool_call_id=s.tool_call_id,
        remote_agent=s.remote_agent, outbound_id=s.outbound_id, checkpoint=s.checkpoint,
        key_fingerprint=s.key_fingerprint, since=now, deadline_at=s.deadline_at, next_poll_at=s.next_poll_at,
        push_token_sha256=s.push_token_sha256,
    ).execute()
    events.append(claim.run_id, fence(claim), "pause", {
        "kind": "dependency", "pause_id": wait_id, "generation": generation, "tool_call_id": s.tool_call_id,
        "remote_agent": s.remote_agent, "outbound_id": s.outbound_id, "outcome": s.outcome,
        "remote_task_id": s.remote_task_id,
    })
    leases.suspend(claim, RunStatus.WAITING_FOR_DEPENDENCY)
    return wait_id


def current(run_id: str) -> DependencyWait | None:
    """The wait a run is suspended on now, if it waits for a dependency."""
    run = Run.get_or_none(Run.id == run_id)
    if run is None or run.status != WAITING or not run.waiting_on:
        return None
    return DependencyWait.get_or_none(DependencyWait.id == run.waiting_on)


def claim_due(limit: int, now: datetime | None = None) -> list[DependencyWait]:
    """Claim up to `limit` due waits by moving each one's next poll to now + its agent's interval."""
    now = now or utcnow()
    # Read the whole batch before writing: on SQLite a connection that writes while its own read is
    # still open works on a stale snapshot and fails at once ("database is locked") instead of waiting.
    due = list(
        DependencyWait.select(DependencyWait, RemoteAgent.poll_interval_seconds)
        .join(RemoteAgent, on=(DependencyWait.remote_agent == RemoteAgent.name), attr="agent")
        .where(DependencyWait.resolved_at.is_null(), DependencyWait.next_poll_at <= now)
        .order_by(DependencyWait.next_poll_at)
        .limit(limit)
    )
    claimed = []
    for wait in due:
        interval = wait.agent.poll_interval_seconds
        taken = (
            DependencyWait.update(next_poll_at=now + timedelta(seconds=interval))
            .where(DependencyWait.id == wait.id, DependencyWait.next_poll_at == wait.next_poll_at,
                   DependencyWait.resolved_at.is_null())
            .execute()
        )
        if taken == 1:
            claimed.append(wait)
    return claimed


def poll_now(wait_id: str) -> bool:
    """Bring the next poll forward to now (a push, or a test); True if the wait is still open."""
    return DependencyWait.update(next_poll_at=utcnow()).where(
        DependencyWait.id == wait_id, DependencyWait.resolved_at.is_null(),
        DependencyWait.next_poll_at.is_null(False)).execute() == 1


def mark_unsealable(wait_id: str, unsealable: bool) -> None:
    DependencyWait.update(unsealable=int(unsealable)).where(DependencyWait.id == wait_id).execute()


class _Lost(Exception):
    """The run no longer waits on this wait: undo the resolution."""


def _close(wait: DependencyWait, resolution: str, now) -> list:
    """Mark the wait resolved (guarded); the run guard the caller must apply next."""
    closed = DependencyWait.update(resolved_at=now, resolution=resolution).where(
        DependencyWait.id == wait.id, DependencyWait.resolved_at.is_null()).execute()
    if closed != 1:
        raise _Lost()
    return [Run.id == wait.run_id, Run.status == WAITING, Run.waiting_on == wait.id]


@transactional
def _resolve(wait: DependencyWait, turn_index: int, result: str, resolution: str, detail: dict) -> None:
    now = utcnow()
    guard = _close(wait, resolution, now)
    if events.append(wait.run_id, guard, "resume", {"pause_id": wait.id, "resolution": resolution, **detail}) is None:
        raise _Lost()
    events.append(wait.run_id, guard, "status", {"from": WAITING, "to": RunStatus.QUEUED.value})
    events.append(wait.run_id, guard, "tool", {"turn_index": turn_index, "tool_call_id": wait.tool_call_id,
                                               "name": "delegate_to_agent", "result": result})
    ToolResult.insert(run=wait.run_id, tool_call_id=wait.tool_call_id, turn_index=turn_index,
                      name="delegate_to_agent", result=result, created_at=now).execute()
    Run.update(status=RunStatus.QUEUED.value, waiting_on=None, queued_at=now, updated_at=now,
               lease_epoch=Run.lease_epoch + 1).where(*guard).execute()


def resolve(wait: DependencyWait, *, turn_index: int, result: str, resolution: str = "result",
            detail: dict | None = None) -> bool:
    """Answer the suspended tool call with `result` and queue the run. True for the one caller that wins."""
    try:
        _resolve(wait, turn_index, result, resolution, detail or {})
    except _Lost:
        return False
    wakeup.runs_queued()
    return True


@transactional
def _fail(wait: DependencyWait, reason: TerminationReason, detail: dict) -> None:
    now = utcnow()
    guard = _close(wait, reason.value, now)
    if events.append(wait.run_id, guard, "resume", {"pause_id": wait.id, "resolution": reason.value, **detail}) is None:
        raise _Lost()
    events.append(wait.run_id, guard, "status", {"from": WAITING, "to": RunStatus.FAILED.value})
    Run.update(status=RunStatus.FAILED.value, termination_reason=reason.value, waiting_on=None, finished_at=now,
               updated_at=now, lease_epoch=Run.lease_epoch + 1).where(*guard).execute()


def fail(wait: DependencyWait, reason: TerminationReason, detail: dict | None = None) -> bool:
    """End the waiting run `failed` (a tampered checkpoint, the run's deadline). True for the one winner."""
    try:
        _fail(wait, reason, detail or {})
    except _Lost:
        return False
    return True


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
