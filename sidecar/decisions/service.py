"""Taking a decision on a paused run: the checks in the contract's order, and the one guarded transaction
that stores the decision as it claims the pause (both modes; decide-now also claims the run's lease).

Checks (docs/http-api.md, "Inbox and decisions"): the run exists for this actor (404), the decider's current
permission (403), the pause is the run's current one and still pending (409 pause_not_pending) with the
named generation (409 stale_generation), the input against the pause's schema (422 invalid_input), the
approved content against the turn digest (409 digest_mismatch). They run inside the claiming transaction,
so what they read is what the claim's guard holds; a decision that loses the race after its checks finds
the guard gone and is refused 409 pause_not_pending, with nothing written.
"""

import json
from dataclasses import dataclass

from ..domain.clock import rfc3339
from ..domain.decisions import ACTION_FOR, DecisionKind, PauseKind
from ..domain.errors import (
    DigestMismatch,
    InvalidInput,
    NotFound,
    NotPermitted,
    PauseNotPending,
    StaleGeneration,
    ValidationFailed,
)
from ..domain.input_schemas import UnusableSchema, input_errors
from ..domain.lease import LeasePolicy
from ..permissions import may, may_decide
from ..store import pauses, runs
from ..store.db import transactional
from ..store.leases import Claim
from ..store.models import Decision, Run

MISSING = object()


@dataclass(frozen=True)
class DecisionRequest:
    run_id: str
    actor: str
    workspace: str
    pause_id: str
    generation: int
    decision: str
    mode: str = "now"
    input: object = MISSING
    turn_digest: str | None = None
    comment: str | None = None


@dataclass(frozen=True)
class Taken:
    decision: Decision
    claim: Claim | None  # decide-now: the lease the request now holds
    events_before: int  # the run's last event sequence before the decision: a stream follows from here


def can_see(actor: str, workspace: str, run: Run) -> bool:
    """A host's actor sees the runs it owns and the runs it may decide (docs/http-api.md, "Who may call what")."""
    return run.owner == actor or may_decide(actor, workspace, run)


def receipt(decision: Decision) -> dict:
    return {"receipt_id": decision.id, "run_id": decision.run_id, "pause_id": decision.pause_id,
            "generation": decision.generation, "decision": decision.decision,
            "stored_at": rfc3339(decision.stored_at)}


@transactional
def accept_decision(request: DecisionRequest, *, holder: str | None = None, lease: LeasePolicy | None = None) -> Taken:
    """Check and store the decision, claiming its pause (and, with a holder, the run's lease). Raises the
    refusal's kind (sidecar/domain/errors.py); nothing is written then.

    Database work and pure checks only: the transaction may be retried whole on a deadlock.
    """
    run = runs.get_run(request.run_id)
    if run is None or not can_see(request.actor, request.workspace, run):
        raise NotFound(f"no run {request.run_id}")
    kind = DecisionKind(request.decision)
    if not may(request.actor, request.workspace, kind.action, run):
        raise NotPermitted(f"{request.actor} may not {kind.action.removeprefix('agent:')} this run's pauses")
    pause = pauses.get(request.pause_id)
    if (pause is None or pause.run_id != run.id or pause.decided_at is not None or run.waiting_on != pause.id
            or pauses.current_pause(run) is None):
        raise PauseNotPending(f"pause {request.pause_id} is not pending: it was decided, or the run no longer "
                              "waits on it")
    if pause.generation != request.generation:
        raise StaleGeneration(f"the decision names generation {request.generation}; the pending pause is "
                              f"generation {pause.generation}")
    if kind.pause_kind != pause.kind:
        expected = "input" if pause.kind == PauseKind.INPUT else "approve or deny"
        raise ValidationFailed(f"this pause takes {expected}",
                               {"decision": [f"Must be {expected} for a pause of kind {pause.kind}."]})
    if kind is DecisionKind.INPUT:
        try:
            errors = input_errors(json.loads(pause.input_schema), request.input)
        except UnusableSchema as exc:  # stored before the policy on schemas held: no input can be checked
            raise InvalidInput("the pause's JSON schema cannot be used, so no input can be checked against it; "
                               "cancel the run", {"input": [f"The pause's schema is refused: {exc}"]}) from None
        if errors:
            raise InvalidInput("the input does not match the pause's JSON schema", errors)
    elif (request.turn_digest or "").lower() != pause.turn_digest:
        raise DigestMismatch("the turn digest is not the digest of the pending calls")
    new = pauses.NewDecision(
        decision=kind.value, decider=request.actor, workspace=request.workspace, mode=request.mode,
        input=request.input if kind is DecisionKind.INPUT else None,
        turn_digest=pause.turn_digest if kind is not DecisionKind.INPUT else None, comment=request.comment,
    )
    try:
        decision, claim, sequence = pauses.store_decision(run, pause, new, holder=holder, lease=lease)
    except pauses.PauseTaken:
        raise PauseNotPending(f"pause {pause.id} was decided meanwhile") from None
    return Taken(decision, claim, sequence - 1)


def inbox(actor: str, workspace: str) -> list[dict]:
    """The pauses the actor may decide now, oldest first: runs waiting for input or approval only (a run
    waiting for a dependency is never in it: nothing a person decides moves it on)."""
    items = []
    for pause in pauses.waiting_for_a_person():
        if may(actor, workspace, ACTION_FOR[PauseKind(pause.kind)], pause.run):
            items.append({"run_id": pause.run.id, "kind": pause.kind, **pauses.view(pause)})
    return items


def list_visibility(actor: str, workspace: str) -> dict:
    """The runs list of a host's actor: candidates by SQL (owned, in a workspace where the actor holds a
    grant, waiting for a person, or decided by the actor before), each then asked like a single run is.
    So a right a plugin gives beyond grants shows in the list as in the inbox, without asking the hook
    about every run: only about runs a person could be deciding."""
    return {"candidates_for": actor, "keep": lambda run: can_see(actor, workspace, run)}
