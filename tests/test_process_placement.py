"""Where `worker` and `serve` run their processes: under SCHED_BATCH, every thread of every process they start,
unless they were started under another policy than the default (sidecar/cli/processes.py, docs/configuration.md,
"Scheduling policy"); and each process of a group (the HTTP workers, the worker processes of one `worker`)
held to a core of its own (sidecar/affinity.py, docs/configuration.md, "One core per process")."""

import os
from contextlib import contextmanager
from pathlib import Path

import pytest

from sidecar.affinity import core_of, cores_for_group, usable_cores
from sidecar.config import Settings
from sidecar.store.models import WorkerHeartbeat
from tests.support.servers import process_tree, start_serve
from tests.support.waiting import wait_until
from tests.support.workers import start_worker_process, stop_process

pytestmark = pytest.mark.slow
ON_LINUX = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux's scheduling policies")
CORES = usable_cores()
ON_TWO_CORES = pytest.mark.skipif(len(CORES) < 2, reason="pinning needs two cores or more")
ON_SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the same on every database


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


@contextmanager
def _worker_group(database_url: str, processes: int, **options):
    """The process ids of `worker --processes N` once all of them run (the one started first first); stopped
    after."""
    proc = start_worker_process(database_url, "--processes", str(processes), **options)
    try:
        wait_until(lambda: WorkerHeartbeat.select().count() == processes, timeout=60, what="every worker process")
        pids = process_tree(proc.pid)
        assert len(pids) == processes
        yield pids
    finally:
        stop_process(proc)


@ON_LINUX
def test_every_thread_of_every_worker_process_runs_under_sched_batch(database_url):
    with _worker_group(database_url, 2) as pids:
        assert set(_all_running(pids)) == {os.SCHED_BATCH}


def _idle() -> None:
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


@ON_LINUX
def test_a_worker_started_under_another_policy_keeps_it(database_url):
    with _worker_group(database_url, 1, preexec_fn=_idle) as (pid,):
        assert set(_thread_policies(pid)) == {os.SCHED_IDLE}


@ON_LINUX
def test_serve_runs_the_api_and_its_worker_under_sched_batch(database_url, tmp_path):
    served = start_serve(database_url, tmp_path / "serve.log")
    try:
        wait_until(lambda: WorkerHeartbeat.select().count() == 1, timeout=60, what="the worker beside the API")
        pids = process_tree(served.proc.pid)
        assert len(pids) >= 4  # the arbiter, its two HTTP workers, the worker
        assert set(_all_running(pids)) == {os.SCHED_BATCH}
    finally:
        stop_process(served.proc)


def _thread_cores(pid: int) -> set[frozenset[int]]:
    """The cores each thread of the process may run on, as a set of distinct sets."""
    found = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            found.add(frozenset(os.sched_getaffinity(int(tid))))
        except ProcessLookupError:  # the thread ended meanwhile
            continue
    return found


def _command_line(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def _pinned_core(pid: int) -> int:
    """The one core every thread of the process is held to."""
    (cores,) = _thread_cores(pid)
    (core,) = cores
    return core


@ON_TWO_CORES
@ON_SQLITE
def test_each_worker_process_of_a_group_is_held_to_a_core_of_its_own(database_url):
    with _worker_group(database_url, 3) as pids:
        assert all(len(os.listdir(f"/proc/{pid}/task")) > 2 for pid in pids)  # threads started since are held too
        # In turn over the usable cores, the process that starts the others first.
        assert _pinned_core(pids[0]) == CORES[0]
        assert sorted(_pinned_core(pid) for pid in pids[1:]) == sorted([CORES[1], CORES[2 % len(CORES)]])


@ON_TWO_CORES
@ON_SQLITE
@pytest.mark.parametrize(("processes", "env"), [(1, {}), (2, {"NRLLM_CPU_PINNING": "off"})],
                         ids=["a lone process", "pinning off"])
def test_a_lone_worker_process_and_a_group_with_pinning_off_stay_where_the_kernel_puts_them(database_url, processes,
                                                                                            env):
    with _worker_group(database_url, processes, env=env) as pids:
        assert all(_thread_cores(pid) == {frozenset(CORES)} for pid in pids)


@ON_TWO_CORES
@ON_SQLITE
def test_serve_holds_each_http_worker_to_a_core_of_its_own(database_url, tmp_path):
    served = start_serve(database_url, tmp_path / "serve.log")  # two HTTP workers, one worker process
    try:
        wait_until(lambda: WorkerHeartbeat.select().count() == 1, timeout=60, what="the worker beside the API")
        arbiter, *children = process_tree(served.proc.pid)
        http_workers = [pid for pid in children if b"worker" not in _command_line(pid)]
        assert len(http_workers) == 2
        assert sorted(_pinned_core(pid) for pid in http_workers) == CORES[:2]
        # The arbiter forks them and the lone worker process beside them is a group of one: neither is held.
        assert _thread_cores(arbiter) == {frozenset(CORES)}
        (lone,) = set(children) - set(http_workers)
        assert _thread_cores(lone) == {frozenset(CORES)}
    finally:
        stop_process(served.proc)


@pytest.mark.parametrize(("size", "pinning", "cores", "held"), [
    (2, "auto", [0, 1], [0, 1]),  # the defaults on two cores: a process for every core
    (3, "auto", [2, 3], [2, 3]),  # more processes than cores (an affinity narrowed by the operator)
    (2, "auto", [0, 1, 2, 3], []),  # a smaller group on a larger machine: left to the kernel
    (2, "on", [0, 1, 2, 3], [0, 1, 2, 3]),
    (4, "off", [0, 1], []),
    (1, "on", [0, 1], []),  # a lone process is never held
    (2, "on", [5], []),  # one core: nothing to choose
])
def test_which_groups_are_held_and_to_which_cores(size, pinning, cores, held):
    assert cores_for_group(size, pinning, cores) == held
    assert [core_of(index, held) for index in range(size)] == (
        [held[index % len(held)] for index in range(size)] if held else [None] * size)


def test_the_setting_is_auto_on_or_off():
    assert Settings.from_env({}).cpu_pinning == "auto"
    assert Settings.from_env({"NRLLM_CPU_PINNING": " Off "}).cpu_pinning == "off"
    with pytest.raises(SystemExit, match="NRLLM_CPU_PINNING must be auto, on or off, not 'yes'"):
        Settings.from_env({"NRLLM_CPU_PINNING": "yes"})
