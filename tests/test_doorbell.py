"""The doorbell (store/doorbell.py), with real sockets and real processes, on every database: a ring wakes the
process whose doorbell it is, a dead process's socket is removed, a queued run rings one process with a
thread free, a wait due rings one process (on PostgreSQL too, which notifies only when no process answers),
a suspension rings none where a coordinator of its own is told, and a run POSTed to `serve --no-worker`
reaches a worker process that polls its queue only once an hour."""

import os
import socket
import threading
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import requests

from sidecar import wakeup
from sidecar.domain.clock import utcnow
from sidecar.domain.lease import LeasePolicy
from sidecar.store import doorbell, tokens, waits
from sidecar.store.models import DependencyWait
from sidecar.testing import StepExecutor
from sidecar.worker import Worker
from tests.support.api import as_host
from tests.support.databases import listening_connection, notifications
from tests.support.delegation import journalled_send, suspend_on
from tests.support.runs import run_row
from tests.support.servers import STEPS, start_serve
from tests.support.waiting import wait_until
from tests.support.workers import start_worker_process, stop_process


def test_a_ring_wakes_the_doorbells_process_and_removes_a_dead_processs_socket(database_url):
    queued, due = threading.Event(), threading.Event()
    bell = doorbell.Doorbell()
    bell.start()
    wakeup.subscribe(queued)
    wakeup.subscribe_coordinator(due)
    dead = doorbell.directory() / f"1-gone{doorbell.SUFFIX}"
    try:
        assert bell.path is not None and bell.path.parent == dead.parent
        # The socket of a process killed before it could remove it: bound once, read by nobody.
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as gone:
            gone.bind(str(dead))
        assert doorbell.ring(doorbell.DEPENDENCIES_DUE) == 1
        assert due.wait(30) and not queued.is_set()
        assert not dead.exists() and bell.path.exists()
        assert doorbell.ring(doorbell.RUNS_QUEUED) == 1
        assert queued.wait(30)
    finally:
        wakeup.unsubscribe(queued)
        wakeup.unsubscribe_coordinator(due)
        bell.stop()
    assert not bell.path.exists()
    assert doorbell.ring(doorbell.RUNS_QUEUED) == 0


def drained(sock: socket.socket) -> bytes:
    """Every ring waiting at this doorbell, in the order they came."""
    rings = b""
    while True:
        try:
            rings += sock.recv(64)
        except BlockingIOError:
            return rings


def bell_socket(name: str) -> socket.socket:
    """A doorbell of a worker process that is not there: a socket bound in the doorbells' directory, read by
    the test (non-blocking, for drained()). The caller unlinks its path."""
    folder = doorbell.directory()
    folder.mkdir(mode=0o700, exist_ok=True)
    bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    bell.bind(str(folder / f"{name}-{uuid.uuid4().hex[:8]}{doorbell.SUFFIX}"))
    bell.setblocking(False)
    return bell


def test_a_wait_due_and_a_queued_run_ring_one_worker_process_in_turn(database_url):
    bells = [bell_socket(name) for name in ("a", "b")]
    folder = doorbell.directory()
    dead = folder / f"0-gone{doorbell.SUFFIX}"  # a process killed before it removed its socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as gone:
        gone.bind(str(dead))
    doorbell.ring_other_processes()  # as the API's app does: its wake-ups ring the worker processes
    try:
        for _ in range(4):
            wakeup.dependencies_due()
        # Each ring reached one process; in turn, so both (the dead one's turn passed on to the next).
        rings = [drained(bell) for bell in bells]
        assert b"".join(rings) == b"dddd" and all(rings), rings
        assert not dead.exists()
        # A queued run is claimed by one process: the others' claims would find nothing.
        for _ in range(2):
            wakeup.runs_queued()
        rings = [drained(bell) for bell in bells]
        assert b"".join(rings) == b"qq" and all(rings), rings
        # A process whose threads are all busy is passed over while another has one free.
        busy = [Path(bell.getsockname() + doorbell.BUSY_SUFFIX) for bell in bells]
        busy[0].touch()
        for _ in range(3):
            wakeup.runs_queued()
        assert [drained(bell) for bell in bells] == [b"", b"qqq"]
        # With every one busy, all are rung: each looks again when a thread of its own is free.
        busy[1].touch()
        wakeup.runs_queued()
        assert [drained(bell) for bell in bells] == [b"q", b"q"]
        # A waiting wait is not a queued run: a busy process's coordinator is rung as before.
        for _ in range(2):
            wakeup.dependencies_due()
        assert b"".join(drained(bell) for bell in bells) == b"dd"
    finally:
        for bell in bells:
            os.unlink(bell.getsockname())
            bell.close()
        for marker in folder.glob(f"*{doorbell.BUSY_SUFFIX}"):
            marker.unlink()
        dead.unlink(missing_ok=True)


def test_a_suspension_rings_no_other_process_where_a_coordinator_of_its_own_is_told(database_url):
    from sidecar.delegation.coordinator import Alarm

    bell = bell_socket("a")
    path = Path(bell.getsockname())
    doorbell.ring_other_processes()  # an application that rings the worker processes, as the API's does
    alarm = Alarm(listening=lambda: True)
    try:
        wakeup.dependencies_due_at(utcnow() + timedelta(seconds=60))
        assert drained(bell) == b"d"  # nobody here to tell: a worker process is rung
        wakeup.subscribe_coordinator(alarm)
        wakeup.dependencies_due_at(utcnow() + timedelta(seconds=60))
        assert drained(bell) == b"", "the coordinator here is told, and nobody else"
        wakeup.dependencies_due_at(utcnow())
        assert drained(bell) == b"" and alarm.is_set()  # due now: it looks at once
    finally:
        wakeup.unsubscribe_coordinator(alarm)
        bell.close()
        path.unlink()


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_on_postgresql_a_push_rings_one_worker_process_and_notifies_only_when_it_rings_none(
        database_url, every_status_writable):
    """A NOTIFY woke every worker process's coordinator; the ring wakes one. Only the coordinators of other
    machines are told through the database, when no worker process of this one answers."""
    doorbell.ring_other_processes()  # as the API's app does
    bell = bell_socket("a")
    path = Path(bell.getsockname())
    listener = listening_connection()
    try:
        claim, row, _ = journalled_send()
        wait = suspend_on(claim, row, poll=60)
        drained(bell)
        assert waits.pushed(wait.id, row.id) is True
        assert drained(bell) == b"d"
        assert notifications(listener) == 0
        bell.close()
        path.unlink()  # no worker process on this machine any more
        DependencyWait.update(next_poll_at=utcnow() + timedelta(hours=1)).where(DependencyWait.id == wait.id).execute()
        assert waits.pushed(wait.id, row.id) is True
        assert notifications(listener) == 1  # the coordinators of other machines
    finally:
        listener.close()
        bell.close()


def test_the_turn_passes_on_in_order_when_a_process_ends_between_rings(database_url):
    bells = {name: bell_socket(name) for name in ("a", "b", "c")}

    def rung_alone() -> str:
        assert doorbell.ring(doorbell.RUNS_QUEUED, one=True) == 1
        rings = {name: drained(bell) for name, bell in bells.items()}
        assert b"".join(rings.values()) == b"q", rings
        return next(name for name, ring in rings.items() if ring)

    try:
        first, second = rung_alone(), rung_alone()
        third = ({"a", "b", "c"} - {first, second}).pop()
        # The process rung first ends; the one whose turn is next is still rung next (a turn counted by
        # position would skip it, or ring the second again).
        gone = bells.pop(first)
        os.unlink(gone.getsockname())
        gone.close()
        assert rung_alone() == third
        assert rung_alone() == second
    finally:
        for bell in bells.values():
            os.unlink(bell.getsockname())
            bell.close()


def test_a_worker_marks_its_doorbell_busy_while_no_thread_is_free(database_url):
    bell = doorbell.Doorbell()
    bell.start()
    worker = Worker(StepExecutor(), LeasePolicy(30), concurrency=2, companions=(bell,))  # not started: its slots
    marker = Path(str(bell.path) + doorbell.BUSY_SUFFIX)
    try:
        assert worker.reserve_slot() and not marker.exists()  # one thread of two taken
        assert worker.reserve_slot() and marker.exists()  # none free
        worker.take_reserved(None)  # a claim that found nothing gives its thread back
        assert not marker.exists()
        assert worker.reserve_slot() and marker.exists()
        # A process killed while busy leaves both files: the next ring removes them, and rings another.
        other = bell_socket("zz")
        bell.stop()
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as gone:
            gone.bind(str(bell.path))  # as if it were still there, read by nobody
        marker.touch()
        Path(other.getsockname() + doorbell.BUSY_SUFFIX).touch()  # every live one busy: all are rung
        assert doorbell.ring(doorbell.RUNS_QUEUED, one=True) == 1
        assert drained(other) == b"q" and not bell.path.exists() and not marker.exists()
    finally:
        bell.stop()
        for leftover in bell.path.parent.glob("zz-*"):
            leftover.unlink()


def test_a_run_posted_to_the_api_reaches_a_worker_process_that_polls_the_queue_hourly(database_url, tmp_path):
    token = tokens.create("host-doorbell", "host")[0]
    worker = start_worker_process(database_url, *STEPS, "--poll-interval", "3600", log_path=tmp_path / "worker.log")
    served = start_serve(database_url, tmp_path / "serve.log", "--no-worker")
    try:
        wait_until(lambda: any(doorbell.directory().glob(f"*{doorbell.SUFFIX}")), timeout=60,
                   what="the worker process's doorbell")

        def post(text: str) -> str:
            answer = requests.post(f"{served.base_url}/api/v1/runs", json={"input": text},
                                   headers=as_host(token), timeout=60)
            assert answer.status_code == 201, answer.text
            return answer.json()["id"]

        # The first may be found by the worker's first look at the queue; after it, the worker looks again
        # once its segment ends, then not for an hour: only the API's ring brings it the second.
        for text in ("first", "second"):
            run_id = post(text)
            wait_until(lambda r=run_id: run_row(r).status == "completed", timeout=60,
                       what=f"the {text} run to be claimed and completed")
            assert run_row(run_id).output == text
    finally:
        served.stop()
        stop_process(worker)
