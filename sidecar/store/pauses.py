"""Pauses for a person (input, approval) and the decisions that win them: the dependency wait's analogue.

- pause: the pause row, the run's pause counters and `waiting_for_input|approval`, one fenced transaction;
- take: a decision claims the pause with a guarded UPDATE (`decided_at IS NULL`, this generation) and the
  run still waiting on it; in the same transaction the decision is stored and the run is queued with a
  reference to it (and, for decide-now, claimed at once). Of any number of racing deciders and cancels,
  exactly one finds the row;
- apply / refuse / fail_denied: whoever continues the run applies the stored decision under its lease, or,
  when the decider lost the right meanwhile, puts the run back to waiting on the same pause.
"""

import json
import uuid
from dataclasses import dataclass

from ..domain.clock import utcnow
from ..domain.decisions import PauseKind
from ..domain.errors import CancelRequested, LeaseLost
from ..domain.lease import LeasePolicy
from ..domain.vocabulary import RunStatus, TerminationReason
from . import events, leases, turns
from .db import transactional
from .leases import Claim, fence
from .models import Decision, PersonPause, Run

STATUS_OF = {PauseKind.INPUT: RunStatus.WAITING_FOR_INPUT, PauseKind.APPROVAL: RunStatus.WAITING_FOR_APPROVAL}
PERSON_STATUSES = [s.value for s in RunStatus if s.awaits_person]
QUEUED, RUNNING = RunStatus.QUEUED.value, RunStatus.RUNNING.value


@dataclass(frozen=True)
class PauseRequest:
    kind: PauseKind
    turn_index: int
    tool_call_id: str | None = None
    question: str | None = None
    input_schema: dict | None = None
    pending_calls: list[dict] | None = None
    turn_digest: str | None = None


def _event_or_lost(claim: Claim, kind: str, payload: dict) -> None:
    if events.append(claim.run_id, fence(claim), kind, payload) is None:
        raise LeaseLost(claim.run_id, claim.epoch)


@transactional
def pause(claim: Claim, request: PauseRequest) -> tuple[str, int]:
    """Store the pause and suspend the run on it; returns (pause id, generation). Raises LeaseLost."""
    pause_id = str(uuid.uuid4())
    leases.fenced_update(claim, pause_generation=Run.pause_generation + 1, waiting_on=pause_id)
    # Read after the fenced update holds the run's row: a cancel committed before it is seen here, and one
    # still to come finds the run waiting and cancels it at once. Either way no pause outlives a cancel.
    if Run.select(Run.cancel_requested_at).where(Run.id == claim.run_id).scalar() is not None:
        raise CancelRequested(claim.run_id)  # undoes this transaction; the segment ends the run cancelled
    generation = Run.select(Run.pause_generation).where(Run.id == claim.run_id).scalar()
    PersonPause.insert(
        id=pause_id, run=claim.run_id, generation=generation, kind=request.kind.value,
        turn_index=request.turn_index, tool_call_id=request.tool_call_id, question=request.question,
        input_schema=None if request.input_schema is None else json.dumps(request.input_schema),
        turn_digest=request.turn_digest,
        pending_calls=None if request.pending_calls is None else json.dumps(request.pending_calls),
        since=utcnow(),
    ).execute()
    _event_or_lost(claim, "pause", {"pause_id": pause_id, "generation": generation, **_shown(request)})
    leases.suspend_run(claim, STATUS_OF[request.kind])
    return pause_id, generation


def _shown(request: PauseRequest) -> dict:
    if request.kind is PauseKind.INPUT:
        return {"kind": "input", "turn_index": request.turn_index, "tool_call_id": request.tool_call_id,
                "question": request.question, "input_schema": request.input_schema}
    return {"kind": "approval", "turn_index": request.turn_index, "turn_digest": request.turn_digest,
            "pending_calls": request.pending_calls}


def get(pause_id: str) -> PersonPause | None:
    return PersonPause.get_or_none(PersonPause.id == pause_id)


def current_pause(run: Run) -> PersonPause | None:
    """The pause a run waiting for a person waits on now."""
    if run.status not in PERSON_STATUSES or not run.waiting_on:
        return None
    return PersonPause.get_or_none(PersonPause.id == run.waiting_on, PersonPause.run == run.id)


def view(pause: PersonPause) -> dict:
    """What the Run document and the inbox show of a pause (times as datetimes; the API formats them)."""
    shown = {"pause_id": pause.id, "generation": pause.generation, "since": pause.since}
    if pause.kind == PauseKind.INPUT:
        shown.update(tool_call_id=pause.tool_call_id, question=pause.question,
                     input_schema=json.loads(pause.input_schema) if pause.input_schema else {})
    else:
        shown.update(turn_digest=pause.turn_digest, pending_calls=json.loads(pause.pending_calls or "[]"))
    return shown


def person_view(run: Run) -> dict | None:
    pause = current_pause(run)
    return view(pause) if pause else None


def waiting_for_a_person() -> list[PersonPause]:
    """Every open pause of a run waiting for a person (with `.run` loaded), oldest first: the inbox's
    candidates. The runs' status index keeps this to the runs that wait for a person."""
    return list(
        PersonPause.select(PersonPause, Run)
        .join(Run, on=(PersonPause.run == Run.id))
        .where(Run.status.in_(PERSON_STATUSES), Run.waiting_on == PersonPause.id)
        .order_by(PersonPause.since, PersonPause.id)
    )


def turn_approved(run_id: str, turn_index: int) -> bool:
    """An approval of this turn was applied (the loop may run its calls)."""
    return (
        Decision.select()
        .join(PersonPause, on=(Decision.pause == PersonPause.id))
        .where(PersonPause.run == run_id, PersonPause.turn_index == turn_index,
               PersonPause.kind == PauseKind.APPROVAL.value, Decision.decision == "approve",
               Decision.applied_at.is_null(False))
        .exists()
    )


# -- deciding -------------------------------------------------------------------------------------


class PauseTaken(Exception):  # noqa: N818 - an outcome of the race, not an error
    """Another decision or a cancel took the pause first (nothing was written)."""


@dataclass(frozen=True)
class NewDecision:
    decision: str
    decider: str
    workspace: str
    mode: str
    input: object = None
    turn_digest: str | None = None
    comment: str | None = None


def store_decision(run: Run, pause: PersonPause, d: NewDecision, *, holder: str | None = None,
                   lease: LeasePolicy | None = None) -> tuple[Decision, Claim | None, int]:
    """Claim the pause for `d`, store it and queue the run with a reference to it; with a holder, also claim
    the run's lease (decide-now). Returns the decision, the claim and the `decision` event's sequence.
    Call inside a write transaction; raises PauseTaken when it lost the race.
    """
    now = utcnow()
    waiting = run.status
    guard = [Run.status == waiting, Run.waiting_on == pause.id]
    receipt = str(uuid.uuid4())
    payload = {"receipt_id": receipt, "pause_id": pause.id, "generation": pause.generation,
               "decision": d.decision, "by": d.decider, "workspace": d.workspace, "comment": d.comment,
               "mode": d.mode}
    if d.decision == "input":
        payload["input"] = d.input
    else:
        payload["turn_digest"] = d.turn_digest
    # The pause row first, then the run row (a cancel locks in the same order). Racing deciders queue on
    # the pause, which only deciders and cancels touch, not on the run row, which the run's worker renews
    # its lease on: on MariaDB a losing UPDATE keeps its row locked until it rolls back.
    taken = PersonPause.update(decided_at=now, resolution="decided", decision_id=receipt).where(
        PersonPause.id == pause.id, PersonPause.decided_at.is_null(), PersonPause.generation == pause.generation,
    ).execute()
    if taken != 1:
        raise PauseTaken()
    sequence = events.append(run.id, guard, "decision", payload)
    if sequence is None:
        raise PauseTaken()
    Decision.insert(
        id=receipt, run=run.id, pause=pause.id, generation=pause.generation, decision=d.decision,
        input=None if d.decision != "input" else json.dumps(d.input), turn_digest=d.turn_digest,
        comment=d.comment, decider=d.decider, workspace=d.workspace, mode=d.mode, stored_at=now,
    ).execute()
    events.append(run.id, guard, "status", {"from": waiting, "to": QUEUED})
    Run.update(status=QUEUED, waiting_on=None, continuation=receipt, queued_at=now, updated_at=now,
               lease_epoch=Run.lease_epoch + 1).where(Run.id == run.id, *guard).execute()
    claim = _claim(run.id, holder, lease, now) if holder else None
    return Decision.get_by_id(receipt), claim, sequence


def _claim(run_id: str, holder: str, lease: LeasePolicy, now) -> Claim:
    """The atomic claim a worker makes (from queued, a new epoch), for the decide-now request."""
    claimed = Run.update(status=RUNNING, lease_holder=holder, lease_expires_at=lease.expiry(now),
                         lease_epoch=Run.lease_epoch + 1, queued_at=None, updated_at=now).where(
        Run.id == run_id, Run.status == QUEUED).execute()
    assert claimed == 1, "the run was queued in this transaction"
    claim = Claim(run_id, Run.select(Run.lease_epoch).where(Run.id == run_id).scalar(), holder)
    events.append(run_id, fence(claim), "status", {"from": QUEUED, "to": RUNNING})
    return claim


def close_for_cancel(run: Run, now) -> bool:
    """A cancel takes the pause as a decision would (call inside the cancel's transaction)."""
    return PersonPause.update(decided_at=now, resolution="cancelled").where(
        PersonPause.id == run.waiting_on, PersonPause.decided_at.is_null()).execute() == 1


# -- continuing -----------------------------------------------------------------------------------


def continuation_of(run: Run) -> tuple[Decision, PersonPause] | None:
    """The stored decision a queued-and-claimed run continues from, if it has one not yet applied."""
    if not run.continuation:
        return None
    decision = Decision.get_or_none(Decision.id == run.continuation)
    if decision is None or decision.applied_at is not None:
        return None
    return decision, PersonPause.get_by_id(decision.pause_id)


def _applied(claim: Claim, decision: Decision) -> None:
    leases.fenced_update(claim, continuation=None)
    Decision.update(applied_at=utcnow()).where(Decision.id == decision.id).execute()
    _event_or_lost(claim, "resume", {"pause_id": decision.pause_id, "receipt_id": decision.id,
                                     "resolution": decision.decision, "by": decision.decider})


@transactional
def apply_decision(claim: Claim, decision: Decision, results: list[dict]) -> None:
    """Apply the decision under the lease: its tool results (input, denials) and the `resume` event."""
    _applied(claim, decision)
    for r in results:
        turns.save_tool_result(claim, r["turn_index"], r["tool_call_id"], r["name"], r["result"], r["event"],
                               clear_pending_effect=False)


@transactional
def fail_denied(claim: Claim, decision: Decision) -> None:
    """A denial of a run created with on_denial "fail": the run ends failed / approval_denied."""
    _applied(claim, decision)
    leases.finish(claim, RunStatus.FAILED, reason=TerminationReason.APPROVAL_DENIED.value)


@transactional
def refuse(claim: Claim, decision: Decision, pause: PersonPause, reason: str) -> None:
    """The decider may no longer decide: the run waits again on the same pause, which is open again."""
    Decision.update(refused_at=utcnow(), refusal=reason).where(Decision.id == decision.id).execute()
    PersonPause.update(decided_at=None, resolution=None, decision_id=None).where(
        PersonPause.id == pause.id).execute()
    _event_or_lost(claim, "decision_refused", {
        "pause_id": pause.id, "generation": pause.generation, "receipt_id": decision.id,
        "decision": decision.decision, "by": decision.decider, "comment": decision.comment, "reason": reason})
    leases.suspend_run(claim, STATUS_OF[PauseKind(pause.kind)], waiting_on=pause.id, continuation=None)
