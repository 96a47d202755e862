"""One error shape for every answer that is not a success: {"code", "message", "errors"?} (http-api.md)."""

from flask_smorest import Api
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from .schemas import ErrorSchema

# The code a bare HTTP error gets when nothing more specific was said.
_DEFAULT_CODES = {
    400: "malformed_request",
    401: "unauthenticated",
    403: "forbidden_role",
    404: "not_found",
    405: "method_not_allowed",
    409: "invalid_state",
    408: "request_timeout",
    413: "too_large",
    414: "request_line_too_long",
    415: "malformed_request",
    422: "validation_failed",
    429: "too_many_requests",
    431: "headers_too_large",
    505: "http_version_not_supported",
}


class ApiError(HTTPException):
    """Raised by views and services' adapters: status, contract code, message, optional field errors."""

    def __init__(self, status: int, code: str, message: str, errors: dict | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.code = status
        self.error_code = code
        self.message = message
        self.errors = errors
        self.headers = headers or {}


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


def default_code(status: int, name: str) -> str:
    """The code of an error answer nothing more specific was said about (the server's own errors too)."""
    return _DEFAULT_CODES.get(status, name.lower().replace(" ", "_"))


def error_body(status: int, code: str, message: str, errors: dict | None = None) -> dict:
    body = {"code": code, "message": message}
    if errors:
        body["errors"] = errors
    return body


class SidecarApi(Api):
    # What the OpenAPI document shows for every error answer.
    ERROR_SCHEMA = ErrorSchema

    def handle_http_exception(self, error):
        if isinstance(error, ApiError):
            return error_body(error.code, error.error_code, error.message, error.errors), error.code, error.headers
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
