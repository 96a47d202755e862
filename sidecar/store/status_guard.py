"""The last line of the compatibility gate: the store writes a status outside the base vocabulary only
when the installed guard allows it for the run's origin, inside the transaction that writes it.

The guard is installed by the gate (nrllm_sidecar_compat.service.install_store_guard) at start-up. Without
one, such a status is refused: an application that never set up the gate must not write what a consumer cannot read.
"""

from collections.abc import Callable

from ..application import current
from ..domain.errors import StatusNotWritable
from ..domain.vocabulary import BASE_STATUSES

# The report's time when the caller did not read it in the writing transaction: the guard reads it itself.
NOT_READ = object()

# (status, origin, the time of the host's last consumer report as this transaction read it, or NOT_READ)
# -> None when writable, else the reason.
Guard = Callable[[str, str | None, object], str | None]


def install(guard: Guard | None) -> None:
    """The application's guard (None: none is installed)."""
    current().status_guard = guard


def check(status: str, origin: str | None, reported_at=NOT_READ) -> None:
    """StatusNotWritable unless the guard lets `status` be written for a run of `origin`. `reported_at`: the
    report's time as a statement of this transaction read it (statements.update_run's `with_report_time`),
    a round trip less than the guard reading it."""
    if status in BASE_STATUSES:
        return
    guard = current().status_guard
    if guard is None:
        raise StatusNotWritable(status, "no compatibility gate is installed in this application")
    reason = guard(status, origin, reported_at)
    if reason is not None:
        raise StatusNotWritable(status, reason)
