"""Logging: plain text (the default) or one JSON object a line (NRLLM_LOG_FORMAT=json), with what a line is
about: the run, the API request and the remote agent, where the code that logs works on one.

The context lives in context variables: the API sets `request_id` for a request, the worker and the
decide-now thread set `run_id` for a segment, the coordinator sets `run_id` and `remote_agent` for a wait
it polls. A filter copies them onto every record, so any logger of the process carries them.
"""

import contextlib
import contextvars
import json
import logging
import re
import sys
import uuid
from datetime import UTC, datetime

LOG_FORMATS = ("text", "json")
CONTEXT_FIELDS = ("run_id", "request_id", "remote_agent")
_CONTEXT = {name: contextvars.ContextVar(f"nrllm_log_{name}", default=None) for name in CONTEXT_FIELDS}

# A request id a client sends is kept when it is short and made of characters safe in a log line and a header.
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_id_from(header_value: str | None) -> str:
    """The client's X-Request-Id when it is safe to log and echo, else a fresh one (uuid4 hex)."""
    if header_value and _SAFE_REQUEST_ID.match(header_value):
        return header_value
    return uuid.uuid4().hex


@contextlib.contextmanager
def context(**values):
    """Log lines inside this block carry these fields (run_id, request_id, remote_agent)."""
    tokens = set_context(**values)
    try:
        yield
    finally:
        reset_context(tokens)


def set_context(**values) -> list:
    """Set fields until reset_context(tokens) (a Flask request: set before, reset at teardown)."""
    return [(_CONTEXT[name], _CONTEXT[name].set(value)) for name, value in values.items()]


def reset_context(tokens: list) -> None:
    for var, token in reversed(tokens):
        var.reset(token)


class ContextFilter(logging.Filter):
    """Copies the context fields onto each record (None where unknown)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in _CONTEXT.items():
            if getattr(record, name, None) is None:
                setattr(record, name, var.get())
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (ISO 8601, UTC), level, logger, message, the known context fields,
    `exception` (the formatted traceback) when there is one, and the `extra` fields a caller passed."""

    _STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", *CONTEXT_FIELDS}

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace(
                "+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            if getattr(record, name, None) is not None:
                line[name] = getattr(record, name)
        for key, value in vars(record).items():
            if key not in self._STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.stack_info:
            line["exception"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The plain format, with the known context fields after the message."""

    def __init__(self):
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        known = " ".join(f"{name}={getattr(record, name)}" for name in CONTEXT_FIELDS
                         if getattr(record, name, None) is not None)
        return super().formatMessage(record) + (f" [{known}]" if known else "")


def configure(*, verbose: bool = False, log_format: str = "text", stream=None) -> None:
    """Log to standard error in the chosen format; replaces handlers an earlier call installed."""
    if log_format not in LOG_FORMATS:
        raise SystemExit(f"NRLLM_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}, not {log_format!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler], force=True)
    # Neither format prints a record's thread or process name; left on, every record looks them up (a tenth of
    # a line's cost, on a path that logs a few lines per run). A handler a plugin adds finds None there. The
    # process id stays: gunicorn's own lines (serving/) print it, and reading it costs next to nothing.
    logging.logThreads = logging.logMultiprocessing = False
    # The API writes its own access line (api/access.py: with the request id, without the query string).
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
