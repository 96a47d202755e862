"""Named points at which a crash test may kill this process, to prove what survives a crash exactly there.

A point does something only when the environment variable NRLLM_FAILPOINT names it (tests set it for a
worker process they start); otherwise reaching it costs one dictionary lookup. Points are listed in
docs/delegation.md.
"""

import os
import signal


def reached(name: str) -> None:
    if os.environ.get("NRLLM_FAILPOINT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
