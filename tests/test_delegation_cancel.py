"""Cancelling a run that waits for a remote task, against real a2a-sdk peers on SQLite and PostgreSQL:
`cancelled` and a pending CancelTask are one transaction, then exactly one CancelTask is sent (even when
the peer answers with an error, and when the cancel comes from the command line); a cancel racing the
remote answer on 100 runs ends every run either cancelled or completed."""

import os
import subprocess
import sys
import threading
import time

from sidecar.domain.errors import InvalidState
from sidecar.store import db, runs, waits
from sidecar.store.models import DependencyWait, Outbound, Run
from tests.support import ROOT
from tests.support.delegation import ON_A2A_DATABASES, delegating_run, register
from tests.support.runs import event_payloads, run_row, tool_results
from tests.support.waiting import wait_until
from tests.support.workers import wait_for_ticks

pytestmark = ON_A2A_DATABASES


def waiting(run_id: str) -> bool:
    return run_row(run_id).status == "waiting_for_dependency"


def cancel_row() -> Outbound:
    return Outbound.get(Outbound.kind == "cancel")


def test_cancelling_a_waiting_run_cancels_its_remote_task_once(settings, peers, start_worker, client, host_headers):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=60)
    run_id = delegating_run("research", "work:30:never needed")
    worker = start_worker(concurrency=1, coordinators=2)
    wait_until(lambda: waiting(run_id), what="the run to wait")

    answer = client.post(f"/api/v1/runs/{run_id}/cancel", headers=host_headers)
    assert answer.status_code == 200
    assert (answer.get_json()["status"], answer.get_json()["termination_reason"]) == ("cancelled", "cancelled")
    # Committed with the cancel, before anything was sent.
    assert cancel_row().outcome in ("pending", "accepted")
    assert DependencyWait.get().resolution == "cancelled"
    wait_until(lambda: cancel_row().outcome == "accepted", what="the CancelTask to be answered")
    send = Outbound.get(Outbound.kind == "send")
    assert cancel_row().remote_task_id == send.remote_task_id
    wait_for_ticks(worker)
    assert peer.calls["CancelTask"] == 1
    assert run_row(run_id).status == "cancelled" and tool_results(run_id) == []
    assert client.post(f"/api/v1/runs/{run_id}/cancel", headers=host_headers).status_code == 409
    assert event_payloads(run_id, "status")[-1] == {"from": "waiting_for_dependency", "to": "cancelled",
                                              "by": "be_user:7"}


def test_one_cancel_task_even_when_the_peer_answers_with_an_error(settings, peers, start_worker, client,
                                                                  host_headers):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=60)
    run_id = delegating_run("research", "work:30:forgotten")
    worker = start_worker(concurrency=1)
    wait_until(lambda: waiting(run_id), what="the run to wait")
    peer.restart()  # the peer forgets the task: CancelTask answers -32001

    assert client.post(f"/api/v1/runs/{run_id}/cancel", headers=host_headers).status_code == 200
    wait_until(lambda: cancel_row().outcome == "rejected", what="the CancelTask to be refused")
    assert "-32001" in cancel_row().error
    wait_for_ticks(worker)  # no retry of an answered cancel
    assert peer.calls["CancelTask"] == 1
    assert run_row(run_id).status == "cancelled"


def test_a_cancel_from_the_command_line_is_sent_by_a_coordinator(database_url, settings, peers, start_worker):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=60)
    run_id = delegating_run("research", "work:30:never needed")
    start_worker(concurrency=1)
    wait_until(lambda: waiting(run_id), what="the run to wait")

    env = {**os.environ, "NRLLM_DATABASE_URL": database_url}
    done = subprocess.run([sys.executable, "-m", "sidecar.cli", "runs", "cancel", run_id], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{run_id}\tcancelled"
    wait_until(lambda: peer.calls["CancelTask"] == 1, what="the worker's coordinator to send the CancelTask")
    wait_until(lambda: cancel_row().outcome == "accepted", what="the CancelTask to be answered")
    assert run_row(run_id).status == "cancelled"


def _cancel(run_ids: list[str], barrier: threading.Barrier, outcomes: dict) -> None:
    try:
        barrier.wait(30)
        for run_id in run_ids:
            try:
                outcomes[run_id] = runs.request_cancel(run_id, by="test")
            except InvalidState:
                outcomes[run_id] = "already_terminal"
    finally:
        db.database.close()


def test_a_cancel_racing_the_answer_on_100_runs_ends_each_run_exactly_once(settings, peers, start_worker):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=0.2)
    run_ids = [delegating_run("research", f"work:4:answer {i}") for i in range(100)]
    start_worker(concurrency=4, coordinators=2)
    wait_until(lambda: DependencyWait.select().count() == 100, timeout=60, what="every run to wait")
    # Cancel while the remote tasks finish and the coordinators resolve the waits.
    first_task_done = time.monotonic()
    wait_until(lambda: DependencyWait.select().where(DependencyWait.resolved_at.is_null(False)).count() > 0,
               timeout=30, interval=0.01, what="the first answers to come in")
    chunks = [run_ids[i::20] for i in range(20)]  # twenty cancelling threads (a connection each)
    barrier, outcomes = threading.Barrier(len(chunks)), {}
    threads = [threading.Thread(target=_cancel, args=(chunk, barrier, outcomes)) for chunk in chunks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(outcomes) == 100, f"cancels took {time.monotonic() - first_task_done:.1f}s"

    wait_until(lambda: Run.select().where(Run.status.in_(("completed", "cancelled"))).count() == 100, timeout=60,
               what="every run to end")
    by_resolution = {"cancelled": 0, "result": 0}
    for i, run_id in enumerate(run_ids):
        run = run_row(run_id)
        (wait,) = DependencyWait.select().where(DependencyWait.run == run_id)
        by_resolution[wait.resolution] += 1
        terminal = [s["to"] for s in event_payloads(run_id, "status")
                    if s["to"] in ("completed", "cancelled", "failed")]
        assert terminal == [run.status], f"run {run_id} ended {terminal}"
        if wait.resolution == "cancelled":  # the cancel won the wait: the answer never reached the run
            assert run.status == "cancelled" and tool_results(run_id) == []
            assert Outbound.select().where(Outbound.run == run_id, Outbound.kind == "cancel").count() == 1
        else:  # the answer won: the run resumed; the cancel (if it came later) stopped it, or it completed
            assert tool_results(run_id) == [f"answer {i}"]
            assert Outbound.select().where(Outbound.run == run_id, Outbound.kind == "cancel").count() == 0
            assert run.status == "cancelled" or run.output == f"Remote said: answer {i}"
    cancels = Outbound.select().where(Outbound.kind == "cancel")
    wait_until(lambda: all(c.outcome in ("accepted", "rejected") for c in cancels.clone()), timeout=30,
               what="every CancelTask to be answered")
    assert peer.calls["CancelTask"] == by_resolution["cancelled"] == cancels.count()
    assert by_resolution["cancelled"] > 0 and by_resolution["result"] > 0, by_resolution
    assert waits.current_wait(run_ids[0]) is None


def test_a_gate_closed_while_the_send_was_answered_gives_the_call_up_and_cancels_its_task(
        settings, peers, start_worker):
    from sidecar.store import consumers

    peer = peers.start(card="1.0")
    proxy = peers.lossy_proxy(peer, drop=())

    def host_reports_an_old_consumer():
        consumers.replace_report([{"name": "nr_mcp_agent", "version": "0.15.1"}])
        db.database.close()  # the proxy's thread is done with the store

    # The journal row passed the gate; between the peer's answer and the sidecar's suspension it closes.
    proxy.before_answering["SendMessage"] = host_reports_an_old_consumer
    register("research", proxy.url, poll=0.2)
    run_id = delegating_run("research", "work:30:too late")
    start_worker(concurrency=1)
    wait_until(lambda: run_row(run_id).status == "completed", timeout=30, what="the run to end without waiting")
    run = run_row(run_id)
    assert run.output.startswith("Remote said: error: delegation is not offered to this run: nr_mcp_agent 0.15.1")
    assert "waiting_for_dependency" not in [e["to"] for e in event_payloads(run_id, "status")]
    assert run.delegations_used == 1 and run.bytes_used > 0
    (sent,) = Outbound.select().where(Outbound.kind == "send")
    assert sent.outcome == "accepted"
    wait_until(lambda: peer.calls["CancelTask"] == 1, timeout=30, what="the remote task to be cancelled")
    assert peer.calls["SendMessage"] == 1 and peer.task_count == 1


def test_a_cancel_that_comes_while_the_wait_is_committed_ends_the_run_and_its_task(settings, peers, start_worker,
                                                                                 monkeypatch):
    # The cancel finds the run running (the send is journalled and answered), so it only marks it; then
    # the segment commits the wait. The cancel must not be lost: the run ends cancelled, with one CancelTask.
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=60)
    run_id = delegating_run("research", "work:30:never needed")
    original = waits.suspend

    def cancel_first(claim, *args, **kwargs):
        assert runs.request_cancel(claim.run_id, by="be_user:1") == "requested"
        return original(claim, *args, **kwargs)

    monkeypatch.setattr(waits, "suspend", cancel_first)
    worker = start_worker(concurrency=1)
    wait_until(lambda: run_row(run_id).status == "cancelled", what="the run to be cancelled")
    assert event_payloads(run_id, "status")[-1] == {"from": "waiting_for_dependency", "to": "cancelled",
                                              "by": "be_user:1"}
    wait_until(lambda: cancel_row().outcome == "accepted", what="the CancelTask to be answered")
    wait_for_ticks(worker)
    assert peer.calls["CancelTask"] == 1
