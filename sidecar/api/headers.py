"""Headers every answer of the API carries, and cross-origin access (closed unless configured).

- `X-Content-Type-Options: nosniff`: a browser never guesses a JSON (or error) body to be something else.
- `Cache-Control: no-store`: runs, tokens' views and event streams are per caller and change; no cache,
  shared or private, keeps them.
- CORS: no `Access-Control-Allow-Origin` at all unless the request's Origin is listed in
  NRLLM_CORS_ORIGINS (`*` lists every origin). Bearer tokens, never cookies, so credentials are not allowed.
"""

from flask import Response, current_app, request

from . import auth

ALLOWED_METHODS = "GET, POST, PUT, DELETE"
ALLOWED_HEADERS = ", ".join(
    ["Authorization", "Content-Type", auth.ACTOR_HEADER, auth.WORKSPACE_HEADER, "Idempotency-Key", "Last-Event-ID"]
)
EXPOSED_HEADERS = "Retry-After, Idempotent-Replayed"
PREFLIGHT_MAX_AGE = "600"
# Carried by every answer (add_headers), and by the pushes answered before Flask (api/push.py).
EVERY_ANSWER = (("X-Content-Type-Options", "nosniff"), ("Cache-Control", "no-store"))


def _allowed_origin() -> str | None:
    origin = request.headers.get("Origin")
    if not origin:
        return None
    allowed = current_app.config["NRLLM_SETTINGS"].cors_origins
    return origin if "*" in allowed or origin.rstrip("/") in allowed else None


def answer_preflight():
    """before_request, ahead of authentication: a browser's preflight carries no token. Only an allowed
    origin's preflight is answered here; any other goes on and gets the usual 401."""
    if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
        return None
    origin = _allowed_origin()
    if origin is None:
        return None
    response = Response(status=204)
    response.headers["Access-Control-Allow-Methods"] = ALLOWED_METHODS
    response.headers["Access-Control-Allow-Headers"] = ALLOWED_HEADERS
    response.headers["Access-Control-Max-Age"] = PREFLIGHT_MAX_AGE
    return response


def add_headers(response: Response) -> Response:
    """after_request: on every answer, errors and event streams included."""
    for name, value in EVERY_ANSWER:
        response.headers[name] = value
    origin = _allowed_origin()
    if origin is not None:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
        response.vary.add("Origin")
    return response
