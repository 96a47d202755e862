"""Starting a delegation from a model's tool call: journal, send, then suspend or answer at once.

The order is the promise: the request is committed to the journal (with the gate checked) before it
leaves; what the send did is recorded before the run suspends, or with the suspension, in its transaction
(a task at work); or, when the remote answered already, with the result given at once. A retried segment
lands on the same journal row (the message id is derived from the run and the tool-call id) and never sends
twice.

A send whose answer is lost (`outcome_unknown`) is reconciled at once, read-only, before the run
suspends: a task found is waited on as if the answer had come.

Pushes: when the agent's record says `push`, its card says `pushNotifications` and NRLLM_PUBLIC_URL is
set, the send carries an inline push config with the webhook URL and a fresh token of this delegation.
The journal keeps the exact text that leaves with the token masked (same length), and the row and the
wait keep only the token's SHA-256 (docs/security.md, "Secrets at rest"). A retried segment takes the push
URL and the masked token back from the journalled body, so it rebuilds the very same journalled text (and
never sends it: the row exists).
"""

import dataclasses
import logging
from dataclasses import dataclass
from datetime import timedelta

from .. import failpoints, logs
from ..domain.clock import utcnow
from ..domain.errors import CancelRequested, MessageIdTaken, StatusNotWritable
from ..domain.push_tokens import new_push_token
from ..domain.vocabulary import OutboundOutcome
from ..engine.tools import DelegationCall
from ..store import outbound, remote_agents, runs, waits
from ..store.models import Run
from . import reconcile, remote
from .a2a import PushTarget, journalled, push_target_of
from .ids import ID_NAMESPACE, context_id_for, message_id_for  # noqa: F401 - the ids' home used to be here
from .results import result_text
from .types import SendResult

log = logging.getLogger("nrllm_sidecar.delegation")

PUSH_PATH = "/api/v1/push"
# A2A peers push once and never retry. A push that comes before the suspension is kept (delegation/push.py),
# but one lost on the way is not: a delegation with pushes is also polled once this soon after it starts
# waiting, so a task that ended at once does not wait the agent's whole interval for it.
FIRST_POLL_WITH_PUSH_SECONDS = 1.0


@dataclass(frozen=True)
class Started:
    """The tool call's result now (`result`), or the run suspended on the remote task (`suspended`). A result
    the remote answered at once carries `settle`: what the saving of the result must also write."""

    result: str | None = None
    suspended: bool = False
    settle: outbound.Settlement | None = None
    cancel_marked: bool = True  # suspended: whether the suspension found a cancel mark on the run


def error(text: str) -> Started:
    return Started(result=f"error: {text}")


def start_delegation(call: DelegationCall, settings) -> Started:
    with logs.context(remote_agent=str(call.arguments.get("agent"))):
        return _start(call, settings)


def _start(call: DelegationCall, settings) -> Started:
    segment = call.segment
    # The budget counters as the claim wrote them (earlier segments' spending included), unless a delegation
    # of this segment has spent some since: answered at once, it let the segment go on to this one.
    run = runs.get_run(segment.run_id) if segment.delegated else segment.run
    if run is None:
        raise Run.DoesNotExist(f"run {segment.run_id} does not exist")  # as Run.get_by_id raised
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
    message_id = message_id_for(run.id, call.tool_call_id)
    push = _push_target(run.id, message_id, agent, client, settings, first_attempt=call.first_attempt)
    body = client.build_send(message_id, context_id, call.arguments["message"], task_id=task_id, push=push)
    if run.max_bytes is not None and run.bytes_used + len(body) > run.max_bytes:
        return error(f"transfer budget exhausted ({run.bytes_used} of {run.max_bytes} bytes used)")
    segment.delegated = True  # from here on the run's counters may move
    try:
        row, is_new = _journal(call, run, dict(
            owner=run.owner, remote_agent=agent.name, message_id=message_id, tool_call_id=call.tool_call_id,
            context_id=context_id, body=journalled(body, push), push_token=push.token if push else None,
            origin=run.origin,
        ))
    except StatusNotWritable as exc:
        return error(f"delegation is not offered to this run: {exc.reason}")
    except MessageIdTaken as exc:
        return error(str(exc))
    if is_new:
        failpoints.reached("delegation.after_journal")
        sent = client.send(body)
        failpoints.reached("delegation.after_send")
        if _answered_at_once(sent):
            # Its outcome is recorded with its tool result, in one transaction (Settlement).
            return _answer_at_once(agent, sent, len(body), record_on=row.id)
        if sent.outcome == OutboundOutcome.ACCEPTED:
            # A task at work: its outcome is recorded with the suspension on it, in one transaction.
            return _suspend(call, run, agent, row, len(body) + sent.bytes_received, settings, answer=sent)
        row = segment.guarded(outbound.record_outcome, row.id, sent.outcome,
                              remote_task_id=sent.task.id if sent.task else None, error=sent.error)
        if sent.outcome == OutboundOutcome.OUTCOME_UNKNOWN and (found := reconcile.try_find(client, row)):
            row = segment.guarded(outbound.record_found_fenced, row.id, found.id)
            if row.outcome == OutboundOutcome.ACCEPTED:
                sent = dataclasses.replace(sent, outcome=row.outcome, task=found, error=None)
                if _answered_at_once(sent):
                    return _answer_at_once(agent, sent, len(body), record_on=None)
        return _suspend(call, run, agent, row, len(body) + sent.bytes_received, settings)
    return _after_retry(call, run, agent, row, settings)


def _journal(call: DelegationCall, run, send: dict) -> tuple[outbound.Outbound, bool]:
    """record_send() of the call's send: (row, is_new). A turn the loop left unsaved is saved with a new row, in
    one transaction; should that be refused (the gate, a taken message id), both are undone, and the turn is
    saved on its own before the send is journalled as for a turn saved earlier. CancelRequested when the run
    row written with the turn says a cancel is requested: nothing is journalled."""
    held = call.unsaved_turn
    if held is None or held.saved:
        return call.segment.guarded(outbound.record_send, first_attempt=call.first_attempt, **send)
    try:
        row = held.save_with_journal(send)
    except (StatusNotWritable, MessageIdTaken):  # JournalledAlready too
        row = None
        held.save()
    if held.cancel_marked:
        raise CancelRequested(run.id)
    # `run` was read before the turn was saved: the checkpoint counts the turn too.
    run.iterations_used += 1
    run.tokens_used += held.record["tokens"]
    run.cost_used += held.record["cost"]
    if row is not None:
        return row, True
    return call.segment.guarded(outbound.record_send, first_attempt=True, **send)


def _push_target(run_id: str, message_id: str, agent, client, settings, *, first_attempt: bool
                 ) -> PushTarget | None:
    journalled = None if first_attempt else outbound.by_message_id(message_id)
    if journalled is not None:
        return push_target_of(journalled.request_body)  # a retry: the same body as the first attempt
    if not (agent.push and client.endpoint.push_supported and settings.public_url):
        return None
    return PushTarget(settings.public_url.rstrip("/") + PUSH_PATH, new_push_token(run_id))


def give_up_delegation(call: DelegationCall) -> outbound.Settlement | None:
    """A call the run may no longer delegate (the gate closed) whose earlier attempt journalled a send: that
    send may have left, so its row is settled and its task cancelled, and it is counted with the call's
    error result. None when no send was journalled for the call."""
    row = outbound.by_message_id(message_id_for(call.segment.run_id, call.tool_call_id))
    if row is None:
        return None
    call.segment.guarded(outbound.give_up_send, row.id)
    log.warning("run %s gives up its journalled delegation to %s: the gate closed", row.run_id, row.remote_agent)
    return outbound.Settlement(counts={"delegations_used": 1, "bytes_used": len(row.request_body)})


def _answered_at_once(sent: SendResult) -> bool:
    """Whether the send's answer settles the tool call now: refused, undeliverable, a message, or a task
    already terminal or interrupted. Anything else (a task at work, an unknown outcome) is waited on."""
    if sent.outcome in (OutboundOutcome.NOT_DELIVERED, OutboundOutcome.REJECTED):
        return True
    return sent.outcome == OutboundOutcome.ACCEPTED and (sent.task is None or sent.task.finished)


def _answer_at_once(agent, sent: SendResult, sent_bytes: int, *, record_on: str | None) -> Started:
    """The tool result of a send answered at once, and what its saving settles: the budget spent (a send not
    delivered costs none) and, on `record_on`, the send's outcome."""
    spent = {"delegations_used": 1, "bytes_used": sent_bytes + sent.bytes_received}
    if sent.outcome == OutboundOutcome.NOT_DELIVERED:
        result, spent = f"error: remote agent {agent.name} unreachable: {sent.error}", {}
    elif sent.outcome == OutboundOutcome.REJECTED:
        result = f"error: remote agent {agent.name} refused the message: {sent.error}"
    elif sent.task is None:
        result = sent.message_text or ""
    else:
        result = result_text(sent.task)
    settle = outbound.Settlement(
        counts=spent, outbound_id=record_on, outcome=sent.outcome if record_on else None,
        remote_task_id=sent.task.id if sent.task else None, error=sent.error,
    )
    return Started(result=result, settle=settle)


def _after_retry(call, run, agent, row, settings) -> Started:
    """A retried segment found the journal row of this call: never send again."""
    if row.outcome == OutboundOutcome.REJECTED:
        return error(f"remote agent {agent.name} refused the message: {row.error}")
    if row.outcome == OutboundOutcome.NOT_DELIVERED:
        return error(f"remote agent {agent.name} unreachable: {row.error}")
    # accepted (the suspension was not committed) or outcome_unknown: wait on what was journalled.
    return _suspend(call, run, agent, row, len(row.request_body), settings)


def _suspend(call, run, agent, row, traffic: int, settings, answer: SendResult | None = None) -> Started:
    """Suspend the run on the journalled send `row`; with `answer`, the send's answer (a task at work), which
    the suspension records on the row (still `pending` until then)."""
    now = utcnow()
    deadline_at = now + timedelta(seconds=agent.deadline_seconds)
    first_poll = agent.poll_interval_seconds
    if row.push_token_sha256:
        first_poll = min(first_poll, FIRST_POLL_WITH_PUSH_SECONDS)
    outcome, remote_task_id = (answer.outcome, answer.task.id) if answer else (row.outcome, row.remote_task_id)
    checkpoint, fingerprint = remote.seal_checkpoint({
        "run_id": run.id, "tool_call_id": call.tool_call_id, "turn_index": call.turn_index,
        "remote_agent": agent.name, "remote_task_id": remote_task_id, "outbound_id": row.id,
        "context_id": row.context_id, "actor": run.owner, "workspace": run.workspace,
        "deadline_at": deadline_at.isoformat(),
        "run_deadline_at": run.deadline_at.isoformat() if run.deadline_at else None,
        "budget": {"delegations_used": run.delegations_used + 1, "bytes_used": run.bytes_used + traffic,
                   "tokens_used": run.tokens_used, "cost_used": run.cost_used, "iterations_used": run.iterations_used},
        "conversation": call.conversation,
    })
    suspension = waits.Suspension(
        tool_call_id=call.tool_call_id, turn_index=call.turn_index, remote_agent=agent.name, outbound_id=row.id,
        outcome=outcome, remote_task_id=remote_task_id, checkpoint=checkpoint, key_fingerprint=fingerprint,
        deadline_at=deadline_at,
        # A known task is polled; an unknown outcome is reconciled again at each poll (the one right after
        # the send may have failed too) until its task is found or the deadline comes.
        next_poll_at=now + timedelta(seconds=first_poll),
        push_token_sha256=row.push_token_sha256,
    )
    try:
        suspended = call.segment.guarded(waits.suspend, suspension, delegations=1, bytes_used=traffic,
                                         record_outcome=answer is not None)
    except StatusNotWritable as exc:
        # The gate closed after the send was journalled (a host reported an older consumer meanwhile): the
        # run may not wait, so the call is given up, its remote task cancelled, and the send still counted.
        if answer is not None:  # the refusal undid the outcome's recording with the rest: recorded on its own
            call.segment.guarded(outbound.record_outcome, row.id, outcome, remote_task_id=remote_task_id)
        call.segment.guarded(outbound.give_up_send, row.id)
        log.warning("run %s gives up its delegation to %s: %s", run.id, agent.name, exc.reason)
        return Started(result=f"error: delegation is not offered to this run: {exc.reason}",
                       settle=outbound.Settlement(counts={"delegations_used": 1, "bytes_used": traffic}))
    log.info("run %s waits on %s (%s)", run.id, agent.name, outcome)
    return Started(suspended=True, cancel_marked=suspended.cancel_marked)
