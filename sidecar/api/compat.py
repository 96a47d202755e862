"""Consumers and compatibility (http-api.md): the host reports the consumers it has loaded; the gate says
what may be written and whether delegation is offered."""

from flask.views import MethodView
from marshmallow import Schema, ValidationError, fields, validate, validates_schema

import compat.service as compat_service

from ..domain.clock import rfc3339
from ..domain.errors import NotFound, ValidationFailed
from ..domain.vocabulary import RunStatus
from ..store import consumers as consumer_store
from .auth import roles
from .errors import error_responses
from .parsing import Blueprint

blp = Blueprint("compat", __name__, url_prefix="/api/v1", description="Consumers and compatibility")

NAME = validate.Length(1, 128)
STATUS_NAMES = [s.value for s in RunStatus]


class ConsumerVersionSchema(Schema):
    version = fields.String(required=True, validate=validate.Length(1, 64),
                            metadata={"description": "as loaded; a version that is not PEP 440 counts as unknown"})
    understands = fields.List(fields.String(validate=validate.OneOf(STATUS_NAMES)), allow_none=True,
                              metadata={"description": "for consumers no plugin declares: the statuses it reads"})


class ConsumerSchema(ConsumerVersionSchema):
    name = fields.String(required=True, validate=NAME)


class ConsumerReportSchema(Schema):
    consumers = fields.List(fields.Nested(ConsumerSchema), required=True)

    @validates_schema
    def _names_are_unique(self, data, **kwargs):
        names = [c["name"] for c in data.get("consumers", [])]
        if len(names) != len(set(names)):
            raise ValidationError("each consumer is reported once", "consumers")


class ReportedConsumerSchema(Schema):
    name = fields.String()
    version = fields.String()
    understands = fields.List(fields.String())
    declared_by = fields.String()


class ConsumerListSchema(Schema):
    reported_at = fields.String(allow_none=True)
    consumers = fields.List(fields.Nested(ReportedConsumerSchema))


class CompatReportSchema(Schema):
    reported_at = fields.String(allow_none=True)
    statuses = fields.Dict(keys=fields.String(), values=fields.Dict())
    delegation = fields.Dict()
    consumers = fields.List(fields.Nested(ReportedConsumerSchema))
    runs_in_unreadable_status = fields.Integer()


def _reported_consumers() -> dict:
    """The host's report as the gate reads it: each consumer with what it understands and who declared it."""
    gate = compat_service.current_gate()
    reported = {row["name"] for row in consumer_store.load_report()[1]}
    return {
        "reported_at": rfc3339(gate.reported_at),
        "consumers": [c for c in gate.report_dict()["consumers"] if c["name"] in reported],
    }


def _valid_name(name: str) -> str:
    if not 1 <= len(name) <= 128:
        raise ValidationFailed("a consumer name has 1 to 128 characters",
                       {"name": ["Length must be between 1 and 128."]})
    return name


@blp.route("/consumers")
class Consumers(MethodView):
    @roles("host", "operator", actor=False)
    @blp.response(200, ConsumerListSchema)
    def get(self):
        """The host's report of loaded consumers."""
        return _reported_consumers()

    @roles("host", actor=False)
    @blp.arguments(ConsumerReportSchema())
    @blp.response(200, ConsumerListSchema)
    def put(self, body):
        """Report every consumer the host has loaded, replacing the previous report ([] opens the gate)."""
        consumer_store.replace_report(body["consumers"])
        return _reported_consumers()


@blp.route("/consumers/<name>")
class Consumer(MethodView):
    @roles("host", actor=False)
    @blp.arguments(ConsumerVersionSchema())
    @blp.response(200, ConsumerListSchema)
    def put(self, body, name):
        """Add or update one consumer of the report."""
        consumer_store.put_consumer(_valid_name(name), body["version"], body.get("understands"))
        return _reported_consumers()

    @roles("host", actor=False)
    @blp.doc(responses=error_responses(404))
    @blp.response(204)
    def delete(self, name):
        """Remove one consumer from the report."""
        if not consumer_store.delete_consumer(name):
            raise NotFound(f"no consumer {name!r} is reported")


@blp.route("/compat")
class Compat(MethodView):
    @roles("host", "operator", actor=False)
    @blp.response(200, CompatReportSchema)
    def get(self):
        """The gate's report: which statuses may be written, whether delegation is offered, and why."""
        report = compat_service.report()
        report["reported_at"] = rfc3339(report["reported_at"])
        return report
