"""How a coordinator learns that a wait is due (docs/delegation.md, "Wake-ups").

On PostgreSQL: a suspension tells its own process's coordinator when the first poll is due and notifies
nobody else, and that coordinator polls it then although it had nothing else to wake it; a process with no
coordinator notifies every one; a stopping coordinator tells the others to look. (A push rings one worker
process and notifies only when it rings none: tests/test_doorbell.py.) Then the coordinator's alarm alone:
what wakes it and what only shortens its next sleep."""

import threading
import time
from datetime import timedelta

import pytest

from sidecar.config import Settings
from sidecar.delegation import coordinator as coordinating
from sidecar.delegation.coordinator import Alarm, Coordinator
from sidecar.domain.clock import utcnow
from sidecar.store.models import DependencyWait
from sidecar.store.remote_agents import AgentFields, create_agent
from tests.support.databases import listening_connection, notifications
from tests.support.delegation import journalled_send, suspend_on
from tests.support.waiting import wait_until

on_postgresql = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


def _started_coordinator(tmp_path, database_url) -> Coordinator:
    coordinator = Coordinator(Settings(instance_path=tmp_path, database_url=database_url))
    coordinator.start()
    wait_until(lambda: coordinator._listener.listening, what="the coordinator listening")
    return coordinator


@on_postgresql
def test_a_suspension_tells_its_own_coordinator_when_it_is_due_and_notifies_nobody(
        database_url, tmp_path, every_status_writable, monkeypatch):
    # The safety net far away: only being told can make the coordinator look at the wait in time.
    monkeypatch.setattr(coordinating, "IDLE_SECONDS", 300.0)
    create_agent("research", AgentFields(url="http://127.0.0.1:9/", poll_interval_seconds=60, deadline_seconds=3600))
    coordinator = _started_coordinator(tmp_path, database_url)
    listener = listening_connection()
    try:
        wait_until(lambda: coordinator._wake.sleeping, what="its first look done: it sleeps for IDLE_SECONDS")
        claim, row, _ = journalled_send()
        wait = suspend_on(claim, row, poll=1.0)
        # Claimed (its next poll moved on) about a second later, long before the safety net.
        wait_until(lambda: DependencyWait.get_by_id(wait.id).next_poll_at != wait.next_poll_at, timeout=60,
                   what="the coordinator's claim of the wait")
        assert notifications(listener) == 0
    finally:
        listener.close()
        coordinator.stop()


@on_postgresql
def test_without_a_coordinator_a_suspension_notifies_every_one_and_a_stopping_coordinator_does(
        database_url, tmp_path, every_status_writable):
    listener = listening_connection()
    try:
        claim, row, _ = journalled_send()
        suspend_on(claim, row, poll=60)
        assert notifications(listener) == 1
        coordinator = _started_coordinator(tmp_path, database_url)
        assert notifications(listener) == 0
        coordinator.stop()  # its waits were its own to know of: the others must look
        assert notifications(listener) == 1
    finally:
        listener.close()


def _sleeping(alarm: Alarm, seconds: float) -> tuple[threading.Thread, list[float]]:
    """A thread sleeping on `alarm`; the list gets how long it slept."""
    slept: list[float] = []

    def sleep():
        began = time.monotonic()
        alarm.sleep(seconds, coordinating.MIN_PAUSE_SECONDS)
        slept.append(time.monotonic() - began)

    sleeper = threading.Thread(target=sleep)
    sleeper.start()
    wait_until(lambda: alarm.sleeping, what="the sleep begun")
    return sleeper, slept


def _in(seconds: float):
    return utcnow() + timedelta(seconds=seconds)


def test_an_alarm_is_woken_by_a_due_time_before_the_end_of_its_sleep_only():
    alarm = Alarm(listening=lambda: True)
    sleeper, slept = _sleeping(alarm, 1.5)
    alarm.due_at(_in(60))  # after the sleep ends: nothing to do now
    sleeper.join()
    assert slept[0] >= 1.4
    sleeper, slept = _sleeping(alarm, 60)
    alarm.due_at(_in(0.2))
    sleeper.join(30)
    assert slept and slept[0] < 30


def test_a_due_time_told_while_awake_shortens_the_next_sleep():
    alarm = Alarm(listening=lambda: True)
    alarm.due_at(_in(0.3))
    assert not alarm.is_set()  # awake: nobody to wake
    began = time.monotonic()
    alarm.sleep(60, coordinating.MIN_PAUSE_SECONDS)
    assert time.monotonic() - began < 30


def test_a_ticking_coordinator_is_told_only_what_is_due_now():
    alarm = Alarm(listening=lambda: False)  # it looks at every tick anyway
    alarm.due_at(_in(0.3))
    began = time.monotonic()
    alarm.sleep(1.5, coordinating.MIN_PAUSE_SECONDS)
    assert time.monotonic() - began >= 1.4
    sleeper, slept = _sleeping(alarm, 60)
    alarm.due_at(utcnow())  # a push noted before the suspension: due at once
    sleeper.join(30)
    assert slept and slept[0] < 30
