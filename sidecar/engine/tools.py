"""The synchronous tool interface and the built-in tools `echo` and `sleep` (docs/http-api.md, "Built-in tools").

A tool declares its name, its effect and a JSON schema for its arguments, and turns valid arguments
into a result text. The loop validates the arguments first, so `run` sees only arguments that match the
schema. A tool that cannot do its work raises ToolError; its result text is then `error: <why>` and the
model continues.
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from ..domain.vocabulary import ToolEffect
from .providers import ToolSpec

# How often a long wait inside a tool looks for a cancel request or a passed deadline.
CHECK_INTERVAL_SECONDS = 0.5
MAX_SLEEP_SECONDS = 3600


class ToolError(Exception):
    """The tool could not do its work; the message says why (the result text is `error: <message>`)."""


def error_text(why: str) -> str:
    """Every failed tool call's result text starts with `error: ` (docs/http-api.md, "Built-in tools")."""
    return f"error: {why}"


class ToolContext:
    """What a running tool may use: the run's id and waits that stop when the run must stop."""

    def __init__(self, segment, check: Callable[[], None]):
        self._segment = segment
        # Raises (Interrupted from the loop) when the run is cancelled or out of time.
        self._check = check

    @property
    def run_id(self) -> str:
        return self._segment.run_id

    def write(self, store_write, *args, **kwargs):
        """A fenced store write `store_write(claim, ...)` for a tool whose effect lives in the sidecar's
        database: a segment that lost its lease writes nothing (LeaseLost)."""
        return self._segment.guarded(store_write, *args, **kwargs)

    def sleep(self, seconds: float) -> None:
        """Wait; a lost lease stops it at once (LeaseLost), a cancel or the deadline within half a second."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self._segment.sleep(min(left, CHECK_INTERVAL_SECONDS))
            self._check()


class UnsavedTurn:
    """A turn whose lone call delegates, not yet saved, so that the call's journal row can be written with it
    (Tool.journals_with_turn). Whatever else the tool does, the loop saves it on its own before the call's
    result or any ending of the segment: a turn is always saved before what follows from it."""

    def __init__(self, segment, record: dict):
        self.segment = segment  # sidecar.segment.Segment
        self.record = record  # Segment.save_turn's arguments
        self.saved = False
        self.cancel_marked = False  # what the run row written with the turn said

    def save(self) -> None:
        """Save it on its own, unless it is saved already."""
        if not self.saved:
            self.cancel_marked = self.segment.save_turn(**self.record)
            self.saved = True

    def save_with_journal(self, send: dict):
        """Save it with the journal row of its call's send (store/turns.py, save_turn_and_journal): the row, or
        None when a cancel is marked (then the turn alone is saved)."""
        row = self.segment.save_turn_and_journal(self.record, send)
        self.saved, self.cancel_marked = True, row is None
        return row


@dataclass(frozen=True)
class DelegationCall:
    """What the loop hands a delegation tool for one tool call (Tool.delegate, Tool.give_up)."""

    segment: object  # sidecar.segment.Segment
    tool_call_id: str
    turn_index: int
    arguments: dict
    conversation: list[dict]  # provider-neutral messages so far, for the checkpoint
    # The call's turn was saved by this segment, so no earlier attempt of the call can have journalled a send:
    # the tool need not look for one before its own journal write (which still refuses a second).
    first_attempt: bool = False
    # Only for a tool that journals_with_turn: the call's turn, left for the tool to save with its journal row.
    unsaved_turn: UnsavedTurn | None = None


class Tool:
    name: ClassVar[str]
    effect: ClassVar[ToolEffect]
    description: ClassVar[str]
    parameters: ClassVar[dict]
    # A delegation tool suspends its run in waiting_for_dependency: it is offered only while the
    # compatibility gate lets that status be written for the run's origin.
    delegation: ClassVar[bool] = False
    # A delegation tool whose delegate() saves a first attempt's turn (DelegationCall.unsaved_turn) in the
    # transaction that journals the send: one transaction less a delegation.
    journals_with_turn: ClassVar[bool] = False
    # A person approves the calls of a turn that calls this tool before any of them runs (per turn).
    requires_approval: ClassVar[bool] = False
    # The tool asks the person for input instead of running: the run waits for it (see AskUserTool).
    pauses_for_input: ClassVar[bool] = False

    def run(self, arguments: dict, context: ToolContext) -> str:
        raise NotImplementedError

    def delegate(self, call: DelegationCall):
        """A delegation tool starts its dependency here instead of run(): it returns a
        sidecar.delegation.start.Started (a result now, or the run suspended). See DelegateTool."""
        raise NotImplementedError(f"{self.name} is marked as a delegation tool but does not implement delegate()")

    def give_up(self, call: DelegationCall):
        """A delegation tool no longer offered to the run (the gate closed): settle what an earlier attempt of
        this call may have started. Returns what the saving of the call's error result must also write (a
        sidecar.store.outbound.Settlement), or None."""
        return None

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.parameters)

    def argument_problem(self, arguments: Any) -> str | None:
        """Why the arguments do not fit the schema, or None."""
        if not isinstance(arguments, dict):
            return f"the arguments of {self.name} are not a JSON object"
        error = best_match(Draft202012Validator(self.parameters).iter_errors(arguments))
        if error is None:
            return None
        where = ".".join(str(p) for p in error.absolute_path)
        return f"invalid arguments for {self.name}: " + (f"{where}: " if where else "") + error.message


class EchoTool(Tool):
    name = "echo"
    effect = ToolEffect.READ_ONLY
    description = "Returns the given text unchanged."
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The text to return."}},
        "required": ["text"],
        "additionalProperties": False,
    }

    def run(self, arguments: dict, context: ToolContext) -> str:
        return arguments["text"]


class SleepTool(Tool):
    name = "sleep"
    effect = ToolEffect.READ_ONLY
    description = "Waits the given number of seconds, then says so."
    parameters = {
        "type": "object",
        "properties": {
            "seconds": {"type": "number", "minimum": 0, "maximum": MAX_SLEEP_SECONDS,
                        "description": "How long to wait, in seconds."},
        },
        "required": ["seconds"],
        "additionalProperties": False,
    }

    def run(self, arguments: dict, context: ToolContext) -> str:
        seconds = arguments["seconds"]
        context.sleep(float(seconds))
        # The number as the model wrote it: 2 -> "slept 2s", 0.5 -> "slept 0.5s".
        return f"slept {json.dumps(seconds)}s"


def builtin_tools() -> list[Tool]:
    return [EchoTool(), SleepTool()]
