"""Model turns, tool calls and the conversation built from them (pure: no database, no network).

A turn is what the model said: either a final answer (`content`) or tool calls. Providers translate it
to and from their wire format; the store keeps it as the JSON of `Turn.message()`.
"""

from dataclasses import dataclass, field, replace
from typing import Any

# The tool_results table keys a result by its call id; longer ids are replaced (assign_call_ids).
MAX_CALL_ID_LENGTH = 128


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    # Normally a JSON object; kept as the model sent it otherwise, and the call then gets an error result.
    arguments: Any = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: dict) -> "ToolCall":
        return cls(id=data["id"], name=data["name"], arguments=data.get("arguments", {}))


@dataclass(frozen=True)
class Turn:
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tokens: int = 0
    cost: float = 0.0

    @property
    def is_final(self) -> bool:
        """A turn without tool calls ends the run with its content as the output."""
        return not self.tool_calls

    def message(self) -> dict:
        """The saved form (model_turns.message): {"content": ...} and/or {"tool_calls": [...]}."""
        message: dict = {}
        if self.content is not None or self.is_final:
            message["content"] = self.content or ""
        if self.tool_calls:
            message["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        return message

    @classmethod
    def from_message(cls, message: dict, tokens: int = 0, cost: float = 0.0) -> "Turn":
        calls = tuple(ToolCall.from_dict(c) for c in message.get("tool_calls") or ())
        return cls(content=message.get("content"), tool_calls=calls, tokens=tokens, cost=cost)


def assign_call_ids(turn: Turn, used: set[str], index: int) -> Turn:
    """Give every call of a new turn an id unique in the run, before the turn is saved.

    Scripts (and some models) repeat ids such as `call_1` from turn to turn; results are keyed by call id,
    so a repeated, missing or overlong id is replaced by `call_<turn>_<position>`. Saved with the turn, the
    ids are stable: a retried segment replays the same ids and lands on the same result rows.
    """
    taken = set(used)
    calls = []
    for position, call in enumerate(turn.tool_calls):
        call_id = call.id
        if not isinstance(call_id, str) or not call_id or len(call_id) > MAX_CALL_ID_LENGTH or call_id in taken:
            call_id = f"call_{index}_{position}"
            suffix = 1
            while call_id in taken:
                call_id = f"call_{index}_{position}_{suffix}"
                suffix += 1
        taken.add(call_id)
        calls.append(replace(call, id=call_id))
    return replace(turn, tool_calls=tuple(calls))


class Conversation:
    """The run's input as the user message, then each turn followed by the results of its calls.

    `messages` is provider-neutral: {"role": "user", "content"}, {"role": "assistant", "content",
    "tool_calls": [ToolCall]}, {"role": "tool", "tool_call_id", "name", "content"}.
    """

    def __init__(self, user_input: str):
        self.messages: list[dict] = [{"role": "user", "content": user_input}]
        self.turns: list[Turn] = []
        self.results: dict[str, str] = {}

    @property
    def last_turn(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    @property
    def call_ids(self) -> set[str]:
        return {call.id for turn in self.turns for call in turn.tool_calls}

    def add_turn(self, turn: Turn) -> None:
        self.turns.append(turn)
        self.messages.append({"role": "assistant", "content": turn.content, "tool_calls": list(turn.tool_calls)})

    def add_result(self, call: ToolCall, text: str) -> None:
        self.results[call.id] = text
        self.messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": text})

    def unanswered(self) -> list[ToolCall]:
        """Calls of the last turn that have no result yet, in call order (results are saved in that order)."""
        last = self.last_turn
        if last is None:
            return []
        return [call for call in last.tool_calls if call.id not in self.results]

    @property
    def last_tool_result(self) -> str:
        """The text of the last tool result the model has received; empty when there is none."""
        for message in reversed(self.messages):
            if message["role"] == "tool":
                return message["content"]
        return ""
