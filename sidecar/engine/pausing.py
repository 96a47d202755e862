"""How the loop pauses a segment for a person: approval of a turn before any of its calls runs, and
input for an `ask_user` call. Each stores the pause and releases the lease in one fenced transaction
(store/pauses.py); the loop then ends the segment with the outcome returned here.
"""

from ..domain.decisions import PauseKind, turn_digest
from ..domain.vocabulary import SegmentOutcome
from ..store import pauses
from .turns import ToolCall


def needs_approval(calls: list[ToolCall], offered: dict) -> bool:
    """Some call still to run is of an offered tool that a person must approve."""
    return any(getattr(offered.get(call.name), "requires_approval", False) for call in calls)


def shown_calls(calls: list[ToolCall], offered: dict) -> list[dict]:
    """The pending calls as the person sees them (their effects as the tools declare them)."""
    shown = []
    for call in calls:
        tool = offered.get(call.name)
        shown.append({"id": call.id, "name": call.name, "arguments": call.arguments,
                      "effect": tool.effect.value if tool is not None else None})
    return shown


def pause_for_approval(segment, turn_index: int, calls: list[ToolCall], offered: dict) -> SegmentOutcome:
    pending = shown_calls(calls, offered)
    request = pauses.PauseRequest(PauseKind.APPROVAL, turn_index, pending_calls=pending,
                                  turn_digest=turn_digest(pending))
    segment.guarded(pauses.pause, request)
    return SegmentOutcome.AWAITING_APPROVAL


def pause_for_input(segment, turn_index: int, call: ToolCall, tool) -> SegmentOutcome:
    question, schema = tool.input_request(call.arguments)
    request = pauses.PauseRequest(PauseKind.INPUT, turn_index, tool_call_id=call.id, question=question,
                                  input_schema=schema)
    segment.guarded(pauses.pause, request)
    return SegmentOutcome.AWAITING_INPUT
