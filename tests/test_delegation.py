"""Delegation to a real A2A peer: a run waits holding nothing, resumes exactly once, never sends twice."""

from prometheus_client import REGISTRY

from sidecar.domain.lease import LeasePolicy
from sidecar.engine import AgentLoop
from sidecar.engine.registry import build_registry
from sidecar.store.models import Outbound, Run
from sidecar.testing import StepExecutor
from sidecar.worker import Worker
from tests.support.delegation import ON_A2A_DATABASES, delegating_run, register
from tests.support.runs import event_payloads, run_row, tool_results
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


class _Recording(AgentLoop):
    """The agent loop, noting which worker executed each segment of each run."""

    def __init__(self, settings, segments: list):
        super().__init__(build_registry(settings))
        self.segments = segments

    def execute(self, segment):
        self.segments.append((segment.run_id, segment.claim.holder))
        return super().execute(segment)


def test_the_worker_whose_coordinator_resolved_a_wait_executes_the_resumed_run_at_once(settings, peers, start_worker):
    # Two workers of one process, both woken whenever a run is queued there; only the first has a coordinator,
    # and a thread free for every run. A resolution that only queued the run would leave its resumption to
    # whichever claimed it first.
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=0.1)
    segments: list = []
    resolving = start_worker(_Recording(settings, segments), concurrency=16)
    other = start_worker(_Recording(settings, segments), concurrency=4, coordinators=0)
    ids = [delegating_run("research", f"work:0.05:answer {i}") for i in range(12)]
    wait_until(lambda: Run.select().where(Run.status == "completed").count() == 12, timeout=60,
               what="12 delegating runs to complete")
    assert {run_row(i).output for i in ids} == {f"Remote said: answer {i}" for i in range(12)}
    for run_id in ids:
        holders = [holder for executed, holder in segments if executed == run_id]
        assert len(holders) == 2 and holders[1] == resolving.id, (holders, resolving.id, other.id)
        statuses = [p["to"] for p in event_payloads(run_id, "status")]
        assert statuses == ["queued", "running", "waiting_for_dependency", "queued", "running", "completed"]


def test_a_worker_holds_threads_for_the_runs_its_coordinator_claims_and_frees_those_not_claimed(settings):
    worker = Worker(StepExecutor(), LeasePolicy(30), concurrency=2)
    assert worker.reserve_slot() and worker.reserve_slot()
    assert not worker.reserve_slot()  # both threads held: the run is queued for any worker instead
    worker.take_reserved(None)  # that resolution lost: its thread is free again
    assert worker.reserve_slot() and not worker.reserve_slot()
    worker.take_reserved(None)
    worker.stop(grace=1)
    assert not worker.reserve_slot()  # a stopping worker takes no more runs
