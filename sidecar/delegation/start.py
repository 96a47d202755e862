"""Starting a delegation from a model's tool call: journal, send, then suspend or answer at once.

The order is the promise: the request is committed to the journal (with the gate checked) before it
leaves; what the send did is recorded; only then does the run suspend (or, when the remote answered
already, the result is given at once). A retried segment lands on the same journal row (the message id is
derived from the run and the tool-call id) and never sends twice.
"""

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta

from .. import failpoints
from ..domain.clock import utcnow
from ..domain.vocabulary import OutboundOutcome
from ..store import outbound, remote_agents, waits
from ..store.models import Run
from ..store.status_guard import StatusNotWritable
from . import remote
from .results import result_text
from .types import SendResult

log = logging.getLogger("nrllm_sidecar.delegation")

# Fixed namespace: message and context ids are derived, so a retried segment derives the same ones.
ID_NAMESPACE = uuid.UUID("2f8c8f1e-8d6b-4f6e-9b1a-281281281281")


def message_id_for(run_id: str, tool_call_id: str, resend_count: int = 0) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, f"message/{run_id}/{tool_call_id}/{resend_count}"))


def context_id_for(run_id: str, tool_call_id: str) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, f"context/{run_id}/{tool_call_id}"))


@dataclass(frozen=True)
class Started:
    """The tool call's result now (`result`), or the run suspended on the remote task (`suspended`)."""

    result: str | None = None
    suspended: bool = False


def error(text: str) -> Started:
    return Started(result=f"error: {text}")


@dataclass(frozen=True)
class DelegationCall:
    segment: object  # sidecar.segment.Segment
    tool_call_id: str
    turn_index: int
    arguments: dict
    conversation: list[dict]  # provider-neutral messages so far, for the checkpoint


def start(call: DelegationCall, settings) -> Started:
    segment = call.segment
    run = Run.get_by_id(segment.run_id)  # fresh budget counters: earlier segments may have spent some
    agent = remote_agents.get_agent(call.arguments["agent"])
    if agent is None:
        return error(f"unknown remote agent {call.arguments['agent']!r}")
    if run.max_delegations is not None and run.delegations_used >= run.max_delegations:
        return error(f"delegation budget exhausted ({run.delegations_used} of {run.max_delegations} used)")
    try:
        client = remote.client_for(agent, settings)
    except remote.Unreachable as exc:
        return error(f"remote agent {agent.name} unreachable: {exc}")
    task_id = call.arguments.get("task_id")
    context_id = (outbound.context_of_task(run.id, task_id) if task_id else None) or context_id_for(
        run.id, call.tool_call_id)
    body = client.build_send(message_id_for(run.id, call.tool_call_id), context_id, call.arguments["message"],
                             task_id=task_id)
    if run.max_bytes is not None and run.bytes_used + len(body) > run.max_bytes:
        return error(f"transfer budget exhausted ({run.bytes_used} of {run.max_bytes} bytes used)")
    try:
        row, is_new = segment.guarded(
            outbound.record_send, owner=run.owner, remote_agent=agent.name,
            message_id=message_id_for(run.id, call.tool_call_id), tool_call_id=call.tool_call_id,
            context_id=context_id, body=body,
        )
    except StatusNotWritable as exc:
        return error(f"delegation is not offered to this run: {exc.reason}")
    except outbound.DigestMismatch as exc:
        return error(str(exc))
    if is_new:
        failpoints.reached("delegation.after_journal")
        sent = client.send(body)
        failpoints.reached("delegation.after_send")
        row = segment.guarded(outbound.record_outcome, row.id, sent.outcome,
                              remote_task_id=sent.task.id if sent.task else None, error=sent.error)
        return _after_send(call, run, agent, row, sent, len(body), settings)
    return _after_retry(call, run, agent, row, settings)


def _after_send(call, run, agent, row, sent: SendResult, sent_bytes: int, settings) -> Started:
    traffic = sent_bytes + sent.bytes_received
    if sent.outcome == OutboundOutcome.NOT_DELIVERED:
        return error(f"remote agent {agent.name} unreachable: {sent.error}")  # costs no delegation
    if sent.outcome == OutboundOutcome.REJECTED:
        _count(call, traffic)
        return error(f"remote agent {agent.name} refused the message: {sent.error}")
    if sent.outcome == OutboundOutcome.ACCEPTED and sent.task is None:
        _count(call, traffic)
        return Started(result=sent.message_text or "")
    if sent.outcome == OutboundOutcome.ACCEPTED and sent.task.finished:
        _count(call, traffic)  # an answer already terminal resolves in the same segment
        return Started(result=result_text(sent.task))
    return _suspend(call, run, agent, row, traffic, settings)


def _after_retry(call, run, agent, row, settings) -> Started:
    """A retried segment found the journal row of this call: never send again."""
    if row.outcome == OutboundOutcome.REJECTED:
        return error(f"remote agent {agent.name} refused the message: {row.error}")
    if row.outcome == OutboundOutcome.NOT_DELIVERED:
        return error(f"remote agent {agent.name} unreachable: {row.error}")
    # accepted (the suspension was not committed) or outcome_unknown: wait on what was journalled.
    return _suspend(call, run, agent, row, len(row.request_body), settings)


def _count(call: DelegationCall, traffic: int) -> None:
    call.segment.update(delegations_used=Run.delegations_used + 1, bytes_used=Run.bytes_used + traffic)


def _suspend(call, run, agent, row, traffic: int, settings) -> Started:
    now = utcnow()
    deadline_at = now + timedelta(seconds=agent.deadline_seconds)
    known = row.outcome == OutboundOutcome.ACCEPTED and row.remote_task_id
    checkpoint, fingerprint = remote.seal_checkpoint({
        "run_id": run.id, "tool_call_id": call.tool_call_id, "turn_index": call.turn_index,
        "remote_agent": agent.name, "remote_task_id": row.remote_task_id, "outbound_id": row.id,
        "context_id": row.context_id, "actor": run.owner, "workspace": run.workspace,
        "deadline_at": deadline_at.isoformat(),
        "run_deadline_at": run.deadline_at.isoformat() if run.deadline_at else None,
        "budget": {"delegations_used": run.delegations_used + 1, "bytes_used": run.bytes_used + traffic,
                   "tokens_used": run.tokens_used, "cost_used": run.cost_used, "iterations_used": run.iterations_used},
        "conversation": call.conversation,
    })
    suspension = waits.Suspension(
        tool_call_id=call.tool_call_id, turn_index=call.turn_index, remote_agent=agent.name, outbound_id=row.id,
        outcome=row.outcome, remote_task_id=row.remote_task_id, checkpoint=checkpoint, key_fingerprint=fingerprint,
        deadline_at=deadline_at,
        # Nothing to poll while the outcome is unknown: only reconciliation or an operator moves it on.
        next_poll_at=now + timedelta(seconds=agent.poll_interval_seconds) if known else None,
    )
    call.segment.guarded(waits.suspend, suspension, delegations=1, bytes_used=traffic)
    log.info("run %s waits on %s (%s)", run.id, agent.name, row.outcome)
    return Started(suspended=True)
