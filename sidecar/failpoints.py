"""Named points at which a crash test may kill this process, to prove what survives a crash exactly there
(or, with `stall`, hold it there a moment).

A point does something only when the environment variable NRLLM_FAILPOINT names it (tests set it for a
worker process they start); otherwise reaching it costs one dictionary lookup. Points are listed in
docs/delegation.md.
"""

import os
import signal
import time

STALL_SECONDS = 3.0


def reached(name: str) -> None:
    if os.environ.get("NRLLM_FAILPOINT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def stall(name: str) -> None:
    """Hold this process here for STALL_SECONDS when named: widens a window a test must hit."""
    if os.environ.get("NRLLM_FAILPOINT") == name:
        time.sleep(STALL_SECONDS)
