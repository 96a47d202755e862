"""An operator's resend of a send whose outcome is unknown (docs/delegation.md, "Operator resend";
`nrllm-sidecar outbound resend`).

Reconciliation comes first (read-only ListTasks): a task found turns the row `accepted` and nothing is
resent (409 `not_resendable`, saying so). Otherwise the guarded transaction of store/resends.py supersedes
the row and moves the wait to a new row, with a new message id (the resend count goes into its
derivation) and the same text, context and push URL; only then is the new request sent. The journal
keeps no push token (only its digest), so a resend that registers pushes carries a new token, and the
wait then accepts that one (docs/security.md, "Secrets at rest"). What it answers is settled as a first
send's answer would be: a task is polled by the coordinator (at once), an answer already final resumes the
run, a lost answer is reconciled again.
"""

import logging
import uuid

from ..domain import push_tokens
from ..domain.errors import NotFound, NotResendable
from ..domain.vocabulary import OutboundOutcome
from ..store import outbound, remote_agents, resends, resolutions, waits
from ..store.models import Outbound
from . import reconcile, remote
from .a2a import push_target_of, resend_body
from .ids import message_id_for
from .results import refused_text, result_text, unreachable_text

log = logging.getLogger("nrllm_sidecar.resend")

__all__ = ["NotResendable", "journal_row", "resend"]


def journal_row(outbound_id: str) -> Outbound:
    """The journal row a resend is asked for (the console shows it first); NotFound."""
    try:
        uuid.UUID(outbound_id)
    except ValueError:
        raise NotFound("no outbound row with that id") from None
    row = outbound.get(outbound_id)
    if row is None:
        raise NotFound(f"no outbound row {outbound_id}")
    return row


def resend(outbound_id: str, settings, *, by: str) -> Outbound:
    """Resend a lost send for `by` (the operator, as logged); returns the new row. Raises NotFound or
    NotResendable. The API, the console and the command line all resend through here."""
    old = journal_row(outbound_id)
    wait = resends.waiting_on(old)  # refuse early, before anything is asked of the remote agent
    agent = remote_agents.get_agent(old.remote_agent)
    if agent is None:
        raise NotResendable(f"remote agent {old.remote_agent} is no longer registered")
    try:
        client = remote.client_for(agent, settings)
    except remote.Unreachable as exc:
        raise NotResendable(f"remote agent {agent.name} unreachable: {exc}") from None
    found = reconcile.try_find(client, old)
    if found is not None and outbound.record_found(old.id, found.id):
        waits.poll_now(wait.id)
        raise NotResendable(f"reconciliation found the task the lost send created ({found.id}): "
                            "the row is accepted now and the run waits on that task")
    message_id = message_id_for(old.run_id, old.tool_call_id, old.resend_count + 1)
    # The journal kept only the old push token's digest: a resend with a push config gets a new token.
    push_token = push_tokens.new_push_token(old.run_id) if push_target_of(old.request_body) else None
    body = resend_body(old.request_body, message_id, push_token)
    journalled = push_tokens.mask(body, push_token) if push_token else body
    done = resends.record_resend(old.id, message_id, journalled, push_token)
    log.info("run %s: outbound %s resent by %s as %s", old.run_id, old.id, by, done.row.id)
    sent = client.send(body)
    row = resends.record_resent_outcome(done.row.id, sent.outcome, error=sent.error,
                                        remote_task_id=sent.task.id if sent.task else None,
                                        bytes_received=sent.bytes_received)
    if sent.outcome == OutboundOutcome.OUTCOME_UNKNOWN and (again := reconcile.try_find(client, row)):
        outbound.record_found(row.id, again.id)
        row = outbound.get(row.id)
    _settle(done.wait, row, sent, agent.name)
    return outbound.get(row.id)


def _settle(wait, row: Outbound, sent, agent_name: str) -> None:
    """Resume the run now when the answer is final; otherwise let the coordinator poll the task at once."""
    text = None
    if row.outcome == OutboundOutcome.REJECTED:
        text = refused_text(agent_name, row.error)
    elif row.outcome == OutboundOutcome.NOT_DELIVERED:
        text = unreachable_text(agent_name, row.error)
    elif row.outcome == OutboundOutcome.ACCEPTED and sent.task is None and sent.message_text is not None:
        text = sent.message_text  # a direct message: no task to poll
    elif row.outcome == OutboundOutcome.ACCEPTED and sent.task is not None and sent.task.finished:
        text = result_text(sent.task)
    if text is not None:
        try:
            turn_index = remote.unseal_checkpoint(wait)["turn_index"]
        except (remote.KeyMissing, remote.Tampered):
            turn_index = None  # the coordinator deals with the checkpoint (and polls a task) when it looks
        if turn_index is not None and resolutions.resolve_wait(wait, turn_index=turn_index, result=text,
                                                         detail={"outbound_id": row.id, "outcome": row.outcome}):
            return
    waits.poll_now(wait.id)
