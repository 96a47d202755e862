"""The model provider interface and the scripted provider (docs/http-api.md, "The scripted provider").

A provider answers one question: given the conversation so far and the tools on offer, what is the
model's next turn? It raises ProviderError with a sentence saying why when it cannot answer; the loop
ends the run `failed` with `provider_failed` and puts the sentence in an `error` event.
"""

import math
from dataclasses import dataclass
from typing import Protocol

from .turns import Conversation, ToolCall, Turn

LAST_TOOL_RESULT = "{last_tool_result}"


class ProviderError(Exception):
    """The provider gave no usable turn (timeout, HTTP error, malformed answer, script ended)."""


@dataclass(frozen=True)
class ToolSpec:
    """What a model is told about a tool it may call."""

    name: str
    description: str
    parameters: dict  # JSON schema of the arguments


@dataclass(frozen=True)
class TurnRequest:
    run_id: str
    spec: dict  # the run's spec: provider, model, script, tools, ...
    conversation: Conversation
    tools: tuple[ToolSpec, ...]
    # Seconds until the run's deadline (None: no deadline); a provider waits no longer than this.
    seconds_left: float | None = None

    @property
    def model(self) -> str | None:
        return self.spec.get("model")


class ModelProvider(Protocol):
    name: str

    def next_turn(self, request: TurnRequest) -> Turn:
        """The model's next turn, or ProviderError. Must be safe to call from several threads at once."""
        ...


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ProviderError(f"{what} must be a non-negative number, not {value!r}")
    return value


class ScriptedProvider:
    """Deterministic turns from the run's `script`; the n-th model turn is the script's n-th entry.

    An entry is {"tool_calls": [{"id", "name", "arguments"}, ...]} or {"content": "final text"}, in which
    `{last_tool_result}` is replaced by the text of the last tool result. Entries may also carry "tokens"
    and "cost" (default 0): what that turn counts against the run's budget.
    """

    name = "scripted"

    def next_turn(self, request: TurnRequest) -> Turn:
        script = request.spec.get("script") or []
        if not isinstance(script, list):
            raise ProviderError("the run's script is not a list of turns")
        index = len(request.conversation.turns)
        if index >= len(script):
            raise ProviderError(f"the script ran out after {len(script)} turns without a final turn")
        return parse_script_turn(script[index], index, request.conversation.last_tool_result)


def parse_script_turn(entry, index: int, last_tool_result: str = "") -> Turn:
    """One script entry as a Turn; ProviderError (naming the entry) when it is not a valid turn."""
    where = f"script turn {index + 1}"
    if not isinstance(entry, dict):
        raise ProviderError(f"{where} is not an object")
    tokens = int(_number(entry.get("tokens", 0), f"{where}: tokens"))
    cost = float(_number(entry.get("cost", 0.0), f"{where}: cost"))
    content = entry.get("content")
    if content is not None and not isinstance(content, str):
        raise ProviderError(f"{where}: content must be a string")
    if content is not None:
        content = content.replace(LAST_TOOL_RESULT, last_tool_result)
    raw_calls = entry.get("tool_calls")
    if raw_calls is None:
        if content is None:
            raise ProviderError(f"{where} has neither tool_calls nor content")
        return Turn(content=content, tokens=tokens, cost=cost)
    if not isinstance(raw_calls, list) or not raw_calls:
        raise ProviderError(f"{where}: tool_calls must be a non-empty list")
    calls = []
    for position, raw in enumerate(raw_calls):
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
            raise ProviderError(f"{where}: tool call {position + 1} has no name")
        call_id = raw.get("id")
        calls.append(ToolCall(id=call_id if isinstance(call_id, str) else "", name=raw["name"],
                              arguments=raw.get("arguments", {})))
    return Turn(content=content, tool_calls=tuple(calls), tokens=tokens, cost=cost)


def script_problems(script) -> list[str]:
    """Why a script cannot run, for a caller that checks it before creating a run (empty: it can)."""
    if not isinstance(script, list):
        return ["the script must be a list of turns"]
    problems = []
    for index, entry in enumerate(script):
        try:
            parse_script_turn(entry, index)
        except ProviderError as exc:
            problems.append(str(exc))
    return problems
