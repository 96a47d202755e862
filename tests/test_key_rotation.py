"""`nrllm-sidecar keys rotate`: runs waiting under the old key complete after the rotation and the old
key's removal, remote agents' auth values still open; idempotent; guarded against a resolution or an
update that lands meanwhile; a value it cannot open is named, left alone, and the command exits 1."""

import os
import subprocess
import sys
import uuid

import pytest

from sidecar import keys
from sidecar.config import Settings
from sidecar.domain.clock import utcnow
from sidecar.domain.sealing import Sealer, fingerprint, generate_key
from sidecar.store import remote_agents, rotation, runs, sealed, waits
from sidecar.store.models import DependencyWait, Outbound, RemoteAgent
from sidecar.store.remote_agents import AgentFields
from tests.support import ROOT
from tests.support.delegation import A2A_DATABASES, delegating_run
from tests.support.runs import run_row, tool_results
from tests.support.waiting import wait_until
from tests.support.workers import start_worker_process, stop_process

AUTH = AgentFields(url="http://127.0.0.1:9/", poll_interval_seconds=60, deadline_seconds=600,
                   auth_header="X-Api-Key", auth_value="s3cret")


@pytest.fixture
def new_key():
    return generate_key()


@pytest.fixture(autouse=True)
def _put_the_test_keys_back(settings):
    yield
    keys.configure(settings)


def rotate_cli(database_url: str, *secret_keys: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NRLLM_DATABASE_URL": database_url, "NRLLM_SECRET_KEYS": ",".join(secret_keys)}
    return subprocess.run([sys.executable, "-m", "sidecar.cli", "keys", "rotate"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def only(settings, *secret_keys: str) -> Settings:
    return Settings(instance_path=settings.instance_path, database_url=settings.database_url,
                    lease_seconds=settings.lease_seconds, remote_allow=settings.remote_allow,
                    secret_keys=secret_keys)


def seed_wait(sealer: Sealer, agent: str = "research") -> DependencyWait:
    """A wait row as a suspension writes it (no peer needed to re-seal it)."""
    run_id = runs.create_run("be_user:7", "waits")
    checkpoint, fp = sealer.seal({"run_id": run_id, "tool_call_id": "call_1", "turn_index": 0})
    wait_id = str(uuid.uuid4())
    DependencyWait.insert(id=wait_id, run=run_id, generation=1, tool_call_id="call_1", remote_agent=agent,
                          outbound_id=str(uuid.uuid4()), checkpoint=checkpoint, key_fingerprint=fp, since=utcnow(),
                          deadline_at=utcnow(), next_poll_at=None).execute()
    return DependencyWait.get_by_id(wait_id)


@pytest.mark.parametrize("database_url", A2A_DATABASES, indirect=True)
@pytest.mark.usefixtures("delegation_offered")
def test_runs_waiting_under_the_old_key_complete_after_rotation_and_the_old_keys_removal(
        settings, sealing_key, new_key, peers, start_worker, tmp_path):
    old = sealing_key
    peer = peers.start(card="1.0")
    remote_agents.create_agent("research", AgentFields(url=peer.url, poll_interval_seconds=60, deadline_seconds=600,
                                                       auth_header="X-Api-Key", auth_value="s3cret"))
    ids = [delegating_run("research", f"work:0.1:answer {i}") for i in range(3)]
    worker = start_worker(concurrency=1)
    wait_until(lambda: all(run_row(i).status == "waiting_for_dependency" for i in ids), what="the runs to wait")
    worker.stop(grace=5)
    assert {w.key_fingerprint for w in DependencyWait.select()} == {fingerprint(old)}

    rotated = rotate_cli(settings.database_url, new_key, old)
    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout.splitlines() == [
        "checkpoints: 3 re-sealed, 0 already under the newest key, 0 resolved or removed meanwhile",
        "remote agent auth values: 1 re-sealed, 0 already under the newest key, 0 resolved or removed meanwhile",
    ]
    assert "older keys may be removed" in rotated.stderr and "s3cret" not in rotated.stdout + rotated.stderr
    resealed = {w.id: w.checkpoint for w in DependencyWait.select()}
    assert {w.key_fingerprint for w in DependencyWait.select()} == {fingerprint(new_key)}
    assert RemoteAgent.get_by_id("research").auth_value_sealed.startswith(fingerprint(new_key) + ":")

    again = rotate_cli(settings.database_url, new_key, old)  # idempotent: nothing left to do
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0].startswith("checkpoints: 0 re-sealed, 3 already under the newest key")
    assert {w.id: w.checkpoint for w in DependencyWait.select()} == resealed

    # The old key is removed everywhere: a worker in its own process knows only the new one.
    keys.configure(only(settings, new_key))
    assert sealed.unsealable_checkpoints(keys.sealer().fingerprints) == 0
    assert remote_agents.auth_of(RemoteAgent.get_by_id("research")) == ("X-Api-Key", "s3cret")
    process = start_worker_process(settings.database_url, lease=5.0, log_path=tmp_path / "worker.log",
                                   env={"NRLLM_SECRET_KEYS": new_key, "NRLLM_REMOTE_ALLOW": "127.0.0.1"})
    try:
        for run_id in ids:
            assert waits.poll_now(waits.current_wait(run_id).id)
        wait_until(lambda: all(run_row(i).status == "completed" for i in ids), timeout=60,
                   what="the runs to complete under the new key only")
    finally:
        stop_process(process)
    assert [run_row(i).output for i in ids] == [f"Remote said: answer {i}" for i in range(3)]
    assert [tool_results(i) for i in ids] == [[f"answer {i}"] for i in range(3)]
    assert peer.task_count == 3 and peer.calls["SendMessage"] == 3
    assert Outbound.select().where(Outbound.outcome == "accepted").count() == 3


def test_a_value_whose_key_is_not_configured_or_that_was_tampered_is_named_and_left_alone(
        settings, sealing_key, new_key):
    gone_key = generate_key()
    remote_agents.create_agent("research", AUTH)
    lost = seed_wait(Sealer([gone_key]))
    tampered = seed_wait(keys.sealer())
    altered = tampered.checkpoint[:-6] + ("AAAAAA" if not tampered.checkpoint.endswith("AAAAAA") else "BBBBBB")
    DependencyWait.update(checkpoint=altered).where(DependencyWait.id == tampered.id).execute()
    fine = seed_wait(keys.sealer())

    result = rotate_cli(settings.database_url, new_key, sealing_key)
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == (
        "checkpoints: 1 re-sealed, 0 already under the newest key, 0 resolved or removed meanwhile")
    assert f"wait {lost.id}" in result.stderr and "not configured" in result.stderr
    assert f"wait {tampered.id}" in result.stderr and "tampered" in result.stderr
    assert "keep the older keys configured" in result.stderr
    assert DependencyWait.get_by_id(lost.id).key_fingerprint == fingerprint(gone_key)
    assert DependencyWait.get_by_id(tampered.id).checkpoint == altered
    assert DependencyWait.get_by_id(fine.id).key_fingerprint == fingerprint(new_key)
    assert RemoteAgent.get_by_id("research").auth_value_sealed.startswith(fingerprint(new_key) + ":")


def test_a_resolution_or_an_update_landing_during_the_rotation_is_never_overwritten(
        settings, sealing_key, new_key, monkeypatch):
    remote_agents.create_agent("research", AUTH)
    resolved, still_open = seed_wait(keys.sealer()), seed_wait(keys.sealer())
    both = Sealer([new_key, sealing_key])
    keys.configure(only(settings, new_key, sealing_key))  # the operator's update seals under the new key
    original, replaced = Sealer.reseal, []

    def racing_reseal(self, token, fp):
        if token == resolved.checkpoint:  # the coordinator resolves this wait between read and write
            DependencyWait.update(resolved_at=utcnow(), resolution="result").where(
                DependencyWait.id == resolved.id).execute()
        elif token != still_open.checkpoint and not replaced:  # an operator replaces the secret
            replaced.append(True)
            remote_agents.update_agent("research", AgentFields(**{**AUTH.__dict__, "auth_value": "n3w"}))
        return original(self, token, fp)

    monkeypatch.setattr(Sealer, "reseal", racing_reseal)
    report = rotation.rotate(both)
    assert (report.checkpoints.resealed, report.checkpoints.gone) == (1, 1)
    assert (report.agent_secrets.resealed, report.agent_secrets.current) == (0, 1)
    assert report.complete
    kept = DependencyWait.get_by_id(resolved.id)
    assert (kept.checkpoint, kept.key_fingerprint) == (resolved.checkpoint, fingerprint(sealing_key))
    assert DependencyWait.get_by_id(still_open.id).key_fingerprint == fingerprint(new_key)
    assert remote_agents.auth_of(RemoteAgent.get_by_id("research")) == ("X-Api-Key", "n3w")


def test_rotation_pages_through_many_waits_and_a_second_run_does_nothing(settings, sealing_key, new_key):
    for _ in range(7):
        seed_wait(keys.sealer())
    both = Sealer([new_key, sealing_key])
    first = rotation.rotate(both, batch=3)
    assert (first.checkpoints.resealed, first.checkpoints.current, first.complete) == (7, 0, True)
    before = {w.id: w.checkpoint for w in DependencyWait.select()}
    second = rotation.rotate(both, batch=3)
    assert (second.checkpoints.resealed, second.checkpoints.current) == (0, 7)
    assert {w.id: w.checkpoint for w in DependencyWait.select()} == before
    assert {Sealer([new_key]).unseal(w.checkpoint, w.key_fingerprint)["tool_call_id"]
            for w in DependencyWait.select()} == {"call_1"}
