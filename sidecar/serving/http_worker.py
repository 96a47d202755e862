"""The gunicorn worker class of the sidecar: gunicorn's threaded worker, hardened (docs/security.md).

- Errors gunicorn answers itself, before the app sees a request (a malformed request line, 414, 431, 505,
  a read deadline passed), are written in the API's error shape as JSON, not gunicorn's HTML.
- Read deadlines: a request's headers must arrive within NRLLM_HEADER_TIMEOUT seconds of the worker
  starting to read them, its body within NRLLM_BODY_TIMEOUT seconds after the headers; a client that
  sends half a request and stalls gets 408 and its connection closed (gunicorn alone would keep a thread
  waiting on it for as long as the client likes).
- Stopping (SIGTERM, and the old workers of a reload) ends every event stream at once, so clients
  reconnect with Last-Event-ID to a worker that stays, instead of holding this one until the graceful
  timeout kills it.
- The streams one process accepts stay below its threads, so other requests always find a thread.
- A stopping worker writes the pushes it counted and has not written yet (store/push_counts.py).
- The thread that answered a kept-alive connection waits there for the client's next request, up to
  NRLLM_KEEPALIVE_LINGER seconds, and answers it too: gunicorn alone hands the connection back to its loop
  thread, which wakes twice more before a thread reads the next request (docs/performance.md, "The next
  request on the thread that answered the last").
- Each HTTP worker is held to a core of its own when NRLLM_CPU_PINNING says so (sidecar/affinity.py).

Operators who run gunicorn themselves can name it: `gunicorn -k sidecar.serving.http_worker.SidecarWorker`.
"""

import gc
import json
import select
import threading
import time

from gunicorn import util
from gunicorn.http import errors as http_errors
from gunicorn.http.parser import RequestParser
from gunicorn.http.unreader import SocketUnreader
from gunicorn.workers.gthread import TConn, ThreadWorker
from werkzeug.exceptions import RequestTimeout

from .. import affinity, failpoints
from ..api import event_hub, streaming
from ..api.errors import default_code, error_body
from ..application import thread
from ..config import Settings
from ..store import push_counts

# A thread waiting for a connection's next request looks this often whether its worker is stopping.
LINGER_SLICE_SECONDS = 0.05


def threads_kept_free(threads: int) -> int:
    """Threads of a worker that event streams may not take: for health checks and the other requests."""
    return min(64, max(2, threads // 4))


def threads_lingering(threads: int) -> int:
    """Threads of a worker that may wait on kept-alive connections at once: half of those kept free, so
    the other half is always there for a new connection's request."""
    return max(1, threads_kept_free(threads) // 2)


class ReadTimedOut(RequestTimeout):
    """A request did not arrive in time. A werkzeug HTTP error, so a body read in the app answers 408 too."""

    def __init__(self, what: str):
        super().__init__(f"{what} did not arrive in time; the connection is closed")


class DeadlineConn(TConn):
    """A connection whose reads of the current request stop at `read_deadline` (None: no deadline)."""

    read_deadline: float | None = None
    reading = "the request"

    def init(self):
        fresh = self.parser is None
        super().init()
        if fresh and type(self.parser) is RequestParser and type(self.parser.unreader) is SocketUnreader:
            self.parser.unreader = DeadlineUnreader(self)


class DeadlineUnreader(SocketUnreader):
    def __init__(self, conn: DeadlineConn):
        super().__init__(conn.sock)
        self.conn = conn

    def chunk(self, size_hint=None):
        deadline = self.conn.read_deadline
        if deadline is None:
            return super().chunk(size_hint)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ReadTimedOut(self.conn.reading)
        self.sock.settimeout(remaining)
        try:
            return super().chunk(size_hint)
        except TimeoutError:
            raise ReadTimedOut(self.conn.reading) from None
        finally:
            self.sock.settimeout(None)


# Errors gunicorn raises while it reads a request, and how they are answered: status, reason, message.
_ANSWERS = [
    (http_errors.LimitRequestLine, 414, "URI Too Long", "the request line is longer than this server accepts"),
    (http_errors.LimitRequestHeaders, 431, "Request Header Fields Too Large",
     "the request has more header fields, or larger ones, than this server accepts"),
    (http_errors.InvalidHTTPVersion, 505, "HTTP Version Not Supported", "this server speaks HTTP/1.0 and HTTP/1.1"),
    (http_errors.UnsupportedTransferCoding, 501, "Not Implemented", "the request's transfer coding is not supported"),
    (http_errors.ExpectationFailed, 417, "Expectation Failed", "the request's Expect header cannot be met"),
    (http_errors.ForbiddenProxyRequest, 403, "Forbidden", "the request is forbidden"),
    (ReadTimedOut, 408, "Request Timeout", None),
]
_APP_FAULTS = (http_errors.InvalidResponseHeader, http_errors.InvalidResponseHeaderName)


def error_answer(exc: Exception) -> tuple[int, str, str]:
    """(status, reason, message) of the answer to an error raised while serving a connection."""
    if isinstance(exc, _APP_FAULTS):
        return 500, "Internal Server Error", "the sidecar failed to answer; see its log"
    for kind, status, reason, message in _ANSWERS:
        if isinstance(exc, kind):
            return status, reason, message or str(exc.description)
    if isinstance(exc, http_errors.ParseException):
        return 400, "Bad Request", "the request is not valid HTTP/1.1"
    return 500, "Internal Server Error", "the sidecar failed to answer; see its log"


def raw_error(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP answer in the API's error shape, for a connection the app never saw."""
    body = json.dumps(error_body(status, default_code(status, reason), message)).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n\r\n")
    return head.encode("latin-1") + body


class SidecarWorker(ThreadWorker):
    def init_process(self):
        settings = Settings.from_env()
        self.header_timeout = settings.header_timeout
        self.body_timeout = settings.body_timeout
        self.linger_seconds = min(settings.keepalive_linger, self.cfg.keepalive)  # never past the keep-alive timeout
        self.linger_slots = threading.BoundedSemaphore(threads_lingering(self.cfg.threads))
        streaming.SLOTS.thread_bound = max(1, self.cfg.threads - threads_kept_free(self.cfg.threads))
        # One core for each HTTP worker, in the order they were started (sidecar/affinity.py). Forked from the
        # arbiter, which is not held: the cores it may use are the sidecar's.
        core = affinity.core_of(self.age - 1, affinity.cores_for_group(
            self.cfg.workers, settings.cpu_pinning, affinity.usable_cores()))
        if core is not None:
            affinity.pin(core)
        failpoints.stall("http_worker.boot")  # before gunicorn installs this worker's signal handlers
        super().init_process()

    def load_wsgi(self):
        super().load_wsgi()
        # What the app has built so far (about 70,000 objects) lives as long as the process. Frozen, the
        # collector no longer walks it: a full collection took 10 to 30 ms, a pause every request in flight
        # waited out, and now takes next to nothing.
        gc.freeze()

    def run(self):
        try:
            super().run()  # returns once the requests in flight have ended (or the graceful timeout passed)
        finally:
            application = getattr(self.wsgi, "extensions", {}).get("nrllm_application")
            if application is not None:
                application.run(push_counts.flush)

    def enqueue_req(self, conn):
        if type(conn) is TConn:
            conn.__class__ = DeadlineConn  # gthread makes plain connections; this one also keeps deadlines
        super().enqueue_req(conn)

    def handle(self, conn):
        keep = self._handle_one(conn)
        # A client that keeps its connection sends its next request soon (a peer its next push, a host its
        # next call): answered by this thread, it skips the loop thread's two wake-ups and the hand-over
        # to a pool thread, about a third of what a small request costs the server.
        while keep is True and self.alive and self._next_request_arrives(conn):
            keep = self._handle_one(conn)
        return keep

    def _handle_one(self, conn):
        conn.read_deadline = time.monotonic() + self.header_timeout
        conn.reading = "the request's line and headers"
        return super().handle(conn)

    def _next_request_arrives(self, conn) -> bool:
        """Whether the connection's next request has come (its first bytes are readable) within the linger.
        False at once when lingering is off or as many threads as may linger already do."""
        if conn.parser.unreader.buf.getvalue():
            return True  # the last body's drain read into it already
        if self.linger_seconds <= 0 or not self.linger_slots.acquire(blocking=False):
            return False
        try:
            poller = select.poll()  # not select.select: descriptors above 1023 are common with many streams
            poller.register(conn.sock, select.POLLIN)
            deadline = time.monotonic() + self.linger_seconds
            while self.alive and (left := deadline - time.monotonic()) > 0:
                if poller.poll(min(left, LINGER_SLICE_SECONDS) * 1000):
                    return True  # a request, or the client closed: either way the parser says which
            return False
        finally:
            self.linger_slots.release()

    def handle_request(self, req, conn):
        conn.read_deadline = time.monotonic() + self.body_timeout
        conn.reading = "the request's body"
        try:
            return super().handle_request(req, conn)
        finally:
            conn.read_deadline = None  # the answer is written; draining the rest of a body has its own bound

    def handle_exit(self, sig, frame):
        if self.alive:  # the arbiter may say it more than once (SidecarArbiter.reap_workers)
            # Off the signal handler: closing waits for the feed's listener to stop.
            thread(event_hub.close, name="end-streams").start()
        super().handle_exit(sig, frame)

    def handle_error(self, req, client, addr, exc):
        status, reason, message = error_answer(exc)
        ip = (addr or ("",))[0]
        if status == 500:
            self.log.exception("Error handling request from ip=%s", ip)
        else:
            self.log.warning("Invalid request from ip=%s: %s", ip, exc)
        try:
            util.write_nonblock(client, raw_error(status, reason, message))
        except Exception:
            self.log.debug("Failed to send error message.")
