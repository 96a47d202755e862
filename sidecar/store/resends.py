"""An operator's resend of a lost send (`POST /api/v1/outbound/{id}/resend`, docs/http-api.md, "Remote
agents, the outbound journal and push").

One guarded transaction: the old row goes from `outcome_unknown` to `superseded`, the wait the run is
suspended on moves from the old row to the new one, and the new row is committed `pending` before its
request leaves; what the request did is recorded after it (record_resent_outcome). Reconciliation records a
found task with the same `outcome_unknown` guard (outbound.record_found), so of two resends, or a resend and
a reconciliation, exactly one wins.
"""

import uuid
from dataclasses import dataclass

from ..domain import push_tokens
from ..domain.clock import utcnow
from ..domain.errors import NotFound, NotResendable
from ..domain.vocabulary import OutboundOutcome, RunStatus
from . import events, outbound
from .db import transactional
from .models import DependencyWait, Outbound, Run

UNKNOWN = OutboundOutcome.OUTCOME_UNKNOWN.value


@dataclass(frozen=True)
class Resend:
    row: Outbound  # the new row, pending
    wait: DependencyWait


def waiting_on(row: Outbound) -> DependencyWait:
    """The open wait of the row's run, if it waits on this very row; NotResendable otherwise."""
    if row.kind != outbound.SEND or row.outcome != UNKNOWN:
        raise NotResendable(f"outbound row {row.id} is a {row.kind} row that is {row.outcome}: only a send row "
                            "that is outcome_unknown can be resent")
    run = Run.get_or_none(Run.id == row.run_id)
    wait = DependencyWait.get_or_none(DependencyWait.id == run.waiting_on) if run and run.waiting_on else None
    if (run is None or run.status != RunStatus.WAITING_FOR_DEPENDENCY.value or wait is None
            or wait.outbound_id != row.id or wait.resolved_at is not None):
        raise NotResendable(f"run {row.run_id} no longer waits on outbound row {row.id}")
    return wait


@transactional
def record_resend(old_id: str, message_id: str, body: str, push_token: str | None = None) -> Resend:
    """Supersede `old_id` with a new pending row carrying `body` (its push token masked); NotFound, or
    NotResendable when the row is not outcome_unknown or its run no longer waits on it (nothing written).
    With `push_token` (the resend's new one) the new row and the wait keep its digest: pushes for the new
    request find the wait."""
    old = outbound.get(old_id)
    if old is None:
        raise NotFound(f"no outbound row {old_id}")
    wait = waiting_on(old)
    if Outbound.update(outcome=OutboundOutcome.SUPERSEDED.value).where(
            Outbound.id == old.id, Outbound.outcome == UNKNOWN).execute() != 1:
        raise NotResendable(f"outbound row {old.id} was resent or reconciled meanwhile")
    now = utcnow()
    new = Outbound(
        id=str(uuid.uuid4()), kind=outbound.SEND, owner=old.owner, run=old.run_id, remote_agent=old.remote_agent,
        message_id=message_id, tool_call_id=old.tool_call_id, context_id=old.context_id, request_body=body,
        request_sha256=outbound.sha256(body), outcome=outbound.PENDING, resend_of=old.id,
        resend_count=old.resend_count + 1, created_at=now,
        push_token_sha256=push_tokens.digest(push_token) if push_token else None,
    )
    new.save(force_insert=True)
    moved_fields = {"outbound_id": new.id}
    if push_token:
        moved_fields["push_token_sha256"] = new.push_token_sha256
    moved = DependencyWait.update(**moved_fields).where(
        DependencyWait.id == wait.id, DependencyWait.resolved_at.is_null(), DependencyWait.outbound_id == old.id
    ).execute()
    guard = [Run.status == RunStatus.WAITING_FOR_DEPENDENCY.value, Run.waiting_on == wait.id]
    payload = outbound.outbound_payload(new, f"resent by an operator in place of {old.id} (now superseded)")
    if moved != 1 or events.append(old.run_id, guard, "outbound", payload) is None:
        raise NotResendable(f"run {old.run_id} no longer waits on outbound row {old.id}")  # rolls back
    Run.update(bytes_used=Run.bytes_used + len(body)).where(Run.id == old.run_id).execute()
    wait.outbound_id = new.id
    if push_token:
        wait.push_token_sha256 = new.push_token_sha256
    return Resend(new, wait)


@transactional
def record_resent_outcome(outbound_id: str, outcome: str, *, remote_task_id=None, error=None,
                          bytes_received: int = 0) -> Outbound:
    """What became of a resent request (outbound.record_outcome for a send no segment holds): the run waits
    meanwhile. Only a row still pending is changed."""
    Outbound.update(outcome=outcome, remote_task_id=remote_task_id, error=error, sent_at=utcnow()).where(
        Outbound.id == outbound_id, Outbound.outcome == outbound.PENDING).execute()
    row = Outbound.get_by_id(outbound_id)
    if bytes_received:
        Run.update(bytes_used=Run.bytes_used + bytes_received).where(Run.id == row.run_id).execute()
    events.append(row.run_id, [], "outbound", outbound.outbound_payload(row, "sent"))
    return row
