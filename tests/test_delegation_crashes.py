"""A worker process killed in the middle of a delegation: never two tasks on the peer, the run never lost.

The worker is killed (SIGKILL, from a failpoint) right after the journal commit and before the send, and
right after the send and before its outcome and the suspension are committed. Another worker takes the
run over after the lease; it finds the journal row still `pending`, which may have left, so the run waits
with `outcome_unknown` and nothing is sent again.
"""

import time

import pytest

from sidecar.store.models import Outbound
from tests.api_helpers import TEST_SECRET_KEY
from tests.delegation_helpers import A2A_DATABASES, delegating_run, events_of, register
from tests.helpers import run_row, start_worker, stop_process, wait_until

pytest_plugins = ["tests.delegation_support"]
pytestmark = [pytest.mark.slow, pytest.mark.parametrize("database_url", A2A_DATABASES, indirect=True)]

WORKER_ENV = {"NRLLM_REMOTE_ALLOW": "127.0.0.1"}


@pytest.fixture
def sealing_key():
    return TEST_SECRET_KEY  # the worker processes seal with the key of the environment


@pytest.mark.parametrize("failpoint, tasks_on_peer", [
    ("delegation.after_journal", 0),
    ("delegation.after_send", 1),
])
def test_a_worker_killed_mid_delegation_never_makes_a_second_task(
        database_url, settings, peers, tmp_path, failpoint, tasks_on_peer):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=0.2)
    run_id = delegating_run("research", "work:0.5:the answer")
    doomed = start_worker(database_url, lease=1.0, env={**WORKER_ENV, "NRLLM_FAILPOINT": failpoint},
                          log_path=tmp_path / "doomed.log")
    assert doomed.wait(30) == -9, "the worker did not reach the failpoint"
    (journalled,) = Outbound.select()
    assert journalled.outcome == "pending"
    assert peer.task_count == tasks_on_peer

    survivor = start_worker(database_url, lease=1.0, env=WORKER_ENV, log_path=tmp_path / "survivor.log")
    try:
        wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", timeout=30,
                   what="the run to be taken over and wait")
        wait_until(lambda: Outbound.get_by_id(journalled.id).outcome == "outcome_unknown", timeout=10,
                   what="the journal row to show an unknown outcome")
        pause = events_of(run_id, "pause")[-1]
        assert (pause["outcome"], pause["outbound_id"]) == ("outcome_unknown", journalled.id)
        time.sleep(2)  # ten poll intervals: an unknown outcome is never resent nor polled
        assert peer.calls["SendMessage"] == tasks_on_peer and peer.task_count == tasks_on_peer
        assert Outbound.select().count() == 1
        assert run_row(run_id).status == "waiting_for_dependency"
        assert run_row(run_id).requeue_count == 1
    finally:
        stop_process(survivor)
