"""The doorbell (store/doorbell.py), with real sockets and real processes, on every database: a ring wakes the
process whose doorbell it is, a dead process's socket is removed, and a run POSTed to `serve --no-worker`
reaches a worker process that polls its queue only once an hour."""

import os
import socket
import threading
import uuid

import requests

from sidecar import wakeup
from sidecar.store import doorbell, tokens
from sidecar.store.db import dialect
from tests.support.api import as_host
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


def test_a_wait_due_rings_one_worker_process_in_turn_and_a_queued_run_rings_every_one(database_url):
    folder = doorbell.directory()
    folder.mkdir(mode=0o700, exist_ok=True)
    bells = []
    for name in ("a", "b"):
        bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        bell.bind(str(folder / f"{name}-{uuid.uuid4().hex[:8]}{doorbell.SUFFIX}"))
        bell.setblocking(False)
        bells.append(bell)
    dead = folder / f"0-gone{doorbell.SUFFIX}"  # a process killed before it removed its socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as gone:
        gone.bind(str(dead))
    doorbell.ring_other_processes()  # as the API's app does: its wake-ups ring the worker processes
    try:
        for _ in range(4):
            wakeup.dependencies_due()
        if dialect() == "postgresql":  # NOTIFY wakes every coordinator there
            assert [drained(bell) for bell in bells] == [b"", b""]
        else:
            # Each ring reached one process; in turn, so both (the dead one's turn passed on to the next).
            rings = [drained(bell) for bell in bells]
            assert b"".join(rings) == b"dddd" and all(rings), rings
            assert not dead.exists()
        wakeup.runs_queued()
        assert [drained(bell) for bell in bells] == [b"q", b"q"]
    finally:
        for bell in bells:
            os.unlink(bell.getsockname())
            bell.close()
        dead.unlink(missing_ok=True)


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
