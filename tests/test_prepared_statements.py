"""PostgreSQL: the store's kept statements are prepared once per connection and executed by name after, on a
real server (store/db.py, SidecarPostgresqlDatabase)."""

import pytest
from peewee import IntegrityError, ProgrammingError

from sidecar.application import Application, set_default
from sidecar.domain.clock import utcnow
from sidecar.domain.lease import LeasePolicy
from sidecar.store import db as store_db
from sidecar.store import events, leases, runs, statements, status_guard, turns
from sidecar.store.models import ModelTurn, Run
from tests.support.databases import round_trips

POSTGRESQL = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


def _prepared(text_part: str) -> list[str]:
    """This connection's prepared statements whose text contains `text_part`."""
    rows = store_db.database.execute_sql(
        "SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s", (f"%{text_part}%",)).fetchall()
    return [statement for (statement,) in rows]


def _turn(run_id: str, index: int) -> dict:
    return {"run_id": run_id, "index": index, "message": "{}", "tokens": 0, "cost": 0.0, "created_at": utcnow()}


@POSTGRESQL
def test_writes_nobody_reads_go_with_the_commit(database_url):
    run_id = runs.create_run("owner", "hi")
    for index in range(2):  # the first time also prepares each statement, a round trip each
        with round_trips() as sent, store_db.database.atomic():
            sequence = statements.update_run(run_id, where={}, values={}, add={"last_event_sequence": 1},
                                             returning=("last_event_sequence",))[0]
            statements.insert_values(ModelTurn, _turn(run_id, index), deferred=True)
            events.record(run_id, sequence, "step", {})
            statements.add_to(Run, "iterations_used", 1, id=run_id)
            sent_before_commit = len(sent)
    assert sent_before_commit == 1  # BEGIN with the UPDATE, whose answer is read
    assert len(sent) == 2
    assert sent[1].count("; ") == 3 and sent[1].endswith("; COMMIT")  # the turn, the event, the counter
    assert ModelTurn.select().where(ModelTurn.run == run_id).count() == 2
    assert statements.select_value(Run, "iterations_used", id=run_id) == 2


@POSTGRESQL
def test_a_delegating_turn_and_its_journal_row_take_two_round_trips(database_url):
    # A gate that reads nothing: only the store's statements are counted.
    status_guard.install(lambda status, origin, reported_at: None)
    try:
        for attempt in range(2):  # the first also prepares each statement, a round trip each
            runs.create_run("owner", "hi")
            (claim,) = leases.claim_queued("w", 1, LeasePolicy(30))
            send = dict(owner="owner", remote_agent="research", message_id=f"m-{attempt}", tool_call_id="call_1",
                        context_id="ctx", body="{}", origin=None)  # the segment knows its run's origin
            with round_trips() as sent:
                turns.save_turn_and_journal(claim, 0, {"content": "delegating"}, 1, 0.0, {"index": 0}, send=send)
    finally:
        status_guard.install(None)
    # BEGIN, the journal row's INSERT and the run's UPDATE (whose answer is read) together; then the events
    # and the turn with the COMMIT.
    assert len(sent) == 2, sent
    assert sent[0].startswith("BEGIN; ") and 'INSERT INTO "outbound"' in _named(sent[0])
    assert sent[1].endswith("; COMMIT")


def _named(sent: str) -> str:
    """`sent` with each EXECUTE of a prepared statement replaced by that statement's text."""
    for name, statement in store_db.database.execute_sql("SELECT name, statement FROM pg_prepared_statements"):
        sent = sent.replace(f"EXECUTE {name}(", f"{statement.partition(' AS ')[2]}(")
    return sent


@POSTGRESQL
def test_a_deferred_write_that_fails_undoes_its_whole_transaction(database_url):
    run_id = runs.create_run("owner", "hi")
    reached = []
    with pytest.raises(IntegrityError), store_db.database.atomic():
        statements.update_where(Run, {"id": run_id}, {"workspace": "changed"})
        statements.insert_values(ModelTurn, _turn("no such run", 0), deferred=True)
        reached.append("after the insert")  # nothing was sent: its failure comes with the COMMIT
    assert reached == ["after the insert"]
    assert statements.select_value(Run, "workspace", id=run_id) == "0"
    # Undeferred, the same insert fails where it is made.
    with pytest.raises(IntegrityError), store_db.database.atomic():
        statements.insert_values(ModelTurn, _turn("no such run", 0))
        reached.append("never")
    assert reached == ["after the insert"]


@POSTGRESQL
def test_a_kept_statement_is_prepared_on_first_use_and_executed_by_name_after(database_url):
    run_id = runs.create_run("owner", "hi")
    assert _prepared('SELECT "status" FROM "runs"') == []
    for _ in range(3):
        assert statements.select_value(Run, "status", id=run_id) == "queued"
    (prepared,) = _prepared('SELECT "status" FROM "runs"')
    assert '"id" = $1' in prepared  # its parameter numbered for PREPARE
    # An UPDATE's row count comes back through EXECUTE as it did without it.
    for expected in (1, 1, 0):
        where = {"id": run_id} if expected else {"id": "no such run"}
        assert statements.update_where(Run, where, {"workspace": "w"}) == expected
    assert len(_prepared('UPDATE "runs" SET "workspace"')) == 1


@POSTGRESQL
def test_deferred_event_inserts_go_by_name_and_notify_nobody(database_url):
    run_id = runs.create_run("owner", "hi")
    for _ in range(2):
        with store_db.database.atomic():
            sequence = statements.update_run(run_id, where={}, values={}, add={"last_event_sequence": 1},
                                             returning=("last_event_sequence",))[0]
            events.record(run_id, sequence, "step", {"n": sequence})
    assert [e["payload"] for e in events.list_events(run_id)][-2:] == [{"n": 2}, {"n": 3}]
    assert len(_prepared('INSERT INTO "run_events"')) == 1
    # Streams poll: a notification would make every transaction that writes an event commit in turn with
    # all the others that do (docs/performance.md, "Event streams poll on PostgreSQL too").
    assert _prepared("notify") == []


@POSTGRESQL
def test_a_statement_prepared_by_a_failed_transaction_is_executed_by_name_after(database_url):
    # The PREPARE is a round trip of its own before the transaction's statements, and PostgreSQL keeps a
    # prepared statement when the transaction beside it fails: the next use finds it by its name.
    values = {"index": 0, "message": "{}", "tokens": 0, "cost": 0.0, "created_at": utcnow()}
    with pytest.raises(IntegrityError), store_db.database.atomic():
        statements.insert_values(ModelTurn, {"run_id": "no such run", **values})
    run_id = runs.create_run("owner", "hi")
    with store_db.database.atomic():
        statements.insert_values(ModelTurn, {"run_id": run_id, **values})
    assert ModelTurn.select().where(ModelTurn.run == run_id).count() == 1
    assert len(_prepared('INSERT INTO "model_turns"')) == 1


@POSTGRESQL
def test_a_statement_the_server_will_not_prepare_is_sent_as_it_is(database_url, caplog):
    untyped = "SELECT %s + %s"  # PREPARE cannot tell which + (its parameters have no type)
    for _ in range(2):
        assert store_db.database.execute_kept(untyped, (1, 2)).fetchone() == (3,)
    assert [r.message for r in caplog.records].count(
        "PostgreSQL does not prepare this statement; it is sent as it is: SELECT %s + %s") == 1
    # Also at the start of a transaction (its BEGIN not sent yet), which goes on.
    run_id = runs.create_run("owner", "hi")
    with store_db.database.atomic():
        assert store_db.database.execute_kept("SELECT %s + %s + 1", (1, 2)).fetchone() == (4,)
        assert statements.select_value(Run, "status", id=run_id) == "queued"


@POSTGRESQL
def test_a_refused_prepare_inside_a_begun_transaction_fails_that_transaction(database_url):
    run_id = runs.create_run("owner", "hi")
    with pytest.raises(ProgrammingError), store_db.database.atomic():
        assert statements.select_value(Run, "status", id=run_id) == "queued"  # the transaction has begun
        store_db.database.execute_kept("SELECT %s + %s + 2", (1, 2))
    assert statements.select_value(Run, "status", id=run_id) == "queued"  # the connection goes on


@POSTGRESQL
def test_prepared_statements_off_sends_each_statement_as_it_is(database_url):
    set_default(Application())
    bound = store_db.bind(database_url + ("&" if "?" in database_url else "?") + "prepared_statements=off")
    try:
        run_id = runs.create_run("owner", "hi")
        for _ in range(3):
            assert statements.select_value(Run, "status", id=run_id) == "queued"
        assert _prepared("") == []
    finally:
        bound.close_all()


def test_prepared_statements_takes_on_or_off():
    with pytest.raises(ValueError, match="prepared_statements must be on or off"):
        store_db.connect("postgresql://postgres@127.0.0.1/test?prepared_statements=yes")
    assert store_db.connect("postgresql://postgres@127.0.0.1/test?prepared_statements=OFF").prepared_statements is False
    assert store_db.connect("postgresql://postgres@127.0.0.1/test").prepared_statements is True
