"""Every error the sidecar raises on purpose, in one place.

Each kind carries, as data, the contract's error `code` and the HTTP status the API answers it with
(docs/http-api.md, "Errors"). The API maps all of them in one handler (sidecar/api/errors.py); the
command line prints their message. Services and the store raise them without knowing about HTTP.

A kind that never reaches a client (a missing key at start-up, say) keeps the 500 of its base: if one ever
escaped to the API it would be answered as the internal error it is.

The control-flow signals that end a segment early are no errors: they derive from BaseException, not
Exception, so a tool's or a plugin's `except Exception` cannot swallow them and the core needs no re-raise
around its broad excepts. Only the segment's executor and its worker catch them.
"""

from .budget import Stop
from .vocabulary import SegmentOutcome


class SidecarError(Exception):
    """Base of every error the sidecar raises on purpose."""

    http_status = 500
    code = "internal_error"

    def __init__(self, message: str = "", errors: dict[str, list[str]] | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.errors = errors  # field name -> messages, shown as the answer's "errors"
        self.headers = headers or {}  # e.g. Retry-After

    @classmethod
    def is_refusal(cls) -> bool:
        """Answered with its own code: a request refused (4xx), or the 503 of an unreachable database. Any
        other kind is a fault of the sidecar, answered 500 internal_error."""
        return cls.http_status < 500 or cls.http_status == 503


# Refusals a client can act on: the request, not the sidecar, is at fault.

class Malformed(SidecarError):
    """The request is not what HTTP or JSON allow (a body that is not a JSON object, say)."""

    http_status, code = 400, "malformed_request"


class CsrfFailed(SidecarError):
    """A console form without this session's CSRF token (out of date, or not from the console)."""

    http_status, code = 400, "csrf_failed"


class ActorRequired(SidecarError):
    """A host token must name the actor it acts for."""

    http_status, code = 400, "actor_required"


class Unauthenticated(SidecarError):
    """No valid bearer token (or push token) came with the request."""

    http_status, code = 401, "unauthenticated"


class ForbiddenRole(SidecarError):
    """The token's role may not use this endpoint."""

    http_status, code = 403, "forbidden_role"


class NotPermitted(SidecarError):
    """The actor may not do this to this run (its owner, a grant or a plugin's rule decides)."""

    http_status, code = 403, "not_permitted"


class NotFound(SidecarError):
    http_status, code = 404, "not_found"


class NotThisDelegation(NotFound):
    """A push names no task of the delegation its token was made for."""


class InvalidState(SidecarError):
    """The thing exists but is not in a state that allows the request."""

    http_status, code = 409, "invalid_state"


class NameTaken(InvalidState):
    """A token or a remote agent of that name exists already."""


class AgentInUse(InvalidState):
    """A remote agent that runs still wait on cannot be deleted."""


class NoStoredSecret(InvalidState):
    """An update kept the auth value, but none is stored."""


class PauseNotPending(SidecarError):
    """The pause was decided already, or its run moved on."""

    http_status, code = 409, "pause_not_pending"


class StaleGeneration(SidecarError):
    """The decision names an older generation of the run's pauses."""

    http_status, code = 409, "stale_generation"


class DigestMismatch(SidecarError):
    """The decision's turn digest is not the digest of the pending calls."""

    http_status, code = 409, "digest_mismatch"


class NotResendable(SidecarError):
    """Not a send row that is `outcome_unknown` and that its run still waits on."""

    http_status, code = 409, "not_resendable"


class TooLarge(SidecarError):
    http_status, code = 413, "too_large"


class ValidationFailed(SidecarError):
    """Fields missing or of the wrong type or value; `errors` says which."""

    http_status, code = 422, "validation_failed"


class InvalidInput(SidecarError):
    """A person's input does not match the pause's JSON schema."""

    http_status, code = 422, "invalid_input"


class KeyReused(SidecarError):
    """The Idempotency-Key was first used with another request."""

    http_status, code = 422, "idempotency_key_reused"


class TooManyStreams(SidecarError):
    """Too many event streams open for this token, or in this process."""

    http_status, code = 429, "too_many_streams"


class DatabaseUnavailable(SidecarError):
    """The database cannot be reached (a restart, a lock held too long): ask again shortly."""

    http_status, code = 503, "database_unavailable"


# Errors of the sidecar itself: they stop a command, a start or a step, and never describe a request.

class StatusNotWritable(SidecarError):
    """A loaded consumer could not read this status, so it is not written (the compatibility gate)."""

    def __init__(self, status: str, reason: str):
        super().__init__(f"{status} may not be written: {reason}")
        self.status = status
        self.reason = reason


class MessageIdTaken(SidecarError):
    """The message id is taken by another request body (or another owner): refused, nothing sent."""


class JournalledAlready(MessageIdTaken):
    """A first attempt's journal row found its message id taken, where no row could exist yet: the caller
    undoes the attempt and looks for the row, as a retry does (store/outbound.py, record_send)."""


class KeyNotConfigured(SidecarError):
    """The value was sealed under a key that is not configured (any more)."""


class CheckpointTampered(SidecarError):
    """The value does not authenticate under the key it names: it was altered."""


class SecretKeysError(SidecarError):
    """The sealing keys are missing or malformed: the process must not start."""


class SchemaNotCurrent(SidecarError):
    """The database's schema is not the one this sidecar needs: run `nrllm-sidecar db upgrade`."""


# Control-flow signals: not errors (BaseException), caught by the segment's executor and its worker only.

class ControlSignal(BaseException):  # noqa: N818 - a signal, not an error
    """Base of the signals that stop a segment's work at once; they pass through `except Exception`."""


class Suspended(ControlSignal):
    """The segment suspended (the suspension is committed): it ends here with `outcome` (a dependency
    wait, or a pause for a person's input or approval)."""

    def __init__(self, outcome: SegmentOutcome = SegmentOutcome.AWAITING_DEPENDENCY, *, cancel_marked: bool = True):
        super().__init__(outcome.value)
        self.outcome = outcome
        # False when the suspension's own write found no cancel mark on the run: a cancel after it finds the
        # run waiting and ends it itself, so there is nothing to look for after the commit.
        self.cancel_marked = cancel_marked


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


def answered_kinds() -> list[type[SidecarError]]:
    """Every kind the API answers with its own code (the client errors and the 503), in status order."""
    kinds, todo = [], [SidecarError]
    while todo:
        kind = todo.pop()
        todo.extend(kind.__subclasses__())
        if kind.is_refusal():
            kinds.append(kind)
    return sorted(kinds, key=lambda kind: (kind.http_status, kind.code, kind.__name__))
