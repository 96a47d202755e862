"""The backoff arithmetic of failed polls, reconciliations and CancelTask attempts (sidecar/domain/backoff.py)."""

import pytest

from sidecar.domain.backoff import Backoff, without_urls


def test_delays_double_from_the_initial_interval_up_to_the_cap():
    backoff = Backoff(initial=30.0, factor=2.0, cap=300.0, jitter=0.2)
    assert [backoff.delay(n) for n in range(1, 8)] == [30.0, 60.0, 120.0, 240.0, 300.0, 300.0, 300.0]
    assert backoff.delay(0) == backoff.delay(1) == 30.0  # no failure yet reads as the first
    assert backoff.delay(10_000) == 300.0  # no overflow however long it fails


@pytest.mark.parametrize("failures", [1, 2, 3, 4])
def test_jitter_spreads_each_delay_by_at_most_its_fraction(failures):
    backoff = Backoff(initial=1.0, cap=1000.0, jitter=0.2)
    middle = backoff.delay(failures, 0.5)
    assert backoff.delay(failures, 0.0) == pytest.approx(middle * 0.8)
    assert backoff.delay(failures, 0.999999) == pytest.approx(middle * 1.2, rel=1e-5)
    draws = [i / 100 for i in range(100)]
    assert all(middle * 0.8 - 1e-9 <= backoff.delay(failures, d) <= middle * 1.2 for d in draws)
    assert len({backoff.delay(failures, d) for d in draws}) == 100  # the draw really spreads them


def test_the_cap_holds_after_the_spread():
    backoff = Backoff(initial=200.0, cap=300.0, jitter=0.2)
    assert backoff.delay(2, 0.999) == 300.0
    assert backoff.delay(2, 0.0) == pytest.approx(240.0)
    assert Backoff(initial=0.2, jitter=0.0).delay(3, 0.9) == pytest.approx(0.8)


def test_error_messages_shown_without_authentication_lose_their_urls():
    message = "remote agent at https://peer.example/a2a?key=s3cret: connection refused"
    assert without_urls(message) == "remote agent at <url> connection refused"
    assert without_urls("no url here") == "no url here"
    long = without_urls("x" * 1000, limit=50)
    assert len(long) == 50 and long.endswith("...")
