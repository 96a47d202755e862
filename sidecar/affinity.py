"""One core for each process of a group: the HTTP workers of `serve`, the worker processes of `worker
--processes N` (docs/configuration.md, "One core per process").

Each of these processes is many threads sharing one interpreter lock, so it uses about one core at most.
Left to the kernel, its threads were woken on whichever core was free as they handed work to each other,
and a thread that resumed on the other core than the one it was woken from ran its Python from cold
caches: a request served by two threads in turn cost 0.36 ms of CPU on two cores and 0.18 ms on one
(docs/performance.md, "One core per process"). So the processes of a group are each held to one of the
cores the sidecar may use (its CPU affinity as started), in turn: the first HTTP worker and the first
worker process on the first core, the second ones on the second, and so on.

A lone process (one HTTP worker, `worker` without --processes on PostgreSQL) is left where the kernel puts
it: an operator who scales by starting more of them would otherwise find them all on the first core.
NRLLM_CPU_PINNING=off leaves every process where the kernel puts it.
"""

import logging
import os

log = logging.getLogger("nrllm_sidecar.processes")


def usable_cores() -> list[int]:
    """The cores this process may run on, in order; [] where the platform cannot pin a process."""
    if not hasattr(os, "sched_getaffinity"):
        return []
    return sorted(os.sched_getaffinity(0))


def core_of(index: int, cores: list[int]) -> int | None:
    """The core of the `index`th process of a group (from 0) among `cores`; None when there is nothing to
    choose (one core or none)."""
    return cores[index % len(cores)] if len(cores) > 1 else None


def pin(core: int) -> None:
    """Hold every thread of this process, and those it starts later, to `core`.

    The affinity is a thread's own (threads and processes inherit it from the thread that starts them), so
    each thread that exists already is pinned, not only the calling one."""
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]  # no /proc: the calling thread, before it starts others
    for tid in threads:
        try:
            os.sched_setaffinity(tid, {core})
        except ProcessLookupError:  # the thread ended meanwhile
            continue
        except OSError as exc:  # a core outside this process's cpuset, a sandbox that forbids it
            log.warning("not pinned to core %d: %s", core, exc)
            return
    log.debug("pinned to core %d", core)
