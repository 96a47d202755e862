"""A worker process killed in the middle of a delegation: never two tasks on the peer, the run never lost.

The worker is killed (SIGKILL, from a failpoint) right after the journal commit and before the send, and
right after the send and before its outcome and the suspension are committed. Another worker takes the
run over after the lease; it finds the journal row still `pending`, which may have left, so the run waits
with `outcome_unknown` and nothing is sent again; the wait's polls reconcile it, and a task the send made
is found and gives the result.
"""


import pytest

from sidecar.store.models import Outbound
from tests.support.delegation import ON_A2A_DATABASES, delegating_run, register
from tests.support.runs import event_payloads, run_row
from tests.support.waiting import wait_until
from tests.support.workers import start_worker_process, stop_process

pytestmark = [pytest.mark.slow, *ON_A2A_DATABASES]

WORKER_ENV = {"NRLLM_REMOTE_ALLOW": "127.0.0.1"}


@pytest.mark.parametrize("failpoint, tasks_on_peer", [
    ("delegation.after_journal", 0),
    ("delegation.after_send", 1),
])
def test_a_worker_killed_mid_delegation_never_makes_a_second_task(
        database_url, settings, peers, tmp_path, failpoint, tasks_on_peer):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=0.2)
    run_id = delegating_run("research", "work:0.5:the answer")
    doomed = start_worker_process(database_url, lease=1.0, env={**WORKER_ENV, "NRLLM_FAILPOINT": failpoint},
                                  log_path=tmp_path / "doomed.log")
    assert doomed.wait(30) == -9, "the worker did not reach the failpoint"
    (journalled,) = Outbound.select()
    assert journalled.outcome == "pending"
    assert peer.task_count == tasks_on_peer

    survivor = start_worker_process(database_url, lease=1.0, env=WORKER_ENV, log_path=tmp_path / "survivor.log")
    try:
        wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", timeout=30,
                   what="the run to be taken over and wait")
        wait_until(lambda: Outbound.get_by_id(journalled.id).outcome == "outcome_unknown", timeout=10,
                   what="the journal row to show an unknown outcome")
        pause = event_payloads(run_id, "pause")[-1]
        assert (pause["outcome"], pause["outbound_id"]) == ("outcome_unknown", journalled.id)
        if tasks_on_peer:  # the wait's polls reconcile: the task the lost send made is found and answers
            wait_until(lambda: run_row(run_id).status == "completed", timeout=30, what="the run to complete")
            assert run_row(run_id).output == "Remote said: the answer"
            assert Outbound.get_by_id(journalled.id).outcome == "accepted"
        else:
            wait_until(lambda: peer.calls["ListTasks"] >= 3, timeout=30, what="reconciliation at later polls")
            assert run_row(run_id).status == "waiting_for_dependency"  # no task was found: it waits on
        assert peer.calls["SendMessage"] == tasks_on_peer and peer.task_count == tasks_on_peer  # never resent
        assert Outbound.select().count() == 1
        assert run_row(run_id).requeue_count == 1
    finally:
        stop_process(survivor)


def test_a_gate_closed_between_the_send_and_its_retry_gives_the_call_up_and_cancels_its_task(
        database_url, settings, peers, tmp_path):
    from sidecar.store import consumers

    peer = peers.start(card="1.0")
    register("research", peer.url, poll=0.2)
    run_id = delegating_run("research", "work:30:too late")
    doomed = start_worker_process(database_url, lease=1.0,
                                  env={**WORKER_ENV, "NRLLM_FAILPOINT": "delegation.after_send"},
                                  log_path=tmp_path / "doomed.log")
    assert doomed.wait(30) == -9, "the worker did not reach the failpoint"
    (sent,) = Outbound.select()
    assert (sent.outcome, peer.task_count) == ("pending", 1)
    # The host now reports a consumer that cannot read waiting_for_dependency: the run may not wait.
    consumers.replace_report([{"name": "nr_mcp_agent", "version": "0.15.1"}])

    survivor = start_worker_process(database_url, lease=1.0, env=WORKER_ENV, log_path=tmp_path / "survivor.log")
    try:
        wait_until(lambda: run_row(run_id).status == "completed", timeout=30, what="the run to end without waiting")
        run = run_row(run_id)
        assert run.output.startswith("Remote said: error: tool 'delegate_to_agent' is not offered to this run: "
                                     "nr_mcp_agent 0.15.1")
        assert "waiting_for_dependency" not in [e["to"] for e in event_payloads(run_id, "status")]
        # It may have left: never left pending (unknown, then accepted once reconciliation finds its task).
        assert Outbound.get_by_id(sent.id).outcome in ("outcome_unknown", "accepted")
        assert "found pending by a retry: it may have left" in [e["note"] for e in event_payloads(run_id, "outbound")]
        assert run.delegations_used == 1
        # Its task is found by reconciliation and cancelled, once; nothing is sent again.
        wait_until(lambda: peer.calls["CancelTask"] == 1, timeout=30, what="the remote task to be cancelled")
        assert peer.calls["SendMessage"] == 1 and peer.task_count == 1
    finally:
        stop_process(survivor)
