"""What the model gets from a delegation, exactly as the built-in tools table says (docs/http-api.md,
"Built-in tools"), the one-dependency-per-turn rule, and the run's budgets across a suspension; a real
a2a-sdk peer on SQLite and PostgreSQL."""

import json
import socket

import pytest

from sidecar.delegation import remote
from sidecar.store import remote_agents, runs, waits
from sidecar.store.models import DependencyWait, Outbound, RemoteAgent, Run
from tests.support.api import ACTOR
from tests.support.delegation import ON_A2A_DATABASES, register
from tests.support.runs import event_payloads, run_row, tool_results
from tests.support.waiting import wait_until

pytestmark = ON_A2A_DATABASES

FINAL = {"content": "Remote said: {last_tool_result}"}


def delegate(agent: str, message: str, *, call_id: str = "call_1", task_id: str | None = None, **turn) -> dict:
    arguments = {"agent": agent, "message": message}
    if task_id is not None:
        arguments["task_id"] = task_id
    return {"tool_calls": [{"id": call_id, "name": "delegate_to_agent", "arguments": arguments}], **turn}


def spec_of(script) -> dict:
    return {"provider": "scripted", "script": list(script)}


def scripted_run(*script, **budget) -> str:
    return runs.create_run(ACTOR, "delegation outcomes", spec=spec_of(script), budget=budget)


def finished(run_id: str, timeout: float = 30) -> Run:
    wait_until(lambda: run_row(run_id).status in ("completed", "failed", "cancelled"), timeout=timeout,
               what="the run to end")
    return run_row(run_id)


def statuses(run_id: str) -> list[str]:
    return [e["to"] for e in event_payloads(run_id, "status")]


def remote_state(settings, agent: str, task_id: str) -> str:
    return remote.client_for(remote_agents.get_agent(agent), settings).get_task(task_id).state


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- results by what the remote did --------------------------------------------------------------------


def test_an_answer_already_terminal_in_the_send_resolves_in_the_same_segment(settings, peers, start_worker):
    peer = peers.start(card="1.0")
    register("research", peer.url)
    run_id = scripted_run(delegate("research", "complete:the answer"), FINAL)
    start_worker(concurrency=1)
    run = finished(run_id)
    assert (run.status, run.output) == ("completed", "Remote said: the answer")
    assert tool_results(run_id) == ["the answer"]
    assert "waiting_for_dependency" not in statuses(run_id)
    assert statuses(run_id) == ["queued", "running", "completed"]  # one segment, never suspended
    assert DependencyWait.select().count() == 0 and event_payloads(run_id, "pause") == []
    (row,) = Outbound.select()
    assert (row.outcome, row.remote_task_id) == ("accepted", peer.tasks_in(row.context_id)[0])
    assert peer.task_count == 1 and peer.calls["GetTask"] == 0
    assert run.delegations_used == 1


@pytest.mark.parametrize(("message", "expected"), [
    ("work:0.2:slow answer", "slow answer"),
    ("fail:the disk is full", "error: remote task failed: the disk is full"),
    ("reject:not my kind of work", "error: remote task rejected: not my kind of work"),
    ("auth:sign in at the portal", "auth-required: sign in at the portal task_id={task_id}"),
])
def test_what_a_remote_task_ends_with_is_the_tool_result(settings, peers, start_worker, message, expected):
    peer = peers.start(card="1.0")
    register("research", peer.url)
    run_id = scripted_run(delegate("research", message), FINAL)
    start_worker(concurrency=1)
    run = finished(run_id)
    (row,) = Outbound.select()
    text = expected.format(task_id=row.remote_task_id)
    assert tool_results(run_id) == [text]
    assert (run.status, run.output) == ("completed", f"Remote said: {text}")
    assert "waiting_for_dependency" in statuses(run_id)  # the send's answer was not final yet
    assert len(event_payloads(run_id, "resume")) == 1
    assert peer.task_count == 1 and peer.calls["SendMessage"] == 1
    assert row.remote_task_id in peer.tasks_in(row.context_id)


def test_a_direct_message_is_the_result_and_creates_no_task(settings, peers, start_worker):
    peer = peers.start(card="1.0")
    register("research", peer.url)
    run_id = scripted_run(delegate("research", "message:hello from the remote"), FINAL)
    start_worker(concurrency=1)
    run = finished(run_id)
    assert tool_results(run_id) == ["hello from the remote"]
    assert (run.status, run.output) == ("completed", "Remote said: hello from the remote")
    assert "waiting_for_dependency" not in statuses(run_id)
    assert peer.task_count == 0 and peer.calls["SendMessage"] == 1
    (row,) = Outbound.select()
    assert (row.outcome, row.remote_task_id) == ("accepted", None)
    assert run.delegations_used == 1


def test_a_remote_that_asks_for_input_is_answered_on_the_same_task(settings, peers, start_worker):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=60)  # polled only when the test says so
    run_id = scripted_run(delegate("research", "input:which colour?"), FINAL)
    start_worker(concurrency=1)
    wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", what="the run to wait")
    (first,) = Outbound.select()
    task_id = first.remote_task_id
    assert task_id
    wait_until(lambda: remote_state(settings, "research", task_id) == "input-required", what="the remote to ask")

    # The model's next turn answers on the task named in the result (the scripted model is told now; the
    # first turn is saved already and is replayed as it was).
    script = [delegate("research", "input:which colour?"),
              delegate("research", "blue", call_id="call_2", task_id=task_id),
              {"content": "Finally: {last_tool_result}"}]
    Run.update(spec=json.dumps(spec_of(script), sort_keys=True)).where(Run.id == run_id).execute()
    assert waits.poll_now(waits.current_wait(run_id).id)

    run = finished(run_id)
    assert tool_results(run_id) == [f"input-required: which colour? task_id={task_id}", "answer: blue"]
    assert (run.status, run.output) == ("completed", "Finally: answer: blue")
    assert peer.task_count == 1 and peer.calls["SendMessage"] == 2
    second = Outbound.get(Outbound.tool_call_id == "call_2")
    assert (second.remote_task_id, second.context_id, second.outcome) == (task_id, first.context_id, "accepted")
    assert run.delegations_used == 2


def test_a_peer_that_lost_the_task_gives_an_error_not_an_endless_wait(settings, peers, start_worker):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=0.2)
    run_id = scripted_run(delegate("research", "work:5:too late"), FINAL)
    start_worker(concurrency=1)
    wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", what="the run to wait")
    (row,) = Outbound.select()
    peer.restart()  # every task forgotten: GetTask answers -32001

    run = finished(run_id, timeout=15)
    text = f"error: the remote agent no longer knows task {row.remote_task_id}"
    assert tool_results(run_id) == [text]
    assert (run.status, run.output) == ("completed", f"Remote said: {text}")
    assert peer.task_count == 0 and peer.calls["SendMessage"] == 1


def test_an_unknown_remote_agent_is_an_error_result(settings, peers, start_worker):
    peer = peers.start(card="1.0")
    register("research", peer.url)
    run_id = scripted_run(delegate("nobody", "complete:x"), FINAL)
    start_worker(concurrency=1)
    run = finished(run_id)
    (result,) = tool_results(run_id)
    assert result.startswith("error: unknown remote agent ") and "nobody" in result
    assert run.status == "completed" and run.delegations_used == 0
    assert Outbound.select().count() == 0 and peer.calls == {}


def test_a_closed_port_is_unreachable_and_costs_no_delegation(settings, start_worker):
    assert settings.remote_allow == ("127.0.0.1",)
    register("gone", f"http://127.0.0.1:{closed_port()}")
    run_id = scripted_run(delegate("gone", "complete:x"), FINAL, max_delegations=1)
    start_worker(concurrency=1)
    run = finished(run_id)
    (result,) = tool_results(run_id)
    assert result.startswith("error: remote agent gone unreachable")
    assert (run.status, run.delegations_used, run.bytes_used) == ("completed", 0, 0)
    assert "waiting_for_dependency" not in statuses(run_id)


# --- one dependency per turn ---------------------------------------------------------------------------


@pytest.mark.parametrize("delegation_first", [True, False])
def test_a_delegation_beside_another_tool_runs_neither(settings, peers, start_worker, delegation_first):
    peer = peers.start(card="1.0")
    register("research", peer.url)
    calls = [{"id": "call_d", "name": "delegate_to_agent", "arguments": {"agent": "research", "message": "complete:x"}},
             {"id": "call_e", "name": "echo", "arguments": {"text": "echoed"}}]
    if not delegation_first:
        calls.reverse()
    run_id = scripted_run({"tool_calls": calls}, {"content": "then: {last_tool_result}"})
    start_worker(concurrency=1)
    run = finished(run_id)

    results = tool_results(run_id)
    assert len(results) == 2
    for result in results:
        assert result.startswith("error: ")
        assert "delegate_to_agent must be the only tool call of its turn" in result and "none of them ran" in result
    assert "echoed" not in results
    assert (run.status, run.output) == ("completed", f"then: {results[-1]}")  # the model got another turn
    assert run.iterations_used == 2
    assert peer.calls == {} and peer.task_count == 0
    assert Outbound.select().count() == 0 and DependencyWait.select().count() == 0
    assert run.delegations_used == 0


# --- budgets -------------------------------------------------------------------------------------------


def _two_delegations_with_a_budget_of_one(first: str) -> str:
    """A run that delegates `first`, then another message, with one delegation allowed."""
    return scripted_run(
        delegate("research", first, tokens=10, cost=0.5),
        delegate("research", "complete:second", call_id="call_2", tokens=10, cost=0.5),
        {"content": "{last_tool_result}", "tokens": 10, "cost": 0.5},
        max_delegations=1,
    )


def test_the_delegation_budget_and_the_counters_survive_a_suspension(settings, peers, start_worker):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=60)  # polled only when the test says so
    run_id = _two_delegations_with_a_budget_of_one("work:0.05:first")
    start_worker(concurrency=1)
    wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", what="the run to wait")
    before = run_row(run_id)
    (row,) = Outbound.select()
    assert before.delegations_used == 1
    assert before.bytes_used >= len(row.request_body) > 0
    assert (before.iterations_used, before.tokens_used, before.cost_used) == (1, 10, 0.5)
    wait_until(lambda: remote_state(settings, "research", row.remote_task_id) == "completed", what="the remote")
    assert waits.poll_now(waits.current_wait(run_id).id)

    after = finished(run_id)
    assert tool_results(run_id) == ["first", "error: delegation budget exhausted (1 of 1 used)"]
    assert (after.status, after.output) == ("completed", "error: delegation budget exhausted (1 of 1 used)")
    # Counted on from where the suspension left them, not from the start.
    assert after.delegations_used == 1
    # The answer to the poll that carried "first" counts too (a task document around the text).
    assert after.bytes_used - before.bytes_used > len("first")
    assert (after.iterations_used, after.tokens_used, after.cost_used) == (3, 30, 1.5)
    assert peer.calls["SendMessage"] == 1 and peer.task_count == 1 and Outbound.select().count() == 1


def test_a_delegation_answered_at_once_spends_the_budget_its_segment_then_sees(settings, peers, start_worker):
    """A segment goes by the counters its claim read until one of its delegations may have spent some."""
    peer = peers.start(card="1.0")
    register("research", peer.url)
    run_id = _two_delegations_with_a_budget_of_one("complete:first")
    start_worker(concurrency=1)
    run = finished(run_id)
    assert statuses(run_id) == ["queued", "running", "completed"]  # one segment
    assert tool_results(run_id) == ["first", "error: delegation budget exhausted (1 of 1 used)"]
    assert (run.delegations_used, peer.task_count) == (1, 1)


def test_a_send_not_delivered_costs_no_delegation(settings, peers, start_worker):
    down = peers.start(card="1.0")
    register("down", down.url)
    remote.client_for(remote_agents.get_agent("down"), settings)  # its card was read while it was up
    assert RemoteAgent.get(RemoteAgent.name == "down").endpoint
    down.stop()  # then it went away: the send is refused before any byte leaves
    # Its port stays closed (bound, not listening): a peer started later, here or by a test beside this one,
    # could otherwise be given that port and answer the send meant for the agent that went away.
    closed = socket.socket()
    closed.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    closed.bind(("127.0.0.1", down.port))
    up = peers.start(card="1.0")
    register("up", up.url)
    run_id = scripted_run(
        delegate("down", "complete:never"),
        delegate("up", "complete:delivered", call_id="call_2"),
        FINAL,
        max_delegations=1,
    )
    start_worker(concurrency=1)
    run = finished(run_id)
    closed.close()

    first, second = tool_results(run_id)
    assert first.startswith("error: remote agent down unreachable")
    assert second == "delivered"  # the budget of one delegation was still there
    assert (run.status, run.output, run.delegations_used) == ("completed", "Remote said: delivered", 1)
    journal = {r.remote_agent: r for r in Outbound.select()}
    assert journal["down"].outcome == "not_delivered"
    assert journal["up"].outcome == "accepted"
    assert down.calls == {} and up.task_count == 1
