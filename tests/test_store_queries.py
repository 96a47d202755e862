"""Store functions that took over queries the services used to build themselves (the store is the only
place with SQL): counts by status and origin, the ping, a delegation settled with its tool result, a send
journalled by a first attempt, and the runs list of an actor."""

import logging
import uuid

import pytest

from sidecar.domain.errors import JournalledAlready, LeaseLost, MessageIdTaken
from sidecar.domain.lease import LeasePolicy
from sidecar.store import db, events, grants, leases, outbound, runs, status_guard, turns
from sidecar.store.models import ModelTurn, Outbound, Run
from tests.support.runs import run_row

LEASE = LeasePolicy(30)


def test_runs_are_counted_by_status_and_origin(database_url):
    runs.create_run("a", "x", origin="typo3:one")
    runs.create_run("a", "x", origin="typo3:one")
    runs.request_cancel(runs.create_run("a", "x", origin="typo3:one"), "a")
    runs.create_run("a", "x")
    assert runs.count_by_status_and_origin() == {
        ("queued", "typo3:one"): 2, ("cancelled", "typo3:one"): 1, ("queued", None): 1}


def test_no_runs_no_counts(database_url):
    assert runs.count_by_status_and_origin() == {}


def test_ping_answers(database_url):
    db.ping()


def test_ping_raises_when_the_database_does_not_answer(tmp_path):
    not_a_database = tmp_path / "garbage.db"
    not_a_database.write_bytes(b"this is not a SQLite database file" * 100)
    db.bind(f"sqlite:///{not_a_database}")
    try:
        with pytest.raises(db.DatabaseError):
            db.ping()
    finally:
        db.database.close()


@pytest.fixture
def open_gate(database_url):
    # The journal checks the gate: every status may be written.
    status_guard.install(lambda status, origin, reported_at: None)
    yield
    status_guard.install(None)


def _journalled_send(claim):
    row, _ = outbound.record_send(claim, owner="owner", remote_agent="research", message_id=str(uuid.uuid4()),
                                  tool_call_id="call_1", context_id=str(uuid.uuid4()), body='{"x": 1}')
    return row


def test_a_send_answered_at_once_is_settled_with_its_tool_result_in_one_write(open_gate):
    run_id = runs.create_run("owner", "x")
    (claim,) = leases.claim_queued("w", 1, LEASE)
    row = _journalled_send(claim)
    settle = outbound.Settlement(counts={"delegations_used": 1, "bytes_used": 120}, outbound_id=row.id,
                                 outcome="accepted", remote_task_id=None)
    turns.save_tool_result(claim, 0, "call_1", "delegate_to_agent", "hello", {"result": "hello"},
                           clear_pending_effect=False, settle=settle)
    after = run_row(run_id)
    assert (after.delegations_used, after.bytes_used) == (1, 120)
    assert outbound.get(row.id).outcome == "accepted"
    assert turns.load(run_id)[1] == {"call_1": "hello"}


def test_a_settlement_under_a_lost_lease_writes_nothing(open_gate):
    run_id = runs.create_run("owner", "x")
    (claim,) = leases.claim_queued("w", 1, LEASE)
    row = _journalled_send(claim)
    Run.update(lease_epoch=Run.lease_epoch + 1).where(Run.id == run_id).execute()  # the lease is lost
    settle = outbound.Settlement(counts={"delegations_used": 1, "bytes_used": 5}, outbound_id=row.id,
                                 outcome="accepted")
    with pytest.raises(LeaseLost):
        turns.save_tool_result(claim, 0, "call_1", "delegate_to_agent", "hello", {"result": "hello"},
                               clear_pending_effect=False, settle=settle)
    after = run_row(run_id)
    assert (after.delegations_used, after.bytes_used) == (0, 0)
    assert outbound.get(row.id).outcome == "pending", "the outcome's write went back with the rest"
    assert turns.load(run_id)[1] == {}


def test_a_runs_turns_and_results_are_read_in_one_statement_in_order(open_gate):
    run_id = runs.create_run("owner", "x")
    (claim,) = leases.claim_queued("w", 1, LEASE)
    runs.create_run("owner", "another run's turn is not read")
    saved = [(1, {"content": "second", "n": 2}, 7, 0.25), (0, {"content": "first"}, 3, 0.0),
             (2, {"content": "third \u00e9"}, 0, 1.5)]
    for index, message, tokens, cost in saved:  # not in order: the read orders them
        turns.save_turn(claim, index, message, tokens, cost, {"index": index})
    for call_id, result in (("call_b", "B"), ("call_a", "")):
        turns.save_tool_result(claim, 0, call_id, "echo", result, {"result": result}, clear_pending_effect=False)

    loaded, statements_run = _counting_statements(lambda: turns.load(run_id))
    in_order = sorted(saved, key=lambda turn: turn[0])
    assert loaded == ([{"index": i, "message": m, "tokens": t, "cost": c} for i, m, t, c in in_order],
                      {"call_a": "", "call_b": "B"})
    assert statements_run == 1
    assert turns.load(runs.create_run("owner", "nothing saved")) == ([], {})


def _counting_statements(fn):
    """fn()'s result and how many statements the store sent meanwhile (peewee logs each one it sends), but
    PostgreSQL's PREPARE of a statement, once per connection."""
    sent = []
    handler = logging.Handler()
    handler.emit = lambda record: None if str(record.msg[0]).startswith("PREPARE") else sent.append(record)
    peewee_log = logging.getLogger("peewee")
    level = peewee_log.level
    peewee_log.addHandler(handler)
    peewee_log.setLevel(logging.DEBUG)
    try:
        return fn(), len(sent)
    finally:
        peewee_log.removeHandler(handler)
        peewee_log.setLevel(level)


def _send(claim, message_id: str, body: str, **extra):
    return outbound.record_send(claim, owner="owner", remote_agent="research", message_id=message_id,
                                tool_call_id="call_1", context_id="ctx", body=body, **extra)


def test_a_first_attempt_journals_a_new_send_with_its_event(open_gate):
    run_id = runs.create_run("owner", "x")
    (claim,) = leases.claim_queued("w", 1, LEASE)
    row, is_new = _send(claim, "m-new", '{"x": 1}', first_attempt=True)
    assert is_new and outbound.by_message_id("m-new").id == row.id
    assert [e["kind"] for e in events.list_events(run_id)][-1] == "outbound"


@pytest.mark.parametrize("same_body", [True, False])
def test_a_first_attempt_that_finds_its_message_id_taken_answers_as_a_retry_does(open_gate, same_body):
    # DelegationCall.first_attempt says no earlier attempt can have journalled the id; should a row exist all
    # the same, the INSERT that refuses it is undone and the row is looked for: the answer of a retry.
    run_id = runs.create_run("owner", "x")
    (claim,) = leases.claim_queued("w", 1, LEASE)
    first, _ = _send(claim, "m-taken", '{"x": 1}')
    events_before = len(events.list_events(run_id))
    body = '{"x": 1}' if same_body else '{"x": 2}'
    if same_body:
        assert _send(claim, "m-taken", body, first_attempt=True) == _send(claim, "m-taken", body)
        assert outbound.get(first.id).outcome == "outcome_unknown", "found pending: it may have left"
    else:
        with pytest.raises(MessageIdTaken, match="journalled with another request"):
            _send(claim, "m-taken", body, first_attempt=True)
    assert [row.id for row in Outbound.select()] == [first.id]
    assert len(events.list_events(run_id)) == events_before + (1 if same_body else 0)


def test_a_turn_journalled_with_a_taken_message_id_is_refused_and_writes_nothing(open_gate):
    # save_turn_and_journal sends the row's INSERT with the run's UPDATE (on PostgreSQL in one round trip):
    # the refusal of a taken id comes from that statement, and undoes the turn and the update with it.
    run_id = runs.create_run("owner", "x")
    (claim,) = leases.claim_queued("w", 1, LEASE)
    first, _ = _send(claim, "m-taken", '{"x": 1}')
    before = run_row(run_id)
    events_before = len(events.list_events(run_id))
    send = dict(owner="owner", remote_agent="research", message_id="m-taken", tool_call_id="call_2",
                context_id="ctx", body='{"x": 2}')
    with pytest.raises(JournalledAlready, match="m-taken"):
        turns.save_turn_and_journal(claim, 0, {"content": "delegating"}, 5, 0.0, {"index": 0}, send=send)
    assert [row.id for row in Outbound.select()] == [first.id]
    assert ModelTurn.select().count() == 0
    after = run_row(run_id)
    assert (after.iterations_used, after.tokens_used, after.last_event_sequence) == (
        before.iterations_used, before.tokens_used, before.last_event_sequence)
    assert len(events.list_events(run_id)) == events_before


def test_an_actors_candidates_are_its_runs_its_granted_workspaces_person_waits_and_its_decisions(database_url):
    own = runs.create_run("be_user:1", "x", workspace="1")
    granted = runs.create_run("be_user:2", "x", workspace="2")
    elsewhere = runs.create_run("be_user:3", "x", workspace="3")
    waiting = runs.create_run("be_user:3", "x", workspace="3")
    Run.update(status="waiting_for_approval").where(Run.id == waiting).execute()
    grants.replace("be_user:1", "2", ["agent:approve"])

    rows, _ = runs.list_runs(candidates_for="be_user:1")
    assert {r.id for r in rows} == {own, granted, waiting}
    rows, _ = runs.list_runs(candidates_for="be_user:9")
    assert {r.id for r in rows} == {waiting}
    rows, _ = runs.list_runs()
    assert {r.id for r in rows} == {own, granted, elsewhere, waiting}
