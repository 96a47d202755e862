"""The one synchronous way to drive a segment: claim the next queued run with the store's own claim, as a
worker's poll does, and execute one segment of it in this thread. No worker thread, no waiting: when
`drive_segment` returns, the segment has ended and its outcome is what it returns."""

from sidecar.config import Settings
from sidecar.domain.lease import LeasePolicy
from sidecar.domain.vocabulary import SegmentOutcome
from sidecar.engine import AgentLoop
from sidecar.engine.registry import build_registry
from sidecar.segment import Segment
from sidecar.store import leases, runs
from sidecar.store.leases import Claim
from tests.support import GENEROUS_LEASE
from tests.support.engine import make_settings

LEASE = LeasePolicy(GENEROUS_LEASE)
HOLDER = "test-worker"


def agent_loop(settings: Settings | None = None) -> AgentLoop:
    """The agent loop a worker runs, with the default registry of these settings."""
    return AgentLoop(build_registry(settings or make_settings()))


def claim_next(run_id: str | None = None) -> Claim:
    """The store's claim of the oldest queued run, as a worker's poll takes it; that run must be `run_id`."""
    claims = leases.claim_queued(HOLDER, 1, LEASE)
    assert claims, f"no queued run to claim (wanted {run_id})" if run_id else "no queued run to claim"
    (claim,) = claims
    assert run_id is None or claim.run_id == run_id, f"the oldest queued run is {claim.run_id}, not {run_id}"
    return claim


def drive_segment(run_id: str | None = None, *, loop: AgentLoop | None = None, settings: Settings | None = None,
                  segment_class=Segment) -> SegmentOutcome:
    """Claim the oldest queued run (which must be `run_id` when given) and execute one segment of it in this
    thread with `loop` (by default the agent loop of `settings`); its outcome."""
    claim = claim_next(run_id)
    return (loop or agent_loop(settings)).execute(segment_class(claim, runs.get_run(claim.run_id)))
