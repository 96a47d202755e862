"""marshmallow schemas of the inbox, the decision endpoint and grants (docs/http-api.md, "Inbox and decisions",
"Grants")."""

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from ..domain.decisions import MAX_COMMENT
from ..store.grants import GRANTS
from .schemas import INT32, PendingCallSchema, StrictInteger


class DecisionBodySchema(Schema):
    pause_id = fields.UUID(required=True, metadata={"description": "the pause the decision was made for"})
    generation = StrictInteger(required=True, validate=validate.Range(1, INT32))
    decision = fields.String(required=True, validate=validate.OneOf(["approve", "deny", "input"]))
    turn_digest = fields.String(validate=validate.Regexp(r"^[0-9a-fA-F]{64}$", error="Not a SHA-256 hex digest."),
                                metadata={"description": "approve, deny: the digest of the calls shown"})
    input = fields.Raw(allow_none=True, metadata={"description": "input: any JSON that matches the pause's schema"})
    comment = fields.String(allow_none=True, validate=validate.Length(max=MAX_COMMENT))
    mode = fields.String(load_default="now", validate=validate.OneOf(["now", "store"]),
                         metadata={"description": "now (default): continue in this request; store: 202 receipt"})

    @validates_schema
    def _what_each_decision_needs(self, data, **kwargs):
        if data.get("decision") == "input" and "input" not in data:
            raise ValidationError("Missing data for required field.", "input")
        if data.get("decision") in ("approve", "deny") and "turn_digest" not in data:
            raise ValidationError("Missing data for required field.", "turn_digest")


class ReceiptSchema(Schema):
    receipt_id = fields.String(metadata={"format": "uuid"})
    run_id = fields.String(metadata={"format": "uuid"})
    pause_id = fields.String(metadata={"format": "uuid"})
    generation = fields.Integer()
    decision = fields.String(metadata={"enum": ["approve", "deny", "input"]})
    stored_at = fields.String(metadata={"format": "date-time"})


class InboxItemSchema(Schema):
    run_id = fields.String(metadata={"format": "uuid"})
    pause_id = fields.String(metadata={"format": "uuid"})
    generation = fields.Integer()
    kind = fields.String(metadata={"enum": ["approval", "input"]})
    turn_digest = fields.String(metadata={"description": "approval: the SHA-256 of the pending calls"})
    pending_calls = fields.List(fields.Nested(PendingCallSchema), metadata={"description": "approval"})
    input_schema = fields.Dict(metadata={"description": "input: the JSON schema the answer must match"})
    question = fields.String(metadata={"description": "input: the question the model asked"})
    tool_call_id = fields.String(metadata={"description": "input: the call the answer answers"})
    since = fields.String(metadata={"format": "date-time"})


class InboxSchema(Schema):
    items = fields.List(fields.Nested(InboxItemSchema))


class GrantsBodySchema(Schema):
    workspace = fields.String(load_default="0", validate=validate.Length(1, 64))
    grants = fields.List(fields.String(validate=validate.OneOf(GRANTS)), required=True)


class GrantsQuerySchema(Schema):
    workspace = fields.String(load_default="0", validate=validate.Length(1, 64))


class GrantsSchema(Schema):
    actor = fields.String()
    workspace = fields.String()
    grants = fields.List(fields.String(metadata={"enum": list(GRANTS)}))
