"""What the A2A client hands the rest of the sidecar: protocol-neutral views of endpoints, sends and tasks.

Task states are normalised to the 0.3 spelling (lowercase, hyphenated), whichever dialect the peer
speaks, so callers compare against one set of strings.
"""

from dataclasses import dataclass, field

TERMINAL_STATES = frozenset({"completed", "failed", "canceled", "rejected"})
INTERRUPTED_STATES = frozenset({"input-required", "auth-required"})
ALL_STATES = TERMINAL_STATES | INTERRUPTED_STATES | {"submitted", "working", "unknown"}


@dataclass(frozen=True)
class AgentEndpoint:
    """Where and how to call a remote agent, as read from its card (or taken from its URL without one)."""

    rpc_url: str
    protocol_version: str  # "1.0" or "0.3"
    push_supported: bool = False
    auth_header: str | None = None
    auth_value: str | None = field(default=None, repr=False)  # a secret: never printed


@dataclass(frozen=True)
class TaskView:
    id: str
    context_id: str | None
    state: str  # one of ALL_STATES
    text: str  # artifacts' text parts in order joined by "\n"; if none, the status message's text
    status_text: str  # the status message's text ("" when none)
    # The messageIds of the caller's messages in the task's history (when the peer keeps history): how
    # reconciliation tells the task a lost send created from others in the same context.
    message_ids: tuple[str, ...] = ()
    # The size of the answer that carried this view (a GetTask's), counted against the run's transfer budget.
    bytes_received: int = 0

    @property
    def finished(self) -> bool:
        """Terminal or interrupted: the delegation has an answer for the model."""
        return self.state in TERMINAL_STATES or self.state in INTERRUPTED_STATES


@dataclass(frozen=True)
class SendResult:
    """What became of one send. `outcome` is an outbound outcome: accepted, rejected, not_delivered or
    outcome_unknown (the last two only when the client could tell the request never left, or could not)."""

    outcome: str
    task: TaskView | None = None  # accepted with a task
    message_text: str | None = None  # accepted with a direct message instead of a task
    error: str | None = None  # rejected, not_delivered, outcome_unknown: why
    error_code: int | None = None  # the JSON-RPC error code of a rejection
    bytes_received: int = 0


class RemoteError(Exception):
    """A call other than a send failed: code is the JSON-RPC error code when the peer answered one."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
VERSION_NOT_SUPPORTED = -32009
