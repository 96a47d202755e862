"""Every error `code` the API answers with, its HTTP status and when: the one list the OpenAPI document's enum,
its examples and the docs' error table are held to (tests/test_openapi_contract.py derives the codes the
source raises and compares). A code is public: it is never renamed (docs/stability.md).

A status is written once. A refusal of the sidecar's own takes its status from its kind
(sidecar/domain/errors.py), which carries it as data; an error of HTTP itself (werkzeug's, the server's) takes
it from DEFAULT_CODES, the code such an error is answered with. This module only says when each code is
answered; tests/test_errors.py fails when a code has no description or a description no code."""

from ..domain.errors import SidecarError, answered_kinds

# The code a bare HTTP error (werkzeug's, the server's own) gets when nothing more specific was said.
DEFAULT_CODES: dict[int, str] = {
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

# When each code is answered, in the order the document and the docs' table show them.
DESCRIPTIONS: dict[str, str] = {
    "malformed_request": "the body is not JSON, not an object, or nested too deeply",
    "csrf_failed": "a console form without its session's CSRF token (the console only)",
    "actor_required": "a host token without X-Nrllm-Actor on an endpoint that acts for a person",
    "unauthenticated": "no token, an unknown or revoked token; a push without a valid delegation token",
    "forbidden_role": "the token's role may not use this endpoint",
    "not_permitted": "the actor may see the run but not decide this pause",
    "not_found": "an unknown or malformed id, a run this actor may not see, a path that does not exist",
    "method_not_allowed": "a method the path does not have",
    "request_timeout": "the request did not arrive within the read deadlines",
    "invalid_state": "cancelling a finished run; a remote agent name registered twice or still in use",
    "pause_not_pending": "the pause was decided already, or the run no longer waits on it",
    "stale_generation": "the decision names another generation than the current pause's",
    "digest_mismatch": "the approved or denied calls are not the ones pending",
    "not_resendable": "a resend of a journal row that is not an unknown send its run still waits on",
    "too_large": "a body over the limit",
    "request_line_too_long": "a request line over the server's limit",
    "validation_failed": "fields missing, unknown, or of the wrong type or value",
    "invalid_input": "decision input that breaks the pause's JSON schema",
    "idempotency_key_reused": "the same Idempotency-Key with another request",
    "too_many_streams": "as many event streams as the token or the process may have",
    "too_many_requests": "any other 429",
    "headers_too_large": "too many header fields, or one over the server's limit",
    "internal_error": "a bug; the log has the details under the answer's X-Request-Id",
    "database_unavailable": "the database does not answer; retry after Retry-After seconds",
    "http_version_not_supported": "a request in an HTTP version the server does not speak",
}


def code_statuses() -> dict[str, int]:
    """Every code answered, with its status: a kind's own; the base kind's 500 for the internal error; for an
    error of HTTP itself, the status its default code is for. A code that is both is listed under its kind's
    status (an unsupported media type keeps its 415 but is answered malformed_request, listed under 400)."""
    answered = {code: status for status, code in DEFAULT_CODES.items()}
    answered[SidecarError.code] = SidecarError.http_status
    answered.update({kind.code: kind.http_status for kind in answered_kinds()})
    return answered


def _error_codes() -> dict[str, tuple[int, str]]:
    answered = code_statuses()
    return {code: (answered[code], when) for code, when in DESCRIPTIONS.items() if code in answered}


ERROR_CODES: dict[str, tuple[int, str]] = _error_codes()
