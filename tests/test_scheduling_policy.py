"""`worker` and `serve` run their processes under SCHED_BATCH, every thread of every process they start, unless
they were started under another policy than the default (sidecar/cli/processes.py, docs/configuration.md,
"Scheduling policy")."""

import os
from pathlib import Path

import pytest

from sidecar.store.models import WorkerHeartbeat
from tests.support.servers import process_tree, start_serve
from tests.support.waiting import wait_until
from tests.support.workers import start_worker_process, stop_process

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux's scheduling policies")]


def _thread_policies(pid: int) -> list[int]:
    """The scheduling policy of each thread of the process: field 41 of /proc/<pid>/task/<tid>/stat."""
    policies = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        policies.append(int(stat.rsplit(")", 1)[1].split()[38]))
    return policies


def _all_running(pids: list[int]) -> list[int]:
    """Every thread's policy of the processes, which have started threads of their own."""
    found = [policy for pid in pids for policy in _thread_policies(pid)]
    assert len(found) > 2 * len(pids)  # besides each main thread: segment, request and coordinator threads ...
    return found


def _worker_started(database_url: str, processes: int, **options):
    proc = start_worker_process(database_url, "--processes", str(processes), **options)
    wait_until(lambda: WorkerHeartbeat.select().count() == processes, timeout=60, what="every worker process")
    return proc


def test_every_thread_of_every_worker_process_runs_under_sched_batch(database_url):
    proc = _worker_started(database_url, 2)
    try:
        pids = process_tree(proc.pid)
        assert len(pids) == 2
        assert set(_all_running(pids)) == {os.SCHED_BATCH}
    finally:
        stop_process(proc)


def _idle() -> None:
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def test_a_worker_started_under_another_policy_keeps_it(database_url):
    proc = _worker_started(database_url, 1, preexec_fn=_idle)
    try:
        assert set(_thread_policies(proc.pid)) == {os.SCHED_IDLE}
    finally:
        stop_process(proc)


def test_serve_runs_the_api_and_its_worker_under_sched_batch(database_url, tmp_path):
    served = start_serve(database_url, tmp_path / "serve.log")
    try:
        wait_until(lambda: WorkerHeartbeat.select().count() == 1, timeout=60, what="the worker beside the API")
        pids = process_tree(served.proc.pid)
        assert len(pids) >= 4  # the arbiter, its two HTTP workers, the worker
        assert set(_all_running(pids)) == {os.SCHED_BATCH}
    finally:
        stop_process(served.proc)
