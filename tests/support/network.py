"""Network misbehaviour for the delegation tests, on 127.0.0.1 with real sockets.

LossyProxy forwards each request to an upstream A2A peer, waits for the peer's whole answer, and then, for
the JSON-RPC methods in `drop`, closes the connection without answering: the peer did the work, the
caller never hears of it (a lost answer). Other requests are relayed; card URLs are rewritten to point at
the proxy, so a client that reads the card through the proxy keeps talking through it. `drop_while` drops
a method's answers while a condition holds (until a deadline, for the first N requests). `before_answering`
runs a test's step in the window between the peer's answer and the caller's. `rewrite` changes each answer's
bytes on the way (to send what the peer itself could not, such as an unpaired surrogate escape).

FaultyProxy (the chaos suite's) adds faults that come and go: while a fault kind is switched on, each
request gets it with its probability. `500` answers an HTTP 500, `close` closes the connection without an
answer, `json` answers 200 with a body that is not JSON (none of these three reaches the peer); `hang`
forwards the request and holds the answer `hang_seconds` (past the caller's timeout) before closing;
`lose` forwards it and drops the answer, as `drop` does.

SilentServer accepts connections, reads what is sent, and never answers (a read timeout). CannedServer
answers every request with the same raw bytes (a 5xx, a redirect, truncated JSON, a reset).
"""

import collections
import http.client
import json
import random
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"host", "connection", "keep-alive", "transfer-encoding", "content-length"}


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_ProxyServer"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def do_GET(self):
        self._forward(b"")

    def do_POST(self):
        self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _forward(self, body: bytes) -> None:
        proxy = self.server.proxy
        try:
            method = json.loads(body).get("method") if body else None
        except (ValueError, AttributeError):
            method = None
        fault = proxy.fault_for(method)
        if fault in _UNFORWARDED:
            self._answer_without_peer(fault)
            return
        upstream = urlsplit(proxy.upstream)
        conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            conn.request(self.command, self.path, body=body or None, headers=headers)
            answer = conn.getresponse()
            data = answer.read()
        except OSError:
            # The peer is down (restarting): answered as a reverse proxy would, after the request arrived.
            self._answer_without_peer("502")
            return
        finally:
            conn.close()
        with proxy.lock:
            proxy.forwarded[method] += 1
            lose = fault == "lose" or method in proxy.drop or bool((still := proxy.drop_while.get(method)) and still())
            if lose:
                proxy.dropped += 1
        if (meanwhile := proxy.before_answering.get(method)) is not None:
            meanwhile()  # the peer has answered; the caller has not heard yet
        if fault == "hang":
            time.sleep(proxy.hang_seconds)  # the peer has acted; the caller gives up waiting meanwhile
        if lose or fault == "hang":
            # The peer has acted on the request; the caller gets a closed connection and no answer.
            self.close_connection = True
            return
        if self.command == "GET":
            data = data.replace(proxy.upstream.encode(), proxy.url.encode())
        data = proxy.rewrite(data)
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in _HOP_BY_HOP and name.lower() != "etag":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _answer_without_peer(self, fault: str) -> None:
        if fault == "close":
            self.close_connection = True
            return
        status, data = {"500": (500, b"Internal Server Error"), "502": (502, b"Bad Gateway")}.get(
            fault, (200, b'{"jsonrpc": "2.0", "res'))
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if fault == "json" else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    proxy: "LossyProxy"

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a caller that hung up (or was killed) is normal
            super().handle_error(request, client_address)


class LossyProxy:
    def __init__(self, upstream: str, drop=("SendMessage", "message/send"), rewrite=lambda data: data):
        self.upstream = upstream.rstrip("/")
        self.drop = set(drop)
        self.rewrite = rewrite
        # JSON-RPC method -> a callable asked at each request: its answer is dropped while it returns True.
        self.drop_while: dict = {}
        self.dropped = 0
        self.forwarded: collections.Counter = collections.Counter()  # JSON-RPC method -> requests
        # JSON-RPC method -> a callable run after the peer answered and before the caller hears the answer.
        self.before_answering: dict = {}
        self.lock = threading.Lock()
        self._server: _ProxyServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> "LossyProxy":
        self._server = _ProxyServer(("127.0.0.1", 0), _ProxyHandler)
        self._server.proxy = self
        threading.Thread(target=self._server.serve_forever, daemon=True, name="lossy-proxy").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def fault_for(self, method: str | None) -> str | None:
        """The fault this request gets (None: relayed as it is); `drop` is applied after forwarding."""
        return None


class FaultyProxy(LossyProxy):
    """A LossyProxy whose faults are switched on and off while it runs (see the module's docstring)."""

    KINDS = ("500", "close", "json", "hang", "lose")

    def __init__(self, upstream: str, *, seed: int = 0, hang_seconds: float = 5.0):
        super().__init__(upstream, drop=())
        self.hang_seconds = hang_seconds
        self.injected: collections.Counter = collections.Counter()  # fault kind -> requests that got it
        self._on: dict[str, float] = {}  # fault kind -> probability, while switched on
        self._random = random.Random(seed)

    def switch_on(self, kind: str, probability: float = 1.0) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"unknown fault {kind!r} (known: {', '.join(self.KINDS)})")
        with self.lock:
            self._on[kind] = probability

    def switch_off(self, kind: str | None = None) -> None:
        """Switch one fault kind off, or every one."""
        with self.lock:
            if kind is None:
                self._on.clear()
            else:
                self._on.pop(kind, None)

    def fault_for(self, method: str | None) -> str | None:
        with self.lock:
            for kind, probability in self._on.items():
                if self._random.random() < probability:
                    self.injected[kind] += 1
                    return kind
        return None


_UNFORWARDED = ("500", "close", "json")


class SilentServer:
    """Accepts, reads and never answers; `received` holds what arrived, to show a request did leave."""

    def __init__(self):
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._conns: list[socket.socket] = []
        self.received = b""
        self.connections_ended = 0  # read to their end: all a closed connection sent is in `received`
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="silent-server").start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        try:
            while chunk := conn.recv(65536):
                self.received += chunk
        except OSError:
            pass
        self.connections_ended += 1

    def stop(self) -> None:
        self._stopped.set()
        self._listener.close()
        for conn in self._conns:
            conn.close()

    def __enter__(self) -> "SilentServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class CannedServer:
    """Answers every request with the same raw bytes (any status, a broken body, a redirect), then closes
    the connection, or resets it when `reset` is set. `requests` holds each request as received."""

    def __init__(self, answer: bytes, reset: bool = False):
        self.answer = answer
        self.reset = reset
        self.requests: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._serve, daemon=True, name="canned-server").start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with conn:
                self.requests.append(read_message(conn))
                conn.sendall(self.answer)
                if self.reset:
                    # SO_LINGER 0: close() sends a RST instead of a FIN.
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def stop(self) -> None:
        self._listener.close()

    def __enter__(self) -> "CannedServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def read_message(conn: socket.socket) -> bytes:
    """One HTTP/1.1 message from the socket, a request or an answer: its head and the body its Content-Length
    gives (what has come when the other side closes sooner). The connection stays open for the next one."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def http_answer(status: int, body: bytes | str, content_type: str = "application/json", **headers) -> bytes:
    """A raw HTTP/1.1 answer for CannedServer; Content-Length is the body's unless given."""
    body = body.encode() if isinstance(body, str) else body
    fields = {"Content-Type": content_type, "Content-Length": str(len(body)), "Connection": "close"}
    fields.update({k.replace("_", "-"): v for k, v in headers.items()})
    head = f"HTTP/1.1 {status} X\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    return head.encode() + b"\r\n" + body
