"""Lease arithmetic shared by the worker, the heartbeat and the reaper."""

from dataclasses import dataclass
from datetime import datetime, timedelta

MAX_REQUEUES = 3


@dataclass(frozen=True)
class LeasePolicy:
    seconds: float

    def __post_init__(self):
        if self.seconds <= 0:
            raise ValueError("a lease lasts a positive number of seconds")

    def expiry(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.seconds)

    @property
    def heartbeat_interval(self) -> float:
        """Renew every third of the lease, so two missed beats still leave the lease alive."""
        return self.seconds / 3

    @property
    def reap_interval(self) -> float:
        """Every worker reaps at least once per lease, so a lost holder's run moves within two leases."""
        return self.seconds

    @property
    def worker_alive_window(self) -> timedelta:
        """A worker whose last heartbeat row is older than this counts as gone."""
        return timedelta(seconds=max(self.seconds * 2, 10))


@dataclass(frozen=True)
class ReapVerdict:
    """What the reaper does with a running row whose lease expired."""

    requeue: bool
    termination_reason: str | None


def reap_verdict(requeue_count: int, pending_effect: str | None) -> ReapVerdict:
    # A non-idempotent write may have happened: running it again could do it twice.
    if pending_effect:
        return ReapVerdict(requeue=False, termination_reason="not_retryable")
    if requeue_count >= MAX_REQUEUES:
        return ReapVerdict(requeue=False, termination_reason="retries_exhausted")
    return ReapVerdict(requeue=True, termination_reason=None)


def hand_back_verdict(pending_effect: str | None) -> ReapVerdict:
    """What a stopping worker does with a run it still holds: a hand-back is no failure, so it costs no
    requeue, but the process stops in the middle of the segment, so a non-idempotent write in flight still
    forbids running it again."""
    return reap_verdict(0, pending_effect)


class ClaimBatch(list):
    """What one claim took, and how many of its candidates another claimer had taken first (the
    `nrllm_claim_conflicts_total` metric). Locked reads make those rare: PostgreSQL and MariaDB skip the rows
    others hold, SQLite has one writer."""

    def __init__(self, taken=(), conflicts: int = 0):
        super().__init__(taken)
        self.conflicts = conflicts
        # The claimed rows as the claim wrote them, by id, where the claim's statement returned them (the
        # worker then has no need to read each run again).
        self.rows: dict = {}
