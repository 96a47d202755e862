"""An OpenAI-compatible chat-completions provider over `requests`.

POST <base_url>/chat/completions with the conversation and the offered tools as functions; the answer's
first choice is the turn: its `tool_calls` (arguments are a JSON string on the wire), or its `content`
as the final answer. `usage.total_tokens` counts against the run's token budget, and `usage.cost`, which
some compatible servers report, against its cost budget (0 when absent).

Every failure is a ProviderError with a sentence that says why; it never contains the API key.
"""

import json
import time

import requests

from ..domain.text import storable_json
from .providers import ProviderError, ToolSpec, TurnRequest
from .turns import ToolCall, Turn

# An answer larger than this is not a chat completion we can use (and must not fill the worker's memory).
MAX_ANSWER_BYTES = 8 * 1024 * 1024
ERROR_BODY_EXCERPT = 200


def _wire_messages(messages: list[dict]) -> list[dict]:
    wire = []
    for message in messages:
        role = message["role"]
        if role == "assistant":
            out = {"role": "assistant", "content": message["content"]}
            if message["tool_calls"]:
                out["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            # A model's unparseable arguments go back exactly as it sent them.
                            "arguments": call.arguments if isinstance(call.arguments, str)
                            else json.dumps(call.arguments),
                        },
                    }
                    for call in message["tool_calls"]
                ]
            wire.append(out)
        elif role == "tool":
            wire.append({"role": "tool", "tool_call_id": message["tool_call_id"], "content": message["content"]})
        else:
            wire.append({"role": role, "content": message["content"]})
    return wire


def _wire_tools(tools: tuple[ToolSpec, ...]) -> list[dict]:
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in tools
    ]


def _arguments(raw):
    if not isinstance(raw, str):
        return raw if raw is not None else {}
    if not raw.strip():
        return {}
    try:
        return storable_json(raw)  # a "\u0000" escape in the arguments' own JSON
    except ValueError:
        return raw  # the tool call then gets `error: ... not a JSON object`, and the model may retry


def _count(value) -> float:
    return value if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else 0


def parse_completion(data) -> Turn:
    """A chat-completions answer (decoded JSON) as a Turn; ProviderError when it has no usable message."""
    if not isinstance(data, dict):
        raise ProviderError("the answer is not a JSON object")
    if isinstance(data.get("error"), dict):
        raise ProviderError(f"the server reported an error: {data['error'].get('message', data['error'])}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ProviderError("the answer has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ProviderError("the answer's first choice has no message")
    calls = []
    for raw in message.get("tool_calls") or []:
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ProviderError("the answer has a tool call without a function name")
        calls.append(ToolCall(id=raw.get("id") or "", name=function["name"],
                              arguments=_arguments(function.get("arguments"))))
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise ProviderError("the answer's content is not a string")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    tokens = _count(usage.get("total_tokens")) or _count(usage.get("prompt_tokens")) + _count(
        usage.get("completion_tokens"))
    return Turn(content=content, tool_calls=tuple(calls), tokens=int(tokens), cost=float(_count(usage.get("cost"))))


class OpenAIProvider:
    name = "openai"

    def __init__(self, base_url: str, *, api_key: str | None, model: str | None, timeout: float):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key
        self.model = model
        self.timeout = timeout

    @classmethod
    def from_settings(cls, settings) -> "OpenAIProvider":
        return cls(settings.openai_base_url, api_key=settings.openai_api_key, model=settings.openai_model,
                   timeout=settings.provider_timeout)

    def next_turn(self, request: TurnRequest) -> Turn:
        model = request.model or self.model
        if not model:
            raise ProviderError("no model: the run names none and NRLLM_OPENAI_MODEL is not set")
        body = {"model": model, "messages": _wire_messages(request.conversation.messages)}
        if request.tools:
            body["tools"] = _wire_tools(request.tools)
        timeout = self.timeout
        if request.seconds_left is not None:
            timeout = max(0.01, min(timeout, request.seconds_left))
        return parse_completion(self._post(body, timeout))

    def _post(self, body: dict, timeout: float):
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        # requests' timeout bounds each socket wait, not the whole answer: the deadline below bounds that.
        deadline = time.monotonic() + timeout
        try:
            response = requests.post(self.url, json=body, headers=headers, timeout=timeout, stream=True,
                                     allow_redirects=False)
        except requests.Timeout:
            raise ProviderError(f"no answer from {self.url} within {timeout:g} s") from None
        except requests.RequestException as exc:
            raise ProviderError(f"cannot reach {self.url}: {type(exc).__name__}") from None
        with response:
            raw = self._read(response, deadline, timeout)
        if response.status_code != 200:
            excerpt = raw[:ERROR_BODY_EXCERPT].decode("utf-8", "replace").strip()
            raise ProviderError(f"HTTP {response.status_code} from {self.url}" + (f": {excerpt}" if excerpt else ""))
        try:
            return storable_json(raw)
        except ValueError as exc:
            raise ProviderError(f"malformed JSON in the answer from {self.url}: {exc}") from None

    def _read(self, response, deadline: float, timeout: float) -> bytes:
        chunks, size = [], 0
        try:
            for chunk in response.iter_content(64 * 1024):
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise ProviderError(f"the answer from {self.url} is larger than {MAX_ANSWER_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise ProviderError(f"no complete answer from {self.url} within {timeout:g} s")
                chunks.append(chunk)
        except requests.RequestException:
            # A read timeout in the middle of the body arrives as a ConnectionError from requests.
            raise ProviderError(f"the answer from {self.url} broke off or stalled (timeout {timeout:g} s)") from None
        return b"".join(chunks)
