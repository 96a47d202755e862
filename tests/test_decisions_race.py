"""Many deciders racing for one pause, over a real HTTP server, on each database: exactly one wins.

Deciders post at once (a barrier), half of them deciding now and half storing; a worker runs meanwhile so
that a stored winner is continued too. A cancel racing the deciders takes the same guard.
"""

import threading

import pytest
import requests

from sidecar.store import notes
from sidecar.store.models import PersonPause
from tests.support.api import as_host
from tests.support.decisions import body, paused_run
from tests.support.runs import event_kinds, event_payloads, run_row
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

DECIDERS = 50


def _race(calls: list) -> list:
    """Run every call at once (each in its own thread, released together); their results in order."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(index, call):
        barrier.wait()
        try:
            results[index] = call()
        except Exception as exc:  # a failed request is a result the test reports, not a hung thread
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


def test_fifty_deciders_in_both_modes_one_winner_one_continuation(live_server, host_token, settings, start_worker):
    run_id = paused_run(settings=settings)
    start_worker()
    sent = body(run_id)
    url = f"{live_server}/api/v1/runs/{run_id}/decision"

    def decider(i):
        payload = {**sent, "mode": "now" if i % 2 else "store", "comment": f"decider {i}"}
        return lambda: requests.post(url, json=payload, headers=as_host(host_token), timeout=60)

    answers = _race([decider(i) for i in range(DECIDERS)])
    assert not [a for a in answers if isinstance(a, Exception)], answers
    winners = [(i, a) for i, a in enumerate(answers) if a.status_code < 300]
    assert len(winners) == 1, [(a.status_code, a.text[:80]) for a in answers if a.status_code < 300]
    (winner, answer), = winners
    assert answer.status_code == (200 if winner % 2 else 202)
    losers = [(a.status_code, a.json()["code"]) for a in answers if a.status_code >= 300]
    assert losers == [(409, "pause_not_pending")] * (DECIDERS - 1)

    wait_until(lambda: run_row(run_id).status == "completed", what="the one continuation to complete the run")
    assert notes.of_run(run_id) == ["hello"]
    (decision,) = event_payloads(run_id, "decision")
    assert (decision["comment"], decision["mode"]) == (f"decider {winner}", "now" if winner % 2 else "store")
    assert event_kinds(run_id).count("resume") == 1, "the decision was applied once"
    # One claim before the pause and one continuation after it (plus any takeover by the reaper, should
    # a heartbeat starve on a loaded machine: a takeover continues the same segment, it never re-decides).
    claims = [e["to"] for e in event_payloads(run_id, "status")].count("running")
    assert claims == 2 + event_kinds(run_id).count("requeued")


@pytest.mark.parametrize("round_", range(3))
def test_a_cancel_racing_deciders_takes_the_same_guard(live_server, host_token, settings, round_):
    run_id = paused_run(settings=settings)
    sent = body(run_id)
    url = f"{live_server}/api/v1/runs/{run_id}"
    calls = [lambda: requests.post(f"{url}/decision", json=sent, headers=as_host(host_token), timeout=60)
             for _ in range(10)]
    calls.insert(round_ * 5, lambda: requests.post(f"{url}/cancel", headers=as_host(host_token), timeout=60))
    answers = _race(calls)
    decided = [a for a in answers if "/decision" in a.url and a.status_code == 202]
    resolution = PersonPause.get_by_id(sent["pause_id"]).resolution
    assert len(decided) + (resolution == "cancelled") == 1, (resolution, [a.status_code for a in answers])
    assert resolution == ("decided" if decided else "cancelled")
    assert event_kinds(run_id).count("decision") == len(decided)
    # The cancel itself succeeded either way: it won the pause, or it cancelled the queued run after it.
    assert run_row(run_id).status == "cancelled"
