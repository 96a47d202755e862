"""Pushes from real a2a-sdk peers to the sidecar's webhook, on SQLite and PostgreSQL: a bad token is 401
and changes nothing, a valid push with a 60 s poll interval resumes the run in under a second (in this
process, and across processes: LISTEN/NOTIFY on PostgreSQL, the worker process's doorbell on SQLite), a push
saying the task still works brings nothing forward, and a push for a delegation whose outcome is unknown
triggers reconciliation."""

import json

from sidecar.delegation.a2a import push_target_of
from sidecar.domain import push_tokens
from sidecar.store import waits
from sidecar.store.models import DependencyWait, Outbound, RunEvent
from tests.support.delegation import ON_A2A_DATABASES, delegating_run, register
from tests.support.runs import run_row, tool_results
from tests.support.waiting import wait_until
from tests.support.workers import start_worker_process, stop_process, wait_for_ticks

pytestmark = ON_A2A_DATABASES


# Seconds a pushed run may take to complete: half the 60 s poll it would wait for without the push, so a
# busy machine never fails the test and a push that did nothing always does.
PUSH_BOUND = 30.0


def completion_latency(webhook, run_id: str) -> float:
    """Seconds from the last accepted push before the run completed to the run's completion."""
    wait_until(lambda: run_row(run_id).status == "completed", timeout=PUSH_BOUND + 10, what="the run to complete")
    finished = run_row(run_id).finished_at
    pushed = webhook.last_push_before(finished)
    assert pushed is not None, "the run completed before any accepted push"
    return (finished - pushed).total_seconds()


def accepted_pushes(webhook) -> int:
    return sum(1 for _, status in list(webhook.pushes) if status == 204)


def test_a_bad_push_token_is_401_and_changes_nothing(settings, peers, webhook, start_worker, client):
    peer = peers.start(card="1.0", push=True)
    register("research", peer.url, poll=60, push=True)
    run_id = delegating_run("research", "work:30:slow answer")
    worker = start_worker(settings=webhook.settings, concurrency=1)
    wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", what="the run to wait")
    (row,) = Outbound.select()
    assert push_target_of(row.request_body).url == webhook.url + "/api/v1/push"
    (token,) = peer.push_tokens()
    wait = waits.current_wait(run_id)
    assert wait.push_token_sha256 == row.push_token_sha256 == push_tokens.digest(token)
    # The token is the sidecar's secret: only its digest is kept, in the wait and in the journal.
    assert token not in json.dumps([wait.checkpoint, wait.push_token_sha256, row.request_body])
    wait_until(lambda: peer.calls["GetTask"] >= 1, what="the first poll")
    # The pushes the peer made when the task started were answered (they bring nothing forward: the task works),
    # and whatever was due was polled (a tick polls what is due before it ends).
    wait_until(peer.pushes_settled, what="the peer's pushes to be answered")
    wait_for_ticks(worker, 2)
    polls = peer.calls["GetTask"]
    before = (DependencyWait.get_by_id(wait.id).next_poll_at, RunEvent.select().count(), run_row(run_id).status)
    notification = {"statusUpdate": {"taskId": row.remote_task_id, "contextId": row.context_id,
                                     "status": {"state": "TASK_STATE_COMPLETED"}}}

    for headers in ({}, {"X-A2A-Notification-Token": "not-a-token"},
                    {"X-A2A-Notification-Token": token + "x"},
                    {"Authorization": f"Bearer {run_id}.{'A' * 43}"},
                    {"Authorization": f"Basic {token}"}):
        answer = client.post("/api/v1/push", json=notification, headers=headers)
        assert answer.status_code == 401, headers
        assert answer.get_json()["code"] == "unauthenticated"
    other_task = {"statusUpdate": {"taskId": "another-task", "status": {"state": "TASK_STATE_COMPLETED"}}}
    answer = client.post("/api/v1/push", json=other_task, headers={"X-A2A-Notification-Token": token})
    assert (answer.status_code, answer.get_json()["code"]) == (404, "not_found")
    assert (DependencyWait.get_by_id(wait.id).next_poll_at, RunEvent.select().count(),
            run_row(run_id).status) == before
    assert peer.calls["GetTask"] == polls

    # A push saying the task still works is counted (the count written within a second, with any others)
    # and brings nothing forward: a poll now would find just that.
    working = {"statusUpdate": {"taskId": row.remote_task_id, "status": {"state": "TASK_STATE_WORKING"}}}
    answer = client.post("/api/v1/push", json=working, headers={"X-A2A-Notification-Token": token})
    assert answer.status_code == 204
    wait_until(lambda: Outbound.get_by_id(row.id).pushes_seen == accepted_pushes(webhook), timeout=10,
               what="every accepted push counted")
    assert DependencyWait.get_by_id(wait.id).next_poll_at == before[0]

    # Either header carries a valid token; a push saying the task completed brings the poll forward, and the
    # poll is what decides (the task still works).
    answer = client.post("/api/v1/push", json=notification, headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 204 and answer.data == b""
    wait_until(lambda: peer.calls["GetTask"] == polls + 1, what="the pushed poll")
    wait_for_ticks(worker)
    assert run_row(run_id).status == "waiting_for_dependency" and tool_results(run_id) == []
    assert DependencyWait.get_by_id(wait.id).next_poll_at > before[0]


def test_a_push_resumes_a_run_polled_every_60s_long_before_its_next_poll(settings, peers, webhook, start_worker):
    peer = peers.start(card="1.0", push=True)
    register("research", peer.url, poll=60, push=True)
    run_id = delegating_run("research", "work:3:pushed answer")
    start_worker(settings=webhook.settings, concurrency=1, tick=0.25)
    latency = completion_latency(webhook, run_id)
    # Without the push the answer would wait for the poll 60 s after the first; how soon a push is served
    # (well under a second) is bench/bench_push.py's to measure, on a machine nobody else is using.
    assert latency < PUSH_BOUND, f"push to completion took {latency:.3f}s"
    assert run_row(run_id).output == "Remote said: pushed answer"
    # The first poll (a second after the suspension) and the pushed ones: nothing like a 60 s schedule.
    assert peer.calls["GetTask"] <= 4 and peer.task_count == 1


def test_every_push_of_a_delegation_is_accepted_even_before_the_suspension(settings, peers, webhook,
                                                                           start_worker):
    # The peer pushes as soon as the task starts: usually before the run's suspension is committed.
    peer = peers.start(card="1.0", push=True)
    register("research", peer.url, poll=60, push=True)
    run_ids = [delegating_run("research", f"work:0.5:answer {i}") for i in range(3)]
    start_worker(settings=webhook.settings, concurrency=3)
    for run_id in run_ids:
        wait_until(lambda r=run_id: run_row(r).status == "completed", timeout=30, what="the runs to complete")
    statuses = [status for _, status in list(webhook.pushes)]
    assert len(statuses) >= 3 and set(statuses) == {204}, statuses
    # Each accepted push is counted once on its send, the early ones too (the console shows the count), those
    # that change nothing within a second.
    def counts():
        return [row.pushes_seen for row in Outbound.select().where(Outbound.kind == "send")]

    wait_until(lambda: sum(counts()) >= len(statuses), timeout=10, what="every accepted push counted")
    assert sum(counts()) == len(statuses) and all(count >= 1 for count in counts()), (counts(), statuses)


def test_a_push_wakes_a_coordinator_in_another_process(database_url, settings, peers, webhook, tmp_path):
    """The webhook answers in this process; the coordinator polls in a worker process, where it looks at the
    due index only once an hour (AgentLoopWokenOnlyByWakeUps): the run's first poll, due a second after the
    suspension, is not made on time, and only a wake-up from this process makes the coordinator look: NOTIFY
    on PostgreSQL, the worker process's doorbell on SQLite (store/doorbell.py)."""
    peer = peers.start(card="1.0", push=True)
    register("research", peer.url, poll=60, push=True)
    run_id = delegating_run("research", "work:4:answer from afar")
    env = {"NRLLM_REMOTE_ALLOW": "127.0.0.1", "NRLLM_PUBLIC_URL": webhook.url}
    worker = start_worker_process(database_url, "--executor", "tests.support.engine:AgentLoopWokenOnlyByWakeUps",
                                  env=env, log_path=tmp_path / "worker.log")
    try:
        latency = completion_latency(webhook, run_id)
        # Without the wake-up the coordinator would look again only in an hour; the push's own latency is
        # bench/bench_push.py's to measure.
        assert latency < PUSH_BOUND, f"push to completion across processes took {latency:.3f}s"
        assert run_row(run_id).output == "Remote said: answer from afar"
        if database_url.startswith("sqlite"):
            # Nothing rings a doorbell for a suspension (that is the worker's own) nor for the pushes saying the
            # task started: the polls are the one the completion's push rang for, and the first poll a second
            # after the suspension only if the coordinator's first look came after the suspension.
            assert 1 <= peer.calls["GetTask"] <= 2
    finally:
        stop_process(worker)


def test_a_push_for_an_unknown_outcome_triggers_reconciliation(settings, peers, webhook, start_worker):
    peer = peers.start(card="1.0", push=True)
    # The send's answer is lost, and so is the ListTasks right after it: the outcome stays unknown.
    proxy = peers.lossy_proxy(peer, drop=("SendMessage", "ListTasks"))
    register("research", proxy.url, poll=60, push=True)
    run_id = delegating_run("research", "work:3:found again")
    start_worker(settings=webhook.settings, concurrency=1)
    wait_until(lambda: run_row(run_id).status == "waiting_for_dependency", what="the run to wait")
    (row,) = Outbound.select()
    # The reconciliation before the suspension, and maybe one for the push the peer made when the task
    # started (kept until the suspension, which then makes the wait due at once): all lost.
    assert row.outcome == "outcome_unknown" and proxy.forwarded["ListTasks"] >= 1
    proxy.drop.clear()

    wait_until(lambda: run_row(run_id).status == "completed", timeout=20, what="the push to lead to the answer")
    assert run_row(run_id).output == "Remote said: found again"
    found = Outbound.get_by_id(row.id)
    assert (found.outcome, found.remote_task_id) == ("accepted", peer.tasks_in(row.context_id)[0])
    assert proxy.forwarded["ListTasks"] >= 2 and peer.task_count == 1
    assert Outbound.select().count() == 1  # found, never resent
