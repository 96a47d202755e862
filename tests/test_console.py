"""The console's sessions and forms through Flask's test client, on each database: login, the cookie's
flags, CSRF, a revoked token ending its sessions, roles, and bad input answered as a page (never a 500).
What a person does in a browser is in test_console_browser.py."""

import dataclasses
import re

import pytest

from sidecar.store import console_queries, runs, tokens
from sidecar.store.models import ApiToken, RemoteAgent
from tests.support.api import ACTOR
from tests.support.decisions import INPUT_SCRIPT, paused_run


@pytest.fixture
def settings(settings):
    return dataclasses.replace(settings, remote_allow=("agents.test",))  # allowed by name: no lookup


def csrf_of(page: bytes) -> str:
    return re.search(rb'name="csrf_token" value="([^"]+)"', page).group(1).decode()


def log_in(client, token: str, **fields):
    return client.post("/console/login", data={"token": token, **fields})


@pytest.fixture
def operator(client, operator_token):
    assert log_in(client, operator_token).status_code == 302
    return client


def test_every_page_but_the_login_asks_for_a_session(client, operator_token):
    for path in ("/console/", "/console/runs", "/console/tokens", "/console/inbox"):
        answer = client.get(path)
        assert answer.status_code == 302 and answer.headers["Location"].startswith("/console/login?next=")
    # A bearer token opens the API, not the console.
    answer = client.get("/console/runs", headers={"Authorization": f"Bearer {operator_token}"})
    assert answer.status_code == 302


def test_login_refusals_are_shown_by_their_field(client, host_token):
    answer = log_in(client, "nrllm_not-a-token")
    assert answer.status_code == 422 and b'id="token-error"' in answer.data and b"Not a valid token" in answer.data
    answer = log_in(client, host_token)  # a host token acts for an actor
    assert answer.status_code == 422 and b'id="actor-error"' in answer.data
    answer = log_in(client, host_token, actor="x" * 256)
    assert answer.status_code == 422 and b"At most 255" in answer.data
    answer = log_in(client, host_token, actor="be_user:\x007")  # nothing a database cannot store: 422, no 500
    assert answer.status_code == 422


def test_the_session_cookie_is_httponly_strict_and_secure_over_https(app, operator_token):
    plain = log_in(app.test_client(), operator_token).headers["Set-Cookie"]
    assert "HttpOnly" in plain and "SameSite=Strict" in plain and "Path=/console" in plain
    assert "Secure" not in plain and operator_token not in plain
    secure = app.test_client().post("/console/login", data={"token": operator_token},
                                    base_url="https://sidecar.example").headers["Set-Cookie"]
    assert "Secure" in secure
    proxied = app.test_client().post("/console/login", data={"token": operator_token},
                                     headers={"X-Forwarded-Proto": "https"}).headers["Set-Cookie"]
    assert "Secure" in proxied


def test_only_the_console_opens_its_session(app, operator_token):
    logged_in = app.test_client()
    log_in(logged_in, operator_token)
    # A client that sends the cookie everywhere (a browser does not: its path is /console) ...
    client = app.test_client()
    client.set_cookie("nrllm_console", logged_in.get_cookie("nrllm_console", path="/console").value, path="/")
    console = client.get("/console/runs")
    assert console.status_code == 200 and "Set-Cookie" in console.headers  # read, and renewed (permanent)
    # ... has no session elsewhere: the API neither reads nor renews it.
    api = client.get("/api/v1/health")
    assert api.status_code == 200 and "Set-Cookie" not in api.headers


def test_the_login_goes_back_where_it_was_asked_for_and_never_elsewhere(client, operator_token):
    answer = client.post("/console/login?next=/console/tokens", data={"token": operator_token})
    assert answer.headers["Location"] == "/console/tokens"
    answer = client.post("/console/login?next=//evil.example/", data={"token": operator_token})
    assert answer.headers["Location"] == "/console/runs"


def test_a_form_without_the_csrf_token_changes_nothing(operator, host_token):
    page = operator.get("/console/tokens/host-test/revoke")
    assert page.status_code == 200
    answer = operator.post("/console/tokens/host-test/revoke", data={"csrf_token": "forged"})
    assert answer.status_code == 400 and b"csrf_failed" in answer.data
    assert operator.post("/console/tokens/host-test/revoke").status_code == 400
    assert ApiToken.get(ApiToken.name == "host-test").revoked_at is None
    answer = operator.post("/console/tokens/host-test/revoke", data={"csrf_token": csrf_of(page.data)})
    assert answer.status_code == 302 and ApiToken.get(ApiToken.name == "host-test").revoked_at is not None


def test_a_revoked_token_ends_its_sessions_at_the_next_request(operator, operator_token):
    assert operator.get("/console/runs").status_code == 200
    tokens.revoke("operator-test")
    answer = operator.get("/console/runs")
    assert answer.status_code == 302 and "reason=ended" in answer.headers["Location"]
    assert b"Your session ended" in operator.get(answer.headers["Location"]).data
    assert operator.get("/console/runs").status_code == 302  # and it stays ended
    assert console_queries.live_token(ApiToken.get(ApiToken.name == "operator-test").id) is None


def test_logout_ends_the_session(operator):
    page = operator.get("/console/runs")
    assert operator.post("/console/logout", data={"csrf_token": csrf_of(page.data)}).status_code == 302
    assert operator.get("/console/runs").status_code == 302


def test_roles_are_the_apis(client, operator_token, host_token):
    host = client
    assert log_in(host, host_token, actor=ACTOR).headers["Location"] == "/console/inbox"
    for path in ("/console/tokens", "/console/outbound", "/console/agents", "/console/health", "/console/waiting"):
        answer = host.get(path)
        assert answer.status_code == 403 and b"forbidden_role" in answer.data, path
    assert host.get("/console/inbox").status_code == 200
    assert log_in(host, operator_token).status_code == 302
    assert host.get("/console/inbox").status_code == 403


def test_a_host_actor_sees_only_its_runs(client, host_token, settings):
    mine = runs.create_run(ACTOR, "mine", wake=False)
    theirs = runs.create_run("be_user:99", "theirs", wake=False)
    log_in(client, host_token, actor=ACTOR)
    listed = client.get("/console/runs").data.decode()
    assert mine[:8] in listed and theirs[:8] not in listed
    assert client.get(f"/console/runs/{mine}").status_code == 200
    assert client.get(f"/console/runs/{theirs}").status_code == 404


def test_runs_filters_and_pages(operator):
    ids = [runs.create_run(f"be_user:{i % 2}", "x", origin="typo3" if i % 3 else None, wake=False) for i in range(60)]
    first = operator.get("/console/runs").data.decode()
    assert "queued</span> <strong>60</strong>" in first
    cursor = re.search(r'href="/console/runs\?cursor=([^"&]+)"', first).group(1)
    second = operator.get(f"/console/runs?cursor={cursor}").data.decode()
    shown = re.findall(r"/console/runs/([0-9a-f-]{36})", first) + re.findall(r"/console/runs/([0-9a-f-]{36})", second)
    assert sorted(shown) == sorted(ids)
    owned = operator.get("/console/runs?owner=be_user:1&origin=typo3").data.decode()
    assert len(re.findall(r"/console/runs/[0-9a-f-]{36}", owned)) == sum(1 for i in range(60) if i % 2 and i % 3)
    for query, field in (("status=nonsense", "status"), ("cursor=zzz", "cursor"), ("owner=" + "x" * 300, "owner")):
        answer = operator.get(f"/console/runs?{query}")
        assert answer.status_code == 422, query
        assert f'{field}-error' in answer.data.decode() or field == "cursor"


def test_agent_forms_answer_the_apis_field_errors_and_save_nothing_bad(operator):
    page = operator.get("/console/agents/new")
    token = csrf_of(page.data)
    bad = operator.post("/console/agents/new", data={"csrf_token": token, "name": "Research", "url": "ftp://x",
                                                     "poll_interval_seconds": "soon", "deadline_seconds": "60"})
    text = bad.data.decode()
    assert bad.status_code == 422 and 'id="name-error"' in text and 'id="poll_interval_seconds-error"' in text
    assert RemoteAgent.select().count() == 0
    addressed = operator.post("/console/agents/new", data={"csrf_token": token, "name": "research",
                                                           "url": "http://10.1.2.3/", "deadline_seconds": "60"})
    assert addressed.status_code == 422 and 'id="url-error"' in addressed.data.decode()  # the address guard's
    no_secret = operator.post("/console/agents/new", data={"csrf_token": token, "name": "research",
                                                            "url": "https://agents.test/", "auth_header": "X-Key"})
    assert no_secret.status_code == 422 and 'id="auth_value-error"' in no_secret.data.decode()
    nul = operator.post("/console/agents/new", data={"csrf_token": token, "name": "re\x00search", "url": "x"})
    assert nul.status_code == 422


def test_a_refused_decision_is_shown_by_its_form_and_changes_nothing(client, host_token, settings):
    run_id = paused_run(INPUT_SCRIPT, settings=settings)
    log_in(client, host_token, actor=ACTOR)
    page = client.get("/console/inbox").data.decode()
    form = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', page))
    answer = client.post(f"/console/inbox/{run_id}/decide", data={**form, "decision": "input", "mode": "store",
                                                                   "input.page": "0"})
    text = answer.data.decode()
    assert answer.status_code == 422 and "invalid_input" in text
    assert re.search(r'class="error field-error" id="f-[0-9a-f]{8}-1-error">0 is less than the minimum of 1', text)
    stale = client.post(f"/console/inbox/{run_id}/decide", data={**form, "generation": "7", "decision": "input",
                                                                  "mode": "store", "input.page": "2",
                                                                  "idempotency_key": "another"})
    assert stale.status_code == 409 and "stale_generation" in stale.data.decode()
    assert runs.get_run(run_id).status == "waiting_for_input"
    stored = client.post(f"/console/inbox/{run_id}/decide", data={**form, "decision": "input", "mode": "store",
                                                                   "input.page": "2", "idempotency_key": "third"})
    assert stored.status_code == 302 and runs.get_run(run_id).continuation is not None


def test_a_database_from_before_migration_9_gains_the_runs_list_indexes(database_url):
    from playhouse.migrate import SchemaMigrator, migrate

    from sidecar.store import migrations
    from sidecar.store.db import database
    from sidecar.store.models import SchemaMigration

    def runs_indexes() -> set[tuple]:
        return {tuple(index.columns) for index in database.get_indexes("runs")}

    added = {("created_at", "id"), ("status", "created_at", "id"), ("origin", "created_at", "id")}
    assert added <= runs_indexes()
    names = [index.name for index in database.get_indexes("runs") if tuple(index.columns) in added]
    migrate(*(SchemaMigrator.from_database(database.obj).drop_index("runs", name) for name in names))
    SchemaMigration.delete().where(SchemaMigration.version == 9).execute()
    assert added.isdisjoint(runs_indexes())
    assert migrations.upgrade() == [9]
    assert added <= runs_indexes()
    assert migrations.upgrade() == []


def test_every_operator_page_renders(operator, settings):
    runs.create_run(ACTOR, "x", wake=False)
    for path, expected in (("/console/waiting", "No run waits"), ("/console/outbound", "Nothing was sent"),
                           ("/console/agents", "No remote agent"), ("/console/consumers", "Delegation"),
                           ("/console/health", "Worker heartbeats"), ("/console/tokens", "operator-test")):
        answer = operator.get(path)
        assert answer.status_code == 200 and expected in answer.data.decode(), path
        assert answer.headers["Content-Security-Policy"].startswith("default-src 'none'")


def test_an_agent_is_edited_keeping_its_secret_and_deleted_after_a_confirmation(operator):
    token = csrf_of(operator.get("/console/agents/new").data)
    created = operator.post("/console/agents/new", data={
        "csrf_token": token, "name": "research", "url": "https://agents.test/", "poll_interval_seconds": "5",
        "deadline_seconds": "600", "push": "on", "auth_header": "X-Key", "auth_value": "s3cret"})
    assert created.status_code == 302
    sealed = RemoteAgent.get_by_id("research").auth_value_sealed
    edit = operator.get("/console/agents/research/edit").data.decode()
    assert "s3cret" not in edit and 'value="X-Key"' in edit
    edited = operator.post("/console/agents/research/edit", data={
        "csrf_token": token, "url": "https://agents.test/v2", "poll_interval_seconds": "10",
        "deadline_seconds": "600", "auth_header": "X-Key", "auth_value": ""})
    assert edited.status_code == 302
    row = RemoteAgent.get_by_id("research")
    assert (row.url, row.poll_interval_seconds, row.push, row.auth_value_sealed) == \
        ("https://agents.test/v2", 10.0, 0, sealed)
    assert "Delete remote agent research?" in operator.get("/console/agents/research/delete").data.decode()
    assert operator.post("/console/agents/research/delete", data={"csrf_token": token}).status_code == 302
    assert RemoteAgent.select().count() == 0
    assert operator.get("/console/agents/research/edit").status_code == 404


def test_a_decision_goes_through_the_grants_and_the_idempotency_key(client, host_token, settings):
    from sidecar.store.models import Decision

    run_id = paused_run(INPUT_SCRIPT, settings=settings)
    log_in(client, host_token, actor="be_user:99")  # not the owner, and no grant
    assert run_id[:8] not in client.get("/console/inbox").data.decode()
    pause = runs.get_run(run_id)
    token = csrf_of(client.get("/console/inbox").data)
    form = {"csrf_token": token, "pause_id": pause.waiting_on, "generation": "1", "decision": "input",
            "mode": "store", "input.page": "2", "idempotency_key": "k1"}
    refused = client.post(f"/console/inbox/{run_id}/decide", data=form)
    assert refused.status_code == 404 and "not_found" in refused.data.decode()
    log_in(client, host_token, actor=ACTOR)
    form["csrf_token"] = csrf_of(client.get("/console/inbox").data)
    first = client.post(f"/console/inbox/{run_id}/decide", data=form)
    assert first.status_code == 302, re.findall(r'class="error[^"]*"[^>]*>(.*?)</p>', first.data.decode(), re.S)
    assert client.post(f"/console/inbox/{run_id}/decide", data=form).status_code == 302  # the same form again
    assert Decision.select().where(Decision.run == run_id).count() == 1
    other = client.post(f"/console/inbox/{run_id}/decide", data={**form, "input.page": "3"})
    assert other.status_code == 422 and "idempotency_key_reused" in other.data.decode()


def test_a_denial_keeps_its_comment(client, host_token, settings):
    from sidecar.store.models import Decision

    run_id = paused_run(settings=settings)
    log_in(client, host_token, actor=ACTOR)
    page = client.get("/console/inbox").data.decode()
    assert "write_note" in page and "non_idempotent_write" in page
    form = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', page))
    answer = client.post(f"/console/inbox/{run_id}/decide", data={**form, "decision": "deny", "mode": "store",
                                                                   "comment": "  Not this page  "})
    assert answer.status_code == 302
    (decision,) = Decision.select().where(Decision.run == run_id)
    assert (decision.decision, decision.comment, decision.decider) == ("deny", "Not this page", ACTOR)
    assert "Decision stored" in client.get("/console/inbox").data.decode()
