"""The tool result texts of a delegation, exactly as docs/http-api.md, "Built-in tools", says. Pure."""

from datetime import datetime

from sidecar.delegation.types import INTERRUPTED_STATES, TaskView
from sidecar.domain.clock import rfc3339


def result_text(task: TaskView) -> str | None:
    """What the model gets for a remote task; None while the task is not finished (keep waiting)."""
    reason = task.status_text or task.text
    if task.state == "completed":
        return task.text
    if task.state in ("failed", "rejected"):
        return f"error: remote task {task.state}: {reason or 'no reason given'}"
    if task.state == "canceled":
        return "error: remote task was canceled" + (f": {reason}" if reason else "")
    if task.state in INTERRUPTED_STATES:
        # The task id lets the model answer on the same task with a follow-up delegate_to_agent.
        return " ".join(p for p in (f"{task.state}:", reason, f"task_id={task.id}") if p)
    return None


def lost_task_text(task_id: str) -> str:
    """The result when the remote answers -32001 for a task it had accepted (it restarted or forgot)."""
    return f"error: the remote agent no longer knows task {task_id}"


def timeout_text(deadline: datetime) -> str:
    """The result when the delegation's deadline passed before the remote task had an answer."""
    return f"timeout: no answer from the remote agent by the deadline {rfc3339(deadline)}"


def refused_text(agent: str, error: str | None) -> str:
    return f"error: remote agent {agent} refused the message: {error}"


def unreachable_text(agent: str, error: str | None) -> str:
    return f"error: remote agent {agent} unreachable: {error}"
