"""No secret is stored in the clear (docs/security.md, "Secrets at rest"): API tokens, a remote agent's
credential and a delegation's push token, made through the API and a real delegation to an a2a-sdk peer
that registers pushes, occur nowhere in the database: not in the SQLite files (write-ahead log included)
and in no column of any table. A database from before push tokens left the journal is migrated so. The
instance folder and the SQLite files are private to the sidecar's user."""

import os
import stat
import subprocess
import sys

import pytest

from sidecar.delegation import push
from sidecar.domain import push_tokens
from sidecar.store import db, migrations, outbound, status_guard, tokens
from sidecar.store.models import DependencyWait, Outbound, SchemaMigration
from tests.support.api import ACTOR, as_host, as_operator
from tests.support.delegation import A2A_DATABASES, delegating_run, journalled_send, register, send_body
from tests.support.runs import run_row, tool_results
from tests.support.secrets_scan import found_in_columns, found_in_files, sqlite_files
from tests.support.waiting import wait_until

AGENT_SECRET = "agent-credential-5f1c9e0a7b"


def _delegating_body(message: str) -> dict:
    return {"input": "ask the research agent", "provider": "scripted", "script": [
        {"tool_calls": [{"id": "call_1", "name": "delegate_to_agent",
                         "arguments": {"agent": "research", "message": message}}]},
        {"content": "Remote said: {last_tool_result}"}]}


@pytest.mark.parametrize("database_url", ["sqlite", "postgresql", "mysql"], indirect=True)
@pytest.mark.usefixtures("delegation_offered")
def test_no_secret_made_through_the_api_is_stored_in_the_clear(database_url, peers, webhook, start_worker, client):
    host_token, operator_token = tokens.create("typo3", "host")[0], tokens.create("ops", "operator")[0]
    peer = peers.start(card="1.0", push=True)
    registered = client.post("/api/v1/remote-agents", headers=as_operator(operator_token), json={
        "name": "research", "url": peer.url, "poll_interval_seconds": 60, "push": True,
        "auth": {"header": "X-Agent-Key", "value": AGENT_SECRET}})
    assert registered.status_code == 201, registered.get_json()
    created = client.post("/api/v1/runs", headers=as_host(host_token), json=_delegating_body("work:1:pushed"))
    assert created.status_code == 201, created.get_json()
    run_id = created.get_json()["id"]
    start_worker(settings=webhook.settings, concurrency=1)
    wait_until(lambda: run_row(run_id).status == "completed", timeout=30, what="the delegating run to complete")
    assert tool_results(run_id) == ["pushed"] and run_row(run_id).owner == ACTOR

    # The secrets really were used: the peer got the credential and the push token, and pushed with it.
    (push_token,) = peer.push_tokens()
    assert {headers.get("x-agent-key") for headers, _ in peer.received} == {AGENT_SECRET}
    assert any(status == 204 for _, status in webhook.pushes)
    secrets = {"host token": host_token, "operator token": operator_token, "agent credential": AGENT_SECRET,
               "push token": push_token, "push token's secret part": push_token.partition(".")[2]}
    assert found_in_columns(secrets) == []
    if database_url.startswith("sqlite"):
        files = sqlite_files(database_url)
        assert any(f.name.endswith("-wal") for f in files)  # the log is read while it still holds the writes
        assert found_in_files(files, secrets) == []


@pytest.mark.parametrize("database_url", ["sqlite", "postgresql", "mysql"], indirect=True)
def test_a_journal_from_before_is_migrated_and_its_push_token_still_authenticates(database_url):
    """A send journalled by an older release carries its push token in the clear; migration 8 masks it."""
    status_guard.install(lambda status, origin, reported_at: None)  # the journal's gate, open
    try:
        claim, row, _ = journalled_send()
    finally:
        status_guard.install(None)
    token = push_tokens.new_push_token(claim.run_id)
    old_body = send_body(token)  # as an older release journalled it
    Outbound.update(request_body=old_body, request_sha256=outbound.sha256(old_body),
                    push_token_sha256=None).where(Outbound.id == row.id).execute()
    SchemaMigration.delete().where(SchemaMigration.version >= 8).execute()
    assert found_in_columns({"push token": token}) == ["push token in outbound.request_body"]

    assert 8 in migrations.upgrade()
    migrated = Outbound.get_by_id(row.id)
    assert migrated.request_body == push_tokens.mask(old_body, token) and len(migrated.request_body) == len(old_body)
    assert migrated.request_sha256 == outbound.sha256(migrated.request_body)
    assert migrated.push_token_sha256 == push_tokens.digest(token)
    assert push.authenticate(token).row.id == row.id  # a push before the suspension still finds its send
    assert found_in_columns({"push token": token}) == []
    if database_url.startswith("sqlite"):
        assert found_in_files(sqlite_files(database_url), {"push token": token}) == []
    assert migrations.upgrade() == []


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_instance_folder_and_the_sqlite_files_are_private(tmp_path):
    """Under the usual umask (022): the folder `db upgrade` creates is 0700, the database 0600, and the
    -wal and -shm files SQLite creates later 0600 too, as the writers' and the checkpointer's lock files; files
    an older release left 0644 are tightened."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NRLLM_")}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "sidecar.cli", *args], cwd=tmp_path, env=env, text=True,
                              capture_output=True, timeout=60, preexec_fn=lambda: os.umask(0o022))

    assert cli("db", "upgrade").returncode == 0
    assert cli("token", "create", "--name", "typo3", "--role", "host").returncode == 0
    instance = tmp_path / "instance"
    database_file = instance / "nrllm-sidecar.db"
    assert _mode(instance) == 0o700
    assert {p.name: _mode(p) for p in instance.iterdir()} == {
        "nrllm-sidecar.db": 0o600, "secret-key.dev": 0o600, "nrllm-sidecar.db-writer": 0o600,
        "nrllm-sidecar.db-checkpointer": 0o600}

    old_umask = os.umask(0o022)
    try:
        os.chmod(database_file, 0o644)  # as an older release left it
        url = f"sqlite:///{database_file}"
        bound = db.bind(url)
        try:
            tokens.create("another", "operator")  # the connection stays open: the -wal and -shm files exist
            files = sqlite_files(url)
            assert {p.name[len(database_file.name):] for p in files} >= {"", "-wal", "-shm"}
            assert {p.name: _mode(p) for p in files} == {p.name: 0o600 for p in files}
        finally:
            bound.close()
    finally:
        os.umask(old_umask)


@pytest.mark.parametrize("database_url", A2A_DATABASES, indirect=True)
@pytest.mark.usefixtures("delegation_offered")
def test_an_operator_resend_with_pushes_sends_a_new_token_and_journals_none(peers, webhook, start_worker,
                                                                           client, operator_headers):
    # A 0.3 peer has no ListTasks: the lost send can only be resent.
    peer = peers.start(card="0.3", push=True)
    proxy = peers.lossy_proxy(peer, drop=("message/send",))
    register("research", proxy.url, poll=60, push=True)
    run_id = delegating_run("research", "work:0.5:resent answer")
    start_worker(settings=webhook.settings, concurrency=1)
    wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", what="the run to wait")
    (lost,) = Outbound.select()
    assert lost.outcome == "outcome_unknown"
    proxy.drop.clear()

    resent = client.post(f"/api/v1/outbound/{lost.id}/resend", headers=operator_headers)
    assert resent.status_code == 201, resent.get_json()
    first, second = peer.push_tokens()
    assert first != second
    new = Outbound.get_by_id(resent.get_json()["id"])
    assert new.push_token_sha256 == push_tokens.digest(second) != lost.push_token_sha256
    assert len(new.request_body) == len(lost.request_body)  # the same request but its message id, masked
    # The wait accepts pushes with the new token (its row keeps the digest after the run resumes, too).
    assert DependencyWait.get(DependencyWait.run == run_id).push_token_sha256 == new.push_token_sha256
    wait_until(lambda: run_row(run_id).status == "completed", timeout=30, what="the resent delegation to finish")
    assert tool_results(run_id) == ["resent answer"]
    assert found_in_columns({"first push token": first, "resent push token": second}) == []
