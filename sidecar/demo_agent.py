"""The demo's remote agent: a tiny A2A 1.0 JSON-RPC server on 127.0.0.1, written with the standard library.

`serve --demo` runs it in a thread of the serving process, so the demo shows a run that waits for a remote
agent after a plain `pip install -e .` (the a2a-sdk is a test dependency only). It speaks just what the
sidecar's client uses (sidecar/delegation/a2a.py): the agent card at /.well-known/agent-card.json, and SendMessage,
GetTask, CancelTask and ListTasks. A task works for `work_seconds`, then completes with a short summary of
the message as its artifact. A send that asks for push notifications gets one, the completed task, posted
to its URL with its token; only to a loopback address (127.0.0.1, ::1, localhost), so the agent cannot be
made to post elsewhere. It keeps tasks in memory only, answers a repeated message id with the task it
already made, and is not meant for anything but the demo.
"""

import heapq
import http.client
import itertools
import json
import logging
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from .delegation.a2a import CARD_PATH
from .delegation.push import TOKEN_HEADER
from .delegation.types import TASK_NOT_FOUND

log = logging.getLogger("nrllm_sidecar.demo_agent")

DEFAULT_WORK_SECONDS = 5.0
MAX_REQUEST_BYTES = 64 * 1024
METHOD_NOT_FOUND = -32601
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
PUSH_TIMEOUT_SECONDS = 5.0
PUSHING_THREADS = 4  # pushes posted at once at the most
TASK_NOT_CANCELABLE = -32002


class _Tasks:
    """The agent's tasks, by id; a task's state is worked out when it is read (no thread per task)."""

    def __init__(self, work_seconds: float):
        self.work_seconds = work_seconds
        self.pusher = _Pusher(self)
        self._lock = threading.Lock()
        self._tasks: dict[str, dict] = {}
        self._by_message: dict[str, str] = {}

    def send(self, message: dict, push: dict | None = None) -> dict:
        with self._lock:
            message_id = str(message.get("messageId") or uuid.uuid4())
            if message_id in self._by_message:  # a resend of the same message: the task it made
                return self._view(self._tasks[self._by_message[message_id]])
            text = " ".join(p["text"] for p in message.get("parts") or () if isinstance(p, dict)
                            and isinstance(p.get("text"), str))
            task = {"id": str(uuid.uuid4()), "contextId": str(message.get("contextId") or uuid.uuid4()),
                    "text": text, "started": time.monotonic(), "state": "TASK_STATE_WORKING",
                    "history": [{**message, "messageId": message_id}]}
            self._tasks[task["id"]] = task
            self._by_message[message_id] = task["id"]
            if push:
                self.pusher.post_at(task["started"] + self.work_seconds, task["id"], push)
            return self._view(task)

    def get(self, task_id: str) -> dict | None:
        with self._lock:
            task = self._tasks.get(task_id)
            return self._view(task) if task else None

    def cancel(self, task_id: str) -> dict | None:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return None
            if self._view(task)["status"]["state"] != "TASK_STATE_COMPLETED":
                task["state"] = "TASK_STATE_CANCELED"
            return self._view(task)

    def in_context(self, context_id: str) -> list[dict]:
        with self._lock:
            return [self._view(t) for t in self._tasks.values() if t["contextId"] == context_id]

    def _view(self, task: dict) -> dict:
        if task["state"] == "TASK_STATE_WORKING" and time.monotonic() - task["started"] >= self.work_seconds:
            task["state"] = "TASK_STATE_COMPLETED"
        view = {"id": task["id"], "contextId": task["contextId"], "history": task["history"],
                "status": {"state": task["state"]}}
        if task["state"] == "TASK_STATE_COMPLETED":
            words = task["text"].split()
            summary = " ".join(words[:12]) + (" ..." if len(words) > 12 else "")
            view["artifacts"] = [{"artifactId": "summary", "parts": [{"text": (
                f"Summary ({len(words)} words, after {self.work_seconds:g} s of work): {summary}")}]}]
        elif task["state"] == "TASK_STATE_WORKING":
            view["status"]["message"] = {"role": "ROLE_AGENT", "messageId": f"{task['id']}-status",
                                         "parts": [{"text": "working on it"}]}
        return view


class _Pusher:
    """Posts each task, once its work is done, to its send's push URL with its token (one attempt).
    PUSHING_THREADS threads post them, in the order they are due, each over kept-alive connections of its
    own, as a peer's HTTP client keeps a few (a thread and a new connection for every push cost the agent
    and the receiving sidecar more than the push itself; one thread for all of them, waiting for each
    answer in turn, posted them 40 ms late (p50) once 180 tasks a second completed). A connection the
    receiver has closed meanwhile is opened again for the same push."""

    def __init__(self, tasks: "_Tasks"):
        self._tasks = tasks
        self._due: list[tuple[float, int, str, dict]] = []  # a heap: (due, order, task id, push config)
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._stopped = False

    def post_at(self, due: float, task_id: str, push: dict) -> None:
        """Post the task at `due` (time.monotonic)."""
        with self._changed:
            heapq.heappush(self._due, (due, next(self._order), task_id, push))
            if not self._threads and not self._stopped:
                self._threads = [threading.Thread(target=self._run, name=f"demo-agent-pushes-{n}", daemon=True)
                                 for n in range(PUSHING_THREADS)]
                for thread in self._threads:
                    thread.start()
            self._changed.notify()

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        deadline = time.monotonic() + PUSH_TIMEOUT_SECONDS * 2 + 1  # one push's two attempts, for all the threads
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _run(self) -> None:
        connections: dict[tuple[str, int], http.client.HTTPConnection] = {}  # this thread's
        try:
            while True:
                with self._changed:
                    while not self._stopped and (not self._due or self._due[0][0] > time.monotonic()):
                        self._changed.wait(self._due[0][0] - time.monotonic() if self._due else None)
                    if self._stopped:
                        return
                    _, _, task_id, push = heapq.heappop(self._due)
                self._post(connections, task_id, push)
        finally:
            for connection in connections.values():
                connection.close()

    def _post(self, connections: dict, task_id: str, push: dict) -> None:
        target = urlsplit(push["url"])
        path = (target.path or "/") + (f"?{target.query}" if target.query else "")
        body = json.dumps({"task": self._tasks.get(task_id)}).encode("utf-8")
        headers = {"Content-Type": "application/json", TOKEN_HEADER: push["token"]}
        address = (target.hostname, target.port or 80)
        for attempt in (1, 2):
            connection = connections.get(address)
            kept = connection is not None
            if connection is None:
                connection = connections[address] = http.client.HTTPConnection(*address, timeout=PUSH_TIMEOUT_SECONDS)
            try:
                connection.request("POST", path, body=body, headers=headers)
                connection.getresponse().read()
                return
            except (OSError, http.client.HTTPException, ValueError) as exc:  # ValueError: a token unfit for a header
                connection.close()
                del connections[address]
                if not (kept and attempt == 1 and isinstance(exc, ConnectionError)):
                    log.info("demo agent: the push for task %s failed: %s", task_id, exc)
                    return


def _card(base_url: str) -> dict:
    return {
        "name": "nr-llm demo agent",
        "description": "Summarises the message it is sent, after a few seconds of pretended work.",
        "version": "1.0.0",
        "supportedInterfaces": [{"url": base_url + "/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": False, "pushNotifications": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "summarize", "name": "Summarize", "description": "Summarises a text.", "tags": ["demo"]}],
    }


def _push_config(params: dict) -> dict | None | bool:
    """The send's push URL and token: None when it asks for no push, False when it names a URL the agent
    does not post to."""
    configuration = params.get("configuration")
    config = configuration.get("taskPushNotificationConfig") if isinstance(configuration, dict) else None
    if config is None:
        return None
    url, token = (config.get("url"), config.get("token")) if isinstance(config, dict) else (None, None)
    if not (isinstance(url, str) and isinstance(token, str) and len(url) <= 2048):
        return False
    try:
        target = urlsplit(url)
        target.port  # noqa: B018 - raises on a port that is no number
    except ValueError:
        return False
    if target.scheme != "http" or target.hostname not in LOOPBACK_HOSTS:
        return False
    return {"url": url, "token": token}


def _handler(tasks: _Tasks, base_url: str):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # every answer has its length: the sidecar keeps its polls' connection
        disable_nagle_algorithm = True  # the body, written after the headers, is not held back for their ACK

        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            log.debug("demo agent: " + format, *args)

        def _answer(self, status: int, document: dict) -> None:
            body = json.dumps(document).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path == CARD_PATH:
                self._answer(200, _card(base_url))
            else:
                self._answer(404, {"error": "not found"})

        def do_POST(self):  # noqa: N802 - http.server's name
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_REQUEST_BYTES:
                self.close_connection = True  # the unread body must not be taken for the next request
                self._answer(413, {"error": "request too large"})
                return
            try:
                request = json.loads(self.rfile.read(length))
                if not isinstance(request, dict) or not isinstance(request.get("params"), dict):
                    raise ValueError("not a JSON-RPC request")
            except ValueError:
                self._answer(400, {"jsonrpc": "2.0", "id": None,
                                   "error": {"code": INVALID_REQUEST, "message": "invalid request"}})
                return
            result, error = self._call(request["method"], request["params"])
            reply = {"jsonrpc": "2.0", "id": request.get("id")}
            reply.update({"error": error} if error else {"result": result})
            self._answer(200, reply)

        def _call(self, method, params: dict) -> tuple[dict | None, dict | None]:
            not_found = {"code": TASK_NOT_FOUND, "message": "task not found"}
            if method == "SendMessage" and isinstance(params.get("message"), dict):
                push = _push_config(params)
                if push is False:
                    return None, {"code": INVALID_PARAMS, "message": "pushes go to an http URL on a loopback address"}
                return {"task": tasks.send(params["message"], push)}, None
            if method == "GetTask":
                task = tasks.get(str(params.get("id")))
                return (task, None) if task else (None, not_found)
            if method == "CancelTask":
                task = tasks.cancel(str(params.get("id")))
                if task is None:
                    return None, not_found
                if task["status"]["state"] != "TASK_STATE_CANCELED":
                    return None, {"code": TASK_NOT_CANCELABLE, "message": "the task is already finished"}
                return task, None
            if method == "ListTasks":
                return {"tasks": tasks.in_context(str(params.get("contextId"))), "nextPageToken": ""}, None
            return None, {"code": METHOD_NOT_FOUND, "message": f"method not found: {method}"}

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Every send comes on a new connection: a burst of them overflowed the standard library's backlog of 5,
    # and a connection refused that way is tried again by the client's kernel only a second later.
    request_queue_size = 128


class DemoAgent:
    """The server and its thread: start() listens on 127.0.0.1 (a free port), stop() ends it."""

    def __init__(self, *, work_seconds: float = DEFAULT_WORK_SECONDS, host: str = "127.0.0.1"):
        self.work_seconds = work_seconds
        self._server = _Server((host, 0), BaseHTTPRequestHandler)
        self.url = f"http://{host}:{self._server.server_port}"
        self._tasks = _Tasks(work_seconds)
        self._server.RequestHandlerClass = _handler(self._tasks, self.url)
        self._thread = threading.Thread(target=self._server.serve_forever, name="demo-agent", daemon=True)

    def start(self) -> "DemoAgent":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._tasks.pusher.stop()
