"""Request bodies: JSON objects only, refused with the contract's codes before any schema sees them.

webargs alone would pass a non-object body or a body sent as another content type on to the schema
(and answer 422 "required"); the contract says 400 `malformed_request` for a body that is not a JSON
object. The Content-Type is not checked: `curl -d` sends a form type by default, and a bearer token is
never attached by a browser on its own, so accepting JSON under any type opens no cross-site hole.
"""

import json

from flask import request
from flask_smorest import Blueprint as SmorestBlueprint
from webargs.flaskparser import FlaskParser

from ..domain.errors import Malformed, TooLarge, ValidationFailed
from ..domain.text import may_hold_unstorable, unstorable

MAX_DEPTH = 64


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _inspect(value) -> tuple[bool, ValidationFailed | None]:
    """One walk of a parsed body, without recursion (a deep body must not exhaust the stack later, when
    stored): whether it nests deeper than MAX_DEPTH, and the refusal of the first string or key that holds
    text no database can store (the NUL character, an unpaired surrogate; domain/text.py), or None."""
    refused, stack = None, [(value, 1, "")]
    while stack:
        item, depth, path = stack.pop()
        if depth > MAX_DEPTH:
            return True, None
        if isinstance(item, str):
            refused = refused or unstorable_refused(path or "body", item)
        elif isinstance(item, dict):
            for key, child in item.items():
                refused = refused or unstorable_refused(f"{path}.{key!r}".lstrip("."), key)
                stack.append((child, depth + 1, f"{path}.{key}".lstrip(".")))
        elif isinstance(item, list):
            stack.extend((child, depth + 1, f"{path}.{index}".lstrip(".")) for index, child in enumerate(item))
    return False, refused


def unstorable_refused(where: str, text: str) -> ValidationFailed | None:
    """422 validation_failed on `where` when `text` holds what no database can store, else None."""
    what = unstorable(text)
    if what is None:
        return None
    return ValidationFailed(f"{where} holds {what}, which no text here may hold",
                    {where: [f"Must not contain {what}."]})


def refuse_unstorable_in_url() -> None:
    """before_request: path parameters and query values never hold text no database can store (it would
    fail a query instead of being refused)."""
    for name, value in (request.view_args or {}).items():
        if isinstance(value, str) and (refused := unstorable_refused(name, value)):
            raise refused
    for name, value in request.args.items(multi=True):
        if refused := unstorable_refused(name, name) or unstorable_refused(name, value):
            raise refused


def malformed(message: str) -> Malformed:
    return Malformed(message)


def json_object(raw: bytes) -> dict:
    """The body as a JSON object, or Malformed (400 malformed_request)."""
    if not raw.strip():
        raise malformed("the body must be a JSON object, and it is empty")
    try:
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")  # as json.loads decodes bytes
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, over-long numbers
        raise malformed(f"the body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise malformed(f"the body must be a JSON object, not {type(value).__name__}")
    # Most bodies nest less than MAX_DEPTH containers (a value inside n of them is n + 1 deep) and hold no
    # text to refuse, which two scans of the text tell; the walk, in Python over every value, is for the rest.
    if text.count("{") + text.count("[") < MAX_DEPTH and not may_hold_unstorable(text):
        return value
    too_deep, refused = _inspect(value)
    if too_deep:
        raise malformed(f"the body is nested deeper than {MAX_DEPTH} levels")
    if refused is not None:
        raise refused
    return value


class StrictJsonParser(FlaskParser):
    def load_json(self, req, schema):
        # get_data raises 413 for a Content-Length past MAX_CONTENT_LENGTH, but a chunked body is cut at
        # the limit silently: one that reaches the limit is taken as over it.
        raw = req.get_data(cache=True)
        limit = req.max_content_length
        if req.content_length is None and limit is not None and len(raw) >= limit:
            raise TooLarge(f"the body is over the limit of {limit} bytes")
        return json_object(raw)


class Blueprint(SmorestBlueprint):
    """flask-smorest's Blueprint with the strict body parser; every sidecar blueprint uses it."""

    ARGUMENTS_PARSER = StrictJsonParser()


IDEMPOTENCY_KEY = "Idempotency-Key"
MAX_KEY = 255
# The header as the OpenAPI document shows it, on every operation that takes it.
IDEMPOTENCY_PARAMETER = {"in": "header", "name": IDEMPOTENCY_KEY, "schema": {"type": "string", "maxLength": MAX_KEY},
                         "description": "replays the first answer for the same body (24 h); another body is 422"}


def idempotency_key() -> str | None:
    """The request's Idempotency-Key, None without one; ValidationFailed for an empty or over-long one."""
    key = request.headers.get(IDEMPOTENCY_KEY)
    if key is not None and (not key.strip() or len(key) > MAX_KEY):
        raise ValidationFailed(f"Idempotency-Key must have 1 to {MAX_KEY} characters",
                               {IDEMPOTENCY_KEY: [f"Length must be between 1 and {MAX_KEY}."]})
    return key
