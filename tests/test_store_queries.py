"""Store functions that took over queries the services used to build themselves (the store is the only
place with SQL): counts by status and origin, the ping, fenced counters, and the runs list of an actor."""

import pytest
from peewee import PeeweeException

from sidecar.domain.errors import LeaseLost
from sidecar.domain.lease import LeasePolicy
from sidecar.store import db, grants, leases, runs
from sidecar.store.models import Run
from tests.helpers import run_row

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
    db.bind(f"sqlite:///{tmp_path}")  # a directory: no database file can be opened there
    try:
        with pytest.raises(PeeweeException):
            db.ping()
    finally:
        db.database.close()


def test_counters_are_added_under_the_fence(database_url):
    run_id = runs.create_run("owner", "x")
    (claim,) = leases.claim_queued("w", 1, LEASE)
    leases.add_to_counters(claim, delegations_used=1, bytes_used=120)
    leases.add_to_counters(claim, delegations_used=1, bytes_used=30)
    row = run_row(run_id)
    assert (row.delegations_used, row.bytes_used) == (2, 150)

    Run.update(lease_epoch=Run.lease_epoch + 1).where(Run.id == run_id).execute()  # the lease is lost
    with pytest.raises(LeaseLost):
        leases.add_to_counters(claim, delegations_used=1, bytes_used=5)
    row = run_row(run_id)
    assert (row.delegations_used, row.bytes_used) == (2, 150)


def test_an_actor_lists_the_runs_it_owns_or_those_of_a_granted_workspace(database_url):
    own = runs.create_run("be_user:1", "x", workspace="1")
    granted = runs.create_run("be_user:2", "x", workspace="2")
    runs.create_run("be_user:3", "x", workspace="3")
    grants.replace("be_user:1", "2", ["agent:approve"])

    rows, _ = runs.list_runs(owned_or_granted_to="be_user:1")
    assert {r.id for r in rows} == {own, granted}
    rows, _ = runs.list_runs(owned_or_granted_to="be_user:9")
    assert rows == []
    rows, _ = runs.list_runs()
    assert len(rows) == 3
