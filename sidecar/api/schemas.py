"""marshmallow schemas of the runs API: they validate what comes in and document what goes out.

Numbers are strict (no "5" for 5, no true for 1, no NaN) and bounded by what the columns hold, so a
well-formed but absurd value is a 422 instead of a database error.
"""

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from ..domain.vocabulary import RunStatus, TerminationReason, ToolEffect
from .error_codes import ERROR_CODES

INT32 = 2**31 - 1
INT63 = 2**63 - 1
TEN_YEARS = 10 * 365 * 24 * 3600


class StrictInteger(fields.Integer):
    def __init__(self, **kwargs):
        super().__init__(strict=True, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, bool):
            raise self.make_error("invalid")
        return super()._deserialize(value, attr, data, **kwargs)


class StrictNumber(fields.Float):
    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.make_error("invalid")
        try:
            float(value)
        except OverflowError:
            raise self.make_error("special") from None
        return super()._deserialize(value, attr, data, **kwargs)


class ToolCallSchema(Schema):
    id = fields.String(required=True, validate=validate.Length(1, 128))
    name = fields.String(required=True, validate=validate.Length(1, 128))
    arguments = fields.Dict(keys=fields.String(), load_default=dict)


class ScriptTurnSchema(Schema):
    """A model turn of the scripted provider: tool calls, or the final content."""

    tool_calls = fields.List(fields.Nested(ToolCallSchema), validate=validate.Length(min=1))
    content = fields.String()

    @validates_schema
    def _one_kind(self, data, **kwargs):
        if ("tool_calls" in data) == ("content" in data):
            raise ValidationError("a turn has either tool_calls or content")


class BudgetSchema(Schema):
    deadline_seconds = StrictNumber(allow_none=True, validate=validate.Range(0, TEN_YEARS, min_inclusive=False))
    max_delegations = StrictInteger(allow_none=True, validate=validate.Range(0, INT32))
    max_bytes = StrictInteger(allow_none=True, validate=validate.Range(0, INT63))
    max_tokens = StrictInteger(allow_none=True, validate=validate.Range(0, INT63))
    max_cost = StrictNumber(allow_none=True, validate=validate.Range(0, 1e12))
    max_iterations = StrictInteger(allow_none=True, validate=validate.Range(1, INT32))


class RunCreateSchema(Schema):
    input = fields.String(required=True, validate=validate.Length(min=1))
    provider = fields.String(allow_none=True, validate=validate.Length(1, 64))
    model = fields.String(allow_none=True, validate=validate.Length(1, 255))
    script = fields.List(fields.Nested(ScriptTurnSchema), allow_none=True)
    tools = fields.List(fields.String(validate=validate.Length(1, 128)), allow_none=True)
    origin = fields.String(allow_none=True, validate=validate.Length(max=255))
    on_denial = fields.String(load_default="continue", validate=validate.OneOf(["continue", "fail"]))
    budget = fields.Nested(BudgetSchema, allow_none=True)

    @validates_schema
    def _script_is_for_the_scripted_provider(self, data, **kwargs):
        if data.get("script") is not None and data.get("provider") not in (None, "scripted"):
            raise ValidationError("script is only for the scripted provider", "script")


class LeaseSchema(Schema):
    holder = fields.String()
    expires_at = fields.String(metadata={"format": "date-time"})


class BudgetStateSchema(Schema):
    deadline_at = fields.String(allow_none=True, metadata={"format": "date-time"})
    max_delegations = fields.Integer(allow_none=True)
    delegations_used = fields.Integer()
    max_bytes = fields.Integer(allow_none=True)
    bytes_used = fields.Integer()
    max_tokens = fields.Integer(allow_none=True)
    tokens_used = fields.Integer()
    max_cost = fields.Float(allow_none=True)
    cost_used = fields.Float()
    max_iterations = fields.Integer(allow_none=True)
    iterations_used = fields.Integer()


class PendingCallSchema(Schema):
    """A call of the model's turn that waits for a person's approval, as the person is shown it."""

    id = fields.String(metadata={"description": "the tool call's id"})
    name = fields.String(metadata={"description": "the tool's name"})
    arguments = fields.Dict(metadata={"description": "the arguments the model gave"})
    effect = fields.String(allow_none=True, metadata={
        "enum": [*(e.value for e in ToolEffect), None],
        "description": "what the tool declares it does; null for an unknown tool"})


class WaitingSchema(Schema):
    """Present only while the run waits; which fields are set depends on `kind`."""

    kind = fields.String(metadata={"enum": ["input", "approval", "dependency"]})
    pause_id = fields.String()
    generation = fields.Integer()
    since = fields.String(metadata={"format": "date-time"})
    tool_call_id = fields.String()
    remote_agent = fields.String()
    remote_task_id = fields.String(allow_none=True)
    outbound_id = fields.String()
    outcome = fields.String()
    next_poll_at = fields.String(metadata={"format": "date-time"})
    deadline_at = fields.String(metadata={"format": "date-time"})
    turn_digest = fields.String(metadata={"description": "approval: the SHA-256 of the pending calls"})
    pending_calls = fields.List(fields.Nested(PendingCallSchema), metadata={"description": "approval"})
    input_schema = fields.Dict(metadata={"description": "input: the JSON schema the answer must match"})
    question = fields.String(metadata={"description": "input: the question the model asked"})


class RunSchema(Schema):
    id = fields.String(metadata={"format": "uuid"})
    status = fields.String(metadata={"enum": [s.value for s in RunStatus]})
    owner = fields.String()
    workspace = fields.String()
    origin = fields.String(allow_none=True)
    input = fields.String()
    output = fields.String(allow_none=True)
    termination_reason = fields.String(allow_none=True, metadata={
        "enum": [*(r.value for r in TerminationReason), None], "description": "why a finished run ended"})
    created_at = fields.String(metadata={"format": "date-time"})
    updated_at = fields.String(metadata={"format": "date-time"})
    finished_at = fields.String(allow_none=True, metadata={"format": "date-time"})
    cancel_requested_at = fields.String(allow_none=True, metadata={"format": "date-time"})
    lease = fields.Nested(LeaseSchema, allow_none=True)
    budget = fields.Nested(BudgetStateSchema)
    waiting = fields.Nested(WaitingSchema)


# Built once: a schema instantiated per request builds its nested schemas again too (a third of a POST's
# CPU went to marshmallow's constructors). Instances hold no per-call state, so threads share them.
RUN_SCHEMA = RunSchema()


class RunListSchema(Schema):
    items = fields.List(fields.Nested(RunSchema))
    next_cursor = fields.String(allow_none=True, metadata={"description": "pass as `cursor` for the next page"})


class RunListQuerySchema(Schema):
    status = fields.String(validate=validate.OneOf([s.value for s in RunStatus]))
    owner = fields.String(validate=validate.Length(1, 255))
    origin = fields.String(validate=validate.Length(1, 255))
    limit = fields.Integer(load_default=50, validate=validate.Range(1, 200))
    cursor = fields.String(metadata={"description": "the `next_cursor` of the previous page"})


class EventListSchema(Schema):
    # Each item is an `Event`, a oneOf over the kinds (api/event_schemas.py registers it): documented there,
    # passed through here as stored.
    items = fields.List(fields.Raw(metadata={"allOf": [{"$ref": "#/components/schemas/Event"}]}))


class EventsQuerySchema(Schema):
    after = fields.Integer(load_default=0, validate=validate.Range(0, INT32),
                           metadata={"description": "only events with a greater sequence"})


class ErrorSchema(Schema):
    code = fields.String(required=True, metadata={
        "enum": sorted(ERROR_CODES), "description": "public and stable; the table in docs/http-api.md says when"})
    message = fields.String(required=True, metadata={"description": "for people; its wording may change"})
    errors = fields.Dict(keys=fields.String(), values=fields.List(fields.String()),
                         metadata={"description": "field -> messages (flat), only where fields are concerned"})
