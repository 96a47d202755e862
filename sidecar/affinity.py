"""One core for each process of a group: the HTTP workers of `serve`, the worker processes of `worker
--processes N` (docs/configuration.md, "One core per process").

Each of these processes is many threads sharing one interpreter lock, so it uses about one core at most.
Left to the kernel, its threads were woken on whichever core was free as they handed work to each other,
and a thread that ran on another core than the one before ran its Python from cold caches: a request
served by two threads in turn cost 0.36 ms of CPU on two cores and 0.18 ms on one (docs/performance.md,
"One core per process"). So the processes of a group are each held to one of the cores the sidecar may
use (its CPU affinity as started), in turn: the first HTTP worker and the first worker process on the
first core, the second ones on the second, and so on.

NRLLM_CPU_PINNING says when (Settings.cpu_pinning):
- `auto` (the default): when the group has a process for every core, as with the defaults on a machine of
  two cores. A smaller group on a larger machine is left to the kernel, which moves its processes to
  whichever cores are idle; held, every sidecar (and every container) on a large host would start on its
  first cores.
- `on`: every group of two or more.
- `off`: never.
A lone process is never held: an operator who scales by starting more of them would find them all on the
first core.
"""

import logging
import os

log = logging.getLogger("nrllm_sidecar.processes")


def usable_cores() -> list[int]:
    """The cores this process may run on, in order; [] where the platform cannot pin a process."""
    if not hasattr(os, "sched_getaffinity"):
        return []
    return sorted(os.sched_getaffinity(0))


def cores_for_group(size: int, pinning: str, cores: list[int]) -> list[int]:
    """Of the usable `cores`, those a group of `size` processes is held to, in turn, under the
    NRLLM_CPU_PINNING setting `pinning` (see above); [] when it is not held."""
    if pinning == "off" or size < 2 or len(cores) < 2 or (pinning == "auto" and size < len(cores)):
        return []
    return cores


def core_of(index: int, cores: list[int]) -> int | None:
    """The core of the `index`th process (from 0) of a group held to `cores`; None when it is not held."""
    return cores[index % len(cores)] if cores else None


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
