"""Sending journalled CancelTask rows (a delegation's deadline, the run's deadline, a cancelled run).

The row was committed, `pending`, in the transaction that ended the wait; the coordinator sends it. A
row whose send had an unknown outcome names no task yet: it is reconciled first (read-only ListTasks),
and with no task found there is nothing to cancel (`not_delivered`: nothing left). Each attempt is
claimed (`outbound.claim_cancel` writes the exact body and the attempt time), so two coordinators never
send the same attempt. The peer's answer settles the row: a task is `accepted`, a JSON-RPC error
(task not found, not cancelable) is `rejected`; neither is sent again. An attempt that got no answer
stays `pending` and is tried again later: CancelTask is idempotent. The run stays as it is whatever the
remote answers.
"""

import logging

from ..domain.clock import utcnow
from ..domain.vocabulary import OutboundOutcome
from ..store import outbound, remote_agents
from ..store.models import Outbound
from . import reconcile, remote
from .types import RemoteError

log = logging.getLogger("nrllm_sidecar.cancels")

RETRY_AFTER_SECONDS = 30.0
GIVE_UP_AFTER_SECONDS = 3600.0


def due(limit: int = 50) -> list[Outbound]:
    return outbound.cancels_due(utcnow(), retry_after=RETRY_AFTER_SECONDS, give_up_after=GIVE_UP_AFTER_SECONDS,
                                limit=limit)


def _task_to_cancel(row: Outbound, client) -> str | None:
    """The task id to cancel; reconciles an unknown outcome first. Raises reconcile.Impossible."""
    if row.remote_task_id:
        return row.remote_task_id
    send_row = outbound.send_row_of(row)
    if send_row is None:
        return None
    if send_row.remote_task_id:
        return send_row.remote_task_id
    if send_row.outcome != OutboundOutcome.OUTCOME_UNKNOWN:
        return None
    found = reconcile.find(client, send_row)
    if found is None:
        return None
    outbound.record_found(send_row.id, found.id)
    return found.id


def send(row: Outbound, settings) -> str | None:
    """One attempt at sending a pending cancel row; returns the outcome written, None if another
    coordinator has this attempt."""
    if not outbound.claim_cancel(row, utcnow()):
        return None
    agent = remote_agents.get_agent(row.remote_agent)
    if agent is None:
        return _settle(row, OutboundOutcome.NOT_DELIVERED, "the remote agent was removed")
    try:
        client = remote.client_for(agent, settings)
        task_id = _task_to_cancel(row, client)
    except remote.Unreachable as exc:
        return _settle(row, OutboundOutcome.PENDING, f"remote agent {agent.name} unreachable: {exc}")
    except reconcile.Impossible as exc:
        if exc.transient:
            return _settle(row, OutboundOutcome.PENDING, f"reconciliation failed: {exc}")
        return _settle(row, OutboundOutcome.NOT_DELIVERED,
                       f"the send's outcome is unknown and reconciliation is impossible: {exc}")
    if task_id is None:
        return _settle(row, OutboundOutcome.NOT_DELIVERED, "no remote task is known to cancel: nothing was sent")
    body = client.build_cancel(task_id)
    outbound.write_cancel_body(row.id, body, task_id)
    try:
        client.send_cancel(body)
    except RemoteError as exc:
        if exc.code is None:  # no answer: CancelTask is idempotent, so it is tried again later
            return _settle(row, OutboundOutcome.PENDING, str(exc))
        # The peer answered (task not found, not cancelable): settled, never sent again.
        return _settle(row, OutboundOutcome.REJECTED, f"{exc} (code {exc.code})")
    log.info("run %s: remote task %s at %s cancelled", row.run_id, task_id, agent.name)
    return _settle(row, OutboundOutcome.ACCEPTED, None)


def _settle(row: Outbound, outcome: OutboundOutcome, error: str | None) -> str:
    if outcome is OutboundOutcome.PENDING:
        log.warning("run %s: cancel %s not done yet (%s); tried again in %gs", row.run_id, row.id, error,
                    RETRY_AFTER_SECONDS)
    elif error:
        log.info("run %s: cancel %s %s: %s", row.run_id, row.id, outcome.value, error)
    outbound.record_cancel(row.id, outcome.value, error=error)
    return outcome.value
