"""A run's budget: its limits, what it has used, and when it must stop (pure; the run row holds the numbers).

The agent loop asks at every step boundary. Tokens and cost are known only after a model turn, so a
turn may overshoot a limit; the run then stops at its next boundary (before the next tool or model call),
so nothing more is spent. The iteration limit counts model turns and is checked only before asking the
model, so the tools of the last allowed turn still run (their results are part of that iteration).
"""

from dataclasses import dataclass, replace
from datetime import datetime

from .clock import rfc3339
from .vocabulary import TerminationReason


@dataclass(frozen=True)
class Stop:
    """Why a run must end now, with a sentence for its events."""

    reason: TerminationReason
    message: str


@dataclass(frozen=True)
class Budget:
    deadline_at: datetime | None = None
    max_tokens: int | None = None
    tokens_used: int = 0
    max_cost: float | None = None
    cost_used: float = 0.0
    max_iterations: int | None = None
    iterations_used: int = 0

    def spend(self, tokens: int, cost: float) -> "Budget":
        """The budget after one more model turn (the store adds the same numbers in the same transaction)."""
        return replace(
            self,
            iterations_used=self.iterations_used + 1,
            tokens_used=self.tokens_used + tokens,
            cost_used=self.cost_used + cost,
        )

    def seconds_left(self, now: datetime) -> float | None:
        if self.deadline_at is None:
            return None
        return (self.deadline_at - now).total_seconds()

    def stop(self, now: datetime, *, asking_model: bool) -> Stop | None:
        """The reason to stop before the next step, or None. `asking_model`: the next step is a model call."""
        if self.deadline_at is not None and now >= self.deadline_at:
            return Stop(TerminationReason.DEADLINE_EXCEEDED, f"the run's deadline {rfc3339(self.deadline_at)} passed")
        if self.max_tokens is not None and self.tokens_used >= self.max_tokens:
            return Stop(TerminationReason.BUDGET_EXHAUSTED, f"{self.tokens_used} of {self.max_tokens} tokens used")
        if self.max_cost is not None and self.cost_used >= self.max_cost:
            return Stop(TerminationReason.BUDGET_EXHAUSTED, f"cost {self.cost_used:g} of {self.max_cost:g} used")
        if asking_model and self.max_iterations is not None and self.iterations_used >= self.max_iterations:
            return Stop(
                TerminationReason.MAX_ITERATIONS, f"{self.iterations_used} of {self.max_iterations} model turns used"
            )
        return None
