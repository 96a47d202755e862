"""Remote agents, the outbound listing, health's unsealable checkpoints and failing agents, on every database."""

import dataclasses
import logging
import uuid
from datetime import timedelta

import pytest

from sidecar import keys
from sidecar.domain.clock import utcnow
from sidecar.domain.sealing import generate_key
from sidecar.store import remote_agents, runs
from sidecar.store.models import DependencyWait, Outbound, RemoteAgent, WorkerHeartbeat
from tests.support.api import as_host, as_operator
from tests.test_address_guard import CARRIED

SECRET = "Bearer s3cr3t-value-nobody-may-see"
ALLOWED_HOST = "agents.test"  # on the allow-list by name: accepted without a name lookup
ALLOWED_NETWORK = "192.0.2.0/24"  # TEST-NET-1: not public, allowed by network
BODY = {"name": "research", "url": f"https://{ALLOWED_HOST}/research", "poll_interval_seconds": 0.5,
        "deadline_seconds": 3600, "auth": {"header": "Authorization", "value": SECRET}, "push": True}


@pytest.fixture
def settings(settings):
    return dataclasses.replace(settings, remote_allow=(ALLOWED_HOST, ALLOWED_NETWORK))


@pytest.fixture
def op(operator_token):
    return as_operator(operator_token)


@pytest.fixture
def logged(caplog):
    caplog.set_level(logging.DEBUG)  # SQL statements included: a secret must not reach any log line
    return caplog


def _register(client, op, **changes):
    answer = client.post("/api/v1/remote-agents", json={**BODY, **changes}, headers=op)
    assert answer.status_code == 201, answer.get_json()
    return answer.get_json()


def test_register_read_list_and_the_secret_is_write_only(client, op, logged):
    created = _register(client, op)
    assert created["name"] == "research" and created["url"] == BODY["url"]
    assert created["poll_interval_seconds"] == 0.5 and created["deadline_seconds"] == 3600.0
    assert created["push"] is True and created["endpoint"] is None
    assert created["auth"] == {"header": "Authorization", "value_set": True}
    one = client.get("/api/v1/remote-agents/research", headers=op)
    listed = client.get("/api/v1/remote-agents", headers=op)
    assert one.get_json() == created and listed.get_json() == {"items": [created]}
    for answer in (one, listed):
        assert SECRET not in answer.get_data(as_text=True)
    assert SECRET not in logged.text and "research" in logged.text
    row = RemoteAgent.get(RemoteAgent.name == "research")
    assert SECRET not in row.auth_value_sealed
    assert remote_agents.auth_of(remote_agents.get_agent("research")) == ("Authorization", SECRET)


def test_defaults_and_an_agent_without_auth(client, op):
    created = _register(client, op, name="plain", auth=None, push=False)
    assert created["auth"] is None and remote_agents.auth_of(remote_agents.get_agent("plain")) is None
    minimal = client.post("/api/v1/remote-agents", json={"name": "m-1_x", "url": "http://192.0.2.7:9/"}, headers=op)
    assert minimal.status_code == 201
    assert {k: minimal.get_json()[k] for k in ("poll_interval_seconds", "deadline_seconds", "push", "auth")} == {
        "poll_interval_seconds": 30.0, "deadline_seconds": 3600.0, "push": False, "auth": None}


def _without(key: str) -> dict:
    return {k: v for k, v in BODY.items() if k != key}


BAD = [
    ("missing name", _without("name"), "name"),
    ("missing url", _without("url"), "url"),
    ("name not a string", {**BODY, "name": 7}, "name"),
    ("name upper case", {**BODY, "name": "Research"}, "name"),
    ("name with a slash", {**BODY, "name": "a/b"}, "name"),
    ("name too long", {**BODY, "name": "a" * 65}, "name"),
    ("name with a newline", {**BODY, "name": "research\n"}, "name"),
    ("url not a string", {**BODY, "url": ["https://agents.test"]}, "url"),
    ("url not http", {**BODY, "url": f"ftp://{ALLOWED_HOST}/x"}, "url"),
    ("url without host", {**BODY, "url": "https:///research"}, "url"),
    ("url with credentials", {**BODY, "url": f"https://user:pw@{ALLOWED_HOST}/"}, "url"),
    ("url with a space", {**BODY, "url": f"https://{ALLOWED_HOST}/a b"}, "url"),
    ("url with a bad port", {**BODY, "url": f"https://{ALLOWED_HOST}:99999/"}, "url"),
    ("url too long", {**BODY, "url": f"https://{ALLOWED_HOST}/" + "a" * 2048}, "url"),
    ("private address", {**BODY, "url": "http://10.1.2.3/agent"}, "url"),
    ("link-local address", {**BODY, "url": "http://169.254.169.254/latest"}, "url"),
    ("loopback", {**BODY, "url": "http://127.0.0.1:8080/"}, "url"),
    ("outside the allowed network", {**BODY, "url": "http://198.51.100.1/"}, "url"),
    ("loopback v6", {**BODY, "url": "http://[::1]:8080/"}, "url"),
    ("loopback by name", {**BODY, "url": "http://localhost:8080/"}, "url"),
    ("name that does not resolve", {**BODY, "url": "https://nowhere.invalid/"}, "url"),
    ("interval too short", {**BODY, "poll_interval_seconds": 0.1}, "poll_interval_seconds"),
    ("interval as string", {**BODY, "poll_interval_seconds": "30"}, "poll_interval_seconds"),
    ("interval as boolean", {**BODY, "poll_interval_seconds": True}, "poll_interval_seconds"),
    ("deadline zero", {**BODY, "deadline_seconds": 0}, "deadline_seconds"),
    ("deadline negative", {**BODY, "deadline_seconds": -5}, "deadline_seconds"),
    ("deadline null", {**BODY, "deadline_seconds": None}, "deadline_seconds"),
    ("push as string", {**BODY, "push": "yes"}, "push"),
    ("push as number", {**BODY, "push": 1}, "push"),
    ("auth not an object", {**BODY, "auth": SECRET}, "auth"),
    ("auth without header", {**BODY, "auth": {"value": SECRET}}, "auth.header"),
    ("auth without value", {**BODY, "auth": {"header": "Authorization"}}, "auth.value"),
    ("auth value not a string", {**BODY, "auth": {"header": "Authorization", "value": 5}}, "auth.value"),
    ("auth value with a newline", {**BODY, "auth": {"header": "X-Key", "value": SECRET + "\r\nX-Evil: 1"}},
     "auth.value"),
    ("auth header reserved", {**BODY, "auth": {"header": "Content-Type", "value": SECRET}}, "auth.header"),
    ("auth header not a token", {**BODY, "auth": {"header": "X Key:", "value": SECRET}}, "auth.header"),
    ("auth header ending in a newline", {**BODY, "auth": {"header": "X-Key\n", "value": SECRET}}, "auth.header"),
    ("auth unknown field", {**BODY, "auth": {"header": "X-Key", "value": SECRET, "x": 1}}, "auth.x"),
    ("unknown field", {**BODY, "bogus": 1}, "bogus"),
]


@pytest.mark.parametrize("body,field", [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_registrations_are_422_name_the_field_and_store_nothing(client, op, logged, body, field):
    answer = client.post("/api/v1/remote-agents", json=body, headers=op)
    assert answer.status_code == 422, answer.get_json()
    assert answer.get_json()["code"] == "validation_failed"
    assert field in answer.get_json()["errors"], answer.get_json()
    assert SECRET not in answer.get_data(as_text=True) and SECRET not in logged.text
    assert RemoteAgent.select().count() == 0


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the guard is the same on every database
@pytest.mark.parametrize(("address", "reason"), [(case[1], case[3]) for case in CARRIED],
                         ids=[case[0] for case in CARRIED])
def test_a_url_whose_ipv6_address_carries_ipv4_is_registered_by_the_ipv4_inside(client, op, address, reason):
    answer = client.post("/api/v1/remote-agents", json={**BODY, "url": f"http://[{address}]:8080/a2a"}, headers=op)
    if reason is None:
        assert answer.status_code == 201, answer.get_json()
        return
    assert (answer.status_code, answer.get_json()["code"]) == (422, "validation_failed")
    assert reason in answer.get_json()["errors"]["url"][0]
    assert RemoteAgent.select().count() == 0


def test_a_body_that_is_not_an_object_is_400(client, op):
    answer = client.post("/api/v1/remote-agents", data="[1]", headers=op)
    assert (answer.status_code, answer.get_json()["code"]) == (400, "malformed_request")


def test_a_duplicate_name_is_409_and_keeps_the_first(client, op):
    _register(client, op)
    again = client.post("/api/v1/remote-agents", json={**BODY, "url": "http://192.0.2.7:1/"}, headers=op)
    assert again.status_code == 409
    assert again.get_json()["code"] == "invalid_state" and "name" in again.get_json()["errors"]
    assert RemoteAgent.get(RemoteAgent.name == "research").url == BODY["url"]


@pytest.mark.parametrize("method", ["get", "put", "delete"])
@pytest.mark.parametrize("name", ["nobody", "Not-A-Slug", "x" * 65])
def test_an_unknown_or_impossible_name_is_404(client, op, method, name):
    answer = getattr(client, method)(f"/api/v1/remote-agents/{name}", headers=op,
                                     **({"json": _without("name")} if method == "put" else {}))
    assert (answer.status_code, answer.get_json()["code"]) == (404, "not_found")


ENDPOINTS = [("post", "/api/v1/remote-agents"), ("get", "/api/v1/remote-agents"),
             ("get", "/api/v1/remote-agents/research"), ("put", "/api/v1/remote-agents/research"),
             ("delete", "/api/v1/remote-agents/research"), ("get", "/api/v1/outbound")]


@pytest.mark.parametrize("method,path", ENDPOINTS)
def test_a_host_token_may_not_use_them(client, op, host_token, method, path):
    _register(client, op)
    answer = getattr(client, method)(path, headers=as_host(host_token), json=BODY if method != "get" else None)
    assert (answer.status_code, answer.get_json()["code"]) == (403, "forbidden_role")
    assert SECRET not in answer.get_data(as_text=True)
    assert client.get(path, headers={}).status_code == 401


def test_put_replaces_the_settings_and_may_keep_the_secret(client, op, logged):
    _register(client, op)
    remote_agents.save_endpoint("research", '{"rpc_url": "https://agents.test/rpc", "protocol_version": "1.0", '
                                            '"push_supported": true, "auth_value": "x"}')
    shown = client.get("/api/v1/remote-agents/research", headers=op).get_json()["endpoint"]
    assert shown == {"rpc_url": "https://agents.test/rpc", "protocol_version": "1.0", "push_supported": True}
    body = {**_without("name"), "url": "http://192.0.2.7:7000/", "auth": {"header": "X-Api-Key"}}
    answer = client.put("/api/v1/remote-agents/research", json=body, headers=op)
    assert answer.status_code == 200, answer.get_json()
    doc = answer.get_json()
    assert doc["url"] == "http://192.0.2.7:7000/" and doc["auth"] == {"header": "X-Api-Key", "value_set": True}
    assert doc["endpoint"] is None  # read again for the new URL
    assert remote_agents.auth_of(remote_agents.get_agent("research")) == ("X-Api-Key", SECRET)
    # The same name in the body is fine; no auth removes it; a new value replaces it.
    assert client.put("/api/v1/remote-agents/research", json={**BODY, "auth": None},
                      headers=op).get_json()["auth"] is None
    kept = client.put("/api/v1/remote-agents/research", json={**_without("name"), "auth": {"header": "X-Api-Key"}},
                      headers=op)
    assert (kept.status_code, list(kept.get_json()["errors"])) == (422, ["auth.value"])
    client.put("/api/v1/remote-agents/research", json={**BODY, "auth": {"header": "X-K", "value": "other"}}, headers=op)
    assert remote_agents.auth_of(remote_agents.get_agent("research")) == ("X-K", "other")
    assert SECRET not in logged.text and "other" not in logged.text


def test_put_refuses_a_rename_and_bad_fields(client, op):
    _register(client, op)
    renamed = client.put("/api/v1/remote-agents/research", json={**BODY, "name": "other"}, headers=op)
    assert (renamed.status_code, list(renamed.get_json()["errors"])) == (422, ["name"])
    refused = client.put("/api/v1/remote-agents/research", json={**_without("name"), "url": "http://10.0.0.1/"},
                         headers=op)
    assert (refused.status_code, list(refused.get_json()["errors"])) == (422, ["url"])
    assert RemoteAgent.get(RemoteAgent.name == "research").url == BODY["url"]


def test_an_endpoint_read_for_an_old_url_is_not_saved_for_the_new_one(client, op):
    _register(client, op)
    assert remote_agents.save_endpoint("research", "{}", for_url="https://old.example/") is False
    assert remote_agents.save_endpoint("research", "{}", for_url=BODY["url"]) is True


def _wait(run_id: str, agent: str, fingerprint: str, resolved: bool = False) -> DependencyWait:
    now = utcnow()
    return DependencyWait.create(
        id=str(uuid.uuid4()), run=run_id, generation=1, tool_call_id="call_1", remote_agent=agent,
        outbound_id=str(uuid.uuid4()), checkpoint="sealed", key_fingerprint=fingerprint, since=now,
        deadline_at=now + timedelta(hours=1), resolved_at=now if resolved else None,
    )


def test_delete_is_409_while_a_run_waits_on_the_agent(client, op):
    _register(client, op)
    wait = _wait(runs.create_run("be_user:7", "x", wake=False), "research", keys.sealer().newest_fingerprint)
    refused = client.delete("/api/v1/remote-agents/research", headers=op)
    assert (refused.status_code, refused.get_json()["code"]) == (409, "invalid_state")
    assert "1 run" in refused.get_json()["message"]
    DependencyWait.update(resolved_at=utcnow()).where(DependencyWait.id == wait.id).execute()
    assert client.delete("/api/v1/remote-agents/research", headers=op).status_code == 204
    assert client.get("/api/v1/remote-agents/research", headers=op).status_code == 404


def _outbound(run_id: str, kind: str, outcome: str, seconds_ago: int) -> str:
    row_id = str(uuid.uuid4())
    Outbound.create(id=row_id, kind=kind, owner="be_user:7", run=run_id, remote_agent="research",
                    message_id=f"m-{row_id}", request_body="{}", request_sha256="ab" * 32, outcome=outcome,
                    created_at=utcnow() - timedelta(seconds=seconds_ago))
    return row_id


def test_the_outbound_journal_lists_newest_first_with_filters(client, op):
    first, second = runs.create_run("be_user:7", "a", wake=False), runs.create_run("be_user:7", "b", wake=False)
    a = _outbound(first, "send", "outcome_unknown", 30)
    b = _outbound(first, "cancel", "accepted", 20)
    c = _outbound(second, "send", "accepted", 10)

    def ids(query=""):
        answer = client.get(f"/api/v1/outbound{query}", headers=op)
        assert answer.status_code == 200, answer.get_json()
        return [item["id"] for item in answer.get_json()["items"]]

    assert ids() == [c, b, a]
    assert ids("?outcome=accepted") == [c, b]
    assert ids(f"?run_id={first}") == [b, a]
    assert ids(f"?run_id={first.upper()}&kind=send") == [a]
    assert ids("?kind=cancel&outcome=outcome_unknown") == []
    assert ids("?limit=1") == [c]
    item = client.get(f"/api/v1/outbound?run_id={second}", headers=op).get_json()["items"][0]
    assert set(item) == {"id", "kind", "owner", "run_id", "remote_agent", "message_id", "request_sha256", "outcome",
                         "remote_task_id", "created_at", "sent_at", "error", "resend_of"}
    assert item["run_id"] == second and item["created_at"].endswith("Z") and item["sent_at"] is None


@pytest.mark.parametrize("query,field", [("outcome=lost", "outcome"), ("kind=resend", "kind"),
                                         ("run_id=42", "run_id"), ("limit=0", "limit"), ("limit=x", "limit")])
def test_bad_outbound_filters_are_422(client, op, query, field):
    answer = client.get(f"/api/v1/outbound?{query}", headers=op)
    assert (answer.status_code, answer.get_json()["code"]) == (422, "validation_failed")
    assert field in answer.get_json()["errors"]


def test_health_counts_checkpoints_no_configured_key_opens(client):
    now = utcnow()
    WorkerHeartbeat.create(id="w1", host="h", pid=1, concurrency=1, started_at=now, seen_at=now)
    run_id = runs.create_run("be_user:7", "x", wake=False)
    _wait(run_id, "research", keys.sealer().newest_fingerprint)
    _wait(run_id, "research", "0123456789abcdef", resolved=True)  # resolved: no longer waits on anything
    healthy = client.get("/api/v1/health").get_json()
    assert (healthy["status"], healthy["unsealable_checkpoints"]) == ("ok", 0)

    removed = generate_key()
    from sidecar.domain.sealing import Sealer

    _, orphaned = Sealer([removed]).seal({})
    _wait(run_id, "research", orphaned)
    degraded = client.get("/api/v1/health").get_json()
    assert (degraded["status"], degraded["unsealable_checkpoints"]) == ("degraded", 1)


def test_health_and_the_gauge_show_a_failing_agent_without_its_urls_until_it_answers(client, op):
    now = utcnow()
    WorkerHeartbeat.create(id="w1", host="h", pid=1, concurrency=1, started_at=now, seen_at=now)
    for name in ("research", "archive"):
        remote_agents.create_agent(name, remote_agents.AgentFields(
            url=f"https://{ALLOWED_HOST}/{name}", poll_interval_seconds=1, deadline_seconds=60))
    assert client.get("/api/v1/health").get_json()["failing_agents"] == []
    error = f"unreachable: remote agent at https://{ALLOWED_HOST}/research?key=s3cret: connection refused"
    assert [remote_agents.record_failure("research", error) for _ in range(3)] == [1, 2, 3]

    health = client.get("/api/v1/health").get_json()
    assert health["status"] == "ok"  # the sidecar itself is healthy
    (failing,) = health["failing_agents"]
    assert (failing["name"], failing["consecutive_failures"]) == ("research", 3)
    assert failing["last_error"] == "unreachable: remote agent at <url> connection refused"
    assert failing["since"].endswith("Z")
    assert "s3cret" not in client.get("/api/v1/health").get_data(as_text=True)
    scraped = client.get("/metrics", headers=op).get_data(as_text=True)
    assert 'nrllm_remote_agent_consecutive_failures{agent="research"} 3.0' in scraped
    assert 'nrllm_remote_agent_consecutive_failures{agent="archive"} 0.0' in scraped

    assert remote_agents.record_success("research") == 3
    assert remote_agents.record_success("research") == 0  # one caller sees the end of the failures
    assert client.get("/api/v1/health").get_json()["failing_agents"] == []
    scraped = client.get("/metrics", headers=op).get_data(as_text=True)
    assert 'nrllm_remote_agent_consecutive_failures{agent="research"} 0.0' in scraped
