"""The outbound journal: every request that creates state on a remote agent is committed here before it
leaves, so a lost answer can never turn into a second remote task.

The same owner, message id and digest is the same operation: its recorded row comes back and nothing is
sent again. The same message id with another digest is refused. A `send` row that a retry finds still
`pending` may have left: it becomes `outcome_unknown`, and only an operator resends it (store/resends.py)
or reconciliation finds its task (`record_found`): both are guarded on `outcome_unknown`, so one wins.

`cancel` rows are committed in the transaction that ends the wait (a deadline, a run's cancel), without
their body: the coordinator that sends them claims an attempt (`claim_cancel`) and writes the exact body
into the row (`write_cancel_body`) before anything leaves. CancelTask is idempotent in A2A, so a cancel whose
attempt failed is tried again (`cancels_due`), after a growing delay and a bounded number of times.
"""

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime

from peewee import IntegrityError

from .. import wakeup
from ..domain import push_tokens
from ..domain.clock import utcnow
from ..domain.errors import JournalledAlready, MessageIdTaken
from ..domain.vocabulary import OutboundKind, OutboundOutcome, RunStatus
from . import events, notify, statements, status_guard
from .db import database, dialect, transactional
from .leases import Claim, fence, fenced_update_with_event
from .models import DependencyWait, Outbound, Run

PENDING = OutboundOutcome.PENDING.value
UNKNOWN = OutboundOutcome.OUTCOME_UNKNOWN.value
ACCEPTED = OutboundOutcome.ACCEPTED.value
SEND = OutboundKind.SEND.value
CANCEL = OutboundKind.CANCEL.value
# Cancel message ids are derived from the send row, so one send row can never get two cancel rows.
CANCEL_NAMESPACE = uuid.UUID("5b0d8c2e-3f7a-4c61-9e2d-281281281282")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _event(claim: Claim, row: Outbound, note: str) -> None:
    """The row's `outbound` event, under the fence (LeaseLost when it no longer holds)."""
    fenced_update_with_event(claim, "outbound", outbound_payload(row, note))


UNREAD = object()  # record_send's origin when the caller did not read it
_JOURNALLED = "journalled before sending"  # the note of a new send row's event


def record_send(
    claim: Claim, *, owner: str, remote_agent: str, message_id: str, tool_call_id: str, context_id: str,
    body: str, push_token: str | None = None, resend_count: int = 0, origin=UNREAD, first_attempt: bool = False,
) -> tuple[Outbound, bool]:
    """Commit a `send` row before the request leaves; returns (row, is_new).

    `body` is the request as sent with its push token masked; a new row keeps only the token's digest.

    For a new row the compatibility gate is checked in this transaction: once the row is committed the run
    may wait on it. A row that exists already (a retry) is returned (is_new False) after its own checks,
    whatever the gate says now: it may have left, so it must be settled (start.py gives it up and cancels
    its task when the gate has closed since).

    `origin`, the run's origin (None: none) when the caller has read the run already (a run's origin never
    changes); read here otherwise.

    `first_attempt`: the caller knows no earlier attempt journalled this message id (the segment saved the
    call's turn itself, DelegationCall.first_attempt), so the row is not looked for before the INSERT: one
    statement less a delegation. Should the INSERT find the id taken all the same, that transaction is
    rolled back and the row is looked for, as for any retry: the answer is the same either way.
    """
    fields = dict(owner=owner, remote_agent=remote_agent, message_id=message_id, tool_call_id=tool_call_id,
                  context_id=context_id, body=body, push_token=push_token, resend_count=resend_count, origin=origin)
    if first_attempt:
        try:
            return _journal_first(claim, **fields), True
        except JournalledAlready:
            pass
    return _record_send(claim, **fields)


@transactional
def _journal_first(claim: Claim, **fields) -> Outbound:
    return journal_first_send(claim, **fields)


def journal_first_send(claim: Claim, *, owner: str, remote_agent: str, message_id: str, tool_call_id: str,
                       context_id: str, body: str, push_token: str | None = None, resend_count: int = 0,
                       origin=UNREAD, with_event: bool = True, deferred: bool = False,
                       gate_by_caller: bool = False) -> Outbound:
    """record_send()'s new row of a first attempt, inside the caller's transaction: the gate checked, the row
    and (unless the caller writes it with its own update of the run: turns.save_turn_and_journal) its
    `outbound` event (journal_event) written. JournalledAlready when the message id is taken; with `deferred`
    (statements.insert_row) the INSERT may go with the caller's next statement, which then raises
    IntegrityError for a taken id instead (the caller maps it: message_id_taken). With `gate_by_caller` the
    gate is not asked here: the caller asks it later in the same transaction, before it commits
    (turns.save_turn_and_journal)."""
    _refuse_secret(body, push_token)
    return _insert_send(claim, JournalledAlready, owner=owner, remote_agent=remote_agent, message_id=message_id,
                        tool_call_id=tool_call_id, context_id=context_id, body=body, push_token=push_token,
                        resend_count=resend_count, origin=origin, with_event=with_event, deferred=deferred,
                        gate_by_caller=gate_by_caller)


def message_id_taken(message_id: str) -> JournalledAlready:
    """What a deferred journal_first_send()'s INSERT refused by the unique message id means."""
    return JournalledAlready(_journalled_concurrently(message_id))


def _journalled_concurrently(message_id: str) -> str:
    return f"message id {message_id} was journalled concurrently"


def journal_event(row: Outbound) -> tuple[str, dict]:
    """The (kind, payload) of a new send row's event."""
    return "outbound", outbound_payload(row, _JOURNALLED)


@transactional
def _record_send(claim: Claim, **fields) -> tuple[Outbound, bool]:
    _refuse_secret(fields["body"], fields["push_token"])
    existing = by_message_id(fields["message_id"])
    if existing is None:
        return _insert_send(claim, MessageIdTaken, **fields), True
    if (existing.request_sha256 != sha256(fields["body"]) or existing.owner != fields["owner"]
            or existing.run_id != claim.run_id):
        raise MessageIdTaken(f"message id {fields['message_id']} is journalled with another request; nothing was sent")
    return _settle_left_pending(claim, existing), False


def _insert_send(claim: Claim, taken: type[Exception], *, owner: str, remote_agent: str, message_id: str,
                 tool_call_id: str, context_id: str, body: str, push_token: str | None, resend_count: int,
                 origin, with_event: bool = True, deferred: bool = False, gate_by_caller: bool = False) -> Outbound:
    """The new `send` row and (`with_event`) its event, once the gate lets the run wait on it (unless the caller
    asks it: `gate_by_caller`); `taken` is raised when the message id is journalled already."""
    if not gate_by_caller:
        if origin is UNREAD:
            origin = statements.select_value(Run, "origin", id=claim.run_id)
        status_guard.check(RunStatus.WAITING_FOR_DEPENDENCY.value, origin)
    values = dict(
        id=str(uuid.uuid4()), kind=OutboundKind.SEND.value, owner=owner, run=claim.run_id, remote_agent=remote_agent,
        message_id=message_id, tool_call_id=tool_call_id, context_id=context_id, request_body=body,
        request_sha256=sha256(body), outcome=PENDING, resend_count=resend_count, created_at=utcnow(),
        push_token_sha256=push_tokens.digest(push_token) if push_token else None,
    )
    row = Outbound(**values)
    try:
        statements.insert_row(Outbound, values, deferred=deferred)
    except IntegrityError:
        raise taken(_journalled_concurrently(message_id)) from None
    if with_event:
        _event(claim, row, _JOURNALLED)
    return row


def _refuse_secret(body: str, push_token: str | None) -> None:
    """The journal never takes a push token in the clear (docs/security.md, "Secrets at rest")."""
    if push_token and not push_tokens.is_masked(push_token) and push_token in body:
        raise ValueError("a request body for the journal must carry its push token masked")


def _mark_unknown(outbound_id: str, *conditions) -> Outbound | None:
    """`pending` -> `outcome_unknown` for a send whose sender stopped before recording what the request did
    (it may have left: never sent again; reconciliation or an operator settles it). None when the row was
    no longer `pending` (or `conditions` did not hold)."""
    moved = Outbound.update(outcome=UNKNOWN, error="the sender stopped before the outcome was recorded").where(
        Outbound.id == outbound_id, Outbound.outcome == PENDING, Outbound.kind == SEND, *conditions).execute()
    return Outbound.get_by_id(outbound_id) if moved == 1 else None


def _settle_left_pending(claim: Claim, row: Outbound) -> Outbound:
    """A row a retry finds still `pending` was committed and never settled (by the crashed attempt)."""
    settled = _mark_unknown(row.id) if row.outcome == PENDING else None
    if settled is None:
        return row
    _event(claim, settled, "found pending by a retry: it may have left")
    return settled


@transactional
def settle_abandoned(outbound_id: str, journalled_before: datetime) -> bool:
    """A send no segment holds (an operator's resend) still `pending` although journalled before
    `journalled_before`, longer ago than any send lasts: its sender stopped. True when settled now."""
    settled = _mark_unknown(outbound_id, Outbound.created_at < journalled_before)
    if settled is not None:
        events.append(settled.run_id, [], "outbound", outbound_payload(settled, "its sender stopped: it may have left"))
    return settled is not None


@dataclass(frozen=True)
class Settlement:
    """What a delegation answered at once still has to write, in the transaction that saves its tool result
    (turns.save_tool_result): the budget it spent, and the send's outcome unless that is recorded already.
    One transaction, so a crash before it leaves the row `pending` (a retry then treats it as unknown), never
    an outcome without its result, or a result counted twice."""

    counts: dict  # budget counters to add: delegations_used, bytes_used (none for a send not delivered)
    outbound_id: str | None = None  # with `outcome`: the pending row to record it on
    outcome: str | None = None
    remote_task_id: str | None = None
    error: str | None = None


@transactional
def record_outcome(claim: Claim, outbound_id: str, outcome: str, *, remote_task_id=None, error=None) -> Outbound:
    """Record what became of a send, only while it is still pending (a later writer never overwrites)."""
    row, _ = write_outcome(outbound_id, outcome, remote_task_id=remote_task_id, error=error)
    _event(claim, row, SENT_NOTE)
    return row


SENT_NOTE = "sent"  # the note of the `outbound` event that records a send's outcome


def write_outcome(outbound_id: str, outcome: str, *, remote_task_id=None, error=None) -> tuple[Outbound, bool]:
    """Inside the caller's transaction, without the event: what became of a send, only while it is still
    pending. Returns the row, and whether this write recorded it (then the row is as written, and locked on a
    server database); else the row as it is."""
    row = statements.update_returning_row(
        Outbound, {"id": outbound_id, "outcome": PENDING},
        {"outcome": outcome, "remote_task_id": remote_task_id, "error": error, "sent_at": utcnow()})
    if row is not None:
        return row, True
    row = get(outbound_id)  # no longer pending: the row as it is
    if row is None:
        raise Outbound.DoesNotExist(f"outbound {outbound_id} does not exist")  # as get_by_id raised
    return row, False


@transactional
def give_up_send(claim: Claim, outbound_id: str) -> Outbound | None:
    """The run will not wait on this send (the gate closed after it was journalled): settle a row left
    `pending`, and journal the CancelTask of its task, if it has or may have one, under the fence. Returns
    the cancel row, or None."""
    row = _settle_left_pending(claim, Outbound.get_by_id(outbound_id))
    cancel = journal_cancel(row, fence(claim), utcnow())
    if cancel is None:
        return None
    notify.notify_unless_heard_here()
    database.after_commit(wakeup.dependencies_due)
    return cancel


def get(outbound_id: str) -> Outbound | None:
    return statements.select_one(Outbound, id=outbound_id)


# What a push is authenticated and acted on with (delegation/push.py): not the journalled request body,
# which may be large, for every push.
PUSH_SEND_COLUMNS = ("id", "run_id", "outcome", "remote_task_id", "push_token_sha256")
PUSH_WAIT_COLUMNS = ("id", "run_id", "push_token_sha256", "resolved_at")


def sends_of_run(run_id: str) -> list[tuple[Outbound, DependencyWait | None]]:
    """The run's journalled sends (the rows a push token may have been made for), each with the wait on it
    once the run is suspended on it, in one read: a push is authenticated against both. Of each only the
    columns a push needs (PUSH_SEND_COLUMNS, PUSH_WAIT_COLUMNS); the others are left unset."""
    return statements.sends_with_waits(run_id, SEND, PUSH_SEND_COLUMNS, PUSH_WAIT_COLUMNS)


def note_early_push(outbound_id: str) -> None:
    """A push for this send came before the run's suspension: counted, and remembered (the first one's time) for
    the suspension to see, in a transaction of its own. Pushes that change nothing are counted by
    store/push_counts.py instead."""
    _note_early_push(outbound_id, utcnow())


@transactional
def _note_early_push(outbound_id: str, early_at: datetime) -> None:
    statements.add_to(Outbound, "pushes_seen", 1, id=outbound_id)
    statements.update_where(Outbound, {"id": outbound_id, "push_received_at": None}, {"push_received_at": early_at})


def pushed_early(outbound_id: str) -> bool:
    """Inside the suspension's transaction: whether a push for this send came already. On a server database the
    row is locked, so a push noting itself meanwhile waits for the suspension to commit and then finds the wait
    (delegation/push.py), instead of both missing each other."""
    # SQLite's BEGIN IMMEDIATE already serialises the two; a server database locks the row.
    return statements.select_value(Outbound, "push_received_at", id=outbound_id,
                                   for_update=dialect() != "sqlite") is not None


def by_message_id(message_id: str) -> Outbound | None:
    return statements.select_one(Outbound, message_id=message_id)


def descends_from(row: Outbound, root_id: str, limit: int = 100) -> bool:
    """True when `row` is the row `root_id` or an operator resend of it (following resend_of back)."""
    for _ in range(limit):
        if row.id == root_id:
            return True
        if row.resend_of is None or (row := get(row.resend_of)) is None:
            return False
    return False


def _found(outbound_id: str, remote_task_id: str) -> Outbound | None:
    found = Outbound.update(outcome=ACCEPTED, remote_task_id=remote_task_id, error=None).where(
        Outbound.id == outbound_id, Outbound.kind == SEND, Outbound.outcome == UNKNOWN).execute() == 1
    return Outbound.get_by_id(outbound_id) if found else None


FOUND_NOTE = "found by reconciliation (ListTasks)"


@transactional
def record_found_fenced(claim: Claim, outbound_id: str, remote_task_id: str) -> Outbound:
    """Reconciliation inside the segment that sent: the lost send's task was found; the row is accepted."""
    row = _found(outbound_id, remote_task_id)
    if row is not None:
        _event(claim, row, FOUND_NOTE)
    return Outbound.get_by_id(outbound_id)


@transactional
def record_found(outbound_id: str, remote_task_id: str) -> bool:
    """Reconciliation found the task of an `outcome_unknown` send: the row is `accepted` with that task.
    False when the row is no longer `outcome_unknown` (an operator resent it, or another found it)."""
    row = _found(outbound_id, remote_task_id)
    if row is not None:
        events.append(row.run_id, [], "outbound", outbound_payload(row, FOUND_NOTE))
    return row is not None


def outbound_payload(row: Outbound, note: str) -> dict:
    return {"outbound_id": row.id, "kind": row.kind, "message_id": row.message_id, "outcome": row.outcome,
            "remote_agent": row.remote_agent, "remote_task_id": row.remote_task_id, "note": note}


def journal_cancel(send_row: Outbound, guard, now: datetime) -> Outbound | None:
    """Inside the caller's transaction: a pending `cancel` row for the task of `send_row`, if a task is
    known or may exist (an unknown outcome: the sender reconciles first). None when there is nothing to
    cancel (rejected, not delivered, or answered with a message)."""
    if send_row.kind != SEND or not (send_row.outcome == UNKNOWN or send_row.remote_task_id):
        return None
    row = Outbound(
        id=str(uuid.uuid4()), kind=CANCEL, owner=send_row.owner, run=send_row.run_id,
        remote_agent=send_row.remote_agent, message_id=str(uuid.uuid5(CANCEL_NAMESPACE, send_row.id)),
        tool_call_id=send_row.tool_call_id, context_id=send_row.context_id, request_body="",
        request_sha256=sha256(""), outcome=PENDING, remote_task_id=send_row.remote_task_id,
        resend_of=None, created_at=now,
    )
    row.save(force_insert=True)
    events.append(row.run_id, guard, "outbound", outbound_payload(row, "cancel journalled before sending"))
    return row


def send_row_of(cancel_row: Outbound) -> Outbound | None:
    """The (newest) send row a cancel row cancels the task of."""
    return (Outbound.select()
            .where(Outbound.run == cancel_row.run_id, Outbound.tool_call_id == cancel_row.tool_call_id,
                   Outbound.kind == SEND)
            .order_by(Outbound.resend_count.desc()).first())


def cancels_due(now: datetime, *, max_attempts: int, limit: int = 50) -> list[Outbound]:
    """Pending cancel rows never tried, or whose next attempt is due, with attempts left. Read through
    the outcome index."""
    return statements.journal_rows_due(PENDING, CANCEL, now, max_attempts, limit)


@transactional
def claim_cancel(row: Outbound, now: datetime, retry_at: datetime) -> bool:
    """Claim a pending cancel row for one attempt (sent_at: the attempt's time; attempts counted). The
    claim also sets when the next attempt is due, should this one get no answer (`retry_at`, the
    backoff's). Only the caller that still sees the attempt time it read wins, so two coordinators never
    make the same attempt."""
    last = Outbound.sent_at.is_null() if row.sent_at is None else Outbound.sent_at == row.sent_at
    return Outbound.update(sent_at=now, attempts=Outbound.attempts + 1, next_attempt_at=retry_at).where(
        Outbound.id == row.id, Outbound.kind == CANCEL, Outbound.outcome == PENDING, last).execute() == 1


@transactional
def retry_cancels_now(remote_agent: str) -> int:
    """The agent answers again: its pending cancel rows waiting for a later attempt are due now."""
    return Outbound.update(next_attempt_at=utcnow()).where(
        Outbound.remote_agent == remote_agent, Outbound.kind == CANCEL, Outbound.outcome == PENDING,
        Outbound.next_attempt_at > utcnow()).execute()


@transactional
def write_cancel_body(outbound_id: str, body: str, remote_task_id: str) -> None:
    """Journal the exact CancelTask body of a claimed attempt, before it leaves."""
    Outbound.update(request_body=body, request_sha256=sha256(body), remote_task_id=remote_task_id).where(
        Outbound.id == outbound_id, Outbound.kind == CANCEL, Outbound.outcome == PENDING).execute()


@transactional
def record_cancel(outbound_id: str, outcome: str, *, error: str | None = None) -> None:
    """What became of a cancel attempt; `pending` keeps it for another attempt (with the error)."""
    Outbound.update(outcome=outcome, error=error).where(
        Outbound.id == outbound_id, Outbound.outcome == PENDING).execute()
    row = Outbound.get_by_id(outbound_id)
    if outcome != PENDING:
        note = "cancel sent" if row.sent_at else "cancel not sent"
        events.append(row.run_id, [], "outbound", outbound_payload(row, note))


GIVEN_UP_NOTE = "cancel given up: no attempt was answered"


@transactional
def give_up_cancel(outbound_id: str, error: str) -> bool:
    """A cancel row whose last allowed attempt got no answer: `outcome_unknown` (the peer may or may not
    have cancelled), never tried again. False when it was settled meanwhile."""
    settled = Outbound.update(outcome=UNKNOWN, error=error).where(
        Outbound.id == outbound_id, Outbound.kind == CANCEL, Outbound.outcome == PENDING).execute() == 1
    if settled:
        row = Outbound.get_by_id(outbound_id)
        events.append(row.run_id, [], "outbound", outbound_payload(row, GIVEN_UP_NOTE))
    return settled


def context_of_task(run_id: str, remote_task_id: str) -> str | None:
    """The contextId this run used for a remote task (a follow-up must name the same context)."""
    row = (Outbound.select(Outbound.context_id)
           .where(Outbound.run == run_id, Outbound.remote_task_id == remote_task_id).first())
    return row.context_id if row else None
