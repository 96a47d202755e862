"""What a whole delegation cycle writes, counted with SQLite's statement trace (the other databases run the
same store code): the segment that delegates, the poll that finds the answer and the segment that ends the
run commit six transactions, each with one UPDATE of the run row. A transaction or an update more is a cost
every delegation pays (docs/performance.md, "The delegation cycle"). Each of them inserts the events it
takes sequences for in one statement. And a push, read in one statement of the columns it needs."""

import re

import pytest

from sidecar.delegation import push
from sidecar.delegation.coordinator import Coordinator
from sidecar.delegation.remote import client_for
from sidecar.domain.errors import Unauthenticated
from sidecar.domain.vocabulary import SegmentOutcome
from sidecar.store import db as store_db
from sidecar.store import events, remote_agents, waits
from sidecar.store.models import DependencyWait, Outbound
from tests.support.delegation import delegating_run, register
from tests.support.runs import run_row
from tests.support.segments import drive_segment
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
              pytest.mark.usefixtures("delegation_offered")]


def _statements_of(fn) -> tuple[object, list[str]]:
    """fn()'s result, and the statements this thread's SQLite connection ran meanwhile."""
    seen: list[str] = []
    connection = store_db.database.connection()
    connection.set_trace_callback(seen.append)
    try:
        return fn(), seen
    finally:
        connection.set_trace_callback(None)


def _writes(statements: list[str]) -> tuple[int, int]:
    """(transactions, UPDATEs of the runs table; a claim's picks its runs in a WITH before it)."""
    return (sum(s.startswith("BEGIN") for s in statements),
            sum(re.match(r'(WITH .* )?UPDATE "runs"', s, re.DOTALL) is not None for s in statements))


def _event_inserts(statements: list[str]) -> int:
    return sum(s.startswith('INSERT INTO "run_events"') for s in statements)


def test_a_delegation_cycle_writes_one_update_of_the_run_per_transaction(settings, peers, database_url):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=60)
    client_for(remote_agents.get_agent("research"), settings)  # its card read and kept, once for the agent
    run_id = delegating_run("research", "work:0.01:the answer")

    outcome, first = _statements_of(lambda: drive_segment(run_id, settings=settings))
    assert outcome is SegmentOutcome.AWAITING_DEPENDENCY
    # The claim; the turn with its journal row; the send's outcome with the suspension.
    assert _writes(first) == (3, 3)
    assert _event_inserts(first) == 3  # the suspension's three events (outcome, pause, status) in one of them

    coordinator = Coordinator(settings)
    polls = []  # the statements of each poll, until one finds the task completed
    try:
        def poll_resolves() -> bool:
            wait = waits.current_wait(run_id)
            polls.append(_statements_of(lambda: coordinator.poll(wait))[1])
            return run_row(run_id).status == "queued"

        wait_until(poll_resolves, what="a poll to find the remote task completed")
    finally:
        coordinator.stop()
    assert _writes(polls[-1]) == (1, 1)  # the resolution
    assert _event_inserts(polls[-1]) == 1  # resume, status, tool

    outcome, last = _statements_of(lambda: drive_segment(run_id, settings=settings))
    assert outcome is SegmentOutcome.COMPLETED
    # The claim; the final turn with the completion.
    assert _writes(last) == (2, 2)
    assert _event_inserts(last) == 2
    kinds = [event["kind"] for event in events.list_events(run_id)]
    assert [event["sequence"] for event in events.list_events(run_id)] == list(range(1, len(kinds) + 1))
    assert kinds == ["status", "status", "llm", "outbound", "outbound", "pause", "status", "resume",
                     "status", "tool", "status", "llm", "status"]
    assert run_row(run_id).output.startswith("Remote said: ") and "the answer" in run_row(run_id).output


def test_a_push_is_authenticated_in_one_read(peers, webhook):
    """The token names its run; the run's sends and the waits on them come in one read, before and after the
    suspension (a peer pushes as soon as its task starts, often before the suspension is committed)."""
    peer = peers.start(card="1.0", push=True)
    register("research", peer.url, poll=60, push=True)
    run_id = delegating_run("research", "work:30:slow answer")
    assert drive_segment(run_id, settings=webhook.settings) is SegmentOutcome.AWAITING_DEPENDENCY
    (token,) = peer.push_tokens()
    (send,) = Outbound.select()

    delegation, seen = _statements_of(lambda: push.authenticate(token))
    assert (delegation.row.id, delegation.wait.id, len(seen)) == (send.id, waits.current_wait(run_id).id, 1)
    # Not the journalled request body, which may be large, for every push: only what a push is acted on with.
    assert '"request_body"' not in seen[0] and '"checkpoint"' not in seen[0]
    assert (delegation.row.run_id, delegation.row.outcome, delegation.row.remote_task_id) == (
        run_id, send.outcome, send.remote_task_id)
    assert delegation.wait.resolved_at is None and delegation.wait.run_id == run_id

    DependencyWait.delete().execute()  # as before the suspension: only the journalled send knows the token
    delegation, seen = _statements_of(lambda: push.authenticate(token))
    assert (delegation.row.id, delegation.wait, len(seen)) == (send.id, None, 1)
    with pytest.raises(Unauthenticated):
        push.authenticate(token[:-1] + ("A" if token[-1] != "A" else "B"))
