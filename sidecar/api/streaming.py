"""Server-sent events of a run: the event table, polled.

Polling the table (not an in-process signal) is what makes a stream served by one process show the
work of a worker in another. The stream only reads: a client that goes away stops its own generator
(the server's write fails, or the next keep-alive's does) and nothing else.
"""

import json
import time

from flask import Response, request
from prometheus_client import Gauge

from ..domain.vocabulary import RunStatus
from ..store import runs
from ..store.db import database, release_connection
from ..store.events import list_events
from .documents import event_document, run_document
from .schemas import RUN_SCHEMA

POLL_SECONDS = 0.1
KEEPALIVE_SECONDS = 15.0
BATCH = 500

STREAMS = Gauge("nrllm_event_streams", "Server-sent event streams this process is serving now")


def wants_stream() -> bool:
    best = request.accept_mimetypes.best_match(["application/json", "text/event-stream"])
    return best == "text/event-stream" and request.accept_mimetypes["text/event-stream"] > 0


def resume_after(after: int) -> int:
    """A reconnecting EventSource sends the last id it saw; it wins over `after`."""
    last_id = request.headers.get("Last-Event-ID", "").strip()
    return max(after, int(last_id)) if last_id.isdigit() and len(last_id) < 10 else after


def _message(event: str, data: dict, id: int | None = None) -> str:
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n"


def run_events(run_id: str, after: int, poll: float = POLL_SECONDS, keepalive: float = KEEPALIVE_SECONDS):
    """Yield SSE messages: each event once, in order, then the Run when it is terminal or waiting."""
    last = after
    quiet_since = time.monotonic()
    STREAMS.inc()
    try:
        while True:
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
            if time.monotonic() - quiet_since >= keepalive:
                quiet_since = time.monotonic()
                yield ": keep-alive\n\n"  # a comment: finds a gone client, keeps proxies from timing out
            # Give the connection back while waiting; a pool shares it with the other requests.
            database.close()
            time.sleep(poll)
    finally:
        STREAMS.dec()
        release_connection()  # a stream ended by a database outage must not leave its thread a dead connection


def stream(run_id: str, after: int) -> Response:
    return Response(
        run_events(run_id, after),
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
