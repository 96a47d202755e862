"""GET /api/v1/health: no auth; says whether the database answers and any worker is alive."""

from flask import current_app
from flask.views import MethodView
from flask_smorest import Blueprint
from marshmallow import Schema, fields

from .. import keys
from ..domain.lease import LeasePolicy
from ..store import db, runs, sealed, workers
from .auth import public

blp = Blueprint("health", __name__, url_prefix="/api/v1", description="Liveness and readiness")


class HealthSchema(Schema):
    status = fields.String(metadata={"description": "ok, or degraded"})
    database = fields.String()
    workers_alive = fields.Integer()
    oldest_queued_seconds = fields.Float()
    unsealable_checkpoints = fields.Integer()


@blp.route("/health")
@public()
class Health(MethodView):
    @blp.response(200, HealthSchema)
    @blp.alt_response(503, schema=HealthSchema, description="the database does not answer: status degraded")
    @blp.doc(security=[])
    def get(self):
        settings = current_app.config["NRLLM_SETTINGS"]
        try:
            db.ping()
            alive = workers.alive_count(LeasePolicy(settings.lease_seconds).worker_alive_window)
            oldest = runs.oldest_queued_seconds()
            # Checkpoints sealed under a key that was removed: their runs wait until the key is back.
            unsealable = sealed.unsealable_checkpoints(keys.sealer().fingerprints)
        except db.DatabaseError:
            return {"status": "degraded", "database": "unavailable", "workers_alive": 0,
                    "oldest_queued_seconds": 0.0, "unsealable_checkpoints": 0}, 503
        degraded = alive == 0 or unsealable > 0
        return {
            "status": "degraded" if degraded else "ok",
            "database": "ok",
            "workers_alive": alive,
            "oldest_queued_seconds": round(oldest, 3),
            "unsealable_checkpoints": unsealable,
        }
