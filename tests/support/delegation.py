"""Delegation to remote agents: real a2a-sdk peers (`peers`), the consumers' gate opened for delegation
(`delegation_offered`), registered agents, delegating runs and journalled sends.

A module of delegation flows marks itself `pytestmark = ON_A2A_DATABASES`."""

import json
import uuid
from datetime import timedelta

import pytest

from sidecar.domain import push_tokens
from sidecar.domain.clock import utcnow
from sidecar.store import consumers, leases, outbound, remote_agents, runs, status_guard, waits
from sidecar.store.models import DependencyWait
from sidecar.store.remote_agents import AgentFields
from tests.support.peers import PeerPool
from tests.support.segments import LEASE

A2A_DATABASES = ["sqlite", "postgresql"]  # the A2A flows run on these (docs/architecture.md, "Databases and processes")


@pytest.fixture
def delegation_offered(settings):
    """The consumers' gate open, as after a host's empty report: runs may delegate."""
    consumers.replace_report([])


@pytest.fixture
def every_status_writable(database_url):
    """A gate that lets every status be written, for store tests that build no app (which would install the
    real one)."""
    status_guard.install(lambda status, origin, reported_at: None)
    yield
    status_guard.install(None)


# The database parameters of the A2A flows, with delegation offered.
ON_A2A_DATABASES = [pytest.mark.parametrize("database_url", A2A_DATABASES, indirect=True),
                    pytest.mark.usefixtures("delegation_offered")]


@pytest.fixture
def peers():
    with PeerPool() as pool:
        yield pool


def register(name: str, url: str, *, poll: float = 0.2, deadline: float = 600.0, push: bool = False) -> None:
    remote_agents.create_agent(name, AgentFields(url=url, poll_interval_seconds=poll, deadline_seconds=deadline,
                                                 push=push))


def delegating_run(agent: str, message: str, *, then: str = "Remote said: {last_tool_result}", **budget) -> str:
    script = [
        {"tool_calls": [{"id": "call_1", "name": "delegate_to_agent",
                         "arguments": {"agent": agent, "message": message}}]},
        {"content": then},
    ]
    return runs.create_run("be_user:7", f"delegate {message}", spec={"provider": "scripted", "script": script},
                           budget=budget)


def journalled_send(*, outcome: str = "accepted", push: bool = False):
    """A claimed run with a journalled send (accepted with task `task-<run>`, another outcome, or `pending`:
    none recorded yet), and with `push` the push token its body registers (journalled masked, as
    delegation/start.py does)."""
    run_id = runs.create_run("owner", "x", wake=False)
    (claim,) = leases.claim_queued("w", 1, LEASE)
    token = push_tokens.new_push_token(run_id) if push else None
    body = push_tokens.mask(send_body(token), token) if push else '{"x": 1}'
    row, _ = outbound.record_send(claim, owner="owner", remote_agent="research", message_id=str(uuid.uuid4()),
                                  tool_call_id="call_1", context_id=str(uuid.uuid4()), body=body, push_token=token)
    if outcome != "pending":
        task_id = f"task-{run_id}" if outcome == "accepted" else None
        outbound.record_outcome(claim, row.id, outcome, remote_task_id=task_id)
    return claim, outbound.get(row.id), token


def suspend_on(claim, row, *, deadline_in: float = 3600, poll: float | None = 60,
               push_token: str | None = None, answer_task: str | None = None) -> DependencyWait:
    """Suspend the claimed run on the send `row` (a journalled_send()), on the remote agent "research"; with
    `answer_task`, the suspension records the send's answer (accepted, that task) on the row."""
    now = utcnow()
    outcome, task_id = ("accepted", answer_task) if answer_task else (row.outcome, row.remote_task_id)
    suspension = waits.Suspension(
        tool_call_id="call_1", turn_index=0, remote_agent="research", outbound_id=row.id, outcome=outcome,
        remote_task_id=task_id, checkpoint="sealed", key_fingerprint="f" * 16,
        deadline_at=now + timedelta(seconds=deadline_in),
        next_poll_at=now + timedelta(seconds=poll) if poll is not None else None,
        push_token_sha256=push_tokens.digest(push_token) if push_token else None)
    waits.suspend(claim, suspension, delegations=1, bytes_used=8, record_outcome=answer_task is not None)
    return waits.current_wait(claim.run_id)


def send_body(token: str) -> str:
    """A send whose push config carries `token`, as the A2A client builds it."""
    return json.dumps({"jsonrpc": "2.0", "id": "m", "method": "SendMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "work"}]},
        "configuration": {"taskPushNotificationConfig": {"url": "http://sidecar.example/api/v1/push",
                                                          "token": token}}}})
