"""Written-ahead model turns and saved tool results: the engine's journal of a run's conversation.

A turn is saved, fenced, before any of its tools runs, together with the budget counts it costs and its
`llm` event; a tool result is saved, fenced, with its `tool` event (and, for a non-idempotent tool, the
clearing of `pending_effect`). A retried segment reads both back instead of asking the model or running
the tool again.
"""

import json

from peewee import IntegrityError

from ..domain.clock import utcnow
from ..domain.vocabulary import RunStatus, TerminationReason
from . import outbound, statements, status_guard
from .db import transactional
from .leases import Claim, fenced_update_returning, fenced_update_with_event, fenced_update_with_events, write_finish
from .models import ModelTurn, ToolResult


@transactional
def save_turn(claim: Claim, index: int, message: dict, tokens: int, cost: float, event: dict) -> bool:
    """Save turn `index` of the claimed run, count it against the budget and append its `llm` event. Returns
    whether a cancel is requested, as the run row this write updated says (the segment's next step boundary
    needs no read of its own)."""
    return _write_turn(claim, index, message, tokens, cost, event)


class _CancelMarked(Exception):
    """The run row written with a turn says a cancel is requested: what was written with it is undone."""


def save_turn_and_journal(claim: Claim, index: int, message: dict, tokens: int, cost: float, event: dict,
                          send: dict) -> outbound.Outbound | None:
    """save_turn() of a turn whose lone call delegates, and the journal row of that call's send
    (outbound.journal_first_send with `send`), in one transaction and one UPDATE of the run: the turn is still
    written ahead of its tool, and the row ahead of the request. None when the run row says a cancel is
    requested: then both are undone and the turn is saved alone, and nothing is journalled (the step boundary
    before the tool would have stopped there). A refusal of the gate or a taken message id undoes both."""
    try:
        return _save_turn_and_journal(claim, index, message, tokens, cost, event, send)
    except _CancelMarked:
        save_turn(claim, index, message, tokens, cost, event)
        return None


@transactional
def _save_turn_and_journal(claim: Claim, index: int, message: dict, tokens: int, cost: float, event: dict,
                           send: dict) -> outbound.Outbound:
    # The row's INSERT goes to the server with the run's UPDATE (a round trip less on PostgreSQL): a taken
    # message id is refused there. The gate is asked after that UPDATE, with the report's time it read (a
    # round trip less again), and before anything commits: a refusal undoes both, as one before the row would.
    row = outbound.journal_first_send(claim, **send, with_event=False, deferred=True, gate_by_caller=True)
    try:
        _, cancel_requested_at, origin, reported_at = fenced_update_with_events(
            claim, [("llm", event), outbound.journal_event(row)], ("cancel_requested_at", "origin"),
            add=_counts(tokens, cost), with_report_time=True)
    except IntegrityError:
        raise outbound.message_id_taken(send["message_id"]) from None
    status_guard.check(RunStatus.WAITING_FOR_DEPENDENCY.value, origin, reported_at)
    if cancel_requested_at is not None:
        raise _CancelMarked
    _insert_turn(claim, index, message, tokens, cost)
    return row


@transactional
def save_final_turn(claim: Claim, index: int, message: dict, tokens: int, cost: float, event: dict,
                    output: str) -> None:
    """Save the run's last turn (it calls no tool), as save_turn() does, and complete the run with `output`, in
    one transaction and one UPDATE of the run. Nothing happens between the two that a retry would need the saved
    turn for: a segment lost before this commits asks the model again, as one lost before saving any turn does."""
    write_finish(claim, RunStatus.COMPLETED, output=output, reason=TerminationReason.COMPLETED.value,
                 events_before=(("llm", event),), add=_counts(tokens, cost))
    _insert_turn(claim, index, message, tokens, cost)


def _write_turn(claim: Claim, index: int, message: dict, tokens: int, cost: float, event: dict) -> bool:
    _, cancel_requested_at = fenced_update_returning(claim, "llm", event, ("cancel_requested_at",),
                                                     add=_counts(tokens, cost))
    _insert_turn(claim, index, message, tokens, cost)
    return cancel_requested_at is not None


def _counts(tokens: int, cost: float) -> dict:
    """What a turn adds to the run's budget counters."""
    return {"iterations_used": 1, "tokens_used": tokens, "cost_used": cost}


def _insert_turn(claim: Claim, index: int, message: dict, tokens: int, cost: float) -> None:
    statements.insert_values(ModelTurn, {
        "run_id": claim.run_id, "index": index, "message": json.dumps(message, sort_keys=True), "tokens": tokens,
        "cost": cost, "created_at": utcnow()}, deferred=True)


@transactional
def save_tool_result(
    claim: Claim, turn_index: int, tool_call_id: str, name: str, result: str, event: dict, *,
    clear_pending_effect: bool, settle: outbound.Settlement | None = None,
) -> None:
    """Save a tool call's result and append its `tool` event; clear `pending_effect` when asked to; and for a
    delegation answered at once, record what it settles (its outcome and the budget it spent)."""
    if settle is not None and settle.outbound_id is not None:
        outbound.record_outcome(claim, settle.outbound_id, settle.outcome, remote_task_id=settle.remote_task_id,
                                error=settle.error)
    fenced_update_with_event(claim, "tool", event, add=settle.counts if settle else None,
                             **({"pending_effect": None} if clear_pending_effect else {}))
    statements.insert_values(ToolResult, {
        "run_id": claim.run_id, "tool_call_id": tool_call_id, "turn_index": turn_index, "name": name,
        "result": result, "created_at": utcnow()}, deferred=True)


def load(run_id: str) -> tuple[list[dict], dict[str, str]]:
    """The run's saved turns in order ({"index", "message", "tokens", "cost"}) and its results by call id."""
    turns, results = statements.turns_and_results(run_id)
    return ([{"index": index, "message": json.loads(message), "tokens": tokens, "cost": cost}
             for index, message, tokens, cost in turns], dict(results))
