"""POST /api/v1/push: the A2A push-notification webhook (docs/http-api.md, "Remote agents, the outbound
journal and push"). Public: the remote agent shows the delegation's own token instead of a bearer token of
ours (delegation/push.py has the rules)."""

from flask import request
from flask.views import MethodView

from .. import metrics
from ..delegation import push
from ..domain.errors import NotThisDelegation, Unauthenticated
from . import examples
from .auth import public
from .errors import error_responses
from .parsing import Blueprint, json_object

blp = Blueprint("push", __name__, url_prefix="/api/v1", description="Push notifications from remote agents")


def _presented_token() -> str | None:
    token = request.headers.get(push.TOKEN_HEADER, "").strip()
    if token:
        return token
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
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
            delegation = push.authenticate(_presented_token())
            push.receive(delegation, json_object(request.get_data(cache=True)))
        except Unauthenticated:
            metrics.PUSHES.labels("unauthenticated").inc()
            raise
        except NotThisDelegation:
            metrics.PUSHES.labels("not_found").inc()
            raise
        metrics.PUSHES.labels("accepted").inc()
