"""Errors the rules raise. The API maps them to the error codes of http-api.md."""


class SidecarError(Exception):
    """Base of every error the sidecar raises on purpose."""


class LeaseLost(SidecarError):
    """A fenced write found the run no longer held under this lease epoch: the segment must stop."""

    def __init__(self, run_id: str, epoch: int):
        super().__init__(f"lease on run {run_id} (epoch {epoch}) is lost")
        self.run_id = run_id
        self.epoch = epoch


class NotFound(SidecarError):
    pass


class InvalidState(SidecarError):
    pass
