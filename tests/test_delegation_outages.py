"""A remote agent that fails for a while, against a real a2a-sdk peer behind a lossy proxy, on SQLite and
PostgreSQL: an unknown outcome is reconciled at every poll until its task is found; the deadline takes a
last look before it answers "timeout"; failed polls and CancelTask attempts back off, are logged a few
times rather than once per poll, and show in health and the gauge while the agent fails, and not after."""

import itertools
import logging
import re
import time

from sidecar import metrics
from sidecar.delegation import cancels
from sidecar.domain.backoff import Backoff
from sidecar.domain.clock import utcnow
from sidecar.store import waits
from sidecar.store.models import DependencyWait, Outbound, RemoteAgent
from tests.support.delegation import ON_A2A_DATABASES, delegating_run, register
from tests.support.runs import event_payloads, run_row, tool_results
from tests.support.waiting import wait_until
from tests.support.workers import wait_for_ticks

pytestmark = ON_A2A_DATABASES


def ended(run_id: str):
    wait_until(lambda: run_row(run_id).status in ("completed", "failed", "cancelled"), timeout=60,
               what="the run to end")
    return run_row(run_id)


def first_requests(count: int):
    """A drop_while condition: true for the first `count` requests it is asked about."""
    asked = itertools.count()
    return lambda: next(asked) < count


def lost_and_waiting(peers, start_worker, message: str, *, poll: float, deadline: float):
    """A run waiting on a send whose answer was lost and whose reconciliations are lost too (for now)."""
    peer = peers.start(card="1.0")
    proxy = peers.lossy_proxy(peer, drop=("SendMessage", "ListTasks"))
    register("research", proxy.url, poll=poll, deadline=deadline)
    run_id = delegating_run("research", message)
    start_worker(concurrency=1)
    wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", what="the run to wait")
    assert Outbound.get().outcome == "outcome_unknown" and peer.task_count == 1
    return peer, proxy, run_id


def test_later_polls_reconcile_a_lost_answer_whose_first_reconciliations_failed(settings, peers, start_worker):
    peer, proxy, run_id = lost_and_waiting(peers, start_worker, "work:0.3:forty-two", poll=0.2, deadline=600)
    # The reconciliation right after the send was lost; so are the next two, then the peer is heard.
    proxy.drop_while["ListTasks"] = first_requests(2)
    proxy.drop.discard("ListTasks")

    run = ended(run_id)
    assert (run.status, run.output) == ("completed", "Remote said: forty-two")
    assert proxy.forwarded["ListTasks"] >= 4  # one after the send, two lost at polls, one that found it
    (row,) = Outbound.select()
    assert (row.outcome, row.remote_task_id) == ("accepted", peer.tasks_in(row.context_id)[0])
    assert peer.task_count == 1 and peer.calls["SendMessage"] == 1
    assert DependencyWait.get().resolution == "result"
    assert RemoteAgent.get_by_id("research").consecutive_failures == 0  # it answers again


def test_the_deadline_takes_a_last_look_and_a_task_finished_earlier_is_the_result(settings, peers, start_worker):
    peer, proxy, run_id = lost_and_waiting(peers, start_worker, "work:0.2:done early", poll=0.3, deadline=3.0)
    deadline_at = DependencyWait.get().deadline_at
    # Every reconciliation before the deadline is lost; the task finished long before it.
    proxy.drop_while["ListTasks"] = lambda: utcnow() < deadline_at
    proxy.drop.discard("ListTasks")

    run = ended(run_id)
    assert (run.status, run.output) == ("completed", "Remote said: done early")
    assert tool_results(run_id) == ["done early"]
    wait = DependencyWait.get()
    assert wait.resolution == "result" and wait.resolved_at >= deadline_at
    assert proxy.dropped >= 2, "reconciliations before the deadline failed"
    # Found by the deadline's last look (`at_deadline` in the resume event), or by a poll due just before
    # the deadline whose question went out just after it: the machine's timing decides which.
    assert Outbound.select().where(Outbound.kind == "cancel").count() == 0  # a finished task is not cancelled


def test_the_deadline_asks_a_known_task_once_more_when_every_poll_before_failed(settings, peers, start_worker):
    peer = peers.start(card="1.0")
    proxy = peers.lossy_proxy(peer, drop=())
    deadline_at = []
    proxy.drop_while["GetTask"] = lambda: not deadline_at or utcnow() < deadline_at[0]
    register("research", proxy.url, poll=0.3, deadline=2.5)
    run_id = delegating_run("research", "work:0.2:known and done")
    start_worker(concurrency=1)
    wait_until(lambda: DependencyWait.select().count() == 1, what="the run to wait")
    deadline_at.append(DependencyWait.get().deadline_at)

    run = ended(run_id)
    # Every question before the deadline failed, and still the answer, not a timeout. It comes from the
    # deadline's last look, or from a poll due just before the deadline whose question reached the peer
    # just after it (the proxy lets questions through from the deadline on): which one is the machine's
    # timing, not a rule.
    assert (run.status, run.output) == ("completed", "Remote said: known and done")
    assert DependencyWait.get().resolution == "result" and proxy.dropped >= 2


def test_at_the_deadline_a_task_not_finished_is_a_timeout_and_cancelled(settings, peers, start_worker):
    peer, proxy, run_id = lost_and_waiting(peers, start_worker, "work:30:too late", poll=0.3, deadline=2.0)
    deadline_at = DependencyWait.get().deadline_at
    proxy.drop_while["ListTasks"] = lambda: utcnow() < deadline_at
    proxy.drop.discard("ListTasks")

    run = ended(run_id)
    assert run.status == "completed" and run.output.startswith("Remote said: timeout: ")
    assert DependencyWait.get().resolution == "timeout"
    send = Outbound.get(Outbound.kind == "send")
    assert send.outcome == "accepted"  # the last reconciliation found the task, still at work
    wait_until(lambda: Outbound.get(Outbound.kind == "cancel").outcome == "accepted", what="the CancelTask")
    assert Outbound.get(Outbound.kind == "cancel").remote_task_id == send.remote_task_id


def _failing_agents(client) -> list:
    return client.get("/api/v1/health").get_json()["failing_agents"]


def _gauge(client, operator_headers) -> float | None:
    text = client.get("/metrics", headers=operator_headers).get_data(as_text=True)
    found = re.search(r'^nrllm_remote_agent_consecutive_failures\{agent="research"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


def _warnings(caplog) -> list[str]:
    """Warnings about remote agents (where each failed poll used to log one)."""
    about_agents = ("nrllm_sidecar.coordinator", "nrllm_sidecar.remote_agents", "nrllm_sidecar.reconcile")
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name in about_agents]


def test_a_dead_peer_is_polled_with_backoff_logged_a_few_times_and_shown_until_it_answers(
        settings, peers, start_worker, client, operator_headers, caplog):
    caplog.set_level(logging.WARNING, logger="nrllm_sidecar")
    peer = peers.start(card="1.0")
    # No poll is ever answered (the sends are): for the sidecar the agent is down while the tasks run.
    proxy = peers.lossy_proxy(peer, drop=("GetTask",))
    poll, count = 0.2, 40
    register("research", proxy.url, poll=poll, deadline=600)
    run_ids = [delegating_run("research", f"work:0.5:answer {i}") for i in range(count)]
    start_worker(concurrency=4)
    wait_until(lambda: all(run_row(r).status == "waiting_for_dependency" for r in run_ids), timeout=120,
               what="every run to wait")
    before, started = proxy.forwarded["GetTask"], time.monotonic()
    wait_until(lambda: _failing_agents(client), what="health to list the failing agent")
    failing = _failing_agents(client)[0]
    assert failing["name"] == "research" and failing["consecutive_failures"] >= 1 and failing["since"]
    assert "http" not in failing["last_error"], "health needs no token: no URL is shown"
    assert _gauge(client, operator_headers) >= 1
    time.sleep(8)  # the window whose polls are counted
    window = time.monotonic() - started
    polls = proxy.forwarded["GetTask"] - before
    for wait in DependencyWait.select().where(DependencyWait.resolved_at.is_null()):
        assert wait.failed_polls >= 1 and wait.next_poll_at <= wait.deadline_at
    full_rate = count * window / poll
    assert 0 < polls < full_rate / 4, (polls, full_rate)  # still asked, far less often
    warnings = _warnings(caplog)
    assert len(warnings) <= 2, warnings  # hundreds of failed polls since the outage began, not a line each

    proxy.drop.discard("GetTask")  # the agent answers again
    for run_id in run_ids:
        assert ended(run_id).status == "completed"
    assert sorted(run_row(r).output for r in run_ids) == sorted(f"Remote said: answer {i}" for i in range(count))
    assert _failing_agents(client) == [] and _gauge(client, operator_headers) == 0
    warnings = _warnings(caplog)
    assert len(warnings) <= 3, warnings
    assert [w for w in warnings if "is failing" in w] and len([w for w in warnings if "answers again" in w]) == 1
    assert all(w.failed_polls == 0 for w in DependencyWait.select())  # the backoff was reset


def test_cancel_task_attempts_back_off_and_are_given_up_after_the_last(settings, peers, start_worker, monkeypatch):
    monkeypatch.setattr(cancels, "BACKOFF", Backoff(initial=0.3, factor=2.0, cap=1.0, jitter=0.0))
    monkeypatch.setattr(cancels, "MAX_ATTEMPTS", 5)
    peer = peers.start(card="1.0")
    proxy = peers.lossy_proxy(peer, drop=("CancelTask",))  # the peer cancels; its answer never arrives
    seen: list[float] = []
    proxy.before_answering["CancelTask"] = lambda: seen.append(time.monotonic())
    register("research", proxy.url, poll=0.2, deadline=1.0)
    given_up_before = metrics.CANCELS_GIVEN_UP._value.get()
    run_id = delegating_run("research", "work:30:too late")
    worker = start_worker(concurrency=1)

    assert ended(run_id).output.startswith("Remote said: timeout: ")
    wait_until(lambda: Outbound.get(Outbound.kind == "cancel").outcome != "pending", timeout=60,
               what="the CancelTask to be given up")
    cancel = Outbound.get(Outbound.kind == "cancel")
    assert (cancel.outcome, cancel.attempts) == ("outcome_unknown", 5)
    assert cancel.error.startswith("given up after 5 attempts without an answer")
    assert event_payloads(run_id, "outbound")[-1]["note"] == "cancel given up: no attempt was answered"
    assert metrics.CANCELS_GIVEN_UP._value.get() == given_up_before + 1
    assert len(seen) == 5
    # Four delays of 0.3, 0.6, 1.0 and 1.0 s between the claims (2.9 s): at a fixed 0.3 s it would be 1.2 s.
    assert seen[-1] - seen[0] >= 2.0, [round(b - a, 2) for a, b in itertools.pairwise(seen)]
    wait_for_ticks(worker)  # many ticks later: nothing sent again
    assert peer.calls["CancelTask"] == 5
    assert waits.current_wait(run_id) is None
