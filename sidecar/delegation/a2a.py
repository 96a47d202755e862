"""The A2A client: reads agent cards and speaks JSON-RPC (1.0, or the 0.3 dialect) over http.client's
connections, kept alive per address for reads.

Every connection is guarded (address_guard, before connecting and again on the connected socket),
redirects are not followed, each call has a timeout and a limit on the answer's size, and environment
proxies are ignored (the guard must see the address it really talks to).

Reads (GetTask, ListTasks) keep their connections alive in a pool per agent's address, so a poll does not
pay a new connection; the guard still checks every new one. A send and a CancelTask (whose attempts are
counted) take a fresh connection each: see _exchange.

What a failed send means is the point of this module: a send is `not_delivered` only when no byte of
the request was handed to a socket (the guard refused, the name did not resolve, the connection was
refused or timed out). The connection class records the moment the request starts to be written, so
this is known, not guessed from exception types. Every failure after that moment is `outcome_unknown`:
the peer may have created the task, and only reconciliation (ListTasks by contextId) can tell.
"""

import collections
import contextlib
import contextvars
import functools
import http.client
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass, replace
from urllib.parse import urljoin, urlsplit

import requests.certs

from sidecar import __version__
from sidecar.application import current
from sidecar.delegation.address_guard import AddressRefused, AllowList, check_connected, check_url, parse_url
from sidecar.delegation.types import UNSUPPORTED_OPERATION, AgentEndpoint, RemoteError, SendResult, TaskView
from sidecar.domain import push_tokens
from sidecar.domain.text import storable_json

DEFAULT_MAX_BYTES = 1024 * 1024
CARD_PATH = "/.well-known/agent-card.json"
INTERNAL_ERROR = -32603
_METHODS = {
    "1.0": {"send": "SendMessage", "get": "GetTask", "cancel": "CancelTask", "list": "ListTasks"},
    "0.3": {"send": "message/send", "get": "tasks/get", "cancel": "tasks/cancel"},
}
_DIALECT_OF_SEND = {"SendMessage": "1.0", "message/send": "0.3"}


@dataclass(frozen=True)
class PushTarget:
    """Where the remote agent should post notifications about the task, and the token it must show."""

    url: str
    token: str


# --- guarded transport -------------------------------------------------------------------------------


@dataclass
class _Call:
    allow: AllowList
    url: str  # checked by the guard before each new connection is made for it
    sent: bool = False  # set just before the first byte of the request is written to the socket
    connected: bool = False  # set when the call opened a connection of its own (not one kept alive)


_CALL: contextvars.ContextVar[_Call] = contextvars.ContextVar("a2a_call")
_QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only


class _GuardedConnection:
    """http.client's connection with the guard around connecting (http.client makes every socket through
    `_create_connection`, before TLS is negotiated on it), and the moment the request starts to be written."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._create_connection = self._guarded_connection

    def _guarded_connection(self, address, timeout, source_address=None):
        # The name is resolved and checked before connecting (a kept-alive connection was checked when it was
        # made, so a read on one resolves nothing); then the address the socket really reached is checked.
        call = _CALL.get()
        check_url(call.url, call.allow)
        sock = socket.create_connection(address, timeout, source_address)
        try:
            check_connected(self.host, sock.getpeername()[0], call.allow)
        except AddressRefused:
            sock.close()
            raise
        call.connected = True
        return sock

    def send(self, data):
        # http.client connects lazily inside its first send; connecting writes nothing of the request.
        if self.sock is None:
            self.connect()
        _CALL.get().sent = True
        return super().send(data)

    def getresponse(self):
        # Acknowledge the answer's first segment at once. A peer that writes its headers and its body in two
        # sends with Nagle's algorithm on (uvicorn under the a2a-sdk, http.server) holds the body back until
        # that acknowledgement, which Linux delays by 40 ms on a kept-alive connection: every poll took 44 ms
        # instead of 1. Linux ends the quick mode by itself, so it is asked for before each answer.
        if _QUICKACK is not None and self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        return super().getresponse()


class _GuardedHTTPConnection(_GuardedConnection, http.client.HTTPConnection):
    pass


class _GuardedHTTPSConnection(_GuardedConnection, http.client.HTTPSConnection):
    pass


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """Certificates checked against the bundle requests uses (certifi's), whatever the environment says."""
    return ssl.create_default_context(cafile=requests.certs.where())


class _Failed(Exception):
    """A call that got no usable answer; `sent` says whether any of the request may have left."""

    def __init__(self, message: str, sent: bool, on_kept_alive: bool = False):
        super().__init__(message)
        self.sent = sent
        self.on_kept_alive = on_kept_alive


@dataclass(frozen=True)
class _Answer:
    status: int
    data: bytes


_KEPT_ALIVE_PER_ADDRESS = 16  # connections a route keeps (more may be open at once; the extra ones are closed)
_CHUNK_BYTES = 64 * 1024  # an answer is read in pieces of at most this, its size and deadline checked between


class _Route:
    """The connections to one address (scheme, host, port) under one allow-list: reads keep theirs alive here,
    the most recently used first (the likeliest to be open still)."""

    def __init__(self, scheme: str, host: str, port: int | None):
        self.host, self.port = host, port
        self.https = scheme == "https"
        self._idle: collections.deque = collections.deque()
        self._lock = threading.Lock()

    def connection(self, timeout: float, *, kept_alive: bool):
        if kept_alive:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is not None:
                connection.timeout = timeout
                connection.sock.settimeout(timeout)
                return connection
        if self.https:
            return _GuardedHTTPSConnection(self.host, self.port, timeout=timeout, context=_tls_context())
        return _GuardedHTTPConnection(self.host, self.port, timeout=timeout)

    def keep(self, connection) -> None:
        with self._lock:
            if len(self._idle) < _KEPT_ALIVE_PER_ADDRESS:
                self._idle.append(connection)
                return
        connection.close()


def _route(url: str, allow: AllowList) -> _Route:
    """The route to this URL's address with this allow-list (a connection kept for one allow-list is never
    lent under another), made once per application."""
    parts = urlsplit(url)
    key = (parts.scheme, parts.netloc, frozenset(allow.names), tuple(allow.networks))
    app = current()  # its routes: another application's allow-list and connections are its own
    with app.lock:
        route = app.remote_routes.get(key)
        if route is None:
            route = app.remote_routes[key] = _Route(parts.scheme, parts.hostname, parts.port)
        return route


def _exchange(method: str, url: str, *, body: bytes | None, headers: dict, allow: AllowList, timeout: float,
              max_bytes: int, keep_alive: bool = False) -> _Answer:
    """One HTTP exchange. Connecting, waiting for the answer to begin, and reading all of it each get
    `timeout`: against a peer that trickles its answer a call ends within about three timeouts.
    AddressRefused (always raised before anything is sent) passes through; every other failure is a _Failed.

    Without `keep_alive` the exchange has a fresh connection of its own: a kept-alive one may have been
    closed by the peer, and a send on it would turn a request that never arrived into an unknown outcome.
    With `keep_alive` (a read: asking again changes nothing) the connection may be one the address's route
    kept, and a kept-alive connection that fails is given one more try on a new connection."""
    try:
        return _exchange_once(method, url, body=body, headers=headers, allow=allow, timeout=timeout,
                              max_bytes=max_bytes, keep_alive=keep_alive)
    except _Failed as exc:
        if not (keep_alive and exc.on_kept_alive):
            raise
    return _exchange_once(method, url, body=body, headers=headers, allow=allow, timeout=timeout,
                          max_bytes=max_bytes, keep_alive=False)


def _exchange_once(method: str, url: str, *, body: bytes | None, headers: dict, allow: AllowList, timeout: float,
                   max_bytes: int, keep_alive: bool) -> _Answer:
    call = _Call(allow, url)
    token = _CALL.set(call)
    connection = None
    try:
        parse_url(url)  # an http or https URL with a host, or AddressRefused before anything else
        route = _route(url, allow)
        connection = route.connection(timeout, kept_alive=keep_alive)
        connection.request(method, _path_of(url), body=body, headers={**_DEFAULT_HEADERS, **headers})
        response = connection.getresponse()
        deadline = time.monotonic() + timeout
        if int(response.getheader("Content-Length") or 0) > max_bytes:
            raise _Failed(f"the answer is larger than {max_bytes} bytes", sent=True)
        data = bytearray()
        while chunk := response.read(_CHUNK_BYTES):
            data += chunk
            if len(data) > max_bytes:
                raise _Failed(f"the answer is larger than {max_bytes} bytes", sent=True)
            if time.monotonic() > deadline:
                raise _Failed(f"the answer took longer than {timeout:g}s", sent=True)
        if keep_alive and not response.will_close:
            route.keep(connection)
            connection = None
        return _Answer(response.status, bytes(data))
    except (OSError, http.client.HTTPException, ValueError) as exc:
        # A broken connection (not a timeout) that this call did not open: the peer had closed it while it was
        # kept alive.
        stale = isinstance(exc, (ConnectionError, http.client.HTTPException)) and not isinstance(exc, TimeoutError)
        raise _Failed(_describe(exc, timeout, call), sent=call.sent,
                      on_kept_alive=stale and not call.connected) from None
    finally:
        if connection is not None:
            connection.close()  # never handed back for another call
        _CALL.reset(token)


# Sent with every request; the call's own headers win. http.client adds `Accept-Encoding: identity`: no
# compression is asked for, so the answer is read as it comes, within the size limit, and nothing is unpacked.
_DEFAULT_HEADERS = {"User-Agent": f"nrllm-sidecar/{__version__}"}


def _path_of(url: str) -> str:
    """What the request line names: the URL's path and query."""
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _describe(exc: Exception, timeout: float, call: _Call) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g}s" if call.sent else f"connecting timed out after {timeout:g}s"
    if isinstance(exc, (ConnectionError, http.client.IncompleteRead, http.client.BadStatusLine)) and call.sent:
        return f"the connection broke: {str(exc) or repr(exc)}"  # an exception is never falsy: test its text
    if isinstance(exc, OSError) and exc.strerror:
        return str(exc) if exc.errno else exc.strerror  # "[Errno 111] Connection refused"; no "[Errno None]"
    return f"{type(exc).__name__}: {exc}"


# --- JSON-RPC answers --------------------------------------------------------------------------------


class _Malformed(Exception):
    pass


@dataclass(frozen=True)
class _Reply:
    result: object = None
    error_code: int | None = None
    error_message: str | None = None

    @property
    def is_error(self) -> bool:
        return self.error_message is not None


def _reply(answer: _Answer, request_id: str) -> _Reply:
    """The JSON-RPC reply in an answer, or _Malformed. An error reply counts whatever the HTTP status
    (peers differ), a result only with 2xx and our id."""
    if 300 <= answer.status < 400:
        raise _Malformed(f"HTTP {answer.status}: redirects are not followed")
    try:
        doc = storable_json(answer.data)
    except ValueError:
        raise _Malformed(f"HTTP {answer.status}: the answer is not JSON") from None
    if not isinstance(doc, dict) or doc.get("jsonrpc") != "2.0":
        raise _Malformed(f"HTTP {answer.status}: the answer is not a JSON-RPC reply")
    error = doc.get("error")
    if isinstance(error, dict) and isinstance(error.get("code"), int) and doc.get("id") in (request_id, None):
        return _Reply(error_code=error["code"], error_message=str(error.get("message") or "error"))
    if "result" in doc and 200 <= answer.status < 300 and doc.get("id") == request_id:
        return _Reply(result=doc["result"])
    raise _Malformed(f"HTTP {answer.status}: the answer is not a JSON-RPC reply to this request")


# --- task views --------------------------------------------------------------------------------------


def _texts(parts) -> list[str]:
    return [p["text"] for p in parts or () if isinstance(p, dict) and isinstance(p.get("text"), str)]


def normalise_state(raw) -> str:
    """TASK_STATE_INPUT_REQUIRED (1.0) and input-required (0.3) are both "input-required"."""
    state = str(raw or "").lower().removeprefix("task_state_").replace("_", "-")
    state = {"cancelled": "canceled", "unspecified": "unknown"}.get(state, state)
    return state if state in {"submitted", "working", "completed", "failed", "canceled", "rejected",
                              "input-required", "auth-required"} else "unknown"


def task_view(task) -> TaskView:
    """A task in either dialect as a TaskView; ValueError when it is not a task."""
    if not isinstance(task, dict) or not isinstance(task.get("id"), str) or not isinstance(task.get("status"), dict):
        raise ValueError("not an A2A task")
    status = task["status"]
    status_text = "\n".join(_texts((status.get("message") or {}).get("parts")))
    artifacts = [t for a in task.get("artifacts") or () if isinstance(a, dict) for t in _texts(a.get("parts"))]
    sent = [m.get("messageId") for m in task.get("history") or ()
            if isinstance(m, dict) and m.get("role") in ("ROLE_USER", "user") and isinstance(m.get("messageId"), str)]
    return TaskView(
        id=task["id"], context_id=task.get("contextId"), state=normalise_state(status.get("state")),
        text="\n".join(artifacts) if artifacts else status_text, status_text=status_text, message_ids=tuple(sent),
    )


def _send_result(result, size: int) -> SendResult:
    """SendMessage answers {"task": ...} or {"message": ...}; message/send (0.3) answers the object itself."""
    if isinstance(result, dict):
        if "task" in result or "message" in result:
            task, message = result.get("task"), result.get("message")
        else:
            is_task = result.get("kind") == "task" or "status" in result
            task, message = (result, None) if is_task else (None, result)
        if task is not None:
            return SendResult("accepted", task=task_view(task), bytes_received=size)
        if isinstance(message, dict) and isinstance(message.get("parts"), list):
            return SendResult("accepted", message_text="\n".join(_texts(message["parts"])), bytes_received=size)
    raise ValueError("the result is neither a task nor a message")


# --- the agent card ----------------------------------------------------------------------------------


def _version(raw) -> str | None:
    """The dialect a protocolVersion speaks: 1.x is "1.0", 0.x is "0.3" (0.2 peers use the same methods)."""
    major = str(raw or "0.3").strip().split(".")[0]
    return {"1": "1.0", "0": "0.3"}.get(major)


def _pick_interface(card: dict, card_url: str) -> tuple[str, str]:
    """The JSON-RPC endpoint and its dialect: the 1.0 one when a card offers both."""
    offers: list[tuple[str, str]] = []
    interfaces = card.get("supportedInterfaces")
    if isinstance(interfaces, list) and interfaces:
        # A 1.x card. An sdk card also carries the 0.3 fields (url, preferredTransport) for old clients;
        # supportedInterfaces is the complete list, so the 0.3 fields are ignored. A missing version is
        # 0.3, as the a2a-sdk reads it.
        for i in interfaces:
            if isinstance(i, dict) and i.get("protocolBinding") == "JSONRPC" and isinstance(i.get("url"), str):
                offers.append((i["url"], _version(i.get("protocolVersion"))))
    else:
        # A 0.3 card: `url` speaks preferredTransport (JSON-RPC by default), additionalInterfaces others.
        version = _version(card.get("protocolVersion"))
        if (card.get("preferredTransport") or "JSONRPC") == "JSONRPC" and isinstance(card.get("url"), str):
            offers.append((card["url"], version))
        for i in card.get("additionalInterfaces") or ():
            if isinstance(i, dict) and i.get("transport") == "JSONRPC" and isinstance(i.get("url"), str):
                offers.append((i["url"], version))
    for wanted in ("1.0", "0.3"):
        for url, version in offers:
            if version == wanted:
                return urljoin(card_url, url), version
    raise RemoteError(f"the agent card at {card_url} offers no JSON-RPC interface of protocol 1.x or 0.3")


def read_card(base_url: str, *, allow=None, timeout: float = 10.0, max_bytes: int = DEFAULT_MAX_BYTES,
              auth_header: str | None = None, auth_value: str | None = None) -> AgentEndpoint:
    """Read `<base_url>/.well-known/agent-card.json` and pick the endpoint to call. Without a card (404),
    the base URL itself is taken as a 1.0 JSON-RPC endpoint. Raises AddressRefused when the base URL or
    the card's endpoint is refused by the guard, RemoteError for any other failure."""
    allow = AllowList.of(allow)
    card_url = base_url.rstrip("/") + CARD_PATH
    headers = {"Accept": "application/json"}
    if auth_header and auth_value:
        headers[auth_header] = auth_value
    check_url(base_url, allow)
    try:
        answer = _exchange("GET", card_url, body=None, headers=headers, allow=allow, timeout=timeout,
                           max_bytes=max_bytes)
    except _Failed as exc:
        raise RemoteError(f"cannot read the agent card at {card_url}: {exc}") from None
    if answer.status in (404, 410):
        rpc_url, version, push = base_url, "1.0", False
    elif answer.status != 200:
        raise RemoteError(f"cannot read the agent card at {card_url}: HTTP {answer.status}")
    else:
        try:
            card = storable_json(answer.data)
        except ValueError:
            card = None
        if not isinstance(card, dict):
            raise RemoteError(f"the agent card at {card_url} is not a JSON object")
        rpc_url, version = _pick_interface(card, card_url)
        push = (card.get("capabilities") or {}).get("pushNotifications") is True
    check_url(rpc_url, allow)
    return AgentEndpoint(rpc_url=rpc_url, protocol_version=version, push_supported=push,
                         auth_header=auth_header, auth_value=auth_value)


# --- bodies as the journal stores them -----------------------------------------------------------------


def push_target_of(body_text: str) -> PushTarget | None:
    """The push config a journalled send body carries (a retry rebuilds the same body from it). Its token is
    masked there (domain/push_tokens.py): the journal keeps the body as sent, less the secret."""
    push = push_tokens.push_config(json.loads(body_text))
    if isinstance(push, dict) and isinstance(push.get("url"), str) and isinstance(push.get("token"), str):
        return PushTarget(push["url"], push["token"])
    return None


def journalled(body_text: str, push: PushTarget | None) -> str:
    """The body as the journal keeps it: the text that is sent, with the push token masked."""
    return push_tokens.mask(body_text, push.token) if push else body_text


def resend_body(body_text: str, message_id: str, push_token: str | None = None) -> str:
    """The same send under a new message id (an operator's resend): same text, context and push URL. With
    `push_token`, the push config carries that token (the body to send); without, it keeps what the
    journalled body has (the masked one: the body to journal)."""
    request = json.loads(body_text)
    params = request["params"]
    params["message"]["messageId"] = message_id
    config = push_tokens.push_config(request)
    if config is not None and push_token is not None:
        config["token"] = push_token
        if isinstance(config.get("authentication"), dict):
            config["authentication"]["credentials"] = push_token
    return _body(message_id, request["method"], params)


def notification_task_id(notification) -> str | None:
    """The task a push notification is about: a 1.0 StreamResponse (`task`, `statusUpdate`,
    `artifactUpdate`, `message`) or the Task object a 0.3 peer posts."""
    if not isinstance(notification, dict):
        return None
    for key, field in (("task", "id"), ("statusUpdate", "taskId"), ("artifactUpdate", "taskId"),
                       ("message", "taskId")):
        inner = notification.get(key)
        if isinstance(inner, dict) and isinstance(inner.get(field), str):
            return inner[field]
    # A 0.3 status update has a `status` too: its kind first, or its own id (none) would be taken for the task's.
    if notification.get("kind") in ("status-update", "artifact-update"):
        return notification.get("taskId") if isinstance(notification.get("taskId"), str) else None
    if notification.get("kind") == "task" or "status" in notification:
        return notification.get("id") if isinstance(notification.get("id"), str) else None
    return None


def is_artifact_update(notification) -> bool:
    """Whether a push notification is an artifact update: a 1.0 StreamResponse's `artifactUpdate`, or a 0.3
    `artifact-update` event."""
    return isinstance(notification, dict) and (
        isinstance(notification.get("artifactUpdate"), dict) or notification.get("kind") == "artifact-update")


def notification_state(notification) -> str | None:
    """The task state a push notification reports (normalised), or None when it reports none: an artifact
    update or a message, or a body whose state cannot be read."""
    if not isinstance(notification, dict):
        return None
    inner = notification.get("task") or notification.get("statusUpdate")
    if not isinstance(inner, dict):
        if notification.get("kind") in ("task", "status-update") or "status" in notification:
            inner = notification  # a 0.3 Task, or a 0.3 status update, posted as it is
        else:
            return None
    status = inner.get("status")
    if not isinstance(status, dict):
        return None
    state = normalise_state(status.get("state"))
    return None if state == "unknown" else state


# --- the client --------------------------------------------------------------------------------------


def _body(request_id: str, method: str, params: dict) -> str:
    # Deterministic: the journal stores and hashes this exact text before it is sent.
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params},
                      sort_keys=True, separators=(",", ":"))


class A2AClient:
    """Calls one remote agent. `timeout` (seconds) bounds each call and must be shorter than the lease;
    every network method also takes its own. Never logs the auth header."""

    def __init__(self, endpoint: AgentEndpoint, *, allow=None, timeout: float = 10.0,
                 max_bytes: int = DEFAULT_MAX_BYTES):
        if endpoint.protocol_version not in _METHODS:
            raise ValueError(f"unsupported A2A protocol version {endpoint.protocol_version!r}")
        self.endpoint = endpoint
        self.allow = AllowList.of(allow)
        self.timeout = timeout
        self.max_bytes = max_bytes

    @property
    def dialect(self) -> str:
        return self.endpoint.protocol_version

    # Request bodies ----------------------------------------------------------------------------------

    def build_send(self, message_id: str, context_id: str, text: str, task_id: str | None = None,
                   push: PushTarget | None = None) -> str:
        """The exact body of a non-blocking send; its JSON-RPC id is the message id."""
        if self.dialect == "1.0":
            message = {"role": "ROLE_USER", "parts": [{"text": text}]}
            config: dict = {"returnImmediately": True}
            if push:
                config["taskPushNotificationConfig"] = {
                    "url": push.url, "token": push.token,
                    "authentication": {"scheme": "Bearer", "credentials": push.token}}
        else:
            message = {"kind": "message", "role": "user", "parts": [{"kind": "text", "text": text}]}
            config = {"blocking": False}
            if push:
                config["pushNotificationConfig"] = {
                    "url": push.url, "token": push.token,
                    "authentication": {"schemes": ["Bearer"], "credentials": push.token}}
        message.update(messageId=message_id, contextId=context_id)
        if task_id:
            message["taskId"] = task_id
        return _body(message_id, _METHODS[self.dialect]["send"], {"message": message, "configuration": config})

    def build_cancel(self, task_id: str) -> str:
        return _body(f"cancel-{task_id}", _METHODS[self.dialect]["cancel"], {"id": task_id})

    def send_cancel(self, body_text: str, timeout: float | None = None) -> TaskView:
        """Post exactly this cancel body (from build_cancel, as the journal stored it)."""
        return self._task(body_text, timeout)

    # Calls -------------------------------------------------------------------------------------------

    def _post(self, body_text: str, dialect: str, timeout: float | None, keep_alive: bool = False) -> _Answer:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if dialect == "1.0":
            headers["A2A-Version"] = "1.0"  # without it a 1.0 server takes the request for 0.3
        if self.endpoint.auth_header and self.endpoint.auth_value:
            headers[self.endpoint.auth_header] = self.endpoint.auth_value
        return _exchange("POST", self.endpoint.rpc_url, body=body_text.encode("utf-8"), headers=headers,
                         allow=self.allow, timeout=timeout or self.timeout, max_bytes=self.max_bytes,
                         keep_alive=keep_alive)

    def send(self, body_text: str, timeout: float | None = None) -> SendResult:
        """Post exactly this send body (from build_send, or as the journal stored it)."""
        request = json.loads(body_text)
        dialect = _DIALECT_OF_SEND.get(request.get("method"))
        if dialect is None:
            raise ValueError(f"not a send request: {request.get('method')!r}")
        try:
            answer = self._post(body_text, dialect, timeout)
        except AddressRefused as exc:
            return SendResult("not_delivered", error=str(exc))
        except _Failed as exc:
            return SendResult("outcome_unknown" if exc.sent else "not_delivered", error=str(exc))
        size = len(answer.data)
        try:
            reply = _reply(answer, request["id"])
        except _Malformed as exc:
            if 400 <= answer.status < 500:
                # The peer refused the request itself (authentication, a wrong URL, rate limits).
                error = f"HTTP {answer.status} without a JSON-RPC answer"
                return SendResult("rejected", error=error, bytes_received=size)
            return SendResult("outcome_unknown", error=str(exc), bytes_received=size)
        if reply.is_error:
            # An internal error may strike after the task was created: not a proof of a refusal.
            outcome = "outcome_unknown" if reply.error_code == INTERNAL_ERROR else "rejected"
            return SendResult(outcome, error=reply.error_message, error_code=reply.error_code, bytes_received=size)
        try:
            return _send_result(reply.result, size)
        except ValueError as exc:
            return SendResult("outcome_unknown", error=f"unreadable answer: {exc}", bytes_received=size)

    def _call(self, body_text: str, timeout: float | None, *, read: bool = False) -> tuple[object, int]:
        """The JSON-RPC result of one call, and the size of the answer that carried it. A `read` changes
        nothing on the peer, so it may go on a kept-alive connection (and be asked again on a new one)."""
        request_id = json.loads(body_text)["id"]
        try:
            answer = self._post(body_text, self.dialect, timeout, keep_alive=read)
            reply = _reply(answer, request_id)
        except (_Failed, _Malformed) as exc:
            raise RemoteError(f"remote agent at {self.endpoint.rpc_url}: {exc}") from None
        if reply.is_error:
            raise RemoteError(reply.error_message, reply.error_code)
        return reply.result, len(answer.data)

    def _task(self, body_text: str, timeout: float | None, *, read: bool = False) -> TaskView:
        result, size = self._call(body_text, timeout, read=read)
        try:
            return replace(task_view(result), bytes_received=size)
        except ValueError:
            raise RemoteError(f"remote agent at {self.endpoint.rpc_url}: the answer is not a task") from None

    def get_task(self, task_id: str, timeout: float | None = None) -> TaskView:
        return self._task(_body(f"get-{task_id}", _METHODS[self.dialect]["get"], {"id": task_id}), timeout, read=True)

    def cancel_task(self, task_id: str, timeout: float | None = None) -> TaskView:
        return self._task(self.build_cancel(task_id), timeout)

    def list_tasks(self, context_id: str, timeout: float | None = None, max_pages: int = 10) -> list[TaskView]:
        """The peer's tasks in a context (reconciliation after a lost answer). 0.3 has no ListTasks."""
        if "list" not in _METHODS[self.dialect]:
            raise RemoteError("A2A 0.3 agents have no ListTasks", UNSUPPORTED_OPERATION)
        tasks: list[TaskView] = []
        params: dict = {"contextId": context_id, "includeArtifacts": True}
        for page in range(max_pages):
            result, _ = self._call(_body(f"list-{context_id}-{page}", "ListTasks", params), timeout, read=True)
            if not isinstance(result, dict) or not isinstance(result.get("tasks", []), list):
                raise RemoteError(f"remote agent at {self.endpoint.rpc_url}: the answer is not a task list")
            try:
                tasks.extend(task_view(t) for t in result.get("tasks", []))
            except ValueError:
                raise RemoteError(f"remote agent at {self.endpoint.rpc_url}: the answer is not a task list") from None
            if not result.get("nextPageToken"):
                break
            params = {**params, "pageToken": result["nextPageToken"]}
        return tasks
