"""Consumers and compatibility (docs/http-api.md, "Consumers and compatibility"): the host reports the
consumers it has loaded; the gate says what may be written and whether delegation is offered."""

from flask.views import MethodView
from marshmallow import Schema, ValidationError, fields, validate, validates_schema

import nrllm_sidecar_compat.service as compat_service

from ..domain.clock import rfc3339
from ..domain.errors import NotFound, ValidationFailed
from ..domain.vocabulary import RunStatus
from ..store import consumers as consumer_store
from . import examples
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
    understands = fields.List(fields.String(metadata={"enum": STATUS_NAMES}))
    declared_by = fields.String(metadata={
        "description": "who said what it understands: `plugin NAME` or `host report`"})


class ConsumerListSchema(Schema):
    reported_at = fields.String(allow_none=True, metadata={"format": "date-time"})
    consumers = fields.List(fields.Nested(ReportedConsumerSchema))


class BlockerSchema(Schema):
    consumer = fields.String(metadata={"description": "the consumer that cannot read the status"})
    version = fields.String(metadata={"description": "its version as reported"})
    understands_from = fields.String(allow_none=True, metadata={
        "description": "the first version of it that reads the status; null when none is known"})


class StatusGateSchema(Schema):
    writable = fields.Boolean(metadata={"description": "the status may be written (for runs without an origin)"})
    blocked_by = fields.List(fields.Nested(BlockerSchema))


class DelegationOfferSchema(Schema):
    offered = fields.Boolean(metadata={"description": "delegation tools are offered (for runs without an origin)"})
    blocked_origins = fields.List(fields.String(), metadata={
        "description": "origins for which delegation is not offered although it is for the rest"})
    reason = fields.String(allow_none=True, metadata={
        "description": "for people: why delegation is not offered, citing the consumer's upgrade note; null when "
                       "it is"})


class CompatReportSchema(Schema):
    reported_at = fields.String(allow_none=True, metadata={
        "format": "date-time", "description": "when the host last reported; null before its first report"})
    statuses = fields.Dict(keys=fields.String(), values=fields.Nested(StatusGateSchema), metadata={
        "description": "each status outside the base vocabulary (such as waiting_for_dependency) -> its gate"})
    delegation = fields.Nested(DelegationOfferSchema)
    consumers = fields.List(fields.Nested(ReportedConsumerSchema))
    runs_in_unreadable_status = fields.Integer(metadata={
        "description": "runs in a status a loaded consumer cannot read (written before a report took it away)"})


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
    @blp.response(200, ConsumerListSchema, example=examples.CONSUMERS)
    def get(self):
        """The host's report of loaded consumers."""
        return _reported_consumers()

    @roles("host", actor=False)
    @blp.arguments(ConsumerReportSchema(), example=examples.CONSUMER_REPORT)
    @blp.response(200, ConsumerListSchema, example=examples.CONSUMERS)
    def put(self, body):
        """Report every consumer the host has loaded, replacing the previous report ([] opens the gate)."""
        consumer_store.replace_report(body["consumers"])
        return _reported_consumers()


@blp.route("/consumers/<name>")
class Consumer(MethodView):
    @roles("host", actor=False)
    @blp.arguments(ConsumerVersionSchema(), example=examples.CONSUMER_VERSION)
    @blp.response(200, ConsumerListSchema, example=examples.CONSUMERS)
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
    @blp.response(200, CompatReportSchema, example=examples.COMPAT)
    def get(self):
        """The gate's report: which statuses may be written, whether delegation is offered, and why."""
        report = compat_service.compat_report()
        report["reported_at"] = rfc3339(report["reported_at"])
        return report
