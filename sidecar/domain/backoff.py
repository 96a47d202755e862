"""How long to wait before trying again after a failure: exponential, bounded, jittered."""

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """The ceiling doubles from `first` with every failure in a row up to `longest`; each wait is drawn between
    half the ceiling and the ceiling ("equal jitter"), so threads and processes that failed together do not
    all come back in the same instant, and none waits less than half of what the ceiling says."""

    first: float = 0.25
    longest: float = 5.0
    factor: float = 2.0

    def ceiling(self, failures: int) -> float:
        """The longest wait after `failures` failures in a row (1 or more)."""
        exponent = min(max(failures, 1) - 1, 64)  # 2**64 times anything is past any `longest`
        return min(self.longest, self.first * self.factor**exponent)

    def seconds(self, failures: int, draw=random.random) -> float:
        ceiling = self.ceiling(failures)
        return ceiling / 2 + draw() * ceiling / 2
