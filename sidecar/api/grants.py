"""Grants (docs/http-api.md, "Grants"): what an actor may decide in a workspace besides their own runs."""

from flask.views import MethodView

from ..domain.errors import ValidationFailed
from ..store import grants
from . import examples
from .auth import MAX_ACTOR, roles
from .decision_schemas import GrantsBodySchema, GrantsQuerySchema, GrantsSchema
from .parsing import Blueprint

blp = Blueprint("grants", __name__, url_prefix="/api/v1", description="Grants")


def _actor(actor: str) -> str:
    if not 1 <= len(actor) <= MAX_ACTOR:
        raise ValidationFailed(f"an actor has 1 to {MAX_ACTOR} characters",
                       {"actor": [f"Length must be between 1 and {MAX_ACTOR}."]})
    return actor


@blp.route("/actors/<actor>/grants")
class ActorGrants(MethodView):
    @roles("host", "operator", actor=False)
    @blp.arguments(GrantsQuerySchema(), location="query")
    @blp.response(200, GrantsSchema, example=examples.GRANTS)
    def get(self, query, actor):
        """The actor's grants in a workspace (`workspace`, default 0)."""
        return {"actor": _actor(actor), "workspace": query["workspace"],
                "grants": grants.of(actor, query["workspace"])}

    @roles("host", actor=False)
    @blp.arguments(GrantsBodySchema(), example=examples.GRANTS_BODY)
    @blp.response(200, GrantsSchema, example=examples.GRANTS)
    def put(self, body, actor):
        """Replace the actor's grants in a workspace (host): `agent:approve`, `agent:input`."""
        saved = grants.replace(_actor(actor), body["workspace"], body["grants"])
        return {"actor": actor, "workspace": body["workspace"], "grants": saved}
