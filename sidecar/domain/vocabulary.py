"""Every vocabulary of the run lifecycle, with the exact strings hosts and consumers depend on.

The strings are part of the host-facing contract (docs/http-api.md, docs/stability.md): never rename a
value. New values arrive in minor releases, so every caller that switches on one of these needs a default
arm.
"""

from enum import StrEnum


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING_FOR_INPUT = "waiting_for_input"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    WAITING_FOR_DEPENDENCY = "waiting_for_dependency"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    # The predicates below are the only place that groups statuses; consumers use them instead of
    # lists of their own, so a new status is classified once.

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def awaits_person(self) -> bool:
        """The inbox: a person can decide it (input or approval)."""
        return self in _AWAITS_PERSON

    @property
    def awaits_dependency(self) -> bool:
        return self is RunStatus.WAITING_FOR_DEPENDENCY

    @property
    def is_waiting(self) -> bool:
        return self.awaits_person or self.awaits_dependency

    @property
    def holds_lease(self) -> bool:
        return self is RunStatus.RUNNING


_TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
_AWAITS_PERSON = frozenset({RunStatus.WAITING_FOR_INPUT, RunStatus.WAITING_FOR_APPROVAL})

# What every consumer could read before `waiting_for_dependency` (docs/adr/0001-durable-waits.md): the
# statuses a consumer with an unknown version is assumed to understand.
BASE_STATUSES = frozenset(RunStatus) - {RunStatus.WAITING_FOR_DEPENDENCY}


class SegmentOutcome(StrEnum):
    COMPLETED = "completed"
    AWAITING_INPUT = "awaiting_input"
    AWAITING_APPROVAL = "awaiting_approval"
    AWAITING_DEPENDENCY = "awaiting_dependency"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REQUEUED = "requeued"
    LEASE_LOST = "lease_lost"


class TerminationReason(StrEnum):
    COMPLETED = "completed"
    MAX_ITERATIONS = "max_iterations"
    BUDGET_EXHAUSTED = "budget_exhausted"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    POLICY_DENIED = "policy_denied"
    APPROVAL_DENIED = "approval_denied"
    PROVIDER_FAILED = "provider_failed"
    CANCELLED = "cancelled"
    RETRIES_EXHAUSTED = "retries_exhausted"
    NOT_RETRYABLE = "not_retryable"
    CHECKPOINT_INVALID = "checkpoint_invalid"


class ToolEffect(StrEnum):
    READ_ONLY = "read_only"
    IDEMPOTENT_WRITE = "idempotent_write"
    NON_IDEMPOTENT_WRITE = "non_idempotent_write"

    @property
    def retry_safe(self) -> bool:
        """A segment may be retried after a crash in the middle of this effect."""
        return self is not ToolEffect.NON_IDEMPOTENT_WRITE


class OutboundKind(StrEnum):
    SEND = "send"
    CANCEL = "cancel"


class OutboundOutcome(StrEnum):
    PENDING = "pending"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    NOT_DELIVERED = "not_delivered"
    OUTCOME_UNKNOWN = "outcome_unknown"
    SUPERSEDED = "superseded"
