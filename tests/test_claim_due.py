"""Claiming due dependency waits, on each database: a batch is claimed in one transaction, coordinators
racing for the same rows never claim one twice, and the next poll is the interval capped by the deadline."""

import contextlib
import threading
import uuid
from datetime import timedelta

from sidecar.delegation.cancels import MAX_ATTEMPTS
from sidecar.domain.clock import utcnow
from sidecar.store import db as store_db
from sidecar.store import outbound, runs, waits
from sidecar.store.models import DependencyWait, RemoteAgent
from tests.support.databases import round_trips
from tests.support.delegation import journalled_send, suspend_on


def seed(count: int, *, due_in: float = -1.0, deadline_in: float = 3600.0, interval: float = 30.0) -> list[str]:
    now = utcnow()
    RemoteAgent.insert(name="research", url="http://127.0.0.1:9/", poll_interval_seconds=interval,
                       deadline_seconds=3600, created_at=now, updated_at=now).on_conflict_ignore().execute()
    ids = []
    for _ in range(count):
        run_id, wait_id = runs.create_run("be_user:7", "waits"), str(uuid.uuid4())
        DependencyWait.insert(id=wait_id, run=run_id, generation=1, tool_call_id="call_1", remote_agent="research",
                              outbound_id=str(uuid.uuid4()), checkpoint="sealed", key_fingerprint="f" * 16,
                              since=now, deadline_at=now + timedelta(seconds=deadline_in),
                              next_poll_at=now + timedelta(seconds=due_in)).execute()
        ids.append(wait_id)
    return ids


def test_racing_coordinators_claim_every_due_wait_exactly_once(database_url):
    ids = seed(60)
    seed(5, due_in=3600)  # not due: never claimed
    claimed: list[list[str]] = [[] for _ in range(4)]
    batches: list[tuple[int, int]] = []  # (waits taken, candidates another coordinator had taken first)
    start = threading.Barrier(4)

    def coordinator(index: int) -> None:
        try:
            start.wait()
            while batch := waits.claim_due(7):
                claimed[index].extend(w.id for w in batch)
                batches.append((len(batch), batch.conflicts))
        finally:
            store_db.database.close()

    threads = [threading.Thread(target=coordinator, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    every = [wait_id for part in claimed for wait_id in part]
    assert sorted(every) == sorted(ids), "a due wait was claimed twice, or not at all"
    assert all(taken + lost <= 7 for taken, lost in batches)
    if store_db.dialect() != "mysql":  # locked reads: another coordinator's rows are never candidates
        assert {lost for _, lost in batches} == {0}
    assert waits.claim_due(100) == []


def test_the_next_poll_is_the_interval_capped_by_the_deadline(database_url):
    (soon,) = seed(1, deadline_in=5)
    (later,) = seed(1, deadline_in=3600)
    (passed,) = seed(1, deadline_in=-10)
    now = utcnow()
    claimed = {w.id: w.claimed_next_poll_at for w in waits.claim_due(10, now)}
    assert claimed[later] == now + timedelta(seconds=30)
    assert claimed[soon] == DependencyWait.get_by_id(soon).deadline_at
    assert claimed[passed] == now + timedelta(seconds=30)  # past its deadline: paced by the interval
    stored = {w.id: w.next_poll_at for w in DependencyWait.select()}
    assert all(abs((stored[i] - claimed[i]).total_seconds()) < 0.001 for i in claimed)


def test_a_coordinator_claims_only_what_is_due_and_wakes_when_the_next_wait_is_due(database_url, tmp_path):
    import time

    from sidecar.config import Settings
    from sidecar.delegation.coordinator import MIN_PAUSE_SECONDS, Coordinator

    # A long period (below the 10 s a coordinator sleeps with nothing due), and a wait due well within it but
    # far enough ahead that a busy machine does not reach it between the seed and the look.
    period, due_in = 9.0, 4.0
    coordinator = Coordinator(Settings(instance_path=tmp_path, database_url=database_url), tick_seconds=period)
    try:
        assert waits.next_due(MAX_ATTEMPTS) == (None, None)  # nothing waits: no claim at all
        assert period - 4 < coordinator._sleep_seconds(time.monotonic()) <= period
        seed(1, due_in=due_in)
        assert not coordinator._is_due((due := waits.next_due(MAX_ATTEMPTS)).poll)
        # Due sooner than the next period: looked at when due, not up to a period later; the loop's own read
        # of the due index gives the same sleep as a read of its own.
        for sleep in (coordinator._sleep_seconds(time.monotonic()), coordinator._sleep_seconds(time.monotonic(), due)):
            assert MIN_PAUSE_SECONDS <= sleep <= due_in
        seed(1, due_in=-1.0)
        assert coordinator._is_due(waits.next_due(MAX_ATTEMPTS).poll)
        assert coordinator._sleep_seconds(time.monotonic()) == MIN_PAUSE_SECONDS  # never a busy loop
    finally:
        coordinator.stop()


def test_a_claimed_wait_comes_with_its_journal_row_and_agent_read_by_the_claims_one_statement(
        database_url, every_status_writable):
    (without_row,) = seed(1)  # its agent "research" (polled every 30 s), and a wait whose journal row is gone
    claim, row, _ = journalled_send()
    wait = suspend_on(claim, row)
    waits.poll_now(wait.id)  # due at once
    statements = []
    if store_db.dialect() == "sqlite":
        store_db.database.connection().set_trace_callback(statements.append)
    try:
        claimed = {found.id: found for found in waits.claim_due(10)}
    finally:
        if store_db.dialect() == "sqlite":
            store_db.database.connection().set_trace_callback(None)
    assert set(claimed) == {wait.id, without_row}
    found = claimed[wait.id]
    assert (found.journal_row.id, found.journal_row.remote_task_id) == (row.id, row.remote_task_id)
    agent = found.agent
    assert (agent.name, agent.url, agent.poll_interval_seconds) == ("research", "http://127.0.0.1:9/", 30)
    assert claimed[without_row].journal_row is None and claimed[without_row].agent.name == "research"
    if statements:  # SQLite: the claim's one read (its UPDATE and the transaction's BEGIN and COMMIT aside)
        assert [s.split()[0] for s in statements] == ["BEGIN", "SELECT", "UPDATE", "COMMIT"], statements


def test_a_coordinator_sleeps_until_a_cancels_next_attempt_is_due(database_url, tmp_path, every_status_writable):
    import time

    from sidecar.config import Settings
    from sidecar.delegation.coordinator import Coordinator

    period, due_in = 9.0, 3.0  # a long period, as above: the cancel, not the period, must end the sleep
    coordinator = Coordinator(Settings(instance_path=tmp_path, database_url=database_url), tick_seconds=period)
    try:
        _, send_row, _ = journalled_send()
        cancel = outbound.journal_cancel(send_row, [], utcnow())
        assert waits.next_due(MAX_ATTEMPTS).cancel <= utcnow(), "never tried: due since it was journalled"
        assert outbound.claim_cancel(cancel, utcnow(), retry_at=utcnow() + timedelta(seconds=due_in))
        due = waits.next_due(MAX_ATTEMPTS)
        assert due.poll is None and 0 < (due.cancel - utcnow()).total_seconds() <= due_in
        assert coordinator._sleep_seconds(time.monotonic()) <= due_in
        assert waits.next_due(1) == (None, None), "no attempt is left"
    finally:
        coordinator.stop()


def test_a_look_with_nothing_due_reads_the_database_once(database_url, tmp_path, every_status_writable):
    from sidecar.config import Settings
    from sidecar.delegation.coordinator import Coordinator

    seed(1, due_in=3600)
    _, send_row, _ = journalled_send()
    cancel = outbound.journal_cancel(send_row, [], utcnow())
    assert outbound.claim_cancel(cancel, utcnow(), retry_at=utcnow() + timedelta(hours=1))
    coordinator = Coordinator(Settings(instance_path=tmp_path, database_url=database_url))
    try:
        coordinator.look()  # on PostgreSQL the first look also prepares its statement
        statements = []
        if database_url.startswith("sqlite"):
            store_db.database.connection().set_trace_callback(statements.append)
        try:
            with round_trips() if database_url.startswith("postgresql") else contextlib.nullcontext([]) as sent:
                busy, due = coordinator.look()
        finally:
            if database_url.startswith("sqlite"):
                store_db.database.connection().set_trace_callback(None)
        assert not busy and due.poll > utcnow() and due.cancel > utcnow()  # nothing done: the sleep uses this read
        # Counted where the driver shows what it sends: SQLite's trace, PostgreSQL's round trips.
        counted = {"sqlite": statements, "postgresql": sent}.get(database_url.split(":")[0])
        if counted is not None:
            assert len(counted) == 1, counted
    finally:
        coordinator.stop()
