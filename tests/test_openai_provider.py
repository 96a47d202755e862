"""The OpenAI-compatible provider against a small chat-completions server on 127.0.0.1 (real sockets)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sidecar.domain.vocabulary import SegmentOutcome
from sidecar.engine import AgentLoop
from sidecar.store import events, runs
from sidecar.store.models import ToolResult
from tests.support.engine import make_settings, registry
from tests.support.runs import run_row
from tests.support.segments import drive_segment

API_KEY = "sk-test-secret"


class ChatServer:
    """Answers POST /v1/chat/completions with the queued answers, in order, and records each request."""

    def __init__(self):
        self.answers: list[tuple[int, bytes, float]] = []
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": json.loads(body)})
                status, payload, delay = server.answers.pop(0)
                time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (the timeout test)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, body, status: int = 200, delay: float = 0.0) -> None:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.answers.append((status, payload, delay))

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def chat_server():
    server = ChatServer()
    yield server
    server.close()


def _completion(message: dict, usage: dict | None = None) -> dict:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}],
        "usage": usage or {},
    }


def _tool_call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _loop(server: ChatServer, timeout: float = 2.0) -> AgentLoop:
    settings = make_settings(openai_base_url=server.url, openai_api_key=API_KEY, openai_model="test-model",
                             openai_timeout=timeout)
    return AgentLoop(registry(settings=settings))


def _openai_run(input="say something", **spec) -> str:
    return runs.create_run("be_user:7", input, spec={"provider": "openai", "tools": ["echo"], **spec})


def test_tool_calls_then_a_final_answer_with_tokens_counted_from_usage(sqlite_url, chat_server):
    chat_server.answer(_completion(
        {"content": None, "tool_calls": [_tool_call("call_abc", "echo", '{"text": "from the model"}')]},
        {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30, "cost": 0.01},
    ))
    chat_server.answer(_completion({"content": "The echo said: from the model"},
                                   {"prompt_tokens": 40, "completion_tokens": 5}))
    run_id = _openai_run()
    assert drive_segment(loop=_loop(chat_server)) is SegmentOutcome.COMPLETED

    row = run_row(run_id)
    assert (row.status, row.output) == ("completed", "The echo said: from the model")
    assert (row.tokens_used, row.iterations_used, row.cost_used) == (75, 2, pytest.approx(0.01))
    first, second = chat_server.requests
    assert first["path"] == "/v1/chat/completions"
    assert first["headers"]["Authorization"] == f"Bearer {API_KEY}"
    assert first["body"]["model"] == "test-model"
    assert first["body"]["messages"] == [{"role": "user", "content": "say something"}]
    (tool,) = first["body"]["tools"]
    assert tool["type"] == "function" and tool["function"]["name"] == "echo"
    assert tool["function"]["parameters"]["required"] == ["text"]
    assert second["body"]["messages"][1:] == [
        {"role": "assistant", "content": None,
         "tool_calls": [_tool_call("call_abc", "echo", '{"text": "from the model"}')]},
        {"role": "tool", "tool_call_id": "call_abc", "content": "from the model"},
    ]


def test_the_runs_model_wins_over_the_configured_one(sqlite_url, chat_server):
    chat_server.answer(_completion({"content": "ok"}))
    _openai_run(model="other-model")
    drive_segment(loop=_loop(chat_server))
    assert chat_server.requests[0]["body"]["model"] == "other-model"


def test_malformed_tool_arguments_from_the_model_are_an_error_result_and_the_model_continues(
        sqlite_url, chat_server):
    chat_server.answer(_completion({"content": None, "tool_calls": [_tool_call("c1", "echo", '{"text": ')]}))
    chat_server.answer(_completion({"content": "sorry"}))
    run_id = _openai_run()
    assert drive_segment(loop=_loop(chat_server)) is SegmentOutcome.COMPLETED
    (result,) = ToolResult.select().where(ToolResult.run == run_id)
    assert result.result == "error: the arguments of echo are not a JSON object"
    # The model sees its own arguments again exactly as it sent them.
    assert chat_server.requests[1]["body"]["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"text": '


@pytest.mark.parametrize(
    "status, body, delay, reason",
    [
        (200, _completion({"content": "too late"}), 2.0, "no answer from {url}/chat/completions within 0.5 s"),
        (500, {"error": {"message": "upstream exploded"}}, 0, 'HTTP 500 from {url}/chat/completions: {{"error"'),
        (200, b'{"choices": [', 0, "malformed JSON in the answer from {url}/chat/completions"),
        (200, {"object": "chat.completion"}, 0, "the answer has no choices"),
    ],
    ids=["timeout", "http-500", "malformed-json", "no-choices"],
)
def test_a_failing_provider_fails_the_run_with_the_reason_in_its_events(
        sqlite_url, chat_server, status, body, delay, reason):
    chat_server.answer(body, status=status, delay=delay)
    run_id = _openai_run()
    started = time.monotonic()
    assert drive_segment(loop=_loop(chat_server, timeout=0.5)) is SegmentOutcome.FAILED
    assert time.monotonic() - started < 1.9  # the timeout, not the server's delay, decided
    row = run_row(run_id)
    assert (row.status, row.termination_reason, row.iterations_used) == ("failed", "provider_failed", 0)
    (error,) = [e["payload"] for e in events.list_events(run_id) if e["kind"] == "error"]
    assert error["provider"] == "openai"
    assert error["message"].startswith("provider openai failed: ")
    assert reason.format(url=chat_server.url) in error["message"]
    assert API_KEY not in json.dumps([e["payload"] for e in events.list_events(run_id)])


def test_an_unreachable_server_fails_the_run_with_the_reason(sqlite_url, chat_server):
    url = chat_server.url
    chat_server.close()  # nothing listens on that port any more
    settings = make_settings(openai_base_url=url, openai_model="m", openai_timeout=0.5)
    run_id = _openai_run()
    drive_segment(loop=AgentLoop(registry(settings=settings)))
    (error,) = [e["payload"] for e in events.list_events(run_id) if e["kind"] == "error"]
    assert f"cannot reach {url}/chat/completions" in error["message"]


@pytest.mark.parametrize("unstorable", ["\u0000", "\ud800"], ids=["NUL", "surrogate"])
def test_unstorable_text_from_the_model_is_replaced_so_every_database_stores_the_run(database_url, chat_server,
                                                                                     unstorable):
    # JSON carries NUL as \u0000 and may carry a lone surrogate escape such as \ud800, in the reply and inside
    # the arguments' own JSON; no database stores either, so without the replacement the run's writes would fail.
    escaped = json.dumps(unstorable)[1:-1]  # the escape as it appears inside the arguments' own JSON
    chat_server.answer(_completion({"content": None,
                                    "tool_calls": [_tool_call("call_1", "echo", f'{{"text": "a{escaped}b"}}')]}))
    chat_server.answer(_completion({"content": f"done{unstorable}"}))
    run_id = _openai_run()
    assert drive_segment(loop=_loop(chat_server)) is SegmentOutcome.COMPLETED
    row = run_row(run_id)
    assert (row.status, row.output) == ("completed", "done\ufffd")
    assert chat_server.requests[1]["body"]["messages"][-1]["content"] == "a\ufffdb"
