"""Every error `code` the API answers with, its HTTP status and when: the one list the OpenAPI document's enum,
its examples and the docs' error table are held to (tests/test_openapi_contract.py derives the codes the
source raises and compares). A code is public: it is never renamed (docs/stability.md)."""

ERROR_CODES: dict[str, tuple[int, str]] = {
    "malformed_request": (400, "the body is not JSON, not an object, or nested too deeply"),
    "csrf_failed": (400, "a console form without its session's CSRF token (the console only)"),
    "actor_required": (400, "a host token without X-Nrllm-Actor on an endpoint that acts for a person"),
    "unauthenticated": (401, "no token, an unknown or revoked token; a push without a valid delegation token"),
    "forbidden_role": (403, "the token's role may not use this endpoint"),
    "not_permitted": (403, "the actor may see the run but not decide this pause"),
    "not_found": (404, "an unknown or malformed id, a run this actor may not see, a path that does not exist"),
    "method_not_allowed": (405, "a method the path does not have"),
    "request_timeout": (408, "the request did not arrive within the read deadlines"),
    "invalid_state": (409, "cancelling a finished run; a remote agent name registered twice or still in use"),
    "pause_not_pending": (409, "the pause was decided already, or the run no longer waits on it"),
    "stale_generation": (409, "the decision names another generation than the current pause's"),
    "digest_mismatch": (409, "the approved or denied calls are not the ones pending"),
    "not_resendable": (409, "a resend of a journal row that is not an unknown send its run still waits on"),
    "too_large": (413, "a body over the limit"),
    "request_line_too_long": (414, "a request line over the server's limit"),
    "validation_failed": (422, "fields missing, unknown, or of the wrong type or value"),
    "invalid_input": (422, "decision input that breaks the pause's JSON schema"),
    "idempotency_key_reused": (422, "the same Idempotency-Key with another request"),
    "too_many_streams": (429, "as many event streams as the token or the process may have"),
    "too_many_requests": (429, "any other 429"),
    "headers_too_large": (431, "too many header fields, or one over the server's limit"),
    "internal_error": (500, "a bug; the log has the details under the answer's X-Request-Id"),
    "database_unavailable": (503, "the database does not answer; retry after Retry-After seconds"),
    "http_version_not_supported": (505, "a request in an HTTP version the server does not speak"),
}


def codes_of(status: int) -> list[str]:
    return [code for code, (answered, _) in ERROR_CODES.items() if answered == status]
