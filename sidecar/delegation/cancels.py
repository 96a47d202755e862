"""Sending journalled CancelTask rows (a delegation's deadline, the run's deadline, a cancelled run).

The row was committed, `pending`, in the transaction that ended the wait; the coordinator sends it. A
row whose send had an unknown outcome names no task yet: it is reconciled first (read-only ListTasks),
and with no task found there is nothing to cancel (`not_delivered`: nothing left). Each attempt is
claimed (`outbound.claim_cancel` writes the exact body and the attempt time), so two coordinators never
send the same attempt. The peer's answer settles the row: a task is `accepted`, a JSON-RPC error
(task not found, not cancelable) is `rejected`; neither is sent again. An attempt that got no answer
stays `pending` and is tried again later (CancelTask is idempotent), after a growing delay (BACKOFF),
at most MAX_ATTEMPTS times in all; then it is given up as `outcome_unknown`. The run stays as it is
whatever the remote answers.
"""

import logging
import random
from datetime import timedelta

from .. import metrics
from ..domain.backoff import Backoff
from ..domain.clock import utcnow
from ..domain.vocabulary import OutboundOutcome
from ..store import outbound, remote_agents
from ..store.models import Outbound
from . import agent_failures, reconcile, remote
from .types import RemoteError

log = logging.getLogger("nrllm_sidecar.cancels")

# 30 s, 1, 2, 4 min, then every 5 min (each spread by 20 %): twelve attempts span about 43 minutes.
BACKOFF = Backoff(initial=30.0, factor=2.0, cap=300.0, jitter=0.2)
MAX_ATTEMPTS = 12


def due(limit: int = 50) -> list[Outbound]:
    return outbound.cancels_due(utcnow(), max_attempts=MAX_ATTEMPTS, limit=limit)


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
    now = utcnow()
    retry_at = now + timedelta(seconds=BACKOFF.delay(row.attempts + 1, random.random()))
    if not outbound.claim_cancel(row, now, retry_at):
        return None
    agent = remote_agents.get_agent(row.remote_agent)
    if agent is None:
        return _settle(row, OutboundOutcome.NOT_DELIVERED, "the remote agent was removed")
    try:
        client = remote.client_for(agent, settings)
        task_id = _task_to_cancel(row, client)
    except remote.Unreachable as exc:
        return _unanswered(row, agent, f"remote agent {agent.name} unreachable: {exc}")
    except reconcile.Impossible as exc:
        if exc.transient:
            return _unanswered(row, agent, f"reconciliation failed: {exc}")
        return _settle(row, OutboundOutcome.NOT_DELIVERED,
                       f"the send's outcome is unknown and reconciliation is impossible: {exc}")
    if task_id is None:
        agent_failures.answered(agent)
        return _settle(row, OutboundOutcome.NOT_DELIVERED, "no remote task is known to cancel: nothing was sent")
    body = client.build_cancel(task_id)
    outbound.write_cancel_body(row.id, body, task_id)
    try:
        client.send_cancel(body)
    except RemoteError as exc:
        if exc.code is None:  # no answer: CancelTask is idempotent, so it is tried again later
            return _unanswered(row, agent, str(exc))
        # The peer answered (task not found, not cancelable): settled, never sent again.
        agent_failures.answered(agent)
        return _settle(row, OutboundOutcome.REJECTED, f"{exc} (code {exc.code})")
    agent_failures.answered(agent)
    log.info("run %s: remote task %s at %s cancelled", row.run_id, task_id, agent.name)
    return _settle(row, OutboundOutcome.ACCEPTED, None)


def _unanswered(row: Outbound, agent, error: str) -> str:
    """An attempt without an answer: tried again when its claim said, unless it was the last one."""
    agent_failures.failed(agent, error)
    attempts = row.attempts + 1  # this attempt's claim counted it
    if attempts < MAX_ATTEMPTS:
        log.info("run %s: cancel %s not done yet after %d attempts (%s)", row.run_id, row.id, attempts, error)
        return _settle(row, OutboundOutcome.PENDING, error)
    if outbound.give_up_cancel(row.id, f"given up after {attempts} attempts without an answer; the last: {error}"):
        metrics.CANCELS_GIVEN_UP.inc()
        log.warning("run %s: cancel %s given up after %d attempts without an answer: %s", row.run_id, row.id,
                    attempts, error)
    return OutboundOutcome.OUTCOME_UNKNOWN.value


def _settle(row: Outbound, outcome: OutboundOutcome, error: str | None) -> str:
    if error and outcome is not OutboundOutcome.PENDING:
        log.info("run %s: cancel %s %s: %s", row.run_id, row.id, outcome.value, error)
    outbound.record_cancel(row.id, outcome.value, error=error)
    return outcome.value
