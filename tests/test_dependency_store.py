"""The store's guards around a dependency wait on SQLite, PostgreSQL and MariaDB (no remote agent needed):
a cancel racing a resolution ends the wait once; two deadline resolutions journal one CancelTask; resends
racing a reconciliation leave exactly one winner; a wait's next poll never passes its deadline; a push that
comes before the suspension, or races it, is kept and makes the wait due, ahead of the routine polls of waits
that started later; a suspension that records the send's answer commits both or, refused, neither; a
backed-off wait and cancel are due at once when their agent answers again, and a cancel's claim schedules its
next attempt."""

import contextlib
import threading
import uuid
from datetime import timedelta

import pytest

from sidecar.delegation import push
from sidecar.domain.clock import utcnow
from sidecar.domain.errors import InvalidState, StatusNotWritable
from sidecar.domain.lease import LeasePolicy
from sidecar.store import db, leases, outbound, push_counts, resends, resolutions, runs, status_guard, waits
from sidecar.store.models import DependencyWait, Outbound, ToolResult
from sidecar.store.remote_agents import AgentFields, create_agent
from tests.support.databases import listening_connection, notifications, round_trips
from tests.support.delegation import journalled_send, suspend_on
from tests.support.runs import event_kinds, event_payloads, run_row, sequences

LEASE = LeasePolicy(30)


pytestmark = pytest.mark.usefixtures("every_status_writable")


def waiting_run(*, outcome: str = "accepted", deadline_in: float = 3600, poll: float | None = 60) -> DependencyWait:
    """A run suspended on a journalled send."""
    claim, row, _ = journalled_send(outcome=outcome)
    return suspend_on(claim, row, deadline_in=deadline_in, poll=poll)


def race(*actions) -> list:
    barrier, results = threading.Barrier(len(actions)), [None] * len(actions)

    def run(i, action):
        try:
            barrier.wait(30)
            results[i] = action()
        except Exception as exc:  # noqa: BLE001 - the test looks at what each racer got
            results[i] = exc
        finally:
            db.database.close()

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(actions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def cancel_rows(run_id: str) -> int:
    return Outbound.select().where(Outbound.run == run_id, Outbound.kind == "cancel").count()


def test_a_cancel_racing_a_resolution_ends_the_wait_once(database_url):
    for _ in range(10):
        wait = waiting_run()
        resolved, cancelled = race(lambda w=wait: resolutions.resolve_wait(w, turn_index=0, result="the answer"),
                                   lambda w=wait: runs.request_cancel(w.run_id, by="test"))
        assert cancelled == "cancelled" or isinstance(cancelled, InvalidState), cancelled
        run, closed = run_row(wait.run_id), DependencyWait.get_by_id(wait.id)
        answered = ToolResult.select().where(ToolResult.run == wait.run_id).count()
        if resolved:  # the answer won; the cancel then found a queued run
            assert (closed.resolution, answered, cancel_rows(wait.run_id)) == ("result", 1, 0)
        else:  # the cancel won: no answer, one pending CancelTask
            assert (closed.resolution, answered, cancel_rows(wait.run_id)) == ("cancelled", 0, 1)
            assert Outbound.get(Outbound.run == wait.run_id, Outbound.kind == "cancel").outcome == "pending"
        assert run.status == "cancelled"


def test_two_deadline_resolutions_journal_one_cancel_task(database_url):
    wait = waiting_run()
    results = race(*[lambda: resolutions.resolve_wait(wait, turn_index=0, result="timeout: x", resolution="timeout",
                                           cancel_remote=True)] * 4)
    assert sorted(results) == [False, False, False, True]
    (row,) = Outbound.select().where(Outbound.kind == "cancel")
    assert (row.outcome, row.remote_task_id, row.request_body) == ("pending", f"task-{wait.run_id}", "")
    assert run_row(wait.run_id).status == "queued"


def test_resolutions_claiming_the_run_race_plain_ones_and_exactly_one_wins(database_url):
    for _ in range(5):
        wait = waiting_run()
        epoch = run_row(wait.run_id).lease_epoch

        def claiming(holder, w=wait):
            return lambda: resolutions.resolve_and_claim(w, holder, LEASE, turn_index=0, result=f"from {holder}")

        def plain(w=wait):
            return resolutions.resolve_wait(w, turn_index=0, result="from the queue")

        results = race(claiming("worker-a"), plain, claiming("worker-b"), plain)
        won = [r for r in results if r]
        assert len(won) == 1 and all(r in (None, False) for r in results if not r), results
        run = run_row(wait.run_id)
        (answer,) = [row.result for row in ToolResult.select().where(ToolResult.run == wait.run_id)]
        kinds = event_kinds(wait.run_id)
        if won[0] is True:
            assert (run.status, answer, kinds[-3:]) == ("queued", "from the queue", ["resume", "status", "tool"])
            runs.request_cancel(wait.run_id, by="test")  # out of the queue: the next waiting_run claims its own
            continue
        claim, row = won[0]
        # Claimed as claim_queued claims: running under the winner's lease, one epoch on, its events in order.
        assert (run.status, run.lease_holder, answer) == ("running", claim.holder, f"from {claim.holder}")
        assert claim.epoch == run.lease_epoch == epoch + 1 and run.lease_expires_at > utcnow()
        assert kinds[-4:] == ["resume", "status", "tool", "status"]
        assert [p["to"] for p in event_payloads(wait.run_id, "status")][-2:] == ["queued", "running"]
        assert sequences(wait.run_id) == list(range(1, len(kinds) + 1))
        if row is not None:  # the run as written, where UPDATE ... RETURNING exists
            assert (row.status, row.lease_epoch, row.last_event_sequence) == ("running", run.lease_epoch, len(kinds))
        assert leases.renew(claim, LEASE)  # the claim fences like any other


def test_a_deadline_resolution_claiming_the_run_journals_its_cancel_task_and_the_claim(database_url):
    wait = waiting_run()
    claim, _ = resolutions.resolve_and_claim(wait, "worker-a", LEASE, turn_index=0, result="timeout: x",
                                             resolution="timeout", cancel_remote=True)
    (row,) = Outbound.select().where(Outbound.kind == "cancel")
    assert (row.outcome, row.remote_task_id) == ("pending", f"task-{wait.run_id}")
    run = run_row(wait.run_id)
    assert (run.status, run.lease_holder, run.lease_epoch) == ("running", "worker-a", claim.epoch)
    assert [p["to"] for p in event_payloads(wait.run_id, "status")][-2:] == ["queued", "running"]
    assert sequences(wait.run_id) == list(range(1, run.last_event_sequence + 1))
    assert resolutions.resolve_and_claim(wait, "worker-b", LEASE, turn_index=0, result="again") is None


def test_resends_racing_a_reconciliation_leave_one_winner(database_url):
    for _ in range(5):
        wait = waiting_run(outcome="outcome_unknown", poll=None)
        old = outbound.get(wait.outbound_id)

        def resend(n, old_id=old.id):
            return lambda: resends.record_resend(old_id, f"{old_id}-resend-{n}", '{"x": 2}')

        results = race(resend(1), resend(2), lambda old_id=old.id: outbound.record_found(old_id, "found-task"),
                       resend(3))
        won = [r for r in results if r is True or isinstance(r, resends.Resend)]
        assert len(won) == 1, results
        assert all(isinstance(r, (bool, resends.Resend, resends.NotResendable)) for r in results), results
        current = DependencyWait.get_by_id(wait.id)
        if won[0] is True:
            assert (outbound.get(old.id).outcome, current.outbound_id) == ("accepted", old.id)
        else:
            assert outbound.get(old.id).outcome == "superseded" and current.outbound_id == won[0].row.id
        assert Outbound.select().where(Outbound.resend_of == old.id).count() == (0 if won[0] is True else 1)


def test_a_waits_next_poll_never_passes_its_deadline(database_url):
    create_agent("research", AgentFields(url="http://agent.example", poll_interval_seconds=60, deadline_seconds=1))
    unknown = waiting_run(outcome="outcome_unknown", poll=None, deadline_in=30)
    assert DependencyWait.get_by_id(unknown.id).next_poll_at == unknown.deadline_at  # nothing to poll before
    soon = waiting_run(deadline_in=0.2)
    assert DependencyWait.get_by_id(soon.id).next_poll_at == soon.deadline_at
    waits.poll_now(soon.id)
    (claimed,) = waits.claim_due(10)
    assert claimed.id == soon.id and DependencyWait.get_by_id(soon.id).next_poll_at == soon.deadline_at



def test_backed_off_waits_and_cancels_are_due_at_once_when_the_agent_answers_again(database_url):
    from sidecar.store import remote_agents

    create_agent("research", AgentFields(url="http://agent.example", poll_interval_seconds=600, deadline_seconds=60))
    backing_off, fine = waiting_run(poll=0), waiting_run(poll=0)
    claimed = {w.id: w for w in waits.claim_due(10)}
    later = utcnow() + timedelta(minutes=5)
    waits.back_off(claimed[backing_off.id], later)
    assert (DependencyWait.get_by_id(backing_off.id).failed_polls,
            DependencyWait.get_by_id(backing_off.id).next_poll_at) == (1, later)
    waits.back_off(claimed[backing_off.id], later)  # this claim's time is gone: a second write finds nothing
    assert DependencyWait.get_by_id(backing_off.id).failed_polls == 1

    cancel = outbound.journal_cancel(outbound.get(backing_off.outbound_id), [], utcnow())
    assert [r.id for r in outbound.cancels_due(utcnow(), max_attempts=3)] == [cancel.id]
    assert outbound.claim_cancel(cancel, utcnow(), retry_at=later)
    assert not outbound.claim_cancel(cancel, utcnow(), retry_at=later), "the same attempt is claimed once"
    assert outbound.cancels_due(utcnow(), max_attempts=3) == []  # the next attempt is due later
    assert outbound.get(cancel.id).attempts == 1

    assert remote_agents.record_failure("research", "down") == 1
    assert remote_agents.record_success("research") == 1
    assert waits.poll_backed_off_now("research") == 1  # only the wait that backed off
    assert outbound.retry_cancels_now("research") == 1
    assert DependencyWait.get_by_id(backing_off.id).failed_polls == 0
    assert DependencyWait.get_by_id(backing_off.id).next_poll_at <= utcnow()
    assert DependencyWait.get_by_id(fine.id).next_poll_at > utcnow()
    assert [r.id for r in outbound.cancels_due(utcnow(), max_attempts=3)] == [cancel.id]
    assert outbound.cancels_due(utcnow(), max_attempts=1) == [], "no attempt is left"


# --- pushes that come before the suspension ---------------------------------------------------------------


def send_with_push(outcome: str = "accepted"):
    """A journalled send that registers a push config; and its token."""
    return journalled_send(outcome=outcome, push=True)


def status_push(task_id: str, state: str = "TASK_STATE_COMPLETED") -> dict:
    return {"statusUpdate": {"taskId": task_id, "status": {"state": state}}}


STILL_WORKING = {  # a 1.0 StreamResponse's status update and task, and what a 0.3 peer posts
    "1.0 submitted": lambda task: status_push(task, "TASK_STATE_SUBMITTED"),
    "1.0 working": lambda task: status_push(task, "TASK_STATE_WORKING"),
    "1.0 task": lambda task: {"task": {"id": task, "status": {"state": "TASK_STATE_WORKING"}}},
    "0.3 task": lambda task: {"kind": "task", "id": task, "status": {"state": "working"}},
    "0.3 status update": lambda task: {"kind": "status-update", "taskId": task, "status": {"state": "submitted"}},
    # A task sends its artifacts while it works; that it has finished comes with a status update.
    "1.0 artifact update": lambda task: {"artifactUpdate": {"taskId": task, "artifact": {"artifactId": "a"}}},
    "0.3 artifact update": lambda task: {"kind": "artifact-update", "taskId": task, "artifact": {"artifactId": "a"}},
}


@pytest.mark.parametrize("shape", list(STILL_WORKING))
def test_a_push_saying_the_task_still_works_is_counted_and_brings_nothing_forward(database_url, shape):
    claim, row, token = send_with_push()
    working = STILL_WORKING[shape](row.remote_task_id)
    # Before the suspension: not noted, so the suspension keeps the wait's first poll where it was. Only
    # counted, and the count written with others (store/push_counts.py).
    assert push.receive(push.authenticate(token), working) is False
    assert push_counts.flush() == 1
    assert (outbound.get(row.id).pushes_seen, outbound.get(row.id).push_received_at) == (1, None)
    wait = suspend_on(claim, row, poll=60, push_token=token)
    assert wait.next_poll_at > utcnow()
    # After it: the wait's next poll stays where it is.
    assert push.receive(push.authenticate(token), working) is False
    assert DependencyWait.get_by_id(wait.id).next_poll_at == wait.next_poll_at
    assert push_counts.flush() == 1
    assert outbound.get(row.id).pushes_seen == 2
    # Any state that may be news does bring it forward: the poll decides what it means.
    for news in ({"message": {"taskId": row.remote_task_id}}, status_push(row.remote_task_id, "bogus"),
                 status_push(row.remote_task_id, "TASK_STATE_INPUT_REQUIRED"),
                 {"kind": "task", "id": row.remote_task_id, "status": {"state": "completed"}}):
        DependencyWait.update(next_poll_at=wait.next_poll_at).where(DependencyWait.id == wait.id).execute()
        assert push.receive(push.authenticate(token), news) is True, news
        assert DependencyWait.get_by_id(wait.id).next_poll_at <= utcnow()


def test_a_push_saying_the_task_still_works_makes_an_unknown_outcome_reconciled(database_url):
    claim, row, token = send_with_push(outcome="outcome_unknown")
    wait = suspend_on(claim, row, poll=60, push_token=token)
    assert push.receive(push.authenticate(token), status_push("any-task", "TASK_STATE_WORKING")) is True
    assert DependencyWait.get_by_id(wait.id).next_poll_at <= utcnow()


def test_a_poll_brought_forward_is_claimed_before_the_routine_polls_of_waits_that_started_later(database_url):
    create_agent("research", AgentFields(url="http://agent.example", poll_interval_seconds=60, deadline_seconds=3600))
    pushed = waiting_run()
    later = [waiting_run() for _ in range(5)]
    for wait in later:  # due a moment after they started, and before the push below
        DependencyWait.update(next_poll_at=wait.since + timedelta(milliseconds=1)).where(
            DependencyWait.id == wait.id).execute()
    assert waits.poll_now(pushed.id) is True
    brought_forward = DependencyWait.get_by_id(pushed.id).next_poll_at
    assert brought_forward == pushed.since <= utcnow()
    (first,) = waits.claim_due(1)
    assert first.id == pushed.id, "the push is not queued behind a burst of routine polls"
    assert [w.id for w in waits.claim_due(10)] == [w.id for w in later]


def test_a_push_is_counted_and_brings_its_wait_forward_in_one_write_that_notifies_only_if_it_moved(database_url):
    wait = waiting_run()
    listener = listening_connection() if db.dialect() == "postgresql" else None
    try:
        assert waits.pushed(wait.id, wait.outbound_id) is True
        assert DependencyWait.get_by_id(wait.id).next_poll_at == wait.since
        assert Outbound.get_by_id(wait.outbound_id).pushes_seen == 1
        DependencyWait.update(resolved_at=utcnow()).where(DependencyWait.id == wait.id).execute()
        with round_trips() if listener else contextlib.nullcontext([]) as sent:  # its statement prepared by now
            assert waits.pushed(wait.id, wait.outbound_id) is False  # a late push: counted, nothing moved
        assert Outbound.get_by_id(wait.outbound_id).pushes_seen == 2
        if listener:
            # One round trip, its own transaction: no BEGIN before it and no COMMIT after it.
            assert len(sent) == 1 and "BEGIN" not in sent[0] and "COMMIT" not in sent[0], sent
            assert notifications(listener) == 1  # the first push's only
    finally:
        if listener:
            listener.close()


def test_a_push_before_the_suspension_is_kept_and_makes_the_wait_due_at_once(database_url):
    create_agent("research", AgentFields(url="http://agent.example", poll_interval_seconds=60, deadline_seconds=3600))
    claim, row, token = send_with_push()
    delegation = push.authenticate(token)
    assert delegation.wait is None and delegation.row.id == row.id
    assert push.receive(delegation, status_push(row.remote_task_id)) is True
    noted = outbound.get(row.id).push_received_at
    assert noted is not None
    wait = suspend_on(claim, row, poll=60, push_token=token)
    assert wait.next_poll_at <= utcnow()  # not a minute from now
    (claimed,) = waits.claim_due(10)
    assert claimed.id == wait.id
    # A second early push changes nothing on the row; once the wait exists, pushes go to it.
    assert push.authenticate(token).wait.id == wait.id


def test_a_push_looked_up_before_the_suspension_and_noted_after_it_still_brings_the_wait_forward(database_url):
    claim, row, token = send_with_push()
    delegation = push.authenticate(token)  # no wait yet
    wait = suspend_on(claim, row, poll=60, push_token=token)  # commits without the note
    assert wait.next_poll_at > utcnow()
    assert push.receive(delegation, status_push(row.remote_task_id)) is True
    assert DependencyWait.get_by_id(wait.id).next_poll_at <= utcnow()


def test_a_push_before_the_suspension_with_another_task_or_token_changes_nothing(database_url):
    claim, row, token = send_with_push()
    with pytest.raises(push.NotThisDelegation):
        push.receive(push.authenticate(token), status_push("another-task"))
    for wrong in (token + "x", f"{uuid.uuid4()}.{token.partition('.')[2]}", "no-dot", "", None,
                  f"{claim.run_id[:-1]}\x00.{token.partition('.')[2]}"):
        with pytest.raises(push.Unauthenticated):
            push.authenticate(wrong)
    assert outbound.get(row.id).push_received_at is None
    assert suspend_on(claim, row, poll=60, push_token=token).next_poll_at > utcnow()


@pytest.mark.parametrize("answer_recorded", ["before the suspension", "by the suspension"])
def test_a_push_racing_the_suspension_is_never_lost(database_url, answer_recorded):
    for _ in range(10):
        by_suspension = answer_recorded == "by the suspension"
        claim, row, token = send_with_push(outcome="pending" if by_suspension else "accepted")
        task_id = f"task-{claim.run_id}"
        answer_task = task_id if by_suspension else None
        pushed, _ = race(lambda t=token, k=task_id: push.receive(push.authenticate(t), status_push(k)),
                         lambda c=claim, r=row, t=token, a=answer_task: suspend_on(c, r, poll=60, push_token=t,
                                                                                   answer_task=a))
        assert pushed is True, pushed
        wait = waits.current_wait(claim.run_id)
        assert wait.next_poll_at <= utcnow(), "the push came before or after the suspension: the wait is due"
        assert outbound.get(row.id).remote_task_id == task_id


def test_a_suspension_records_the_send_answer_with_its_wait_and_a_refusal_undoes_both(database_url):
    claim, row, _ = journalled_send(outcome="pending")
    task_id = f"task-{claim.run_id}"
    kinds_before = event_kinds(claim.run_id)
    status_guard.install(lambda status, origin, reported_at: "an older consumer" if status == waits.WAITING else None)
    with pytest.raises(StatusNotWritable):
        suspend_on(claim, row, answer_task=task_id)
    assert outbound.get(row.id).outcome == "pending" and event_kinds(claim.run_id) == kinds_before
    assert run_row(claim.run_id).status == "running"
    status_guard.install(lambda status, origin, reported_at: None)
    wait = suspend_on(claim, row, answer_task=task_id)
    recorded = outbound.get(row.id)
    assert (recorded.outcome, recorded.remote_task_id) == ("accepted", task_id) and recorded.sent_at is not None
    assert event_kinds(claim.run_id) == [*kinds_before, "outbound", "pause", "status"]
    assert run_row(claim.run_id).last_event_sequence == len(kinds_before) + 3
    assert (wait.outbound_id, run_row(claim.run_id).status) == (row.id, "waiting_for_dependency")
    (pause,) = event_payloads(claim.run_id, "pause")
    assert (pause["outcome"], pause["remote_task_id"]) == ("accepted", task_id)
    assert event_payloads(claim.run_id, "outbound")[-1]["note"] == "sent"
