"""The push webhook's rules (`POST /api/v1/push` in docs/http-api.md, "Remote agents, the outbound journal
and push"; the view is api/push.py).

A push is authenticated by its delegation's token and names a task; it is never taken as the result.
It only brings the wait's next poll forward to now and wakes the coordinators (in this process directly,
in others through NOTIFY on PostgreSQL, or their doorbell on this machine, store/doorbell.py, or their
next look at the due index), and only when it reports a state worth a poll: a push saying the task is
still submitted or working is counted and nothing more. For a
delegation whose outcome is unknown the task id cannot be checked against the journal yet: the push
makes the coordinator reconcile, which only accepts a task of the delegation's own context.

Peers push as soon as a task starts, often before the run's suspension on it is committed. Such a push is
matched to the journalled send instead (which keeps the digest of its push token) and noted there;
the suspension then makes its wait due at once. Whichever of the two commits second sees the other.
"""

import hmac
import logging
from dataclasses import dataclass

from ..domain import push_tokens
from ..domain.errors import NotThisDelegation, Unauthenticated
from ..domain.vocabulary import OutboundOutcome
from ..store import outbound, push_counts, waits
from ..store.models import DependencyWait, Outbound
from .a2a import is_artifact_update, notification_state, notification_task_id
from .types import ALL_STATES, INTERRUPTED_STATES, TERMINAL_STATES

log = logging.getLogger("nrllm_sidecar.push")

TOKEN_HEADER = "X-A2A-Notification-Token"


@dataclass(frozen=True)
class Delegation:
    """What a push token was made for: the journalled send, and the wait on it once the run is suspended."""

    row: Outbound
    wait: DependencyWait | None


def authenticate(token: str | None) -> Delegation:
    """The delegation `token` was made for (open or resolved); Unauthenticated otherwise. Tokens are
    `<run id>.<secret>`: the run id finds the run's few sends with their waits in one read (no index on
    secrets needed), and the digests they keep are compared in constant time."""
    refused = Unauthenticated("a push needs a valid delegation token (X-A2A-Notification-Token or "
                              "Authorization: Bearer)")
    if not token or "\x00" in token:  # no token holds NUL, and PostgreSQL could not even look it up
        raise refused
    run_id = push_tokens.run_id_of(token)
    sends = outbound.sends_of_run(run_id) if run_id is not None else []
    presented = push_tokens.digest(token)
    # The wait's digest first: a resend without a new token moves the wait to the new row, keeping the old
    # token's digest, which the new row does not carry.
    for row, wait in sends:
        if wait is not None and _made_for(wait.push_token_sha256, presented):
            return Delegation(row, wait)
    for row, _ in sends:  # before the suspension: the journalled send keeps its token's digest
        if _made_for(row.push_token_sha256, presented):
            return Delegation(row, None)
    raise refused


def _made_for(kept: str | None, presented: str) -> bool:
    return kept is not None and hmac.compare_digest(kept, presented)


# States whose push is worth a poll: the task has an answer for the model (finished or interrupted).
_ANSWERING = TERMINAL_STATES | INTERRUPTED_STATES
_STILL_WORKING = ALL_STATES - _ANSWERING - {"unknown"}


def worth_a_look(notification) -> bool:
    """Whether a push brings the poll forward: unless it says the task is still submitted or working, or it
    is an artifact update (a task sends its artifacts while it works, and says it has finished with a status
    update of its own). A push that reports no state otherwise (a message) or one we cannot read may mean
    anything, so it is looked at."""
    return not is_artifact_update(notification) and notification_state(notification) not in _STILL_WORKING


def receive(delegation: Delegation, notification) -> bool:
    """Act on an authenticated push; True when a wait's next poll was brought forward (or, before the
    suspension, the push was noted for it). A push saying the task is still submitted or working, or an
    artifact update, is only counted, unless the send's outcome is unknown (then any push says the task
    exists). Raises NotThisDelegation when the notification names no task, or a task that is not the
    delegation's."""
    row, wait = delegation.row, delegation.wait
    task_id = notification_task_id(notification)
    if task_id is None:
        raise NotThisDelegation("the notification names no task of this delegation")
    unknown = row.outcome == OutboundOutcome.OUTCOME_UNKNOWN
    # Before the send's answer is recorded there is no task id to compare with yet.
    if row.remote_task_id is not None and not unknown and task_id != row.remote_task_id:
        raise NotThisDelegation(f"task {task_id} does not belong to this delegation")
    if not unknown and not worth_a_look(notification):
        # The task is still submitted or working (or sends an artifact): a poll now would find just that.
        # Its answer comes with a later push (or the wait's own polls), so this one moves nothing
        # (docs/delegation.md, "Pushes") and is only counted, written with others a moment later.
        push_counts.count(row.id)
        log.debug("run %s: push for task %s, still working: nothing to look at", row.run_id, task_id)
        return False
    if wait is None:
        outbound.note_early_push(row.id)
        # The suspension may have committed since the token was looked up: then it did not see the note.
        wait = waits.open_wait_on(row.run_id, row.id)
        if wait is None:
            log.info("run %s: push for task %s before the suspension; noted", row.run_id, task_id)
            return True
        moved = waits.poll_now(wait.id)
    elif wait.resolved_at is not None:
        push_counts.count(row.id)
        return False  # a late push (the answer was polled already): nothing to do, and nothing is wrong
    else:
        moved = waits.pushed(wait.id, row.id)  # counted, and the poll brought forward, in one transaction
    log.info("run %s: push for task %s%s", wait.run_id, task_id, " (outcome unknown: reconciling)" if unknown else "")
    return moved
