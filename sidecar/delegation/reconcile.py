"""Reconciliation: after a lost answer, find the task a send created, read-only (docs/delegation.md, "Reconciliation").

`ListTasks` by the delegation's own contextId. Tried when the answer is lost (right after the send),
before an operator's resend, at the deadline and at a cancel, and when a push with a valid delegation
token names a task. A task found turns the journal row `accepted` with its id (outbound.record_found,
guarded on `outcome_unknown`, so a resend racing it cannot also win).
"""

import logging

from ..store.models import Outbound
from .a2a import INTERNAL_ERROR, A2AClient
from .ids import context_id_for
from .types import RemoteError, TaskView

log = logging.getLogger("nrllm_sidecar.reconcile")


class Impossible(Exception):
    """ListTasks gave no list: nothing is known either way. `transient` when the peer gave no answer at
    all or an internal error (it may answer later); otherwise it answered an error that asking again
    will not change (a 0.3 peer has no ListTasks)."""

    def __init__(self, message: str, transient: bool):
        super().__init__(message)
        self.transient = transient


def find(client: A2AClient, row: Outbound) -> TaskView | None:
    """The task `row`'s send created, or None when the peer lists none. Raises Impossible.

    The task whose history carries the row's messageId wins. A peer that keeps no history is trusted only
    where the context can hold nothing else: the context made for this one tool call (not a follow-up on
    an earlier task's context), never resent, holding exactly one task.
    """
    try:
        tasks = client.list_tasks(row.context_id)
    except RemoteError as exc:
        raise Impossible(str(exc), transient=exc.code in (None, INTERNAL_ERROR)) from None
    mine = [t for t in tasks if row.message_id in t.message_ids]
    if mine:
        return mine[0]
    fresh_context = row.context_id == context_id_for(row.run_id, row.tool_call_id)
    if fresh_context and row.resend_count == 0 and len(tasks) == 1 and not tasks[0].message_ids:
        return tasks[0]
    return None


def try_find(client: A2AClient, row: Outbound) -> TaskView | None:
    """find(), with an impossible reconciliation logged and taken as nothing found."""
    try:
        return find(client, row)
    except Impossible as exc:
        log.info("run %s: reconciliation of %s impossible: %s", row.run_id, row.id, exc)
        return None
