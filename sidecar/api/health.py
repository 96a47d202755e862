"""GET /api/v1/health: no auth; says whether the database answers and any worker is alive."""

from flask import current_app
from flask.views import MethodView
from flask_smorest import Blueprint
from marshmallow import Schema, fields

from .. import __version__, keys
from ..domain.clock import rfc3339
from ..domain.lease import LeasePolicy
from ..store import db, remote_agents, runs, sealed, workers
from . import examples
from .auth import public
from .errors import retry_after

blp = Blueprint("health", __name__, url_prefix="/api/v1", description="Liveness and readiness")


class FailingAgentSchema(Schema):
    name = fields.String()
    consecutive_failures = fields.Integer()
    since = fields.String(allow_none=True, metadata={"format": "date-time"})
    last_error = fields.String(allow_none=True, metadata={"description": "without URLs (no token is needed here)"})


class HealthSchema(Schema):
    status = fields.String(metadata={"description": "ok, or degraded"})
    database = fields.String()
    workers_alive = fields.Integer()
    oldest_queued_seconds = fields.Float()
    unsealable_checkpoints = fields.Integer()
    version = fields.String(metadata={"description": "the sidecar's release (as nrllm-sidecar --version)"})
    database_unavailable_seconds = fields.Float(metadata={
        "description": "how long this process has found the database unavailable (0: it answers)"})
    failing_agents = fields.List(fields.Nested(FailingAgentSchema), metadata={
        "description": "remote agents whose last call failed; they do not make the status degraded"})


@blp.route("/health")
@public()
class Health(MethodView):
    @blp.response(200, HealthSchema, example=examples.HEALTH)
    @blp.alt_response(503, schema=HealthSchema, example=examples.HEALTH_UNAVAILABLE,
                      description="the database does not answer: status degraded")
    @blp.doc(security=[])
    def get(self):
        document, status = health_report(current_app.config["NRLLM_SETTINGS"])
        return (document, status, retry_after()) if status == 503 else document


def health_report(settings) -> tuple[dict, int]:
    """The health document and its status (200, or 503 while the database does not answer); the console
    shows the same."""
    try:
        db.ping()
        alive = workers.alive_count(LeasePolicy(settings.lease_seconds).worker_alive_window)
        oldest = runs.oldest_queued_seconds()
        # Checkpoints sealed under a key that was removed: their runs wait until the key is back.
        unsealable = sealed.unsealable_checkpoints(keys.sealer().fingerprints)
        failing = [_failing(agent) for agent in remote_agents.failing_agents()]
    except db.DatabaseError as exc:
        if db.is_unavailable(exc):
            db.discard_connection()
            db.outage.began(exc, "the health check")
        # workers_alive 0: heartbeats live in the database, so none can be confirmed (docs/reliability.md).
        return {"status": "degraded", "database": "unavailable", "workers_alive": 0,
                "oldest_queued_seconds": 0.0, "unsealable_checkpoints": 0, "version": __version__,
                "database_unavailable_seconds": round(db.outage.seconds(), 3), "failing_agents": []}, 503
    db.outage.ended()
    degraded = alive == 0 or unsealable > 0
    return {
        "status": "degraded" if degraded else "ok",
        "database": "ok",
        "workers_alive": alive,
        "oldest_queued_seconds": round(oldest, 3),
        "unsealable_checkpoints": unsealable,
        "version": __version__,
        "database_unavailable_seconds": 0.0,
        "failing_agents": failing,
    }, 200


def _failing(agent) -> dict:
    # The error was stored without its URLs (store/remote_agents.py): health needs no token.
    return {"name": agent.name, "consecutive_failures": agent.consecutive_failures,
            "since": rfc3339(agent.failing_since), "last_error": agent.last_error}
