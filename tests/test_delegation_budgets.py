"""The transfer budget (`max_bytes`) of a delegation: a request that would take the run past it is refused
before anything is journalled or sent; a real a2a-sdk peer on SQLite and PostgreSQL."""

import uuid

from sidecar.delegation import remote
from sidecar.delegation.ids import context_id_for, message_id_for
from sidecar.store import remote_agents, runs
from sidecar.store.models import DependencyWait, Outbound
from tests.support.api import ACTOR
from tests.support.delegation import ON_A2A_DATABASES, register
from tests.support.runs import run_row, tool_results
from tests.support.waiting import wait_until

pytestmark = ON_A2A_DATABASES

FINAL = {"content": "Remote said: {last_tool_result}"}


def delegate(agent: str, message: str, *, call_id: str = "call_1") -> dict:
    return {"tool_calls": [{"id": call_id, "name": "delegate_to_agent",
                            "arguments": {"agent": agent, "message": message}}]}


def scripted_run(*script, run_id: str | None = None, **budget) -> str:
    return runs.create_run(ACTOR, "delegation budgets", spec={"provider": "scripted", "script": list(script)},
                           budget=budget, run_id=run_id)


def finished(run_id: str, timeout: float = 30):
    wait_until(lambda: run_row(run_id).status in ("completed", "failed", "cancelled"), timeout=timeout,
               what="the run to end")
    return run_row(run_id)


def request_size(settings, agent: str, run_id: str, call_id: str, message: str) -> int:
    """The size the budget is checked against: the exact body the run's call would send (its ids follow from
    the run id and the call id; no push target, as the agent is registered without pushes)."""
    client = remote.client_for(remote_agents.get_agent(agent), settings)
    body = client.build_send(message_id_for(run_id, call_id), context_id_for(run_id, call_id), message)
    return len(body)


def test_a_request_larger_than_the_transfer_budget_is_refused_and_nothing_is_sent(settings, peers, start_worker):
    # Fails if the check on max_bytes were gone or came after the send: the peer would count a SendMessage and
    # a task, the journal a row, and the tool result would be "the answer".
    peer = peers.start(card="1.0")
    register("research", peer.url)
    run_id = scripted_run(delegate("research", "complete:the answer"), FINAL, max_bytes=10)
    start_worker(concurrency=1)
    run = finished(run_id)

    refusal = "error: transfer budget exhausted (0 of 10 bytes used)"
    assert tool_results(run_id) == [refusal]
    assert (run.status, run.output) == ("completed", f"Remote said: {refusal}")
    assert peer.task_count == 0 and peer.calls["SendMessage"] == 0 and peer.calls["message/send"] == 0
    assert Outbound.select().count() == 0 and DependencyWait.select().count() == 0
    assert (run.delegations_used, run.bytes_used) == (0, 0)  # a refused delegation costs nothing


def test_the_budget_is_checked_against_the_exact_request(settings, peers, start_worker):
    # One byte short of the request is refused; exactly the request is sent. Fails if the check compared
    # something else than the request's size (an estimate, the message alone) or with >= instead of >.
    peer = peers.start(card="1.0")
    register("research", peer.url)
    message = "complete:the answer"
    short_id, exact_id = str(uuid.uuid4()), str(uuid.uuid4())
    size = request_size(settings, "research", short_id, "call_1", message)
    assert request_size(settings, "research", exact_id, "call_1", message) == size > len(message)
    scripted_run(delegate("research", message), FINAL, run_id=short_id, max_bytes=size - 1)
    start_worker(concurrency=1)
    short = finished(short_id)
    assert tool_results(short_id) == [f"error: transfer budget exhausted (0 of {size - 1} bytes used)"]
    assert peer.calls["SendMessage"] == 0 and peer.task_count == 0 and short.bytes_used == 0

    scripted_run(delegate("research", message), FINAL, run_id=exact_id, max_bytes=size)
    exact = finished(exact_id)
    assert tool_results(exact_id) == ["the answer"]
    assert (exact.status, exact.output) == ("completed", "Remote said: the answer")
    assert peer.calls["SendMessage"] == 1 and peer.task_count == 1
    (row,) = Outbound.select()
    assert len(row.request_body) == size  # what was sent is what the budget was checked against
    assert exact.bytes_used > size  # the answer counts too


def test_bytes_spent_by_an_earlier_delegation_count_against_the_next(settings, peers, start_worker):
    # The first request fits; the second would fit an empty budget but not what is left of it. Fails if the
    # check ignored bytes_used (the second request would be sent: two SendMessage calls, two journal rows).
    peer = peers.start(card="1.0")
    register("research", peer.url)
    run_id = str(uuid.uuid4())
    first = request_size(settings, "research", run_id, "call_1", "complete:first")
    second = request_size(settings, "research", run_id, "call_2", "complete:second")
    limit = first + second - 1  # both would fit, were the first's answer free: it is not
    scripted_run(delegate("research", "complete:first"), delegate("research", "complete:second", call_id="call_2"),
                 FINAL, run_id=run_id, max_bytes=limit)
    start_worker(concurrency=1)
    run = finished(run_id)

    spent = run.bytes_used
    assert first < spent and spent + second > limit  # the first's request and its answer
    refusal = f"error: transfer budget exhausted ({spent} of {limit} bytes used)"
    assert tool_results(run_id) == ["first", refusal]
    assert (run.status, run.output) == ("completed", f"Remote said: {refusal}")
    assert peer.calls["SendMessage"] == 1 and peer.task_count == 1 and Outbound.select().count() == 1
    assert run.delegations_used == 1
