"""Delegation to a peer whose card says A2A 0.3 (as the a2a-sdk serves it, and a pre-1.0 card): the
sidecar speaks `message/send` with `blocking: false`, `tasks/get`, `tasks/cancel` and lowercase states,
and never a 1.0 method; a real a2a-sdk peer through its 0.3 compatibility routes, on SQLite and
PostgreSQL. The happy path, an input-required follow-up, the result texts, a cancel while waiting, and
both deadlines."""

import json

import pytest

from sidecar.delegation.a2a import A2AClient, read_card
from sidecar.store import runs, waits
from sidecar.store.models import DependencyWait, Outbound, RemoteAgent, Run
from tests.support.api import ACTOR
from tests.support.delegation import ON_A2A_DATABASES, register
from tests.support.runs import event_payloads, run_row, tool_results
from tests.support.waiting import wait_until
from tests.support.workers import wait_for_ticks

pytestmark = ON_A2A_DATABASES

V03_CARDS = ["0.3", "0.3-legacy"]
FINAL = {"content": "Remote said: {last_tool_result}"}
V10_METHODS = {"SendMessage", "GetTask", "CancelTask", "ListTasks"}


def delegate(message: str, *, call_id: str = "call_1", task_id: str | None = None) -> dict:
    arguments = {"agent": "legacy", "message": message}
    if task_id is not None:
        arguments["task_id"] = task_id
    return {"tool_calls": [{"id": call_id, "name": "delegate_to_agent", "arguments": arguments}]}


def scripted_run(*script) -> str:
    return runs.create_run(ACTOR, "0.3 delegation", spec={"provider": "scripted", "script": list(script)})


def finished(run_id: str, timeout: float = 30) -> Run:
    wait_until(lambda: run_row(run_id).status in ("completed", "failed", "cancelled"), timeout=timeout,
               what="the run to end")
    return run_row(run_id)


def sent_request(row: Outbound) -> dict:
    return json.loads(row.request_body)


def assert_spoke_only_0_3(peer) -> None:
    assert not V10_METHODS & set(peer.calls), f"a 1.0 method reached a 0.3 peer: {dict(peer.calls)}"


def remote_state(peer, task_id: str) -> str:
    client = A2AClient(read_card(peer.url, allow=["127.0.0.1"]), allow=["127.0.0.1"])
    assert client.dialect == "0.3"
    return client.get_task(task_id).state


def the_cancel() -> Outbound:
    return Outbound.get(Outbound.kind == "cancel")


def assert_one_tasks_cancel(peer, send: Outbound, worker) -> None:
    wait_until(lambda: the_cancel().outcome == "accepted", what="the tasks/cancel to be answered")
    cancel = the_cancel()
    assert json.loads(cancel.request_body)["method"] == "tasks/cancel"
    assert cancel.remote_task_id == send.remote_task_id
    wait_until(lambda: remote_state(peer, send.remote_task_id) == "canceled", what="the remote task to be canceled")
    wait_for_ticks(worker)  # many ticks later: nothing sent again
    assert peer.calls["tasks/cancel"] == 1 and peer.calls["message/send"] == 1
    assert_spoke_only_0_3(peer)


@pytest.mark.parametrize("card", V03_CARDS)
def test_a_delegation_completes_through_message_send_and_tasks_get(settings, peers, start_worker, card):
    peer = peers.start(card=card)
    register("legacy", peer.url)
    run_id = scripted_run(delegate("work:1:forty-two"), FINAL)
    start_worker(concurrency=1)
    wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", what="the run to wait")
    assert json.loads(RemoteAgent.get_by_id("legacy").endpoint)["protocol_version"] == "0.3"

    run = finished(run_id)
    assert (run.status, run.output) == ("completed", "Remote said: forty-two")
    assert tool_results(run_id) == ["forty-two"]
    (row,) = Outbound.select()
    request = sent_request(row)
    assert request["method"] == "message/send"
    assert request["params"]["configuration"] == {"blocking": False}
    message = request["params"]["message"]
    assert (message["kind"], message["role"], message["parts"]) == (
        "message", "user", [{"kind": "text", "text": "work:1:forty-two"}])
    assert (row.outcome, row.remote_task_id) == ("accepted", peer.tasks_in(row.context_id)[0])
    assert peer.task_count == 1 and peer.calls["message/send"] == 1
    assert peer.calls["tasks/get"] >= 1
    assert_spoke_only_0_3(peer)


@pytest.mark.parametrize("card", V03_CARDS)
def test_input_required_is_answered_on_the_same_0_3_task(settings, peers, start_worker, card):
    peer = peers.start(card=card)
    register("legacy", peer.url, poll=60)
    run_id = scripted_run(delegate("input:which colour?"), FINAL)
    # No coordinator yet: nothing polls the task before the script below knows its id (a first poll soon
    # after the suspension would otherwise resume the run with the script it has now).
    start_worker(concurrency=1, coordinators=0)
    wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", what="the run to wait")
    (first,) = Outbound.select()
    task_id = first.remote_task_id
    assert task_id

    script = [delegate("input:which colour?"), delegate("blue", call_id="call_2", task_id=task_id),
              {"content": "Finally: {last_tool_result}"}]
    Run.update(spec=json.dumps({"provider": "scripted", "script": script}, sort_keys=True)).where(
        Run.id == run_id).execute()
    assert waits.poll_now(waits.current_wait(run_id).id)
    start_worker(concurrency=1)  # its coordinator polls, the resumed run continues on either worker

    run = finished(run_id)
    assert tool_results(run_id) == [f"input-required: which colour? task_id={task_id}", "answer: blue"]
    assert (run.status, run.output) == ("completed", "Finally: answer: blue")
    second = Outbound.get(Outbound.tool_call_id == "call_2")
    follow_up = sent_request(second)["params"]["message"]
    assert (follow_up["taskId"], follow_up["contextId"]) == (task_id, first.context_id)
    assert (second.remote_task_id, second.outcome) == (task_id, "accepted")
    assert peer.task_count == 1 and peer.calls["message/send"] == 2 and peer.calls["tasks/get"] >= 1
    assert_spoke_only_0_3(peer)


@pytest.mark.parametrize(("message", "expected"), [
    ("complete:at once", "at once"),
    ("fail:the disk is full", "error: remote task failed: the disk is full"),
    ("reject:not my kind of work", "error: remote task rejected: not my kind of work"),
    ("auth:sign in at the portal", "auth-required: sign in at the portal task_id={task_id}"),
    ("message:hello from 0.3", "hello from 0.3"),
])
def test_what_a_0_3_task_ends_with_is_the_tool_result(settings, peers, start_worker, message, expected):
    peer = peers.start(card="0.3-legacy")
    register("legacy", peer.url)
    run_id = scripted_run(delegate(message), FINAL)
    start_worker(concurrency=1)
    run = finished(run_id)
    (row,) = Outbound.select()
    text = expected.format(task_id=row.remote_task_id)
    assert tool_results(run_id) == [text]
    assert (run.status, run.output) == ("completed", f"Remote said: {text}")
    assert peer.calls["message/send"] == 1
    assert_spoke_only_0_3(peer)


@pytest.mark.parametrize("card", V03_CARDS)
def test_cancelling_a_run_waiting_on_a_0_3_peer_sends_one_tasks_cancel(settings, peers, start_worker, client,
                                                                     host_headers, card):
    peer = peers.start(card=card)
    register("legacy", peer.url, poll=60)
    run_id = scripted_run(delegate("work:30:never needed"), FINAL)
    worker = start_worker(concurrency=1, coordinators=2)
    wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", what="the run to wait")

    answer = client.post(f"/api/v1/runs/{run_id}/cancel", headers=host_headers)
    assert (answer.status_code, answer.get_json()["status"]) == (200, "cancelled")
    assert DependencyWait.get().resolution == "cancelled"
    assert_one_tasks_cancel(peer, Outbound.get(Outbound.kind == "send"), worker)
    assert run_row(run_id).status == "cancelled" and tool_results(run_id) == []


def test_the_delegations_deadline_on_a_0_3_peer_gives_timeout_and_one_tasks_cancel(settings, peers, start_worker):
    peer = peers.start(card="0.3-legacy")
    register("legacy", peer.url, poll=0.2, deadline=1.0)
    run_id = scripted_run(delegate("work:30:too late"), FINAL)
    worker = start_worker(concurrency=1, coordinators=2)
    run = finished(run_id)

    assert run.status == "completed" and run.output.startswith("Remote said: timeout: ")
    assert DependencyWait.get().resolution == "timeout"
    (result,) = tool_results(run_id)
    assert result.startswith("timeout: no answer from the remote agent by the deadline ")
    assert_one_tasks_cancel(peer, Outbound.get(Outbound.kind == "send"), worker)
    assert peer.calls["tasks/get"] >= 1


def test_the_runs_deadline_on_a_0_3_peer_cancels_the_task_and_fails_the_run(settings, peers, start_worker):
    peer = peers.start(card="0.3")
    register("legacy", peer.url, poll=0.2, deadline=600)
    run_id = runs.create_run(ACTOR, "0.3 deadline", spec={"provider": "scripted",
                                                          "script": [delegate("work:30:too late"), FINAL]},
                             budget={"deadline_seconds": 1.5})
    worker = start_worker(concurrency=1)
    run = finished(run_id)

    assert (run.status, run.termination_reason) == ("failed", "deadline_exceeded")
    assert DependencyWait.get().resolution == "deadline_exceeded" and tool_results(run_id) == []
    assert_one_tasks_cancel(peer, Outbound.get(Outbound.kind == "send"), worker)
    assert [e["note"] for e in event_payloads(run_id, "outbound") if e["kind"] == "cancel"] == [
        "cancel journalled before sending", "cancel sent"]
