"""The last line of the compatibility gate: the store writes a status outside the base vocabulary only
when the installed guard allows it for the run's origin, inside the transaction that writes it.

The guard is installed by the gate (nrllm_sidecar_compat.service.install_store_guard) at start-up. Without
one, such a status is refused: an application that never set up the gate must not write what a consumer cannot read.
"""

from collections.abc import Callable

from ..application import current
from ..domain.errors import StatusNotWritable
from ..domain.vocabulary import BASE_STATUSES

# (status, origin) -> None when writable, else the reason.
Guard = Callable[[str, str | None], str | None]


def install(guard: Guard | None) -> None:
    """The application's guard (None: none is installed)."""
    current().status_guard = guard


def check(status: str, origin: str | None) -> None:
    if status in BASE_STATUSES:
        return
    guard = current().status_guard
    if guard is None:
        raise StatusNotWritable(status, "no compatibility gate is installed in this application")
    reason = guard(status, origin)
    if reason is not None:
        raise StatusNotWritable(status, reason)
