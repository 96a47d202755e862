"""Deadlines of a waiting run against a real a2a-sdk peer, on SQLite and PostgreSQL: the delegation's
deadline resumes the run with `timeout: ` and exactly one journalled CancelTask reaches the peer; the
run's own deadline cancels the task and fails the run; an unknown outcome is reconciled at the deadline
so its task is cancelled too."""


from sidecar.delegation.a2a import A2AClient, read_card
from sidecar.store.models import DependencyWait, Outbound
from tests.support.delegation import ON_A2A_DATABASES, delegating_run, register
from tests.support.runs import event_payloads, run_row, tool_results
from tests.support.waiting import wait_until
from tests.support.workers import wait_for_ticks

pytestmark = ON_A2A_DATABASES


def remote_state(peer, task_id: str) -> str:
    return A2AClient(read_card(peer.url, allow=["127.0.0.1"]), allow=["127.0.0.1"]).get_task(task_id).state


def ended(run_id: str):
    wait_until(lambda: run_row(run_id).status in ("completed", "failed", "cancelled"), timeout=30,
               what="the run to end")
    return run_row(run_id)


def test_the_delegations_deadline_gives_timeout_and_one_cancel_task(settings, peers, start_worker):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=0.2, deadline=1.0)
    run_id = delegating_run("research", "work:30:too late")
    worker = start_worker(concurrency=1, coordinators=2)  # two coordinators: still one CancelTask
    run = ended(run_id)

    assert run.status == "completed"
    (wait,) = DependencyWait.select()
    assert wait.resolution == "timeout"
    deadline = wait.deadline_at.isoformat(timespec="microseconds") + "Z"
    assert tool_results(run_id) == [f"timeout: no answer from the remote agent by the deadline {deadline}"]
    assert run.output.startswith("Remote said: timeout: ")
    send, cancel = Outbound.select().order_by(Outbound.created_at)
    wait_until(lambda: Outbound.get_by_id(cancel.id).outcome == "accepted", what="the CancelTask to be answered")
    cancel = Outbound.get_by_id(cancel.id)
    assert (cancel.kind, cancel.remote_task_id, cancel.message_id) == ("cancel", send.remote_task_id,
                                                                      cancel.message_id)
    assert '"method":"CancelTask"' in cancel.request_body and send.remote_task_id in cancel.request_body
    assert remote_state(peer, send.remote_task_id) == "canceled"
    wait_for_ticks(worker)  # many ticks later: nothing sent again
    assert peer.calls["CancelTask"] == 1 and peer.calls["SendMessage"] == 1
    assert [e["note"] for e in event_payloads(run_id, "outbound") if e["kind"] == "cancel"] == [
        "cancel journalled before sending", "cancel sent"]


def test_the_runs_deadline_cancels_the_task_and_fails_the_run(settings, peers, start_worker):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=0.2, deadline=600)
    run_id = delegating_run("research", "work:30:too late", deadline_seconds=1.5)
    worker = start_worker(concurrency=1)
    run = ended(run_id)

    assert (run.status, run.termination_reason) == ("failed", "deadline_exceeded")
    assert tool_results(run_id) == []
    assert DependencyWait.get().resolution == "deadline_exceeded"
    wait_until(lambda: peer.calls["CancelTask"] == 1, what="the CancelTask")
    send = Outbound.get(Outbound.kind == "send")
    wait_until(lambda: remote_state(peer, send.remote_task_id) == "canceled", what="the remote task to be canceled")
    wait_for_ticks(worker)
    assert peer.calls["CancelTask"] == 1
    assert Outbound.get(Outbound.kind == "cancel").outcome == "accepted"


def test_an_unknown_outcome_is_reconciled_at_the_deadline_and_its_task_cancelled(settings, peers, start_worker):
    peer = peers.start(card="1.0")
    proxy = peers.lossy_proxy(peer, drop=("SendMessage", "ListTasks"))
    register("research", proxy.url, poll=0.2, deadline=2.0)
    run_id = delegating_run("research", "work:30:lost and late")
    start_worker(concurrency=1)
    wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", what="the run to wait")
    assert Outbound.get().outcome == "outcome_unknown"
    proxy.drop.clear()  # from now on reconciliation can see the task

    run = ended(run_id)
    assert run.status == "completed" and run.output.startswith("Remote said: timeout: ")
    wait_until(lambda: Outbound.get(Outbound.kind == "cancel").outcome == "accepted", what="the CancelTask")
    send = Outbound.get(Outbound.kind == "send")
    (task_id,) = peer.tasks_in(send.context_id)
    assert (send.outcome, send.remote_task_id) == ("accepted", task_id)  # found by reconciliation
    assert remote_state(peer, task_id) == "canceled"
    assert peer.calls["CancelTask"] == 1 and peer.task_count == 1 and peer.calls["SendMessage"] == 1
