"""Delegation when things go wrong, against a real a2a-sdk peer on SQLite and PostgreSQL: a lost answer
never becomes a second task, racing coordinators resolve a wait once, a tampered checkpoint sends nothing,
a removed key leaves the run waiting (and health says so), a reused message id with another body is refused.
"""

import json
import threading
import uuid

import pytest

from sidecar import keys
from sidecar.config import Settings
from sidecar.delegation import remote
from sidecar.delegation.coordinator import Coordinator
from sidecar.delegation.start import message_id_for
from sidecar.domain.clock import utcnow
from sidecar.domain.sealing import generate_key
from sidecar.store import db, outbound, remote_agents, runs, waits
from sidecar.store.models import DependencyWait, Outbound, ToolResult
from tests.support.api import ACTOR
from tests.support.delegation import ON_A2A_DATABASES, delegating_run, register
from tests.support.runs import event_payloads, run_row, tool_results
from tests.support.waiting import wait_until
from tests.support.workers import wait_for_ticks

pytestmark = ON_A2A_DATABASES


def waiting_runs(run_ids) -> bool:
    return all(run_row(r).status == "waiting_for_dependency" for r in run_ids)


def remote_task_of(run_id: str) -> str:
    (row,) = Outbound.select().where(Outbound.run == run_id)
    return row.remote_task_id


def remote_state(settings, task_id: str) -> str:
    client = remote.client_for(remote_agents.get_agent("research"), settings)
    return client.get_task(task_id).state


def open_wait(run_id: str) -> DependencyWait:
    wait = waits.current_wait(run_id)
    assert wait is not None, f"run {run_id} does not wait for a dependency"
    return wait


# --- a lost answer -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("card", "drop", "send"), [
    # A 1.0 peer whose answers to the send and to reconciliation's ListTasks are both lost.
    ("1.0", ("SendMessage", "ListTasks"), "SendMessage"),
    # A 0.3 peer: no JSON-RPC ListTasks, so reconciliation cannot tell.
    ("0.3", ("message/send",), "message/send"),
])
def test_a_lost_answer_leaves_one_task_an_unknown_outcome_and_is_never_resent(
        settings, peers, start_worker, client, host_headers, operator_headers, card, drop, send):
    peer = peers.start(card=card)
    proxy = peers.lossy_proxy(peer, drop=drop)
    register("research", proxy.url, poll=0.2)
    run_id = delegating_run("research", "work:0.2:forty-two")
    worker = start_worker(concurrency=1)
    wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", what="the run to wait")

    assert proxy.forwarded[send] == 1
    assert peer.task_count == 1 and peer.calls[send] == 1

    answer = client.get(f"/api/v1/runs/{run_id}", headers=host_headers)
    assert answer.status_code == 200
    run = answer.get_json()
    assert run["status"] == "waiting_for_dependency" and run["lease"] is None
    waiting = run["waiting"]
    assert (waiting["kind"], waiting["tool_call_id"], waiting["remote_agent"]) == ("dependency", "call_1", "research")
    assert waiting["outcome"] == "outcome_unknown"
    assert waiting["remote_task_id"] is None

    rows = client.get(f"/api/v1/outbound?run_id={run_id}", headers=operator_headers).get_json()["items"]
    assert len(rows) == 1
    assert (rows[0]["kind"], rows[0]["outcome"], rows[0]["remote_task_id"]) == ("send", "outcome_unknown", None)
    assert rows[0]["id"] == waiting["outbound_id"]

    # Many poll intervals (0.2 s) and coordinator ticks (0.05 s) later: nothing was sent again.
    wait_for_ticks(worker, 60)
    assert peer.calls[send] == 1 and proxy.forwarded[send] == 1
    assert peer.task_count == 1
    assert Outbound.select().count() == 1
    after = client.get(f"/api/v1/runs/{run_id}", headers=host_headers).get_json()
    assert after["status"] == "waiting_for_dependency"
    assert (after["waiting"]["outcome"], after["waiting"]["remote_task_id"]) == ("outcome_unknown", None)
    assert worker.active_count() == 0, "a run waiting on an unknown outcome holds a worker thread"
    assert tool_results(run_id) == []


# --- two coordinators racing one result ----------------------------------------------------------------


def _poll_in_thread(coordinator: Coordinator, wait_id: str, barrier: threading.Barrier, errors: list) -> None:
    try:
        wait = DependencyWait.get_by_id(wait_id)  # each coordinator holds its own copy of the row
        barrier.wait(10)
        coordinator.poll(wait)
    except Exception as exc:  # noqa: BLE001 - reported by the test below
        errors.append(exc)
    finally:
        db.database.close()


def test_two_coordinators_racing_the_same_result_resolve_it_once(settings, peers, start_worker):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=0.2)
    count = 20
    run_ids = [delegating_run("research", f"work:0.05:answer {i}") for i in range(count)]
    start_worker(concurrency=2, coordinators=0)  # only the two racing coordinators below poll
    wait_until(lambda: waiting_runs(run_ids), what="every run to wait")
    for run_id in run_ids:
        wait_until(lambda r=run_id: remote_state(settings, remote_task_of(r)) == "completed",
                   what="the remote task to complete")

    first, second = Coordinator(settings), Coordinator(settings)
    polls_before = peer.calls["GetTask"]
    try:
        for run_id in run_ids:
            wait_id = open_wait(run_id).id
            barrier, errors = threading.Barrier(2), []
            threads = [threading.Thread(target=_poll_in_thread, args=(c, wait_id, barrier, errors))
                       for c in (first, second)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            assert errors == []
    finally:
        first.stop()
        second.stop()
    # Both coordinators of every race asked the peer and had the answer in hand: the race was real.
    assert peer.calls["GetTask"] - polls_before == 2 * count

    wait_until(lambda: all(run_row(r).status == "completed" for r in run_ids), what="every run to complete")
    for i, run_id in enumerate(run_ids):
        assert ToolResult.select().where(ToolResult.run == run_id, ToolResult.tool_call_id == "call_1").count() == 1
        assert tool_results(run_id) == [f"answer {i}"]
        assert len(event_payloads(run_id, "resume")) == 1
        assert [e["result"] for e in event_payloads(run_id, "tool") if e["tool_call_id"] == "call_1"] == [f"answer {i}"]
        assert [s for s in event_payloads(run_id, "status") if s["from"] == "waiting_for_dependency"] == [
            {"from": "waiting_for_dependency", "to": "queued"}]
        assert run_row(run_id).output == f"Remote said: answer {i}"
        (wait,) = DependencyWait.select().where(DependencyWait.run == run_id)
        assert wait.resolution == "result"
    assert peer.task_count == count and peer.calls["SendMessage"] == count


# --- sealed checkpoints --------------------------------------------------------------------------------


def _alter_one_character(text: str) -> str:
    middle = len(text) // 2  # inside the ciphertext: every bit of a middle base64 character counts
    return text[:middle] + ("B" if text[middle] != "B" else "C") + text[middle + 1:]


def waiting_on_a_finished_task(settings, peers, start_worker):
    """A run waiting on a remote task that has finished, with no coordinator to notice: (peer, run id, wait)."""
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=0.2)
    run_id = delegating_run("research", "work:0.05:forty-two")
    start_worker(concurrency=1, coordinators=0)
    wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", what="the run to wait")
    wait = open_wait(run_id)
    wait_until(lambda: remote_state(settings, remote_task_of(run_id)) == "completed", what="the remote to finish")
    return peer, run_id, wait


def test_a_tampered_checkpoint_fails_the_run_and_sends_nothing(settings, peers, start_worker):
    peer, run_id, wait = waiting_on_a_finished_task(settings, peers, start_worker)

    tampered = _alter_one_character(wait.checkpoint)
    assert tampered != wait.checkpoint and len(tampered) == len(wait.checkpoint)
    DependencyWait.update(checkpoint=tampered).where(DependencyWait.id == wait.id).execute()
    calls_before = dict(peer.calls)

    coordinator = Coordinator(settings)
    try:
        coordinator.poll(DependencyWait.get_by_id(wait.id))
    finally:
        coordinator.stop()

    run = run_row(run_id)
    assert (run.status, run.termination_reason) == ("failed", "checkpoint_invalid")
    assert dict(peer.calls) == calls_before, "a tampered checkpoint made the sidecar call the remote agent"
    assert DependencyWait.get_by_id(wait.id).resolution == "checkpoint_invalid"
    assert tool_results(run_id) == []
    assert event_payloads(run_id, "status")[-1] == {"from": "waiting_for_dependency", "to": "failed"}
    # The worker does not pick the failed run up again: it runs one queued after it, and the failed run stays.
    later = runs.create_run(ACTOR, "queued after the failure", spec={"script": [{"content": "done"}]})
    wait_until(lambda: run_row(later).status == "completed", timeout=60, what="the worker to run a later run")
    assert run_row(run_id).status == "failed" and dict(peer.calls) == calls_before


def test_a_checkpoint_whose_key_was_removed_waits_until_the_key_is_back(
        settings, peers, start_worker, client):
    peer, run_id, wait = waiting_on_a_finished_task(settings, peers, start_worker)
    healthy = client.get("/api/v1/health").get_json()
    assert (healthy["status"], healthy["unsealable_checkpoints"]) == ("ok", 0)
    assert healthy["workers_alive"] >= 1

    # An operator replaces the sealing keys and leaves the old one out.
    other = Settings(instance_path=settings.instance_path, database_url=settings.database_url,
                     lease_seconds=settings.lease_seconds, remote_allow=settings.remote_allow,
                     secret_keys=(generate_key(),))
    coordinator = Coordinator(settings)
    try:
        keys.configure(other)
        coordinator.poll(DependencyWait.get_by_id(wait.id))

        assert run_row(run_id).status == "waiting_for_dependency"
        stored = DependencyWait.get_by_id(wait.id)
        assert (stored.unsealable, stored.resolved_at) == (1, None)
        health = client.get("/api/v1/health").get_json()
        assert (health["status"], health["unsealable_checkpoints"]) == ("degraded", 1)
        assert health["workers_alive"] >= 1  # degraded because of the checkpoint, not for want of a worker
        assert tool_results(run_id) == []

        keys.configure(settings)  # the old key is back
        assert client.get("/api/v1/health").get_json()["unsealable_checkpoints"] == 0
        coordinator.poll(DependencyWait.get_by_id(wait.id))
    finally:
        keys.configure(settings)
        coordinator.stop()

    wait_until(lambda: run_row(run_id).status == "completed", what="the run to complete")
    assert run_row(run_id).output == "Remote said: forty-two"
    assert tool_results(run_id) == ["forty-two"]
    assert DependencyWait.get_by_id(wait.id).unsealable == 0
    assert client.get("/api/v1/health").get_json()["status"] == "ok"
    assert peer.task_count == 1 and peer.calls["SendMessage"] == 1


# --- a message id journalled with another body ---------------------------------------------------------


def test_the_same_message_id_with_another_body_is_refused_and_nothing_is_sent(settings, peers, start_worker):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=0.2)
    run_id = delegating_run("research", "complete:forty-two")
    message_id = message_id_for(run_id, "call_1")
    # A request that an earlier attempt journalled under this id, asking for something else.
    other_body = json.dumps({"id": message_id, "jsonrpc": "2.0", "method": "SendMessage", "params": {"message": {
        "messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "something else"}]}}}, sort_keys=True)
    Outbound.insert(
        id=str(uuid.uuid4()), kind="send", owner=ACTOR, run=run_id, remote_agent="research", message_id=message_id,
        tool_call_id="call_1", context_id=str(uuid.uuid4()), request_body=other_body,
        request_sha256=outbound.sha256(other_body), outcome="accepted", remote_task_id="an-earlier-task",
        created_at=utcnow(),
    ).execute()

    start_worker(concurrency=1)
    wait_until(lambda: run_row(run_id).status in ("completed", "failed"), what="the run to end")

    (result,) = tool_results(run_id)
    assert result.startswith("error: ")
    assert message_id in result and "journalled with another request" in result
    assert run_row(run_id).status == "completed"  # the model got the refusal and went on
    assert run_row(run_id).output == f"Remote said: {result}"
    assert peer.calls["SendMessage"] == 0 and peer.task_count == 0
    (row,) = Outbound.select()
    assert (row.request_body, row.outcome, row.remote_task_id) == (other_body, "accepted", "an-earlier-task")
    assert run_row(run_id).delegations_used == 0
    assert DependencyWait.select().count() == 0
