"""Each request's id (X-Request-Id) and its access log line.

A client's X-Request-Id is kept when it is safe (sidecar/logs.py says what that is), otherwise a fresh one
is made; either way the answer carries it, and every log line written while the request is handled
names it. The access line is written when the answer is ready: method, path (never the query string,
which could carry a secret), status, duration in milliseconds.
"""

import contextlib
import logging
import time

from flask import Flask, g, request

from .. import logs

REQUEST_ID_HEADER = "X-Request-Id"
log = logging.getLogger("nrllm_sidecar.access")


def _begin() -> None:
    g.nrllm_request_id = logs.request_id_from(request.headers.get(REQUEST_ID_HEADER))
    g.nrllm_started = time.perf_counter()
    g.nrllm_log_tokens = logs.set_context(request_id=g.nrllm_request_id)


def _answer(response):
    request_id = g.get("nrllm_request_id")
    if request_id:
        response.headers[REQUEST_ID_HEADER] = request_id
        log_answer(request.method, request.path, response.status_code, g.nrllm_started)
    return response


def log_answer(method: str, path: str, status: int, started: float) -> None:
    """The access line of a request answered `status`, begun at `started` (time.perf_counter())."""
    duration_ms = round((time.perf_counter() - started) * 1000, 1)
    log.info("%s %s %s %.1fms", method, path, status, duration_ms,
             extra={"method": method, "path": path, "status": status, "duration_ms": duration_ms})


def _end(_exc) -> None:
    tokens = g.pop("nrllm_log_tokens", None)
    if tokens:
        # A streamed answer may end in another context; the request's thread moves on either way.
        with contextlib.suppress(ValueError):
            logs.reset_context(tokens)


def install(app: Flask) -> None:
    """Register the hooks; call before any other before_request hook, so a refused request has an id too."""
    app.before_request(_begin)
    app.after_request(_answer)
    app.teardown_request(_end)
