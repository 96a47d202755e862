"""Waiting for what another thread or process does."""

import time


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    """The predicate's first true value; AssertionError after `timeout` seconds. The timeout is generous:
    it only bounds a failing test, a passing one returns as soon as the condition holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
