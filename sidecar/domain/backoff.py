"""How long to wait before trying again what failed: exponential, jittered, capped.

Pure arithmetic: the caller supplies the random draw, so every value is reproducible in a test.
"""

import re
from dataclasses import dataclass

# 2 ** 64 times any interval is far beyond every cap: larger exponents change nothing but may overflow.
_LARGEST_EXPONENT = 64
_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://\S+")


@dataclass(frozen=True)
class Backoff:
    """After the first failure wait `initial` seconds, then `factor` times longer after each further
    one, never more than `cap`. Each delay is spread by up to `jitter` (a fraction) either way, so waits
    that failed together do not all try again at the same instant; the cap holds after the spread."""

    initial: float
    factor: float = 2.0
    cap: float = 300.0
    jitter: float = 0.2

    def delay(self, failures: int, draw: float = 0.5) -> float:
        """Seconds to wait after `failures` consecutive failures (1 for the first). `draw` is uniform in
        [0, 1): 0.5 is the unspread delay, 0 the shortest, just below 1 the longest."""
        exponent = min(max(failures, 1) - 1, _LARGEST_EXPONENT)
        base = min(self.cap, self.initial * self.factor ** exponent)
        spread = base * (1 + self.jitter * (2 * draw - 1))
        return max(0.0, min(self.cap, spread))


def without_urls(message: str, limit: int = 300) -> str:
    """An error message fit to show without authentication: every URL (which may carry a query with
    a secret) replaced by `<url>`, and at most `limit` characters."""
    scrubbed = _URL.sub("<url>", message)
    return scrubbed if len(scrubbed) <= limit else scrubbed[: limit - 3] + "..."
