"""Server-sent events of a run, fed by the process's event hub (event_hub.py), within the stream limits.

The table stays the truth: a stream reads its run's events after the last one it sent whenever the hub
says the run moved, which is what makes a stream served by one process show the work of a worker in
another. The stream only reads: a client that goes away stops its own generator (the server's write
fails, or the next keep-alive's does) and nothing else.

Limits (docs/security.md, "Stream limits"): a token may hold NRLLM_STREAMS_PER_TOKEN streams and a process
NRLLM_STREAMS_PER_PROCESS (and, under `serve`, never more than its threads leave free for other requests);
one more is refused with 429 too_many_streams and Retry-After, before anything is streamed.
"""

import json
import threading
import time
from collections import Counter

from flask import Response, current_app, g, request
from prometheus_client import Gauge

from ..domain.errors import TooManyStreams
from ..domain.vocabulary import RunStatus
from ..store import runs
from ..store.db import database, release_connection
from ..store.events import list_events
from . import event_hub
from .auth import principal
from .documents import event_document, run_document
from .schemas import RUN_SCHEMA

KEEPALIVE_SECONDS = 15.0
BATCH = 500
# What a client that lost its stream (a server reload) waits before it reconnects with Last-Event-ID.
RECONNECT_MILLISECONDS = 1000
RETRY_AFTER_SECONDS = 5

STREAMS = Gauge("nrllm_event_streams", "Server-sent event streams this process is serving now")


def wants_stream() -> bool:
    best = request.accept_mimetypes.best_match(["application/json", "text/event-stream"])
    return best == "text/event-stream" and request.accept_mimetypes["text/event-stream"] > 0


def resume_after(after: int) -> int:
    """A reconnecting EventSource sends the last id it saw; it wins over `after`."""
    last_id = request.headers.get("Last-Event-ID", "").strip()
    return max(after, int(last_id)) if last_id.isdigit() and len(last_id) < 10 else after


class StreamSlots:
    """Open streams of this process, by token: taken before a stream starts, given back when it ends."""

    def __init__(self):
        self._lock = threading.Lock()
        self._by_token: Counter[str] = Counter()
        self._total = 0
        # Set by the server worker (sidecar/serving): the streams its threads can hold beside other requests.
        self.thread_bound: int | None = None

    def take(self, token_id: str, per_token: int, per_process: int) -> "Slot":
        per_process = min(per_process, self.thread_bound) if self.thread_bound is not None else per_process
        with self._lock:
            if self._by_token[token_id] >= per_token:
                refused = f"this token holds {per_token} open event streams, the most one token may"
            elif self._total >= per_process:
                refused = f"this server process holds {per_process} open event streams, the most it may"
            else:
                self._by_token[token_id] += 1
                self._total += 1
                return Slot(self, token_id)
        raise TooManyStreams(f"{refused}; close one or retry later",
                       headers={"Retry-After": str(RETRY_AFTER_SECONDS)})

    def give_back(self, token_id: str) -> None:
        with self._lock:
            self._by_token[token_id] -= 1
            if self._by_token[token_id] <= 0:
                del self._by_token[token_id]
            self._total -= 1

    def open_count(self) -> int:
        with self._lock:
            return self._total


class Slot:
    def __init__(self, slots: StreamSlots, token_id: str):
        self._slots = slots
        self._token_id = token_id
        self._held = True
        self._lock = threading.Lock()

    def release(self) -> None:
        """Idempotent: the response's close and an error path may both call it."""
        with self._lock:
            held, self._held = self._held, False
        if held:
            self._slots.give_back(self._token_id)


SLOTS = StreamSlots()


def _take() -> Slot:
    settings = current_app.config["NRLLM_SETTINGS"]
    return SLOTS.take(principal().token_id, settings.streams_per_token, settings.streams_per_process)


def reserve() -> None:
    """Take this request's slot now, or answer 429 too_many_streams: for a view that acts before it streams
    (a decision), so a refused stream leaves nothing done. stream() uses it; release_unused() frees it."""
    g.stream_slot = _take()


def release_unused(_exc=None) -> None:
    """teardown_request: a slot reserved but never handed to a stream (the request failed) goes back."""
    slot = g.pop("stream_slot", None)
    if slot is not None:
        slot.release()


def _message(event: str, data: dict, id: int | None = None) -> str:
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n"


def run_events(run_id: str, after: int, keepalive: float = KEEPALIVE_SECONDS):
    """Yield SSE messages: each event once, in order, then the Run when it is terminal or waiting.

    Ends early, without the Run, when the process stops serving: the client reconnects (after
    RECONNECT_MILLISECONDS) with Last-Event-ID and misses nothing.
    """
    last = after
    watch = event_hub.hub().watch(run_id)  # before the first read: a commit after it wakes the watch
    STREAMS.inc()
    try:
        # Sent at once, so the client has the answer's head before the run moves.
        yield f"retry: {RECONNECT_MILLISECONDS}\n\n"
        quiet_since = time.monotonic()
        while not watch.closing:
            # Read the run before its events: every event up to its last_event_sequence is then already
            # in the table, so "terminal and nothing more to send" is decided on a consistent pair.
            run = runs.get_run(run_id)
            if run is None:
                return
            batch = list_events(run_id, after=last, limit=BATCH)
            for event in batch:
                last = event["sequence"]
                yield _message("run_event", event_document(event), id=last)
            if batch:
                quiet_since = time.monotonic()
            status = RunStatus(run.status)
            if (status.is_terminal or status.is_waiting) and last >= run.last_event_sequence:
                yield _message("run", RUN_SCHEMA.dump(run_document(run)))
                return
            if len(batch) == BATCH:
                continue
            # Give the connection back while waiting; a pool shares it with the other requests.
            database.close()
            while not watch.wait(max(0.0, quiet_since + keepalive - time.monotonic())):
                quiet_since = time.monotonic()
                yield ": keep-alive\n\n"  # a comment: finds a gone client, keeps proxies from timing out
    finally:
        event_hub.hub().unwatch(watch)
        STREAMS.dec()
        release_connection()  # a stream ended by a database outage must not leave its thread a dead connection


def stream(run_id: str, after: int) -> Response:
    """The stream answer, holding the slot reserve() took for this request, or one taken now."""
    slot = g.pop("stream_slot", None) or _take()
    try:
        response = Response(
            run_events(run_id, after),
            mimetype="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
    except BaseException:
        slot.release()
        raise
    response.call_on_close(slot.release)
    return response
