"""Claims, fencing, events, heartbeats and the reaper on SQLite, PostgreSQL and MariaDB."""

import threading
from datetime import timedelta

import pytest

from sidecar.domain.clock import utcnow
from sidecar.domain.errors import LeaseLost
from sidecar.domain.lease import LeasePolicy
from sidecar.domain.vocabulary import RunStatus
from sidecar.store import db as store_db
from sidecar.store import events, leases, migrations, runs, statements
from sidecar.store.models import Run, RunEvent
from tests.support.runs import event_kinds, run_row, sequences

LEASE = LeasePolicy(30)


def _expire(run_id: str) -> None:
    Run.update(lease_expires_at=utcnow() - timedelta(seconds=1)).where(Run.id == run_id).execute()


def test_upgrade_is_idempotent(database_url):
    assert migrations.upgrade() == []
    assert migrations.current_version() == migrations.MIGRATIONS[-1][0]


def test_create_run_starts_queued_with_one_status_event(database_url):
    run_id = runs.create_run("be_user:7", "hello", origin="typo3:test", budget={"max_iterations": 5})
    row = run_row(run_id)
    assert (row.status, row.owner, row.workspace, row.origin, row.max_iterations) == (
        "queued", "be_user:7", "0", "typo3:test", 5)
    assert row.lease_epoch == 0 and row.lease_holder is None
    assert event_kinds(run_id) == ["status"]


def test_eight_threads_claim_two_hundred_runs_each_exactly_once(database_url):
    created = {runs.create_run("owner", f"run {i}") for i in range(200)}
    claimed: list[leases.Claim] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    attempts = [0] * 8

    def claimer(n):
        barrier.wait()
        while True:
            attempts[n] += 1
            got = leases.claim_queued(f"claimer-{n}", 2, LEASE)
            if not got and not Run.select().where(Run.status == "queued").exists():
                return
            with lock:
                claimed.extend(got)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    ids = [c.run_id for c in claimed]
    assert len(ids) == 200 and set(ids) == created
    assert all(attempts), "a claimer thread never ran"
    rows = {r.id: r for r in Run.select()}
    for c in claimed:
        assert rows[c.run_id].status == "running"
        assert rows[c.run_id].lease_holder == c.holder
        assert rows[c.run_id].lease_epoch == c.epoch == 1


def test_fenced_writes_of_a_lost_lease_land_nowhere(database_url):
    run_id = runs.create_run("owner", "x")
    (old,) = leases.claim_queued("worker-a", 1, LEASE)
    leases.append_event(old, "step", {"by": "a"})
    _expire(run_id)
    assert [r.action for r in leases.reap()] == ["requeued"]
    (new,) = leases.claim_queued("worker-b", 1, LEASE)
    assert new.epoch > old.epoch
    before = (run_row(run_id).updated_at, RunEvent.select().count())

    with pytest.raises(LeaseLost):
        leases.append_event(old, "step", {"by": "a"})
    with pytest.raises(LeaseLost):
        leases.update_run_fenced(old, output="from a")
    with pytest.raises(LeaseLost):
        leases.finish(old, RunStatus.COMPLETED, output="from a")
    assert not leases.renew(old, LEASE)

    row = run_row(run_id)
    assert (row.updated_at, RunEvent.select().count()) == before
    assert row.status == "running" and row.lease_holder == "worker-b" and row.output is None
    leases.finish(new, RunStatus.COMPLETED, output="from b")
    assert run_row(run_id).output == "from b"


def test_a_requeued_but_unclaimed_run_already_fences_its_old_holder(database_url):
    runs.create_run("owner", "x")
    (old,) = leases.claim_queued("worker-a", 1, LEASE)
    _expire(old.run_id)
    leases.reap()
    with pytest.raises(LeaseLost):
        leases.append_event(old, "step", {})


def test_event_sequence_is_gap_free_from_one(database_url):
    run_id = runs.create_run("owner", "x")
    (claim,) = leases.claim_queued("w", 1, LEASE)
    # Each thread hands its connection back as the worker's threads do: 20 threads outnumber a pool of 16.
    append = store_db.releasing_connection(leases.append_event)
    threads = [threading.Thread(target=append, args=(claim, "step", {"n": n})) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    leases.finish(claim, RunStatus.COMPLETED, output="ok")
    assert sequences(run_id) == list(range(1, 24))
    assert event_kinds(run_id)[:2] == ["status", "status"] and event_kinds(run_id)[-1] == "status"


def test_events_described_by_one_write_are_inserted_together_in_order(database_url):
    """More events than one INSERT carries (statements.EVENTS_PER_INSERT), each with its own payload: all of
    them, numbered in the order given, with the run's counter where the write left it."""
    run_id = runs.create_run("owner", "x")
    (claim,) = leases.claim_queued("w", 1, LEASE)
    count = statements.EVENTS_PER_INSERT + 2
    leases.fenced_update_with_events(claim, [("step", {"n": n, "text": f"ü{n}"}) for n in range(count)])
    steps = [event for event in events.list_events(run_id) if event["kind"] == "step"]
    assert [event["payload"] for event in steps] == [{"n": n, "text": f"ü{n}"} for n in range(count)]
    assert sequences(run_id) == list(range(1, count + 3))
    assert run_row(run_id).last_event_sequence == count + 2


def test_renew_pushes_the_expiry_forward(database_url):
    runs.create_run("owner", "x")
    (claim,) = leases.claim_queued("w", 1, LeasePolicy(1))
    first = run_row(claim.run_id).lease_expires_at
    assert leases.renew(claim, LeasePolicy(60))
    assert run_row(claim.run_id).lease_expires_at > first + timedelta(seconds=30)


def test_renewal_with_unchanged_values_still_reads_as_held(database_url, monkeypatch):
    """MariaDB reports an UPDATE that writes the values a row has as 0 rows unless FOUND_ROWS is set."""
    runs.create_run("owner", "x")
    (claim,) = leases.claim_queued("w", 1, LEASE)
    frozen = utcnow()
    monkeypatch.setattr(leases, "utcnow", lambda: frozen)
    assert leases.renew(claim, LEASE)
    assert leases.renew(claim, LEASE), "an unchanged renewal was taken for a lost lease"


def test_the_reaper_touches_only_running_rows_with_an_expired_lease(database_url):
    past = utcnow() - timedelta(minutes=5)
    ids = {}
    for status in RunStatus:
        ids[status] = runs.create_run("owner", status.value)
        Run.update(status=status.value, lease_holder="ghost", lease_expires_at=past, lease_epoch=7).where(
            Run.id == ids[status]).execute()
    healthy = runs.create_run("owner", "healthy")
    Run.update(status="running", lease_holder="alive", lease_expires_at=utcnow() + timedelta(minutes=5)).where(
        Run.id == healthy).execute()
    before = {r.id: (r.status, r.lease_epoch, r.updated_at) for r in Run.select()}

    reaped = leases.reap(limit=50)

    assert [(r.run_id, r.action) for r in reaped] == [(ids[RunStatus.RUNNING], "requeued")]
    after = {r.id: (r.status, r.lease_epoch, r.updated_at) for r in Run.select()}
    for run_id, state in before.items():
        if run_id != ids[RunStatus.RUNNING]:
            assert after[run_id] == state, f"the reaper touched a {state[0]} run"
    requeued = run_row(ids[RunStatus.RUNNING])
    assert (requeued.status, requeued.requeue_count, requeued.lease_holder) == ("queued", 1, None)
    assert requeued.lease_epoch == 8
    assert event_kinds(requeued.id)[-3:] == ["lease_lost", "status", "requeued"]


def test_requeued_at_most_three_times_then_retries_exhausted(database_url):
    run_id = runs.create_run("owner", "x")
    actions = []
    for _ in range(4):
        leases.claim_queued("w", 1, LEASE)
        _expire(run_id)
        actions += [r.action for r in leases.reap()]
    assert actions == ["requeued", "requeued", "requeued", "retries_exhausted"]
    row = run_row(run_id)
    assert (row.status, row.termination_reason, row.requeue_count) == ("failed", "retries_exhausted", 3)
    assert row.finished_at is not None


def test_a_lost_run_with_a_non_idempotent_write_in_flight_is_not_retried(database_url):
    run_id = runs.create_run("owner", "x")
    (claim,) = leases.claim_queued("w", 1, LEASE)
    leases.update_run_fenced(claim, pending_effect="write_note call_1")
    _expire(run_id)
    assert [r.action for r in leases.reap()] == ["not_retryable"]
    row = run_row(run_id)
    assert (row.status, row.termination_reason) == ("failed", "not_retryable")


def test_finish_takes_only_terminal_statuses(database_url):
    runs.create_run("owner", "x")
    (claim,) = leases.claim_queued("w", 1, LEASE)
    with pytest.raises(ValueError):
        leases.finish(claim, RunStatus.QUEUED)
    assert run_row(claim.run_id).status == "running"


@pytest.fixture
def store_guard():
    """Install a guard for one test, and take it away again (the store then refuses non-base statuses)."""
    from sidecar.store import status_guard

    status_guard.install(None)  # whatever an earlier test in this process installed (an app's start-up)
    yield status_guard.install
    status_guard.install(None)


def test_suspend_releases_the_lease_and_waits(database_url, store_guard):
    run_id = runs.create_run("owner", "x")
    (claim,) = leases.claim_queued("w", 1, LEASE)
    leases.suspend_run(claim, RunStatus.WAITING_FOR_INPUT)
    row = run_row(run_id)
    assert (row.status, row.lease_holder, row.lease_expires_at) == ("waiting_for_input", None, None)
    with pytest.raises(LeaseLost):
        leases.append_event(claim, "step", {})
    with pytest.raises(ValueError):
        leases.suspend_run(claim, RunStatus.COMPLETED)


def test_the_store_refuses_a_gated_status_and_writes_nothing(database_url, store_guard):
    from sidecar.store.status_guard import StatusNotWritable

    run_id = runs.create_run("owner", "x", origin="typo3:page")
    (claim,) = leases.claim_queued("w", 1, LEASE)
    before = (RunEvent.select().count(), run_row(run_id).updated_at)
    with pytest.raises(StatusNotWritable, match="no compatibility gate"):
        leases.suspend_run(claim, RunStatus.WAITING_FOR_DEPENDENCY)
    seen = []
    store_guard(lambda status, origin, _: seen.append((status, origin)) or "nr_mcp_agent 0.15.1 cannot read it")
    with pytest.raises(StatusNotWritable, match="nr_mcp_agent 0.15.1"):
        leases.suspend_run(claim, RunStatus.WAITING_FOR_DEPENDENCY)
    assert seen == [("waiting_for_dependency", "typo3:page")]
    assert (RunEvent.select().count(), run_row(run_id).updated_at) == before
    assert run_row(run_id).status == "running"
    store_guard(lambda status, origin, reported_at: None)
    leases.suspend_run(claim, RunStatus.WAITING_FOR_DEPENDENCY)
    assert run_row(run_id).status == "waiting_for_dependency"


def test_a_database_from_before_migration_4_gains_its_columns(database_url):
    """Simulate a database created at version 3: the run columns of version 4 are missing."""
    from playhouse.migrate import SchemaMigrator, migrate

    from sidecar.store.db import database
    from sidecar.store.models import SchemaMigration

    migrator = SchemaMigrator.from_database(database.obj)
    migrate(migrator.drop_column("runs", "pause_generation"), migrator.drop_column("runs", "waiting_on"))
    SchemaMigration.delete().where(SchemaMigration.version >= 4).execute()
    assert {"pause_generation", "waiting_on"}.isdisjoint(c.name for c in database.get_columns("runs"))

    assert 4 in migrations.upgrade()
    assert {"pause_generation", "waiting_on"} <= {c.name for c in database.get_columns("runs")}
    run_id = runs.create_run("owner", "x")
    assert (run_row(run_id).pause_generation, run_row(run_id).waiting_on) == (0, None)


def test_a_database_from_before_migration_6_gains_the_early_push_column(database_url):
    from playhouse.migrate import SchemaMigrator, migrate

    from sidecar.store.db import database
    from sidecar.store.models import SchemaMigration

    migrate(SchemaMigrator.from_database(database.obj).drop_column("outbound", "push_received_at"))
    SchemaMigration.delete().where(SchemaMigration.version >= 6).execute()
    assert "push_received_at" not in {c.name for c in database.get_columns("outbound")}
    assert 6 in migrations.upgrade()
    assert "push_received_at" in {c.name for c in database.get_columns("outbound")}
    assert migrations.upgrade() == []


def test_a_database_from_before_migration_7_gains_the_failure_columns_with_their_defaults(database_url):
    """Rows written before version 7 read as never failed and never attempted."""
    from playhouse.migrate import SchemaMigrator, migrate

    from sidecar.store import remote_agents
    from sidecar.store.db import database
    from sidecar.store.models import RemoteAgent, SchemaMigration

    added = {"remote_agents": ["consecutive_failures", "failing_since", "last_error"],
             "dependency_waits": ["failed_polls"], "outbound": ["attempts", "next_attempt_at"]}
    migrator = SchemaMigrator.from_database(database.obj)
    migrate(*(migrator.drop_column(table, column) for table, columns in added.items() for column in columns))
    SchemaMigration.delete().where(SchemaMigration.version >= 7).execute()
    database.execute_sql("INSERT INTO remote_agents (name, url, poll_interval_seconds, deadline_seconds, push, "
                         "created_at, updated_at) VALUES ('old', 'http://127.0.0.1:9', 30, 3600, 0, "
                         "'2026-01-01 00:00:00', '2026-01-01 00:00:00')")
    assert 7 in migrations.upgrade()
    for table, columns in added.items():
        assert set(columns) <= {c.name for c in database.get_columns(table)}
    old = RemoteAgent.get_by_id("old")
    assert (old.consecutive_failures, old.failing_since, old.last_error) == (0, None, None)
    assert remote_agents.record_failure("old", "refused") == 1
    assert migrations.upgrade() == []
