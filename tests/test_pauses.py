"""Pauses for a person in the agent loop, on each database: approval per turn before any of its calls
runs, input for ask_user, denial, generations, and a decision applied exactly once by whoever continues."""

import json

import pytest

from sidecar.decisions import service
from sidecar.decisions.continuation import continue_from_decision
from sidecar.domain.decisions import turn_digest
from sidecar.domain.errors import InvalidInput, PauseNotPending, StaleGeneration
from sidecar.domain.vocabulary import SegmentOutcome
from sidecar.segment import Segment
from sidecar.store import notes, pauses, runs
from sidecar.store.models import Decision, PersonPause, ToolResult
from tests.support.api import ACTOR
from tests.support.decisions import APPROVAL_SCRIPT, ASK_TURN, INPUT_SCRIPT, NOTE_TURN, pause_of, paused_run
from tests.support.engine import requeue_as_the_reaper_would
from tests.support.network import CannedServer
from tests.support.runs import event_kinds, event_payloads, run_row
from tests.support.segments import claim_next, drive_segment

TWO_CALLS = [{"tool_calls": [{"id": "e", "name": "echo", "arguments": {"text": "first"}},
                             {"id": "n", "name": "write_note", "arguments": {"text": "hello"}}]},
             {"content": "done: {last_tool_result}"}]


def decide(run_id: str, decision: str = "approve", *, actor: str = ACTOR, **extra) -> Decision:
    pause = pause_of(run_id)
    request = service.DecisionRequest(
        run_id=run_id, actor=actor, workspace="0", pause_id=pause["pause_id"], generation=pause["generation"],
        decision=decision, mode="store", turn_digest=pause.get("turn_digest"), **extra)
    return service.accept_decision(request).decision


def test_a_turn_that_calls_write_note_waits_for_approval_before_any_of_its_calls_runs(database_url):
    run_id = runs.create_run(ACTOR, "x", spec={"script": TWO_CALLS, "provider": "scripted"}, wake=False)
    assert drive_segment(run_id) is SegmentOutcome.AWAITING_APPROVAL
    row = run_row(run_id)
    assert (row.status, row.lease_holder, row.pause_generation) == ("waiting_for_approval", None, 1)
    assert ToolResult.select().where(ToolResult.run == run_id).count() == 0, "no call of the turn ran"
    shown = [{"id": "e", "name": "echo", "arguments": {"text": "first"}, "effect": "read_only"},
             {"id": "n", "name": "write_note", "arguments": {"text": "hello"}, "effect": "non_idempotent_write"}]
    pause = pause_of(run_id)
    assert pause["pending_calls"] == shown and pause["generation"] == 1
    assert pause["turn_digest"] == turn_digest(shown) and len(pause["turn_digest"]) == 64
    (event,) = event_payloads(run_id, "pause")
    assert event == {"kind": "approval", "pause_id": pause["pause_id"], "generation": 1, "turn_index": 0,
                     "turn_digest": pause["turn_digest"], "pending_calls": shown}
    assert event_kinds(run_id)[-2:] == ["pause", "status"]


def test_an_approved_turn_runs_its_calls_and_the_note_is_written_once(database_url):
    run_id = runs.create_run(ACTOR, "x", spec={"script": TWO_CALLS, "provider": "scripted"}, wake=False)
    drive_segment(run_id)
    receipt = decide(run_id, comment="fine")
    row = run_row(run_id)
    assert (row.status, row.continuation, row.waiting_on) == ("queued", receipt.id, None)
    assert drive_segment(run_id) is SegmentOutcome.COMPLETED
    assert run_row(run_id).output == "done: note written: hello"
    assert notes.of_run(run_id) == ["hello"]
    (decision,) = event_payloads(run_id, "decision")
    assert (decision["by"], decision["decision"], decision["comment"], decision["mode"]) == (ACTOR, "approve",
                                                                                            "fine", "store")
    (resume,) = event_payloads(run_id, "resume")
    assert resume == {"pause_id": receipt.pause_id, "receipt_id": receipt.id, "resolution": "approve", "by": ACTOR}
    assert Decision.get_by_id(receipt.id).applied_at is not None and run_row(run_id).continuation is None


def test_a_denial_gives_every_pending_call_its_comment_and_the_model_continues(database_url):
    run_id = runs.create_run(ACTOR, "x", spec={"script": TWO_CALLS, "provider": "scripted"}, wake=False)
    drive_segment(run_id)
    decide(run_id, "deny", comment="not today")
    assert drive_segment(run_id) is SegmentOutcome.COMPLETED
    assert run_row(run_id).output == "done: denied: not today"
    results = {r.tool_call_id: r.result for r in ToolResult.select().where(ToolResult.run == run_id)}
    assert results == {"e": "denied: not today", "n": "denied: not today"}
    assert notes.of_run(run_id) == []
    assert [t["result"] for t in event_payloads(run_id, "tool")] == ["denied: not today"] * 2


def test_a_denial_without_a_comment_still_says_denied(database_url):
    run_id = paused_run()
    decide(run_id, "deny")
    drive_segment(run_id)
    assert run_row(run_id).output == "done: denied: (no comment)"


def test_with_on_denial_fail_a_denial_fails_the_run_approval_denied(database_url):
    run_id = paused_run(on_denial="fail")
    decide(run_id, "deny", comment="no")
    assert drive_segment(run_id) is SegmentOutcome.FAILED
    row = run_row(run_id)
    assert (row.status, row.termination_reason, row.continuation) == ("failed", "approval_denied", None)
    assert notes.of_run(run_id) == [] and event_kinds(run_id)[-2:] == ["resume", "status"]


def test_ask_user_waits_for_input_and_the_input_is_its_result_as_compact_json(database_url):
    run_id = paused_run(INPUT_SCRIPT)
    row = run_row(run_id)
    assert (row.status, row.pause_generation) == ("waiting_for_input", 1)
    pause = pause_of(run_id)
    assert (pause["question"], pause["tool_call_id"]) == ("Which page?", "ask")
    assert pause["input_schema"] == ASK_TURN["tool_calls"][0]["arguments"]["schema"]
    decide(run_id, "input", input={"page": 42})
    assert drive_segment(run_id) is SegmentOutcome.COMPLETED
    assert run_row(run_id).output == 'got {"page":42}'
    (tool,) = event_payloads(run_id, "tool")
    assert (tool["name"], tool["tool_call_id"], tool["result"]) == ("ask_user", "ask", '{"page":42}')


def test_ask_user_with_a_schema_that_is_not_one_is_an_error_result_and_no_pause(database_url):
    script = [{"tool_calls": [{"id": "a", "name": "ask_user",
                               "arguments": {"question": "?", "schema": {"type": "no-such-type"}}}]},
              {"content": "{last_tool_result}"}]
    run_id = runs.create_run(ACTOR, "x", spec={"script": script, "provider": "scripted"}, wake=False)
    assert drive_segment(run_id) is SegmentOutcome.COMPLETED
    output = run_row(run_id).output
    assert output.startswith("error: invalid arguments for ask_user: schema: not a valid JSON schema"), output
    assert run_row(run_id).pause_generation == 0


def test_a_run_paused_twice_has_generation_two_and_each_pause_its_own_id(database_url):
    run_id = paused_run([ASK_TURN, NOTE_TURN, {"content": "end"}])
    first = pause_of(run_id)
    decide(run_id, "input", input={"page": 1})
    assert drive_segment(run_id) is SegmentOutcome.AWAITING_APPROVAL
    second = pause_of(run_id)
    assert (first["generation"], second["generation"], run_row(run_id).pause_generation) == (1, 2, 2)
    assert first["pause_id"] != second["pause_id"]
    stale = service.DecisionRequest(run_id=run_id, actor=ACTOR, workspace="0", pause_id=second["pause_id"],
                                    generation=1, decision="approve", turn_digest=second["turn_digest"])
    with pytest.raises(StaleGeneration) as refused:
        service.accept_decision(stale)
    assert (refused.value.http_status, refused.value.code) == (409, "stale_generation")
    old = service.DecisionRequest(run_id=run_id, actor=ACTOR, workspace="0", pause_id=first["pause_id"],
                                  generation=1, decision="input", input={"page": 2})
    with pytest.raises(PauseNotPending) as refused:
        service.accept_decision(old)
    assert refused.value.code == "pause_not_pending"
    assert [p.generation for p in PersonPause.select().where(PersonPause.run == run_id)] in ([1, 2], [2, 1])


def test_a_segment_retried_after_the_decision_was_applied_does_not_apply_it_again(database_url):
    run_id = paused_run()
    decide(run_id)
    # The first continuer applies the decision, then dies before anything else.
    assert continue_from_decision(Segment(claim_next(run_id), runs.get_run(run_id))) is None
    requeue_as_the_reaper_would(run_id)
    assert drive_segment(run_id) is SegmentOutcome.COMPLETED
    assert notes.of_run(run_id) == ["hello"]
    assert (event_kinds(run_id).count("decision"), event_kinds(run_id).count("resume")) == (1, 1)


def test_a_continuer_whose_decider_lost_the_right_puts_the_run_back_on_the_same_pause(database_url):
    from sidecar.store import grants

    run_id = paused_run()
    pause = pause_of(run_id)
    grants.replace("be_user:9", "0", ["agent:approve"])
    receipt = decide(run_id, actor="be_user:9", comment="looks fine")
    grants.replace("be_user:9", "0", [])
    assert drive_segment(run_id) is SegmentOutcome.AWAITING_APPROVAL
    row = run_row(run_id)
    assert (row.status, row.waiting_on, row.continuation, row.pause_generation) == (
        "waiting_for_approval", pause["pause_id"], None, 1)
    assert pause_of(run_id) == pause, "the same pause, open again"
    (refused,) = event_payloads(run_id, "decision_refused")
    assert (refused["receipt_id"], refused["by"], refused["pause_id"], refused["comment"]) == (
        receipt.id, "be_user:9", pause["pause_id"], "looks fine")
    assert notes.of_run(run_id) == [] and Decision.get_by_id(receipt.id).refused_at is not None
    # The owner decides it now, and the run goes on from the same pause.
    decide(run_id)
    assert drive_segment(run_id) is SegmentOutcome.COMPLETED and notes.of_run(run_id) == ["hello"]


def test_a_turn_approved_once_is_not_asked_again_when_its_other_calls_are_retried(database_url):
    run_id = runs.create_run(ACTOR, "x", spec={"script": TWO_CALLS, "provider": "scripted"}, wake=False)
    drive_segment(run_id)
    decide(run_id)
    drive_segment(run_id)
    assert event_kinds(run_id).count("pause") == 1
    assert pauses.turn_approved(run_id, 0) and not pauses.turn_approved(run_id, 1)
    assert json.loads(PersonPause.get(PersonPause.run == run_id).pending_calls)[1]["name"] == "write_note"


def test_the_run_document_shows_what_the_person_decides(database_url):
    from sidecar.api.documents import run_document

    approval = run_document(run_row(paused_run(APPROVAL_SCRIPT)))["waiting"]
    assert set(approval) == {"kind", "pause_id", "generation", "since", "turn_digest", "pending_calls"}
    assert approval["kind"] == "approval" and approval["since"].endswith("Z")
    asking = run_document(run_row(paused_run(INPUT_SCRIPT)))["waiting"]
    assert set(asking) == {"kind", "pause_id", "generation", "since", "tool_call_id", "question", "input_schema"}


SECRET_DOCUMENT = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"enum": ["INTERNAL-SECRET"]}'


def _asking(schema: dict) -> str:
    script = [{"tool_calls": [{"id": "a", "name": "ask_user", "arguments": {"question": "?", "schema": schema}}]},
              {"content": "{last_tool_result}"}]
    return runs.create_run(ACTOR, "x", spec={"script": script, "provider": "scripted"}, wake=False)


@pytest.mark.parametrize("reference", ["{url}/secret.json", "file:///etc/passwd", "#/$defs/missing"])
def test_ask_user_with_a_schema_that_refers_outside_or_to_nothing_is_an_error_result_and_nothing_is_fetched(
        database_url, reference):
    with CannedServer(SECRET_DOCUMENT) as server:
        run_id = _asking({"$ref": reference.format(url=server.url)})
        assert drive_segment(run_id) is SegmentOutcome.COMPLETED
        assert server.requests == []
    output = run_row(run_id).output
    assert output.startswith("error: invalid arguments for ask_user: schema: $ref"), output
    assert run_row(run_id).pause_generation == 0 and PersonPause.select().count() == 0


@pytest.mark.parametrize("reference", ["{url}/secret.json", "#/$defs/missing"])
def test_input_for_a_stored_pause_whose_schema_the_policy_refuses_is_422_and_nothing_is_fetched(
        database_url, reference):
    run_id = paused_run(INPUT_SCRIPT)  # a pause stored before the policy held, as an upgrade finds it
    with CannedServer(SECRET_DOCUMENT) as server:
        PersonPause.update(input_schema=json.dumps({"$ref": reference.format(url=server.url)})).execute()
        with pytest.raises(InvalidInput) as refused:
            decide(run_id, "input", input="x")
        assert server.requests == []
    assert (refused.value.http_status, refused.value.code) == (422, "invalid_input")
    assert "The pause's schema is refused: $ref" in refused.value.errors["input"][0]
    assert Decision.select().count() == 0 and run_row(run_id).status == "waiting_for_input"


@pytest.mark.parametrize("script, pause, waiting", [(APPROVAL_SCRIPT, "pause_for_approval", "waiting_for_approval"),
                                                    (INPUT_SCRIPT, "pause_for_input", "waiting_for_input")])
def test_a_cancel_that_comes_while_the_pause_is_committed_ends_the_run(database_url, monkeypatch, script, pause,
                                                                       waiting):
    # The cancel finds the run running (after the segment's last boundary), so it only marks it; then the
    # segment writes its pause. The cancel must not be lost, and the run must never show the wait.
    from sidecar.engine import pausing

    run_id = runs.create_run(ACTOR, "x", spec={"script": script, "provider": "scripted"}, wake=False)
    original = getattr(pausing, pause)

    def cancel_first(*args, **kwargs):
        assert runs.request_cancel(run_id, by="be_user:1") == "requested"
        return original(*args, **kwargs)

    monkeypatch.setattr(pausing, pause, cancel_first)
    assert drive_segment(run_id) is SegmentOutcome.CANCELLED
    row = run_row(run_id)
    assert (row.status, row.termination_reason, row.lease_holder) == ("cancelled", "cancelled", None)
    # The pause was never written: the run went from running to cancelled, never showing a wait.
    assert [(p["from"], p["to"]) for p in event_payloads(run_id, "status")][-1] == ("running", "cancelled")
    assert waiting not in [p["to"] for p in event_payloads(run_id, "status")]
    assert "pause" not in event_kinds(run_id) and PersonPause.select().where(PersonPause.run == run_id).count() == 0
