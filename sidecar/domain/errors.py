"""Errors the rules raise. The API maps them to the error codes of docs/http-api.md ("Errors")."""


class SidecarError(Exception):
    """Base of every error the sidecar raises on purpose."""


class LeaseLost(SidecarError):
    """A fenced write found the run no longer held under this lease epoch: the segment must stop."""

    def __init__(self, run_id: str, epoch: int):
        super().__init__(f"lease on run {run_id} (epoch {epoch}) is lost")
        self.run_id = run_id
        self.epoch = epoch


class CancelRequested(SidecarError):
    """A cancel marked the run while its segment was pausing for a person: the pause is not written, and the
    segment ends the run cancelled instead."""

    def __init__(self, run_id: str):
        super().__init__(f"run {run_id}: cancel requested")
        self.run_id = run_id


class NotFound(SidecarError):
    pass


class InvalidState(SidecarError):
    pass
