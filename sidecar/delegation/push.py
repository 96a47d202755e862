"""The push webhook's rules (http-api.md, `POST /api/v1/push`; the view is api/push.py).

A push is authenticated by its delegation's token and names a task; it is never taken as the result.
It only brings the wait's next poll forward to now and wakes the coordinators (in this process directly,
in others through NOTIFY on PostgreSQL, or their next look at the due index on SQLite and MariaDB). For a
delegation whose outcome is unknown the task id cannot be checked against the journal yet: the push
makes the coordinator reconcile, which only accepts a task of the delegation's own context.
"""

import logging

from ..domain.vocabulary import OutboundOutcome
from ..store import outbound, waits
from ..store.models import DependencyWait
from .a2a import notification_task_id

log = logging.getLogger("nrllm_sidecar.push")

TOKEN_HEADER = "X-A2A-Notification-Token"


class Unauthenticated(Exception):
    pass


class NotThisDelegation(Exception):
    pass


def authenticate(token: str | None) -> DependencyWait:
    """The wait whose delegation `token` was made for (open or resolved); Unauthenticated otherwise."""
    wait = waits.by_push_token(token) if token else None
    if wait is None:
        raise Unauthenticated("a push needs a valid delegation token (X-A2A-Notification-Token or "
                              "Authorization: Bearer)")
    return wait


def receive(wait: DependencyWait, notification) -> bool:
    """Act on an authenticated push; True when the wait's next poll was brought forward. Raises
    NotThisDelegation when the notification names no task, or a task that is not the delegation's."""
    task_id = notification_task_id(notification)
    row = outbound.get(wait.outbound_id)
    if task_id is None or row is None:
        raise NotThisDelegation("the notification names no task of this delegation")
    unknown = row.outcome == OutboundOutcome.OUTCOME_UNKNOWN
    if not unknown and task_id != row.remote_task_id:
        raise NotThisDelegation(f"task {task_id} does not belong to this delegation")
    if wait.resolved_at is not None:
        return False  # a late push (the answer was polled already): nothing to do, and nothing is wrong
    moved = waits.poll_now(wait.id)
    log.info("run %s: push for task %s%s", wait.run_id, task_id, " (outcome unknown: reconciling)" if unknown else "")
    return moved
