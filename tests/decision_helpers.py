"""Plain helpers of the decision tests: runs that pause for approval or input, and decision bodies."""

from sidecar.config import Settings
from sidecar.domain.clock import utcnow
from sidecar.domain.lease import LeasePolicy
from sidecar.engine import AgentLoop
from sidecar.engine.registry import build_registry
from sidecar.segment import Segment
from sidecar.store import events, pauses, runs
from sidecar.store.leases import Claim
from sidecar.store.models import Decision, Grant, IdempotencyRecord, Note, PersonPause, Run, RunEvent
from tests.api_helpers import ACTOR

NOTE_TURN = {"tool_calls": [{"id": "call_1", "name": "write_note", "arguments": {"text": "hello"}}]}
APPROVAL_SCRIPT = [NOTE_TURN, {"content": "done: {last_tool_result}"}]
PAGE_SCHEMA = {"type": "object", "properties": {"page": {"type": "integer", "minimum": 1}}, "required": ["page"],
               "additionalProperties": False}
ASK_TURN = {"tool_calls": [{"id": "ask", "name": "ask_user",
                            "arguments": {"question": "Which page?", "schema": PAGE_SCHEMA}}]}
INPUT_SCRIPT = [ASK_TURN, {"content": "got {last_tool_result}"}]
LEASE = LeasePolicy(30)


def loop(settings: Settings | None = None) -> AgentLoop:
    return AgentLoop(build_registry(settings or Settings.from_env()))


def claim(run_id: str, holder: str = "test-worker") -> Claim:
    """Claim this queued run as a worker's atomic claim would (the tests drive runs one by one)."""
    now = utcnow()
    taken = Run.update(status="running", lease_holder=holder, lease_expires_at=LEASE.expiry(now),
                       lease_epoch=Run.lease_epoch + 1, queued_at=None, updated_at=now).where(
        Run.id == run_id, Run.status == "queued").execute()
    assert taken == 1, f"run {run_id} is not queued"
    claim = Claim(run_id, Run.get_by_id(run_id).lease_epoch, holder)
    events.append(run_id, [], "status", {"from": "queued", "to": "running"})
    return claim


def drive(run_id: str, settings: Settings | None = None):
    """Execute one segment of this queued run in this thread, as a worker would; returns its outcome."""
    c = claim(run_id)
    return loop(settings).execute(Segment(c, runs.get_run(run_id)))


def paused_run(script=None, *, owner: str = ACTOR, workspace: str = "0", on_denial: str = "continue",
               settings: Settings | None = None) -> str:
    """A run that waits for a person: created and driven to its first pause."""
    run_id = runs.create_run(owner, "please", workspace=workspace, wake=False, spec={
        "provider": "scripted", "script": script or APPROVAL_SCRIPT, "on_denial": on_denial})
    drive(run_id, settings)
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


def kinds(run_id: str) -> list[str]:
    return [e["kind"] for e in events.list_events(run_id)]


def payloads(run_id: str, kind: str) -> list[dict]:
    return [e["payload"] for e in events.list_events(run_id) if e["kind"] == kind]


def state() -> dict:
    """Everything a decision could change: compared before and after a refused one."""
    return {
        "runs": [(r.id, r.status, r.lease_epoch, r.waiting_on, r.continuation, r.last_event_sequence)
                 for r in Run.select().order_by(Run.id)],
        "pauses": [(p.id, p.decided_at, p.decision_id) for p in PersonPause.select().order_by(PersonPause.id)],
        "counts": {m.__name__: m.select().count() for m in (RunEvent, Decision, Note, IdempotencyRecord, Grant)},
    }
