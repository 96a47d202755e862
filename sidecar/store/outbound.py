"""The outbound journal: every request that creates state on a remote agent is committed here before it
leaves, so a lost answer can never turn into a second remote task.

The same owner, message id and digest is the same operation: its recorded row comes back and nothing is
sent again. The same message id with another digest is refused. A `send` row that a retry finds still
`pending` may have left: it becomes `outcome_unknown`, and only an operator resends it.
"""

import hashlib
import uuid

from peewee import IntegrityError

from ..domain.clock import utcnow
from ..domain.errors import LeaseLost, SidecarError
from ..domain.vocabulary import OutboundKind, OutboundOutcome, RunStatus
from . import events, status_guard
from .db import transactional
from .leases import Claim, fence
from .models import Outbound, Run

PENDING = OutboundOutcome.PENDING.value
UNKNOWN = OutboundOutcome.OUTCOME_UNKNOWN.value


class DigestMismatch(SidecarError):
    """The message id is taken by another request body (or another owner): refused, nothing sent."""


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _event(claim: Claim, row: Outbound, note: str) -> None:
    payload = {"outbound_id": row.id, "kind": row.kind, "message_id": row.message_id, "outcome": row.outcome,
               "remote_agent": row.remote_agent, "remote_task_id": row.remote_task_id, "note": note}
    if events.append(claim.run_id, fence(claim), "outbound", payload) is None:
        raise LeaseLost(claim.run_id, claim.epoch)


@transactional
def record_send(
    claim: Claim, *, owner: str, remote_agent: str, message_id: str, tool_call_id: str, context_id: str,
    body: str, resend_count: int = 0,
) -> tuple[Outbound, bool]:
    """Commit a `send` row before the request leaves; returns (row, is_new).

    The compatibility gate is checked in this transaction: once the row is committed the run may wait on it.
    A row that exists already is returned (is_new False) after the checks above; nothing is inserted.
    """
    origin = Run.select(Run.origin).where(Run.id == claim.run_id).scalar()
    status_guard.check(RunStatus.WAITING_FOR_DEPENDENCY.value, origin)
    digest = sha256(body)
    existing = Outbound.get_or_none(Outbound.message_id == message_id)
    if existing is None:
        row = Outbound(
            id=str(uuid.uuid4()), kind=OutboundKind.SEND.value, owner=owner, run=claim.run_id,
            remote_agent=remote_agent, message_id=message_id, tool_call_id=tool_call_id, context_id=context_id,
            request_body=body, request_sha256=digest, outcome=PENDING, resend_count=resend_count,
            created_at=utcnow(),
        )
        try:
            row.save(force_insert=True)
        except IntegrityError:
            raise DigestMismatch(f"message id {message_id} was journalled concurrently") from None
        _event(claim, row, "journalled before sending")
        return row, True
    if existing.request_sha256 != digest or existing.owner != owner or existing.run_id != claim.run_id:
        raise DigestMismatch(f"message id {message_id} is journalled with another request; nothing was sent")
    if existing.outcome == PENDING:
        # Committed earlier and never settled: the request may have left before the crash.
        Outbound.update(outcome=UNKNOWN, error="the sender stopped before the outcome was recorded").where(
            Outbound.id == existing.id, Outbound.outcome == PENDING).execute()
        existing = Outbound.get_by_id(existing.id)
        _event(claim, existing, "found pending by a retry: it may have left")
    return existing, False


@transactional
def record_outcome(claim: Claim, outbound_id: str, outcome: str, *, remote_task_id=None, error=None) -> Outbound:
    """Record what became of a send, only while it is still pending (a later writer never overwrites)."""
    Outbound.update(outcome=outcome, remote_task_id=remote_task_id, error=error, sent_at=utcnow()).where(
        Outbound.id == outbound_id, Outbound.outcome == PENDING).execute()
    row = Outbound.get_by_id(outbound_id)
    _event(claim, row, "sent")
    return row


def get(outbound_id: str) -> Outbound | None:
    return Outbound.get_or_none(Outbound.id == outbound_id)


def context_of_task(run_id: str, remote_task_id: str) -> str | None:
    """The contextId this run used for a remote task (a follow-up must name the same context)."""
    row = (Outbound.select(Outbound.context_id)
           .where(Outbound.run == run_id, Outbound.remote_task_id == remote_task_id).first())
    return row.context_id if row else None
