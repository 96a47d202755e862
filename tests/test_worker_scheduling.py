"""Worker processes run under SCHED_BATCH, every thread of every process `worker` starts, unless the worker was
started under another policy than the default (sidecar/cli/processes.py, docs/configuration.md)."""

import os
from pathlib import Path

import pytest

from sidecar.store.models import WorkerHeartbeat
from tests.support.servers import process_tree
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


def _started(database_url: str, processes: int, **options):
    proc = start_worker_process(database_url, "--processes", str(processes), **options)
    wait_until(lambda: WorkerHeartbeat.select().count() == processes, timeout=60, what="every worker process")
    return proc


def test_every_thread_of_every_worker_process_runs_under_sched_batch(database_url):
    proc = _started(database_url, 2)
    try:
        pids = process_tree(proc.pid)
        assert len(pids) == 2
        for pid in pids:
            policies = _thread_policies(pid)
            assert len(policies) > 3  # the main thread and those it started: the coordinator, the doorbell ...
            assert set(policies) == {os.SCHED_BATCH}, pid
    finally:
        stop_process(proc)


def test_a_worker_started_under_another_policy_keeps_it(database_url):
    proc = _started(database_url, 1, preexec_fn=lambda: os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0)))
    try:
        assert set(_thread_policies(proc.pid)) == {os.SCHED_IDLE}
    finally:
        stop_process(proc)
