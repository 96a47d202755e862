"""The runs API on each database: create, get, list, events, cancel, idempotency and visibility."""

import json
import threading
from datetime import timedelta

from sidecar.domain.clock import utcnow
from sidecar.domain.lease import LeasePolicy
from sidecar.store import leases, runs, tokens
from sidecar.store.models import IdempotencyRecord, Run
from sidecar.testing import StepExecutor
from tests.support.api import ACTOR, OTHER_ACTOR, as_host, as_operator, row_counts
from tests.support.runs import event_kinds, run_row, steps_input
from tests.support.waiting import wait_until

RUN_KEYS = {
    "id", "status", "owner", "workspace", "origin", "input", "output", "termination_reason", "created_at",
    "updated_at", "finished_at", "cancel_requested_at", "lease", "budget",
}
FULL_BODY = {
    "input": "Summarise page 42",
    "provider": "scripted",
    "model": None,
    "script": [{"tool_calls": [{"id": "call_1", "name": "echo", "arguments": {"text": "hi"}}]},
               {"content": "said {last_tool_result}"}],
    "tools": ["echo"],
    "origin": "typo3:page-module",
    "on_denial": "fail",
    "budget": {"deadline_seconds": 3600, "max_delegations": 5, "max_bytes": 1048576, "max_tokens": 200000,
               "max_cost": 2.0, "max_iterations": 20},
}


def _create(client, token, body=None, actor=ACTOR, **headers):
    response = client.post("/api/v1/runs", json=body or {"input": "hello"}, headers=as_host(token, actor, **headers))
    assert response.status_code == 201, response.json
    return response.json


def test_create_answers_the_contract_run_and_stores_spec_and_budget(client, host_token):
    run = _create(client, host_token, FULL_BODY, **{"X-Nrllm-Workspace": "3"})
    assert set(run) == RUN_KEYS, "no `waiting` block unless the run waits"
    assert (run["status"], run["owner"], run["workspace"], run["origin"]) == ("queued", ACTOR, "3",
                                                                               "typo3:page-module")
    assert run["lease"] is None and run["output"] is None and run["finished_at"] is None
    assert run["created_at"].endswith("Z") and run["budget"]["deadline_at"].endswith("Z")
    assert {k: run["budget"][k] for k in ("max_delegations", "max_iterations", "max_cost", "iterations_used")} == {
        "max_delegations": 5, "max_iterations": 20, "max_cost": 2.0, "iterations_used": 0}
    row = run_row(run["id"])
    assert json.loads(row.spec) == {k: FULL_BODY[k] for k in ("provider", "script", "tools", "on_denial")}
    assert (row.max_tokens, row.max_bytes) == (200000, 1048576)
    assert event_kinds(run["id"]) == ["status"]


def test_defaults_a_script_implies_the_scripted_provider(client, host_token):
    plain = _create(client, host_token, {"input": "x"})
    assert json.loads(run_row(plain["id"]).spec) == {"on_denial": "continue"}
    assert plain["workspace"] == "0" and plain["budget"]["deadline_at"] is None
    scripted = _create(client, host_token, {"input": "x", "script": [{"content": "done"}]})
    assert json.loads(run_row(scripted["id"]).spec)["provider"] == "scripted"


def test_get_shows_the_lease_while_running_and_waiting_only_while_waiting(client, host_token):
    run_id = _create(client, host_token)["id"]
    url = f"/api/v1/runs/{run_id}"
    (claim,) = leases.claim_queued("holder-1", 1, LeasePolicy(30))
    running = client.get(url, headers=as_host(host_token)).json
    assert running["status"] == "running" and running["lease"]["holder"] == "holder-1"
    assert running["lease"]["expires_at"].endswith("Z") and "waiting" not in running
    Run.update(status="waiting_for_input", lease_holder=None, lease_expires_at=None).where(Run.id == run_id).execute()
    waiting = client.get(url, headers=as_host(host_token)).json
    assert waiting["lease"] is None and waiting["waiting"]["kind"] == "input"


def test_a_host_sees_only_its_actors_runs_and_an_operator_all(client, host_token, operator_token):
    mine = _create(client, host_token, actor=ACTOR)["id"]
    theirs = _create(client, host_token, actor=OTHER_ACTOR)["id"]
    assert client.get(f"/api/v1/runs/{theirs}", headers=as_host(host_token)).status_code == 404
    assert client.get(f"/api/v1/runs/{mine}", headers=as_host(host_token)).status_code == 200
    listed = client.get("/api/v1/runs", headers=as_host(host_token)).json["items"]
    assert [r["id"] for r in listed] == [mine]
    asked_for_theirs = client.get(f"/api/v1/runs?owner={OTHER_ACTOR}", headers=as_host(host_token)).json
    assert asked_for_theirs["items"] == []
    everything = client.get("/api/v1/runs", headers=as_operator(operator_token)).json["items"]
    assert {r["id"] for r in everything} == {mine, theirs}
    for path in (f"/api/v1/runs/{theirs}", f"/api/v1/runs/{theirs}/events"):
        assert client.get(path, headers=as_operator(operator_token)).status_code == 200


def test_list_filters_and_pages_with_an_opaque_cursor(client, host_token, operator_token):
    created = [_create(client, host_token, {"input": f"run {i}", "origin": "a" if i % 2 else "b"})["id"]
               for i in range(7)]
    seen, cursor = [], None
    while True:
        query = "limit=3" + (f"&cursor={cursor}" if cursor else "")
        page = client.get(f"/api/v1/runs?{query}", headers=as_host(host_token)).json
        assert len(page["items"]) <= 3
        seen += [r["id"] for r in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(created)), "newest first, each run once"
    origin_a = client.get("/api/v1/runs?origin=a", headers=as_host(host_token)).json["items"]
    assert {r["id"] for r in origin_a} == set(created[1::2])
    runs.request_cancel(created[0], by="test")
    cancelled = client.get("/api/v1/runs?status=cancelled", headers=as_operator(operator_token)).json["items"]
    assert [r["id"] for r in cancelled] == [created[0]]
    by_owner = client.get(f"/api/v1/runs?owner={ACTOR}&limit=200", headers=as_operator(operator_token)).json
    assert len(by_owner["items"]) == 7 and by_owner["next_cursor"] is None


def test_events_as_json_after_a_sequence(client, host_token):
    run_id = _create(client, host_token)["id"]
    leases.claim_queued("holder-1", 1, LeasePolicy(30))
    everything = client.get(f"/api/v1/runs/{run_id}/events", headers=as_host(host_token)).json["items"]
    assert [(e["sequence"], e["kind"]) for e in everything] == [(1, "status"), (2, "status")]
    assert everything[1]["payload"] == {"from": "queued", "to": "running"} and everything[1]["at"].endswith("Z")
    later = client.get(f"/api/v1/runs/{run_id}/events?after=1", headers=as_host(host_token)).json["items"]
    assert [e["sequence"] for e in later] == [2]


def test_cancel_a_queued_run_at_once_then_409(client, host_token):
    run_id = _create(client, host_token)["id"]
    url = f"/api/v1/runs/{run_id}/cancel"
    response = client.post(url, headers=as_host(host_token))
    assert response.status_code == 200
    assert (response.json["status"], response.json["termination_reason"]) == ("cancelled", "cancelled")
    assert response.json["finished_at"] and response.json["cancel_requested_at"]
    assert event_kinds(run_id) == ["status", "status"]
    before = row_counts()
    again = client.post(url, headers=as_host(host_token))
    assert (again.status_code, again.json["code"]) == (409, "invalid_state")
    assert row_counts() == before


def test_cancel_a_waiting_run_at_once(client, host_token, operator_token):
    run_id = _create(client, host_token)["id"]
    Run.update(status="waiting_for_dependency").where(Run.id == run_id).execute()
    response = client.post(f"/api/v1/runs/{run_id}/cancel", headers=as_operator(operator_token))
    assert response.json["status"] == "cancelled" and "waiting" not in response.json
    last = client.get(f"/api/v1/runs/{run_id}/events", headers=as_host(host_token)).json["items"][-1]
    assert last["payload"] == {"from": "waiting_for_dependency", "to": "cancelled", "by": "operator:operator-test"}


def test_cancel_a_running_run_requests_it_and_again_changes_nothing(client, host_token):
    run_id = _create(client, host_token)["id"]
    leases.claim_queued("holder-1", 1, LeasePolicy(30))  # running, held by a segment that is not looking
    first = client.post(f"/api/v1/runs/{run_id}/cancel", headers=as_host(host_token)).json
    assert first["status"] == "running" and first["cancel_requested_at"] is not None
    before = row_counts()
    again = client.post(f"/api/v1/runs/{run_id}/cancel", headers=as_host(host_token))
    assert again.status_code == 200 and again.json == first
    assert row_counts() == before
    assert event_kinds(run_id) == ["status", "status", "cancel_requested"]


def test_a_worker_cancels_a_requested_run_at_its_next_step_boundary(client, host_token, start_worker):
    start_worker(StepExecutor(), coordinators=0)
    run_id = _create(client, host_token, {"input": steps_input(*[{"sleep": 0.05}] * 400)})["id"]
    wait_until(lambda: run_row(run_id).status == "running", what="the worker to claim the run")
    assert client.post(f"/api/v1/runs/{run_id}/cancel", headers=as_host(host_token)).status_code == 200
    wait_until(lambda: run_row(run_id).status == "cancelled", what="the segment to stop at a step boundary")
    row = run_row(run_id)
    assert (row.termination_reason, row.lease_holder) == ("cancelled", None)
    assert event_kinds(run_id)[-1] == "status"


def test_idempotency_key_replays_the_first_answer(client, host_token):
    key = {"Idempotency-Key": "create-1"}
    first = client.post("/api/v1/runs", json=FULL_BODY, headers=as_host(host_token, **key))
    leases.claim_queued("holder-1", 1, LeasePolicy(30))  # the run moves on; the replay does not
    replay = client.post("/api/v1/runs", json=dict(reversed(FULL_BODY.items())), headers=as_host(host_token, **key))
    assert (replay.status_code, replay.json) == (first.status_code, first.json) == (201, first.json)
    assert replay.headers.get("Idempotent-Replayed") == "true"
    assert Run.select().count() == 1
    before = row_counts()
    other = client.post("/api/v1/runs", json={"input": "another"}, headers=as_host(host_token, **key))
    assert (other.status_code, other.json["code"]) == (422, "idempotency_key_reused")
    assert row_counts() == before


def test_idempotency_keys_belong_to_a_token_and_actor_and_expire(client, host_token):
    key = {"Idempotency-Key": "shared"}
    second_token = tokens.create("host-two", "host")[0]
    ids = {
        _create(client, host_token, actor=ACTOR, **key)["id"],
        _create(client, host_token, actor=OTHER_ACTOR, **key)["id"],
        _create(client, second_token, actor=ACTOR, **key)["id"],
    }
    assert len(ids) == 3
    IdempotencyRecord.update(created_at=utcnow() - timedelta(hours=25)).execute()
    assert _create(client, host_token, actor=ACTOR, **key)["id"] not in ids


def test_concurrent_requests_with_one_key_create_one_run(app, host_token):
    barrier = threading.Barrier(6)
    answers = []

    def post():
        client = app.test_client()
        barrier.wait()
        response = client.post("/api/v1/runs", json={"input": "once"},
                               headers=as_host(host_token, **{"Idempotency-Key": "race"}))
        answers.append((response.status_code, response.json["id"]))

    threads = [threading.Thread(target=post) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(answers) == 6 and len(set(answers)) == 1 and answers[0][0] == 201
    assert Run.select().count() == 1


def test_metrics_count_runs_by_status_from_the_database(client, host_token, operator_token, app):
    _create(client, host_token)
    runs.request_cancel(_create(client, host_token)["id"], by="test")
    text = client.get("/metrics", headers=as_operator(operator_token)).get_data(as_text=True)
    assert 'nrllm_runs{status="queued"} 1.0' in text and 'nrllm_runs{status="cancelled"} 1.0' in text
    assert "nrllm_segment_outcomes_total" in text or "nrllm_claims_total" in text


def test_openapi_documents_every_endpoint_with_security_and_errors(client, host_token):
    spec = client.get("/api/v1/openapi.json", headers=as_host(host_token)).json
    assert spec["components"]["securitySchemes"]["bearerToken"]["scheme"] == "bearer"
    assert spec["security"] == [{"bearerToken": []}]
    assert spec["paths"]["/api/v1/health"]["get"]["security"] == []
    operations = {(path, method) for path, item in spec["paths"].items() for method in item if method != "parameters"}
    assert operations >= {("/api/v1/runs", "post"), ("/api/v1/runs", "get"), ("/api/v1/runs/{run_id}", "get"),
                          ("/api/v1/runs/{run_id}/events", "get"), ("/api/v1/runs/{run_id}/cancel", "post"),
                          ("/metrics", "get"), ("/api/v1/health", "get")}
    create = spec["paths"]["/api/v1/runs"]["post"]["responses"]
    assert {"201", "400", "401", "403", "413", "422"} <= set(create)
    assert set(spec["components"]["schemas"]["Error"]["properties"]) == {"code", "message", "errors"}
    assert client.get("/api/v1/docs", headers=as_host(host_token)).status_code == 200
