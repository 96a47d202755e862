"""Process-local Prometheus counters. Run counts by status come from the database at scrape time."""

from prometheus_client import Counter, Gauge

from .store.db import outage

SEGMENT_OUTCOMES = Counter("nrllm_segment_outcomes_total", "Segments ended, by outcome", ["outcome"])
CLAIMS = Counter("nrllm_claims_total", "Runs claimed by workers of this process")
CLAIM_CONFLICTS = Counter(
    "nrllm_claim_conflicts_total", "Claim attempts that found the run already taken by another claimer"
)
LEASE_LOSSES = Counter("nrllm_lease_losses_total", "Segments of this process that found their lease lost")
REAPED = Counter("nrllm_reaped_total", "Runs the reaper of this process acted on, by action", ["action"])
HANDED_BACK = Counter(
    "nrllm_handed_back_total", "Runs a stopping worker of this process handed back unfinished, by action", ["action"]
)
POLLS = Counter("nrllm_polls_total", "GetTask polls of remote tasks by the coordinators of this process")
OUTBOUND_OUTCOMES = Counter(
    "nrllm_outbound_outcomes_total",
    "Outbound journal rows reaching an outcome (pending: journalled before sending), by kind and outcome",
    ["kind", "outcome"],
)
PUSHES = Counter("nrllm_pushes_total", "Push notifications received by this process, by result", ["result"])
DATABASE_UNAVAILABLE = Gauge(
    "nrllm_database_unavailable_seconds",
    "How long this process has found the database unavailable and waits for it (0: the database answers)",
)
DATABASE_UNAVAILABLE.set_function(outage.seconds)
CANCELS_GIVEN_UP = Counter(
    "nrllm_cancels_given_up_total",
    "CancelTask rows the coordinators of this process gave up after their last attempt got no answer",
)
