"""POST /api/v1/push: the A2A push-notification webhook (docs/http-api.md, "Remote agents, the outbound
journal and push"). Public: the remote agent shows the delegation's own token instead of a bearer token of
ours (delegation/push.py has the rules).

A push the sidecar accepts is answered before Flask (PushShortcut, below); the view answers every other.
"""

import io
import time

from flask import request
from flask.views import MethodView

from .. import logs, metrics
from ..delegation import push
from ..domain.errors import NotThisDelegation, Unauthenticated
from ..store import db
from . import examples
from .access import REQUEST_ID_HEADER, log_answer
from .auth import public
from .errors import error_responses
from .headers import EVERY_ANSWER
from .parsing import Blueprint, json_object

PATH = "/api/v1/push"
_TOKEN_KEY = "HTTP_" + push.TOKEN_HEADER.upper().replace("-", "_")  # the header's key in a WSGI environ
blp = Blueprint("push", __name__, url_prefix="/api/v1", description="Push notifications from remote agents")


def presented_token(notification_header: str, authorization_header: str) -> str | None:
    """The delegation token a push shows, in our header or as a bearer token; None without one."""
    token = notification_header.strip()
    if token:
        return token
    scheme, _, value = authorization_header.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


@blp.route("/push")
@public()
class PushNotification(MethodView):
    @blp.doc(security=[], responses=error_responses(400, 401, 404, 413),
             requestBody={"required": True, "content": {"application/json": {
                 "schema": {"type": "object", "description": "an A2A push notification"}, "example": examples.PUSH}}},
             description=f"The delegation's token in `{push.TOKEN_HEADER}` or `Authorization: Bearer`; the body "
                         "is an A2A StreamResponse (or a 0.3 Task). It only makes the coordinator look sooner.")
    @blp.response(204)
    def post(self):
        """Receive an A2A push notification for a delegation."""
        try:
            # The token first: an unauthenticated caller learns nothing, not even how bodies are read.
            delegation = push.authenticate(presented_token(request.headers.get(push.TOKEN_HEADER, ""),
                                                           request.headers.get("Authorization", "")))
            push.receive(delegation, json_object(request.get_data(cache=True)))
        except Unauthenticated:
            metrics.PUSHES.labels("unauthenticated").inc()
            raise
        except NotThisDelegation:
            metrics.PUSHES.labels("not_found").inc()
            raise
        metrics.PUSHES.labels("accepted").inc()


class PushShortcut:
    """WSGI middleware in front of Flask: a push that is accepted is answered 204 here, with the headers and
    the access line the view's answer has, and nothing else is done for it. A peer pushes every state of a
    task, often four times a delegation; through Flask each push cost the API about 0.8 ms of CPU, this
    way 0.5, most of it the HTTP server's (docs/performance.md, "Pushes answered before Flask").

    Every other request, and every push this does not accept, goes to Flask unchanged, so the view answers
    it as before, in the API's error shape: a push without a token, of a length not given or over the
    limit, with a query string or an Origin (a browser's, for the CORS headers), one refused, one that
    failed, one whose body did not arrive. Such a push has changed nothing here: a push is checked
    before anything is written, and a write that fails is rolled back."""

    def __init__(self, flask_app, body_limit: int):
        self.flask_app = flask_app
        self.body_limit = body_limit

    def __call__(self, environ, start_response):
        plain = self._plain_push(environ)
        if plain is None:
            return self.flask_app(environ, start_response)
        token, length = plain
        started = time.perf_counter()
        request_id = logs.request_id_from(environ.get("HTTP_X_REQUEST_ID"))
        with logs.context(request_id=request_id):
            try:
                # The token first, as the view does: an unauthenticated caller learns nothing, not even how
                # bodies are read.
                delegation = push.authenticate(token)
            except Exception:  # noqa: BLE001 - refused, or the database failed: the view answers it
                return self._to_view(environ, start_response, request_id, None)
            try:
                body = environ["wsgi.input"].read(length)
            except Exception as exc:  # noqa: BLE001 - a read deadline, a reset: the view answers it as ever
                return self._to_view(environ, start_response, request_id, _Raising(exc))
            # A short body is the client's disconnection, which the view answers as ever.
            if len(body) != length or not _received(delegation, body):
                return self._to_view(environ, start_response, request_id, io.BytesIO(body))
            db.release_connection(pooled_only=True)  # as after every request (app.py)
            metrics.PUSHES.labels("accepted").inc()
            log_answer("POST", PATH, 204, started)
        start_response("204 NO CONTENT", [("Content-Type", "application/json"), *EVERY_ANSWER,
                                          (REQUEST_ID_HEADER, request_id)])
        return []

    def _to_view(self, environ, start_response, request_id: str, body):
        """Flask answers the push under the same request id, its body `body` (None: not read yet)."""
        db.release_connection(pooled_only=True)  # the view's a connection the pool has tested, after a failure
        environ = {**environ, "HTTP_X_REQUEST_ID": request_id}
        if body is not None:
            environ["wsgi.input"] = body
        return self.flask_app(environ, start_response)

    def _plain_push(self, environ) -> tuple[str, int] | None:
        """(token, body length) of a push this may answer; None for any other request."""
        if environ.get("PATH_INFO") != PATH or environ.get("REQUEST_METHOD") != "POST":
            return None
        length = environ.get("CONTENT_LENGTH", "")
        length = int(length) if length.isdigit() else 0
        if (environ.get("QUERY_STRING") or "HTTP_ORIGIN" in environ or "HTTP_TRANSFER_ENCODING" in environ
                or not 0 < length <= self.body_limit):
            return None
        token = presented_token(environ.get(_TOKEN_KEY, ""), environ.get("HTTP_AUTHORIZATION", ""))
        return None if token is None else (token, length)


def _received(delegation: push.Delegation, body: bytes) -> bool:
    """Whether the push was received; False when it was refused or failed, which changed nothing."""
    try:
        push.receive(delegation, json_object(body))
        return True
    except Exception:  # noqa: BLE001 - refused or failed: the view answers it (see PushShortcut)
        return False


class _Raising:
    """A request body whose read raises what reading it raised before."""

    def __init__(self, error: Exception):
        self.error = error

    def read(self, *_args):
        raise self.error

    readline = read
