"""Errors the rules raise, and the control-flow signals that end a segment early.

The API maps the errors to the error codes of docs/http-api.md ("Errors"). The signals are no errors: they derive from
BaseException, not Exception, so a tool's or a plugin's `except Exception` cannot swallow them and the core
needs no re-raise around its broad excepts. Only the segment's executor and its worker catch them.
"""

from .budget import Stop
from .vocabulary import SegmentOutcome


class SidecarError(Exception):
    """Base of every error the sidecar raises on purpose."""


class ControlSignal(BaseException):  # noqa: N818 - a signal, not an error
    """Base of the signals that stop a segment's work at once; they pass through `except Exception`."""


class Suspended(ControlSignal):
    """The segment suspended (the suspension is committed): it ends here with `outcome` (a dependency
    wait, or a pause for a person's input or approval)."""

    def __init__(self, outcome: SegmentOutcome = SegmentOutcome.AWAITING_DEPENDENCY):
        super().__init__(outcome.value)
        self.outcome = outcome


class Interrupted(ControlSignal):
    """The run must stop at this boundary (cancel requested, budget or deadline); carries why."""

    def __init__(self, stop: Stop):
        super().__init__(stop.message)
        self.stop = stop


class LeaseLost(ControlSignal):
    """A fenced write found the run no longer held under this lease epoch: the segment must stop."""

    def __init__(self, run_id: str, epoch: int):
        super().__init__(f"lease on run {run_id} (epoch {epoch}) is lost")
        self.run_id = run_id
        self.epoch = epoch


class CancelRequested(ControlSignal):
    """A cancel marked the run while its segment was pausing for a person: the pause is not written, and the
    segment ends the run cancelled instead."""

    def __init__(self, run_id: str):
        super().__init__(f"run {run_id}: cancel requested")
        self.run_id = run_id


class NotFound(SidecarError):
    pass


class InvalidState(SidecarError):
    pass
