"""Delegation to a real A2A peer: a run waits holding nothing, resumes exactly once, never sends twice."""

from prometheus_client import REGISTRY

from sidecar.store.models import Outbound, Run
from tests.support.delegation import ON_A2A_DATABASES, delegating_run, register
from tests.support.runs import run_row, tool_results
from tests.support.waiting import wait_until

pytestmark = ON_A2A_DATABASES


def _outbound_outcomes(outcome: str) -> float:
    return REGISTRY.get_sample_value("nrllm_outbound_outcomes_total", {"kind": "send", "outcome": outcome}) or 0.0


def test_a_run_waits_holding_nothing_and_resumes_once_with_the_remote_answer(settings, peers, start_worker):
    journalled, accepted = _outbound_outcomes("pending"), _outbound_outcomes("accepted")
    peer = peers.start(card="1.0")
    register("research", peer.url)
    run_id = delegating_run("research", "work:1.5:forty-two")
    worker = start_worker(concurrency=1)
    wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", what="the run to wait")
    waiting = run_row(run_id)
    assert (waiting.lease_holder, waiting.lease_expires_at) == (None, None)
    assert worker.active_count() == 0, "a waiting run holds a worker thread"
    wait_until(lambda: run_row(run_id).status == "completed", timeout=30, what="the run to complete")
    assert run_row(run_id).output == "Remote said: forty-two"
    assert tool_results(run_id) == ["forty-two"]
    assert peer.task_count == 1 and peer.calls["SendMessage"] == 1
    (row,) = Outbound.select()
    assert (row.outcome, row.kind, row.remote_agent) == ("accepted", "send", "research")
    assert run_row(run_id).delegations_used == 1 and run_row(run_id).bytes_used > 0
    # /metrics counts the journal's outcomes: the row journalled, then accepted.
    assert (_outbound_outcomes("pending") - journalled, _outbound_outcomes("accepted") - accepted) == (1, 1)


def test_two_hundred_runs_wait_at_once_on_a_worker_with_one_thread(settings, peers, start_worker):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=0.5)
    ids = [delegating_run("research", f"work:2:answer {i}") for i in range(200)]
    start_worker(concurrency=1)
    wait_until(lambda: Run.select().where(Run.status == "completed").count() == 200, timeout=120,
               what="200 delegating runs to complete")
    assert peer.task_count == 200
    assert {run_row(i).output for i in ids} == {f"Remote said: answer {i}" for i in range(200)}
