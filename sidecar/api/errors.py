"""One error shape for every answer that is not a success: {"code", "message", "errors"?}
(docs/http-api.md, "Errors").

What the sidecar refuses on purpose is a kind of sidecar/domain/errors.py, which carries its code and status;
it is answered here, in one handler, wherever it was raised (a view, a service, the store, authentication).
HTTP errors that Flask and webargs raise themselves get the code of their status."""

from http import HTTPStatus

from apispec import BasePlugin
from flask_smorest import Api, Blueprint
from flask_smorest.utils import prepare_response
from werkzeug.exceptions import MethodNotAllowed

from ..domain.errors import DatabaseUnavailable, SidecarError
from ..store import db
from .error_codes import DEFAULT_CODES
from .examples import error_examples
from .schemas import ErrorSchema

# While the database is unavailable: how long a client is asked to wait before it asks again.
DATABASE_RETRY_AFTER_SECONDS = 5


def _flatten(messages) -> dict[str, list[str]]:
    """webargs nests errors by location and field ({"json": {"a": {"b": [...]}}}); the contract is flat."""
    flat: dict[str, list[str]] = {}

    def walk(prefix: str, value):
        if isinstance(value, dict):
            for key, inner in value.items():
                # marshmallow's "_schema" is the object itself: "budget._schema" is about "budget".
                name = prefix if key == "_schema" and prefix else f"{prefix}.{key}" if prefix else str(key)
                walk(name, inner)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            flat.setdefault(prefix or "_body", []).extend(value)
        else:
            flat.setdefault(prefix or "_body", []).append(str(value))

    for location, fields in (messages or {}).items():
        # The location (json, query, headers) is not part of a field's name.
        walk("", fields) if location in ("json", "query", "headers", "form", "view_args") else walk(location, fields)
    return flat


def error_responses(*statuses: int) -> dict:
    """An operation's `responses` for these error statuses, each the shared error body. The names are the
    components flask-smorest registers (HTTPStatus names): a name typed by hand can miss one, and an
    OpenAPI document with a reference to nothing does not validate."""
    return {status: HTTPStatus(status).name for status in statuses}


def errors(*statuses: int):
    """Document an operation's error answers (the shared {code, message, errors?} body)."""
    return Blueprint.doc(responses=error_responses(*statuses))


def default_code(status: int, name: str) -> str:
    """The code of an error answer nothing more specific was said about (the server's own errors too)."""
    return DEFAULT_CODES.get(status, name.lower().replace(" ", "_"))


def error_body(status: int, code: str, message: str, errors: dict | None = None) -> dict:
    body = {"code": code, "message": message}
    if errors:
        body["errors"] = errors
    return body


def database_unavailable_body() -> dict:
    return error_body(503, DatabaseUnavailable.code, "the database is unavailable; try again shortly")


def retry_after() -> dict:
    return {"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)}


def _refused(error: SidecarError):
    """Any refusal of the sidecar's own, from wherever it was raised: its status and code, as data."""
    if not error.is_refusal():
        raise error  # not a refusal: a fault of the sidecar, logged and answered 500 internal_error
    return error_body(error.http_status, error.code, error.message, error.errors), error.http_status, error.headers


def _database_error(error):
    """Any store error that reaches Flask, from a view or from authentication before it: 503 when the
    database is unavailable (a restart, a lock held too long); anything else stays the 500 it was."""
    if not db.is_unavailable(error):
        raise error  # Flask logs it and answers 500 internal_error (handle_http_exception)
    db.discard_connection()
    db.outage.began(error, "the API")
    return database_unavailable_body(), 503, retry_after()


class SharedErrorResponses(BasePlugin):
    """Declares, once for every operation, the error answers that app-wide checks give before any view runs:
    422 for the NUL character in a path or query value (parsing.refuse_nul_in_url) or an over-long or NUL
    actor or workspace header, and, unless the operation is public (`security: []`), 401 without a valid
    token and 413 for a body over the limit (auth.authenticate); 400 wherever a body is read that is not a
    JSON object (parsing.StrictJsonParser); and 503 everywhere, since every operation reads the database (a
    token's lookup, at least) and answers 503 while it is unavailable. What a view adds it declares itself
    (and @roles declares its 400 and 403)."""

    def operation_helper(self, path=None, operations=None, **kwargs):
        for operation in (operations or {}).values():
            statuses = [422, 503] if operation.get("security") == [] else [401, 413, 422, 503]
            if "requestBody" in operation:
                statuses.append(400)
            responses = operation.setdefault("responses", {})
            declared = {str(status) for status in responses}
            for status, name in error_responses(*statuses).items():
                if str(status) not in declared:
                    responses[status] = name


class SidecarApi(Api):
    # What the OpenAPI document shows for every error answer.
    ERROR_SCHEMA = ErrorSchema
    # No catch-all `default` answer: every status an operation can answer is declared (above, by @roles, and
    # by each view), so a client or a fuzzer can hold the sidecar to the list.
    DEFAULT_ERROR_RESPONSE_NAME = None

    def __init__(self, app=None, **kwargs):
        super().__init__(app, spec_kwargs={"extra_plugins": [SharedErrorResponses()]}, **kwargs)

    def _register_responses(self):
        # flask-smorest's error answers, each with an example of every code that status carries.
        super()._register_responses()
        for status in HTTPStatus:
            if status >= 400 and (examples := error_examples(status)):
                response = {"description": status.phrase, "schema": self.ERROR_SCHEMA, "examples": examples}
                prepare_response(response, self.spec, self.DEFAULT_RESPONSE_CONTENT_TYPE)
                self.spec.components.response(status.name, response, lazy=True)

    def init_app(self, app, *args, **kwargs):
        super().init_app(app, *args, **kwargs)
        app.register_error_handler(db.DatabaseError, _database_error)
        app.register_error_handler(SidecarError, _refused)

    def handle_http_exception(self, error):
        status = error.code or 500
        data = getattr(error, "data", None) or {}
        errors = _flatten(data.get("messages")) if "messages" in data else data.get("errors")
        if status == 500:
            return error_body(500, "internal_error", "the sidecar failed to answer; see its log"), 500
        code = default_code(status, error.name)
        message = data.get("message") or error.description or error.name
        if status == 422 and errors:
            message = "the request has fields that are missing or of the wrong type or value"
        headers = data.get("headers") or {}
        if isinstance(error, MethodNotAllowed) and error.valid_methods:
            headers = {**headers, "Allow": ", ".join(error.valid_methods)}
        return error_body(status, code, message, errors), status, headers
