"""A lost answer, against real a2a-sdk peers on SQLite and PostgreSQL: reconciliation (ListTasks by the
delegation's contextId) finds the task and the run completes with one task on the peer; where it is
impossible (a 0.3 peer has no ListTasks) one operator resend completes the run, a second is 409
`not_resendable`, and the peer has exactly two tasks; racing resends, or a resend racing a
reconciliation, never both win."""

import os
import subprocess
import sys
import threading

from sidecar.store import db, outbound, waits
from sidecar.store.models import Outbound
from tests.support import ROOT
from tests.support.api import TEST_SECRET_KEY
from tests.support.delegation import ON_A2A_DATABASES, delegating_run, register
from tests.support.runs import event_payloads, run_row, tool_results
from tests.support.waiting import wait_until

pytestmark = ON_A2A_DATABASES


def completed(run_id: str):
    wait_until(lambda: run_row(run_id).status == "completed", timeout=30, what="the run to complete")
    return run_row(run_id)


def lost_send(peers, start_worker, *, card: str, drop: tuple, message: str = "work:0.5:forty-two"):
    """A run waiting on a send whose answer the proxy dropped; returns (peer, proxy, run id, the row)."""
    peer = peers.start(card=card)
    proxy = peers.lossy_proxy(peer, drop=drop)
    register("research", proxy.url, poll=0.2)
    run_id = delegating_run("research", message)
    start_worker(concurrency=1)
    wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", what="the run to wait")
    (row,) = Outbound.select()
    assert row.outcome == "outcome_unknown" and proxy.dropped >= 1 and peer.task_count == 1
    return peer, proxy, run_id, row


def test_reconciliation_finds_the_lost_task_and_the_run_completes(settings, peers, start_worker):
    peer = peers.start(card="1.0")
    proxy = peers.lossy_proxy(peer)  # drops the answer to SendMessage only
    register("research", proxy.url, poll=0.2)
    run_id = delegating_run("research", "work:0.5:forty-two")
    start_worker(concurrency=1)
    assert completed(run_id).output == "Remote said: forty-two"
    (row,) = Outbound.select()
    assert proxy.dropped == 1 and proxy.forwarded["ListTasks"] == 1
    assert (row.outcome, row.remote_task_id) == ("accepted", peer.tasks_in(row.context_id)[0])
    assert peer.task_count == 1 and peer.calls["SendMessage"] == 1
    notes = [e["note"] for e in event_payloads(run_id, "outbound")]
    assert notes == ["journalled before sending", "sent", "found by reconciliation (ListTasks)"]
    assert event_payloads(run_id, "pause")[0]["outcome"] == "accepted"  # it never waited on an unknown outcome


def _cli(database_url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NRLLM_DATABASE_URL": database_url, "NRLLM_REMOTE_ALLOW": "127.0.0.1",
           "NRLLM_SECRET_KEYS": TEST_SECRET_KEY}
    return subprocess.run([sys.executable, "-m", "sidecar.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


def test_without_list_tasks_one_operator_resend_completes_the_run(
        database_url, settings, peers, start_worker, client, operator_headers):
    peer, proxy, run_id, row = lost_send(peers, start_worker, card="0.3", drop=("message/send",))
    assert "ListTasks" not in peer.calls  # a 0.3 peer: reconciliation is impossible, nothing was asked
    listed = _cli(database_url, "outbound", "list", "--run", run_id)
    assert listed.returncode == 0 and listed.stdout.split("\t")[:3] == [row.id, "send", "outcome_unknown"]
    proxy.drop.clear()

    resent = client.post(f"/api/v1/outbound/{row.id}/resend", headers=operator_headers)
    assert resent.status_code == 201, resent.get_json()
    new = resent.get_json()
    assert (new["kind"], new["resend_of"], new["run_id"]) == ("send", row.id, run_id)
    assert new["message_id"] != row.message_id and new["outcome"] == "accepted" and new["remote_task_id"]
    assert Outbound.get_by_id(row.id).outcome == "superseded"
    assert waits.current_wait(run_id) is None or waits.current_wait(run_id).outbound_id == new["id"]
    assert completed(run_id).output == "Remote said: forty-two"
    assert tool_results(run_id) == ["forty-two"]

    again = [client.post(f"/api/v1/outbound/{r}/resend", headers=operator_headers) for r in (row.id, new["id"])]
    assert [(a.status_code, a.get_json()["code"]) for a in again] == [(409, "not_resendable")] * 2
    by_cli = _cli(database_url, "outbound", "resend", row.id)
    assert by_cli.returncode == 1 and "outcome_unknown" in by_cli.stderr
    assert peer.task_count == 2 and peer.calls["message/send"] == 2
    assert client.post("/api/v1/outbound/not-a-uuid/resend", headers=operator_headers).status_code == 404
    not_an_id = _cli(database_url, "outbound", "resend", "not-a-uuid")  # the same service refuses it
    assert not_an_id.returncode == 1 and "no outbound row with that id" in not_an_id.stderr


def test_a_resend_from_the_command_line(database_url, settings, peers, start_worker):
    peer, proxy, run_id, row = lost_send(peers, start_worker, card="0.3", drop=("message/send",))
    proxy.drop.clear()
    done = _cli(database_url, "outbound", "resend", row.id)
    assert done.returncode == 0, done.stderr
    (new_id,) = done.stdout.split()
    assert Outbound.get_by_id(new_id).resend_of == row.id
    assert completed(run_id).output == "Remote said: forty-two"
    assert peer.task_count == 2


def _race(barrier: threading.Barrier, action, results: list) -> None:
    try:
        barrier.wait(30)
        results.append(action())
    finally:
        db.database.close()


def _run_all(actions) -> list:
    barrier, results = threading.Barrier(len(actions)), []
    threads = [threading.Thread(target=_race, args=(barrier, action, results)) for action in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == len(actions)
    return results


def test_racing_resends_send_once(settings, peers, start_worker, app, operator_headers):
    # ListTasks answers are lost too: reconciliation before each resend finds nothing.
    peer, proxy, run_id, row = lost_send(peers, start_worker, card="1.0", drop=("SendMessage", "ListTasks"))
    proxy.drop.discard("SendMessage")

    def resend():  # a client of each racing thread's own
        return app.test_client().post(f"/api/v1/outbound/{row.id}/resend", headers=operator_headers).status_code

    statuses = _run_all([resend] * 6)
    assert sorted(statuses) == [201] + [409] * 5
    assert completed(run_id).output == "Remote said: forty-two"
    assert peer.task_count == 2 and peer.calls["SendMessage"] == 2
    assert Outbound.select().where(Outbound.resend_of == row.id).count() == 1


def test_a_resend_racing_a_reconciliation_never_both_win(settings, peers, start_worker, app, operator_headers):
    peer, proxy, run_id, row = lost_send(peers, start_worker, card="1.0", drop=("SendMessage", "ListTasks"))
    proxy.drop.discard("SendMessage")
    (lost_task,) = peer.tasks_in(row.context_id)

    def resend():  # a client of each racing thread's own
        return app.test_client().post(f"/api/v1/outbound/{row.id}/resend", headers=operator_headers).status_code

    wait_id = waits.current_wait(run_id).id

    def reconciled():  # as a reconciler does: record the task found, then poll it at once
        return "found" if outbound.record_found(row.id, lost_task) and waits.poll_now(wait_id) else "too late"

    results = _run_all([resend, reconciled] * 3)
    winners = [r for r in results if r in (201, "found")]
    assert len(winners) == 1, results
    run = completed(run_id)
    if winners == ["found"]:  # the lost task is the answer; nothing was resent
        assert Outbound.get_by_id(row.id).outcome == "accepted" and peer.calls["SendMessage"] == 1
        assert peer.task_count == 1
    else:
        assert Outbound.get_by_id(row.id).outcome == "superseded" and peer.calls["SendMessage"] == 2
        assert peer.task_count == 2
    assert run.output == "Remote said: forty-two"


def test_a_resend_whose_sender_stopped_is_settled_and_can_be_resent(
        settings, peers, start_worker, client, operator_headers):
    from datetime import timedelta

    from sidecar.delegation.a2a import resend_body
    from sidecar.delegation.coordinator import Coordinator
    from sidecar.delegation.ids import message_id_for
    from sidecar.store import resends

    peer, proxy, run_id, row = lost_send(peers, start_worker, card="0.3", drop=("message/send",))
    proxy.drop.clear()
    # An operator's resend that stopped (a crash) after journalling its row and moving the wait, before sending.
    message_id = message_id_for(row.run_id, row.tool_call_id, row.resend_count + 1)
    stopped = resends.record_resend(row.id, message_id, resend_body(row.request_body, message_id)).row
    coordinator = Coordinator(settings)
    try:
        coordinator.poll(waits.current_wait(run_id))
        assert Outbound.get_by_id(stopped.id).outcome == "pending", "its sender may still be at work"
        Outbound.update(created_at=stopped.created_at - timedelta(hours=1)).where(Outbound.id == stopped.id).execute()
        coordinator.poll(waits.current_wait(run_id))
    finally:
        coordinator.stop()
    assert Outbound.get_by_id(stopped.id).outcome == "outcome_unknown"
    assert "its sender stopped: it may have left" in [e["note"] for e in event_payloads(run_id, "outbound")]

    resent = client.post(f"/api/v1/outbound/{stopped.id}/resend", headers=operator_headers)
    assert resent.status_code == 201, resent.get_json()
    assert completed(run_id).output == "Remote said: forty-two"
    assert peer.task_count == 2  # the lost first send's task, and the second resend's; the stopped one never left
