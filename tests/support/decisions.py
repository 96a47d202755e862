"""Helpers of the decision tests: runs that pause for approval or input, and decision bodies."""

from sidecar.config import Settings
from sidecar.store import pauses, runs
from sidecar.store.models import Decision, Grant, IdempotencyRecord, Note, PersonPause, Run, RunEvent
from tests.support.api import ACTOR
from tests.support.segments import drive_segment

NOTE_TURN = {"tool_calls": [{"id": "call_1", "name": "write_note", "arguments": {"text": "hello"}}]}
APPROVAL_SCRIPT = [NOTE_TURN, {"content": "done: {last_tool_result}"}]
PAGE_SCHEMA = {"type": "object", "properties": {"page": {"type": "integer", "minimum": 1}}, "required": ["page"],
               "additionalProperties": False}
ASK_TURN = {"tool_calls": [{"id": "ask", "name": "ask_user",
                            "arguments": {"question": "Which page?", "schema": PAGE_SCHEMA}}]}
INPUT_SCRIPT = [ASK_TURN, {"content": "got {last_tool_result}"}]


def paused_run(script=None, *, owner: str = ACTOR, workspace: str = "0", on_denial: str = "continue",
               settings: Settings | None = None) -> str:
    """A run that waits for a person: created and driven to its first pause."""
    run_id = runs.create_run(owner, "please", workspace=workspace, wake=False, spec={
        "provider": "scripted", "script": script or APPROVAL_SCRIPT, "on_denial": on_denial})
    drive_segment(run_id, settings=settings)
    assert runs.get_run(run_id).status in ("waiting_for_approval", "waiting_for_input"), runs.get_run(run_id).status
    return run_id


def pause_of(run_id: str) -> dict:
    return pauses.person_view(runs.get_run(run_id))


def body(run_id: str, decision: str = "approve", mode: str = "store", **extra) -> dict:
    """A decision for the run's current pause, as a host that read the pause would send it."""
    pause = pause_of(run_id)
    sent = {"pause_id": pause["pause_id"], "generation": pause["generation"], "decision": decision, "mode": mode}
    if decision in ("approve", "deny"):
        sent["turn_digest"] = pause["turn_digest"]
    return {**sent, **extra}


def state() -> dict:
    """Everything a decision could change: compared before and after a refused one."""
    return {
        "runs": [(r.id, r.status, r.lease_epoch, r.waiting_on, r.continuation, r.last_event_sequence)
                 for r in Run.select().order_by(Run.id)],
        "pauses": [(p.id, p.decided_at, p.decision_id) for p in PersonPause.select().order_by(PersonPause.id)],
        "counts": {m.__name__: m.select().count() for m in (RunEvent, Decision, Note, IdempotencyRecord, Grant)},
    }
