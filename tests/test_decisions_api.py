"""The inbox and the decision endpoint on each database: both modes, every refusal with its code and
nothing changed, the order of the checks, idempotency, visibility, and a right revoked before the worker."""

import time
import uuid

import pytest

from sidecar.api import streaming
from sidecar.store import grants, notes, runs, tokens
from sidecar.store.models import Decision, IdempotencyRecord, Run
from tests.support.api import ACTOR, OTHER_ACTOR, as_host, as_operator
from tests.support.decisions import INPUT_SCRIPT, NOTE_TURN, body, pause_of, paused_run, state
from tests.support.runs import event_kinds, event_payloads, run_row
from tests.support.streams import EventStream
from tests.support.waiting import wait_until
from tests.test_input_schemas import LINEAR_BOUND_SECONDS, REDOS_INPUT, REDOS_PATTERN

GRANTEE = "be_user:9"


def post(client, run_id, sent, token, actor=ACTOR, **headers):
    return client.post(f"/api/v1/runs/{run_id}/decision", json=sent, headers=as_host(token, actor, **headers))


def test_store_answers_202_with_the_receipt_and_a_worker_continues(client, host_token, settings, start_worker):
    run_id = paused_run(settings=settings)
    pause = pause_of(run_id)
    response = post(client, run_id, body(run_id, comment="go"), host_token)
    assert response.status_code == 202, response.json
    receipt = response.json
    assert set(receipt) == {"receipt_id", "run_id", "pause_id", "generation", "decision", "stored_at"}
    assert (receipt["run_id"], receipt["pause_id"], receipt["generation"], receipt["decision"]) == (
        run_id, pause["pause_id"], 1, "approve")
    assert receipt["stored_at"].endswith("Z")
    row = run_row(run_id)
    assert (row.status, row.continuation) == ("queued", receipt["receipt_id"])
    start_worker()
    wait_until(lambda: run_row(run_id).status == "completed", what="a worker to continue the run")
    assert run_row(run_id).output == "done: note written: hello" and notes.of_run(run_id) == ["hello"]
    (decision,) = event_payloads(run_id, "decision")
    assert (decision["by"], decision["comment"], decision["receipt_id"]) == (ACTOR, "go", receipt["receipt_id"])


def test_now_answers_the_run_when_the_segment_ends(client, host_token, settings):
    run_id = paused_run(settings=settings)
    response = post(client, run_id, body(run_id, mode="now"), host_token)
    assert response.status_code == 200, response.json
    assert (response.json["status"], response.json["output"]) == ("completed", "done: note written: hello")
    assert notes.of_run(run_id) == ["hello"]
    assert event_kinds(run_id)[-9:] == [
        "status", "decision", "status", "status", "resume", "note", "tool", "llm", "status"]
    holders = [e for e in event_payloads(run_id, "status") if e["to"] == "running"]
    assert len(holders) == 2


def test_now_answers_a_run_waiting_again_when_the_segment_pauses_again(client, host_token, settings):
    run_id = paused_run([*INPUT_SCRIPT[:1], {"tool_calls": [{"id": "n", "name": "write_note",
                                                             "arguments": {"text": "x"}}]}, {"content": "end"}],
                        settings=settings)
    response = post(client, run_id, body(run_id, "input", mode="now", input={"page": 3}), host_token)
    assert response.status_code == 200
    assert response.json["status"] == "waiting_for_approval" and response.json["waiting"]["generation"] == 2


def decision_stream(base_url: str, run_id: str, headers: dict) -> EventStream:
    """Approve the run's pause, decided now, and follow the run from there as server-sent events."""
    return EventStream(base_url, "POST", f"/api/v1/runs/{run_id}/decision", headers, body(run_id, mode="now"))


def test_now_with_a_stream_follows_the_run_from_the_decision(live_server, host_token, settings):
    run_id = paused_run(settings=settings)
    stream = decision_stream(live_server, run_id, as_host(host_token))
    assert stream.status == 200
    *events, last = list(stream)
    assert [e["kind"] for _, _, e in events][:3] == ["decision", "status", "status"]
    assert last[1] == "run" and last[2]["status"] == "completed"
    assert [int(i) for i, _, _ in events] == list(range(events[0][2]["sequence"], run_row(run_id).last_event_sequence
                                                         + 1))


def test_a_client_that_leaves_the_stream_does_not_break_the_run(live_server, host_token, settings):
    slow = [{"tool_calls": [{"id": "n", "name": "write_note", "arguments": {"text": "hello"}}]},
            {"tool_calls": [{"id": "s", "name": "sleep", "arguments": {"seconds": 1}}]},
            {"content": "done"}]
    run_id = paused_run(slow, settings=settings)
    stream = decision_stream(live_server, run_id, as_host(host_token))
    for _, _, event in stream:
        if event["kind"] == "decision":
            break
    stream.close()
    wait_until(lambda: run_row(run_id).status == "completed", what="the run to end without its client")
    assert notes.of_run(run_id) == ["hello"] and "lease_lost" not in event_kinds(run_id)
    assert run_row(run_id).output == "done"


def test_input_store_then_worker(client, host_token, settings, start_worker):
    run_id = paused_run(INPUT_SCRIPT, settings=settings)
    response = post(client, run_id, body(run_id, "input", input={"page": 7}), host_token)
    assert response.status_code == 202
    start_worker()
    wait_until(lambda: run_row(run_id).status == "completed", what="the worker to continue")
    assert run_row(run_id).output == 'got {"page":7}'
    assert event_payloads(run_id, "decision")[0]["input"] == {"page": 7}


# -- refusals -------------------------------------------------------------------------------------


def _refused(client, token, run_id, sent, status, code, actor=ACTOR, **headers):
    before = state()
    response = post(client, run_id, sent, token, actor, **headers)
    assert (response.status_code, response.json["code"]) == (status, code), response.json
    assert state() == before, "a refused decision changed something"
    return response.json


def test_an_unknown_run_and_a_run_of_another_actor_are_404(client, host_token, settings):
    run_id = paused_run(settings=settings)
    _refused(client, host_token, str(uuid.uuid4()), body(run_id), 404, "not_found")
    _refused(client, host_token, run_id, body(run_id), 404, "not_found", actor=OTHER_ACTOR)


def test_an_operator_cannot_decide(client, operator_token, settings):
    run_id = paused_run(settings=settings)
    before = state()
    response = client.post(f"/api/v1/runs/{run_id}/decision", json=body(run_id),
                           headers=as_operator(operator_token))
    assert (response.status_code, response.json["code"]) == (403, "forbidden_role")
    assert client.get("/api/v1/inbox", headers=as_operator(operator_token)).status_code == 403
    assert state() == before


def test_an_actor_without_the_right_is_403_not_permitted(client, host_token, settings):
    run_id = paused_run(settings=settings)
    grants.replace(GRANTEE, "0", ["agent:input"])  # sees the run, may answer input but not approve
    _refused(client, host_token, run_id, body(run_id), 403, "not_permitted", actor=GRANTEE)
    # A permission plugin's refusal counts too: nobody decides in the example plugin's frozen workspace.
    _refused(client, host_token, run_id, body(run_id), 403, "not_permitted",
             **{"X-Nrllm-Workspace": "example:frozen"})


def test_a_decided_pause_and_a_stale_generation_are_409(client, host_token, settings):
    run_id = paused_run(settings=settings)
    first = body(run_id)
    _refused(client, host_token, run_id, {**first, "generation": 2}, 409, "stale_generation")
    _refused(client, host_token, run_id, {**first, "pause_id": str(uuid.uuid4())}, 409, "pause_not_pending")
    assert post(client, run_id, first, host_token).status_code == 202
    _refused(client, host_token, run_id, first, 409, "pause_not_pending")
    _refused(client, host_token, run_id, {**first, "decision": "deny"}, 409, "pause_not_pending")


def test_a_digest_of_other_content_is_409(client, host_token, settings):
    run_id = paused_run(settings=settings)
    _refused(client, host_token, run_id, body(run_id, turn_digest="0" * 64), 409, "digest_mismatch")
    _refused(client, host_token, run_id, body(run_id, "deny", turn_digest="f" * 64), 409, "digest_mismatch")
    upper = body(run_id, turn_digest=pause_of(run_id)["turn_digest"].upper())
    assert post(client, run_id, upper, host_token).status_code == 202, "hex is hex in either case"


def test_input_that_breaks_the_schema_is_422_with_the_validators_errors(client, host_token, settings):
    run_id = paused_run(INPUT_SCRIPT, settings=settings)
    answer = _refused(client, host_token, run_id, body(run_id, "input", input={"page": 0, "extra": 1}), 422,
                      "invalid_input")
    assert set(answer["errors"]) == {"input", "input.page"}
    assert answer["errors"]["input.page"] == ["0 is less than the minimum of 1"]
    assert _refused(client, host_token, run_id, body(run_id, "input", input="page 4"), 422,
                    "invalid_input")["errors"] == {"input": ["'page 4' is not of type 'object'"]}


def test_input_against_a_catastrophic_pattern_is_checked_at_once(client, host_token, settings):
    # Python's backtracking engine takes about 14 s on this, holding the decision's transaction open.
    schema = {"type": "string", "pattern": REDOS_PATTERN}
    asking = [{"tool_calls": [{"id": "ask", "name": "ask_user", "arguments": {"question": "?", "schema": schema}}]},
              {"content": "got {last_tool_result}"}]
    run_id = paused_run(asking, settings=settings)
    started = time.monotonic()
    answer = _refused(client, host_token, run_id, body(run_id, "input", input=REDOS_INPUT), 422, "invalid_input")
    assert time.monotonic() - started < LINEAR_BOUND_SECONDS
    assert answer["errors"] == {"input": [f"{REDOS_INPUT!r} does not match {REDOS_PATTERN!r}"]}
    assert post(client, run_id, body(run_id, "input", input="aaaa"), host_token).status_code == 202


def test_an_unpaired_surrogate_in_a_decision_is_422_on_its_field(client, host_token, settings):
    # It could not be stored (comment), or was stored and then failed the run when the model was given it (input).
    approval = paused_run(settings=settings)
    asking = paused_run(INPUT_SCRIPT, settings=settings)
    for run_id, sent, field in ((approval, body(approval, "deny", comment="no\ud800"), "comment"),
                                (asking, body(asking, "input", input={"page": 1, "why": "\udfff"}), "input.why")):
        answer = _refused(client, host_token, run_id, sent, 422, "validation_failed")
        assert answer["errors"] == {field: ["Must not contain an unpaired surrogate."]}


def test_a_decision_of_the_wrong_kind_or_without_its_parts_is_422_validation_failed(client, host_token, settings):
    approval = paused_run(settings=settings)
    asking = paused_run(INPUT_SCRIPT, settings=settings)
    _refused(client, host_token, approval, body(approval, "input", input={"page": 1}), 422, "validation_failed")
    _refused(client, host_token, asking, {**body(asking, "input"), "decision": "approve", "turn_digest": "a" * 64},
             422, "validation_failed")
    for sent, field in (({k: v for k, v in body(approval).items() if k != "turn_digest"}, "turn_digest"),
                        (body(asking, "input"), "input"), ({**body(approval), "mode": "later"}, "mode"),
                        ({**body(approval), "generation": "1"}, "generation"), ({**body(approval), "x": 1}, "x"),
                        ({**body(approval), "pause_id": "not-a-uuid"}, "pause_id")):
        answer = _refused(client, host_token, approval, sent, 422, "validation_failed")
        assert field in answer["errors"], answer


def test_the_checks_come_in_the_documented_order(client, host_token, settings):
    run_id = paused_run(INPUT_SCRIPT, settings=settings)
    wrong_everything = body(run_id, "input", generation=5, input="no")
    _refused(client, host_token, str(uuid.uuid4()), wrong_everything, 404, "not_found")
    _refused(client, host_token, run_id, wrong_everything, 404, "not_found", actor=OTHER_ACTOR)
    grants.replace(GRANTEE, "0", ["agent:approve"])
    _refused(client, host_token, run_id, wrong_everything, 403, "not_permitted", actor=GRANTEE)
    _refused(client, host_token, run_id, wrong_everything, 409, "stale_generation")
    _refused(client, host_token, run_id, {**wrong_everything, "generation": 1}, 422, "invalid_input")
    approval = paused_run(settings=settings)
    _refused(client, host_token, approval, body(approval, generation=3, turn_digest="1" * 64), 409,
             "stale_generation")


def test_a_cancelled_waiting_run_refuses_the_decision_and_the_cancel_took_the_pause(client, host_token, settings):
    run_id = paused_run(settings=settings)
    sent = body(run_id)
    assert client.post(f"/api/v1/runs/{run_id}/cancel", headers=as_host(host_token)).json["status"] == "cancelled"
    _refused(client, host_token, run_id, sent, 409, "pause_not_pending")
    from sidecar.store.models import PersonPause

    assert PersonPause.get_by_id(sent["pause_id"]).resolution == "cancelled"


# -- idempotency ----------------------------------------------------------------------------------


def test_the_same_idempotency_key_replays_the_first_answer(client, host_token, settings, start_worker):
    run_id = paused_run(settings=settings)
    sent = body(run_id)
    first = post(client, run_id, sent, host_token, **{"Idempotency-Key": "k1"})
    again = post(client, run_id, sent, host_token, **{"Idempotency-Key": "k1"})
    assert (first.status_code, again.status_code) == (202, 202) and first.json == again.json
    assert again.headers["Idempotent-Replayed"] == "true"
    other = post(client, run_id, {**sent, "comment": "changed"}, host_token, **{"Idempotency-Key": "k1"})
    assert (other.status_code, other.json["code"]) == (422, "idempotency_key_reused")
    assert Decision.select().count() == 1 and event_kinds(run_id).count("decision") == 1


def test_a_decide_now_replay_gives_the_first_answer(client, host_token, settings):
    run_id = paused_run(settings=settings)
    sent = body(run_id, mode="now")
    first = post(client, run_id, sent, host_token, **{"Idempotency-Key": "now-1"})
    assert first.status_code == 200 and first.json["status"] == "completed"
    again = post(client, run_id, sent, host_token, **{"Idempotency-Key": "now-1"})
    assert (again.status_code, again.json) == (200, first.json)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert notes.of_run(run_id) == ["hello"] and event_kinds(run_id).count("decision") == 1
    assert IdempotencyRecord.get().status_code == 200


def test_a_replay_while_decide_now_still_runs_follows_the_run(live_server, host_token, settings):
    import threading

    import requests

    slow = [NOTE_TURN, {"tool_calls": [{"id": "s", "name": "sleep", "arguments": {"seconds": 1}}]},
            {"content": "done"}]
    run_id = paused_run(slow, settings=settings)
    sent, url = body(run_id, mode="now"), f"{live_server}/api/v1/runs/{run_id}/decision"
    headers = as_host(host_token, **{"Idempotency-Key": "slow"})
    first = []
    deciding = threading.Thread(target=lambda: first.append(requests.post(url, json=sent, headers=headers,
                                                                          timeout=60)))
    deciding.start()
    wait_until(lambda: "resume" in event_kinds(run_id), what="the decide-now segment to start")
    assert IdempotencyRecord.get().status_code is None, "no answer yet: the segment is still running"
    replay = requests.post(url, json=sent, headers=headers, timeout=60)
    deciding.join(60)
    assert (replay.status_code, replay.headers["Idempotent-Replayed"]) == (200, "true")
    assert replay.json() == first[0].json() and replay.json()["status"] == "completed"
    later = requests.post(url, json=sent, headers=headers, timeout=60)
    assert later.json() == first[0].json() and IdempotencyRecord.get().status_code == 200
    assert notes.of_run(run_id) == ["hello"] and event_kinds(run_id).count("decision") == 1


def test_a_refused_decision_records_no_key(client, host_token, settings):
    run_id = paused_run(settings=settings)
    _refused(client, host_token, run_id, body(run_id, turn_digest="0" * 64), 409, "digest_mismatch",
             **{"Idempotency-Key": "k2"})
    assert post(client, run_id, body(run_id), host_token, **{"Idempotency-Key": "k2"}).status_code == 202


# -- inbox, visibility, grants ----------------------------------------------------------------------


def test_the_inbox_lists_what_the_actor_may_decide_and_never_a_dependency_wait(client, host_token, settings):
    approval = paused_run(settings=settings)
    asking = paused_run(INPUT_SCRIPT, settings=settings)
    dependency = runs.create_run(ACTOR, "waits elsewhere", wake=False)
    Run.update(status="waiting_for_dependency", pause_generation=1).where(Run.id == dependency).execute()
    theirs = paused_run(owner=OTHER_ACTOR, workspace="5", settings=settings)

    def inbox(actor=ACTOR, **headers):
        response = client.get("/api/v1/inbox", headers=as_host(host_token, actor, **headers))
        assert response.status_code == 200
        return response.json["items"]

    mine = inbox()
    assert [(i["run_id"], i["kind"]) for i in mine] == [(approval, "approval"), (asking, "input")]
    assert set(mine[0]) == {"run_id", "pause_id", "generation", "kind", "turn_digest", "pending_calls", "since"}
    assert set(mine[1]) == {"run_id", "pause_id", "generation", "kind", "input_schema", "question",
                            "tool_call_id", "since"}
    assert mine[0]["turn_digest"] == pause_of(approval)["turn_digest"] and mine[1]["question"] == "Which page?"
    assert inbox(GRANTEE) == []
    grants.replace(GRANTEE, "0", ["agent:input"])
    assert [i["run_id"] for i in inbox(GRANTEE)] == [asking]
    grants.replace(GRANTEE, "5", ["agent:approve", "agent:input"])
    assert [i["run_id"] for i in inbox(GRANTEE)] == [asking, theirs]
    # The example plugin's reviewers may approve every run; the owner rule does not apply in its frozen workspace.
    assert [i["run_id"] for i in inbox("example:reviewer")] == [approval, theirs]
    assert inbox(**{"X-Nrllm-Workspace": "example:frozen"}) == []
    post(client, approval, body(approval), host_token)
    assert [i["run_id"] for i in inbox()] == [asking], "a decided pause leaves the inbox"


def test_a_host_sees_the_runs_it_may_decide_but_cancels_only_its_own(client, host_token, settings):
    theirs = paused_run(owner=OTHER_ACTOR, workspace="5", settings=settings)
    other = runs.create_run(OTHER_ACTOR, "not decidable", workspace="6", wake=False)
    headers = as_host(host_token, GRANTEE)
    assert client.get(f"/api/v1/runs/{theirs}", headers=headers).status_code == 404
    assert client.get("/api/v1/runs", headers=headers).json["items"] == []
    grants.replace(GRANTEE, "5", ["agent:approve"])
    assert client.get(f"/api/v1/runs/{theirs}", headers=headers).json["waiting"]["kind"] == "approval"
    assert client.get(f"/api/v1/runs/{theirs}/events", headers=headers).status_code == 200
    assert [r["id"] for r in client.get("/api/v1/runs", headers=headers).json["items"]] == [theirs]
    assert client.get(f"/api/v1/runs/{other}", headers=headers).status_code == 404
    cancel = client.post(f"/api/v1/runs/{theirs}/cancel", headers=headers)
    assert cancel.status_code == 404 and run_row(theirs).status == "waiting_for_approval"
    assert post(client, theirs, body(theirs), host_token, GRANTEE).status_code == 202


def test_a_right_a_plugin_gives_shows_in_the_list_too(client, host_token, settings):
    # The example plugin lets "example:reviewer" approve every run; it holds no grant anywhere.
    waiting = paused_run(owner=OTHER_ACTOR, workspace="5", settings=settings)
    queued = runs.create_run(OTHER_ACTOR, "nothing to decide", workspace="6", wake=False)
    headers = as_host(host_token, "example:reviewer")

    def listed() -> list[str]:
        return [r["id"] for r in client.get("/api/v1/runs", headers=headers).json["items"]]

    assert listed() == [waiting]  # a run waiting for a person is a candidate; the hook says yes
    assert post(client, waiting, body(waiting), host_token, "example:reviewer").status_code == 202
    assert run_row(waiting).status == "queued"
    assert listed() == [waiting], "the decider follows the run after its decision"
    assert client.get(f"/api/v1/runs/{queued}", headers=headers).status_code == 200  # may approve it, on GET
    assert queued not in listed()  # not waiting for anyone and never decided: not a list candidate


def test_a_list_with_many_invisible_runs_pages_only_visible_ones(client, host_token, settings):
    grants.replace(GRANTEE, "5", ["agent:approve"])
    visible = [runs.create_run(OTHER_ACTOR, f"v{i}", workspace="5", wake=False) for i in range(3)]
    # Runs in the grant's workspace that a permission plugin refuses are read past, not shown.
    frozen = [runs.create_run(OTHER_ACTOR, f"f{i}", workspace="5", wake=False) for i in range(4)]
    from sidecar.hookspecs import hookimpl
    from sidecar.plugins import plugin_manager

    class Refuse:
        @hookimpl
        def nrllm_permission_check(self, actor, workspace, action, run):
            return False if run.id in frozen else None

    plugin = Refuse()
    plugin_manager().register(plugin, name="refuse-some")
    try:
        seen, cursor = [], None
        while True:
            page = client.get("/api/v1/runs?limit=2" + (f"&cursor={cursor}" if cursor else ""),
                              headers=as_host(host_token, GRANTEE)).json
            seen += [r["id"] for r in page["items"]]
            if not (cursor := page["next_cursor"]):
                break
    finally:
        plugin_manager().unregister(plugin)
    assert seen == list(reversed(visible))


def test_the_right_revoked_between_storing_and_the_worker_puts_the_run_back(client, host_token, settings,
                                                                          start_worker):
    run_id = paused_run(settings=settings)
    pause = pause_of(run_id)
    put = client.put(f"/api/v1/actors/{GRANTEE}/grants", json={"workspace": "0", "grants": ["agent:approve"]},
                     headers=as_host(host_token, None))
    assert put.status_code == 200
    assert post(client, run_id, body(run_id), host_token, GRANTEE).status_code == 202
    client.put(f"/api/v1/actors/{GRANTEE}/grants", json={"workspace": "0", "grants": []},
               headers=as_host(host_token, None))
    start_worker()
    wait_until(lambda: "decision_refused" in event_kinds(run_id), what="the worker to refuse the decision")
    wait_until(lambda: run_row(run_id).status == "waiting_for_approval", what="the run to wait again")
    assert pause_of(run_id) == pause and notes.of_run(run_id) == []
    (refused,) = event_payloads(run_id, "decision_refused")
    assert refused["by"] == GRANTEE and "may no longer approve" in refused["reason"]
    inbox = client.get("/api/v1/inbox", headers=as_host(host_token)).json["items"]
    assert [(i["run_id"], i["pause_id"]) for i in inbox] == [(run_id, pause["pause_id"])]
    assert post(client, run_id, body(run_id, mode="now"), host_token).json["status"] == "completed"
    assert notes.of_run(run_id) == ["hello"]


def test_grants_are_replaced_whole_per_workspace(client, host_token, operator_token):
    url = f"/api/v1/actors/{GRANTEE}/grants"
    host = as_host(host_token, None)
    put = client.put(url, json={"workspace": "3", "grants": ["agent:input", "agent:approve", "agent:input"]},
                     headers=host)
    assert put.json == {"actor": GRANTEE, "workspace": "3", "grants": ["agent:approve", "agent:input"]}
    client.put(url, json={"grants": ["agent:input"]}, headers=host)
    assert client.get(url + "?workspace=3", headers=host).json["grants"] == ["agent:approve", "agent:input"]
    assert client.get(url, headers=as_operator(operator_token)).json == {
        "actor": GRANTEE, "workspace": "0", "grants": ["agent:input"]}
    client.put(url, json={"workspace": "3", "grants": []}, headers=host)
    assert grants.by_workspace(GRANTEE) == {"0": ["agent:input"]}
    bad = client.put(url, json={"grants": ["agent:delete"]}, headers=host)
    assert (bad.status_code, bad.json["code"]) == (422, "validation_failed") and "grants.0" in bad.json["errors"]
    denied = client.put(url, json={"grants": []}, headers=as_operator(operator_token))
    assert (denied.status_code, denied.json["code"]) == (403, "forbidden_role")


@pytest.mark.slow
def test_the_grants_command_sets_and_shows_grants(database_url, tmp_path):
    import os
    import subprocess
    import sys

    from tests.support import ROOT

    env = {**os.environ, "NRLLM_DATABASE_URL": database_url}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "sidecar.cli", "grants", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)

    done = cli("set", GRANTEE, "agent:approve", "--workspace", "4")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "4\tagent:approve\n"
    cli("set", GRANTEE, "agent:input")
    # One default with the API: workspace 0 (GET .../grants without `workspace`); every one on request.
    assert cli("show", GRANTEE).stdout == "0\tagent:input\n"
    assert cli("show", GRANTEE, "--all-workspaces").stdout == "0\tagent:input\n4\tagent:approve\n"
    assert cli("show", GRANTEE, "--workspace", "4").stdout == "4\tagent:approve\n"
    assert cli("set", GRANTEE, "agent:delete").returncode == 2
    assert cli("set", GRANTEE, "--workspace", "4").stdout == ""
    assert grants.by_workspace(GRANTEE) == {"0": ["agent:input"]}


def test_a_decision_whose_stream_is_over_the_limit_is_refused_before_it_is_taken(client, host_token, settings,
                                                                                 monkeypatch):
    # The test's own count of open streams: an earlier test's stream may still be ending on a server thread.
    monkeypatch.setattr(streaming, "SLOTS", streaming.StreamSlots())
    run_id = paused_run(settings=settings)
    before = state()
    token_id = tokens.lookup(host_token).id
    held = [streaming.SLOTS.take(token_id, settings.streams_per_token, settings.streams_per_process)
            for _ in range(settings.streams_per_token)]
    try:
        response = post(client, run_id, body(run_id, mode="now"), host_token, Accept="text/event-stream")
        assert response.status_code == 429 and response.json["code"] == "too_many_streams"
        assert response.headers["Retry-After"].isdigit()
        assert state() == before, "the pause is still to be decided"
    finally:
        for slot in held:
            slot.release()
    assert streaming.SLOTS.open_count() == 0
