"""Server-sent event clients for the endpoints that answer with a stream: one stream over http.client
(`EventStream`), and many held open at once over raw non-blocking sockets from one thread (`StreamCrowd`,
for tests and bench)."""

import http.client
import json
import selectors
import socket
import time
from urllib.parse import urlparse


class EventStream:
    """Send one request with `Accept: text/event-stream`; iterate the answer's (id, event, data) messages."""

    def __init__(self, base_url: str, method: str, path: str, headers: dict, body: dict | None = None):
        url = urlparse(base_url)
        self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        self.conn.connect()
        self.sock = self.conn.sock  # the response takes it over; kept to cut the connection at will
        headers = {**headers, "Accept": "text/event-stream"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.content_type = self.response.getheader("Content-Type", "")

    def __iter__(self):
        fields: dict[str, str] = {}
        while True:
            line = self.response.readline()
            if not line:
                return  # the server ended the stream
            line = line.decode().rstrip("\n")
            if line == "":
                if "event" in fields:
                    yield fields.get("id"), fields["event"], json.loads(fields["data"])
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value

    def close(self):
        """Cut the connection, as a browser tab that goes away does, without reading to the end."""
        self.sock.shutdown(socket.SHUT_RDWR)
        self.response.close()


class StreamCrowd:
    """Streams of a server; each counts as open once its answer's head and first line arrived."""

    def __init__(self, port: int, headers: dict):
        self.port = port
        self.extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self.sockets: list[socket.socket] = []
        self.received: dict[socket.socket, bytes] = {}

    def open(self, paths: list[str], batch: int = 100, timeout: float = 60) -> None:
        """Open a stream of each path, `batch` at a time (a burst beyond it only measures the burst)."""
        for start in range(0, len(paths), batch):
            opened = []
            for path in paths[start:start + batch]:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n{self.extra}\r\n"
                             .encode())
                sock.setblocking(False)
                self.sockets.append(sock)
                self.received[sock] = b""
                opened.append(sock)
            self._wait_open(opened, timeout)

    def _wait_open(self, sockets: list[socket.socket], timeout: float) -> None:
        """Until every stream answered 200 and sent its first message; AssertionError otherwise."""
        selector = selectors.DefaultSelector()
        pending = set(sockets)
        for sock in pending:
            selector.register(sock, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        try:
            while pending:
                assert time.monotonic() < deadline, f"{len(pending)} of {len(sockets)} streams did not open"
                for key, _ in selector.select(1.0):
                    sock = key.fileobj
                    chunk = sock.recv(65536)
                    self.received[sock] += chunk
                    if not chunk or b"retry:" in self.received[sock]:
                        head = self.received[sock].split(b"\r\n", 1)[0]
                        assert b" 200 " in head, self.received[sock][:300]
                        pending.discard(sock)
                        selector.unregister(sock)
        finally:
            selector.close()

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
