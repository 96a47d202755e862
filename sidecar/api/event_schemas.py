"""The events of a run, typed per kind for the OpenAPI document (docs/http-api.md, "Events").

An event is `{"sequence", "kind", "at", "payload"}`; `kind` says what the payload holds. The document shows
`Event` as a oneOf of one schema per kind, told apart by `kind` (an OpenAPI discriminator), and a pause's
payload as a oneOf told apart by its own `kind`. These schemas document; the answers are the stored
events as they are (api/documents.py). New kinds come in minor releases: a client ignores a kind it does
not know, which a discriminator mapping cannot say, so the description does.
"""

from marshmallow import INCLUDE, Schema, fields

from ..domain.vocabulary import OutboundKind, OutboundOutcome, RunStatus, ToolEffect
from .schemas import PendingCallSchema

STATUSES = [s.value for s in RunStatus]
EFFECTS = [e.value for e in ToolEffect]
EVENT_DESCRIPTION = ("A change of a run, written in the same transaction as the change. `kind` says what the "
                     "payload holds; ignore a kind you do not know (new kinds come in minor releases).")


def _uuid(**metadata):
    return fields.String(metadata={"format": "uuid", **metadata})


class StatusPayloadSchema(Schema):
    from_ = fields.String(data_key="from", allow_none=True,
                          metadata={"enum": [*STATUSES, None], "description": "null for a new run"})
    to = fields.String(metadata={"enum": STATUSES})
    by = fields.String(metadata={"description": "on a cancel: who cancelled"})


class EventToolCallSchema(Schema):
    id = fields.String()
    name = fields.String()
    arguments = fields.Dict()


class LlmPayloadSchema(Schema):
    index = fields.Integer(metadata={"description": "the model turn's index, from 0"})
    provider = fields.String()
    content = fields.String(allow_none=True)
    tool_calls = fields.List(fields.Nested(EventToolCallSchema))
    tokens = fields.Integer()
    cost = fields.Float()


class ToolPayloadSchema(Schema):
    turn_index = fields.Integer()
    tool_call_id = fields.String()
    name = fields.String()
    arguments = fields.Dict(metadata={"description": "absent for a delegation's result"})
    effect = fields.String(allow_none=True, metadata={"enum": [*EFFECTS, None],
                                                      "description": "null for an unknown tool"})
    result = fields.String(metadata={"description": "the result text the model gets"})


class NotePayloadSchema(Schema):
    text = fields.String()


class ApprovalPauseSchema(Schema):
    kind = fields.String(metadata={"enum": ["approval"]})
    pause_id = _uuid()
    generation = fields.Integer()
    turn_index = fields.Integer()
    turn_digest = fields.String()
    pending_calls = fields.List(fields.Nested(PendingCallSchema))


class InputPauseSchema(Schema):
    kind = fields.String(metadata={"enum": ["input"]})
    pause_id = _uuid()
    generation = fields.Integer()
    turn_index = fields.Integer()
    tool_call_id = fields.String()
    question = fields.String()
    input_schema = fields.Dict()


class DependencyPauseSchema(Schema):
    kind = fields.String(metadata={"enum": ["dependency"]})
    pause_id = _uuid()
    generation = fields.Integer()
    tool_call_id = fields.String()
    remote_agent = fields.String()
    outbound_id = _uuid()
    outcome = fields.String(metadata={"enum": [o.value for o in OutboundOutcome]})
    remote_task_id = fields.String(allow_none=True)


class DecisionPayloadSchema(Schema):
    receipt_id = _uuid()
    pause_id = _uuid()
    generation = fields.Integer()
    decision = fields.String(metadata={"enum": ["approve", "deny", "input"]})
    by = fields.String(metadata={"description": "the deciding actor"})
    workspace = fields.String()
    comment = fields.String(allow_none=True)
    mode = fields.String(metadata={"enum": ["now", "store"]})
    input = fields.Raw(metadata={"description": "input decisions: the submitted input"})
    turn_digest = fields.String(metadata={"description": "approve and deny: the digest decided on"})


class DecisionRefusedPayloadSchema(Schema):
    pause_id = _uuid()
    generation = fields.Integer()
    receipt_id = _uuid()
    decision = fields.String(metadata={"enum": ["approve", "deny", "input"]})
    by = fields.String()
    comment = fields.String(allow_none=True)
    reason = fields.String(metadata={"description": "why the decider's right was gone"})


class ResumePayloadSchema(Schema):
    class Meta:
        unknown = INCLUDE  # a dependency's resolution carries its own details (deadline_at, outbound_id, ...)

    pause_id = _uuid()
    resolution = fields.String(metadata={
        "description": "a person's decision (approve, deny, input); for a dependency result, timeout, "
                       "cancelled or a termination reason"})
    receipt_id = _uuid(description="a person's pause: the decision's receipt")
    by = fields.String(metadata={"description": "a person's pause: the deciding actor"})


class OutboundPayloadSchema(Schema):
    outbound_id = _uuid()
    kind = fields.String(metadata={"enum": [k.value for k in OutboundKind]})
    message_id = fields.String()
    outcome = fields.String(metadata={"enum": [o.value for o in OutboundOutcome]})
    remote_agent = fields.String()
    remote_task_id = fields.String(allow_none=True)
    note = fields.String()


class CancelRequestedPayloadSchema(Schema):
    by = fields.String()


class BudgetPayloadSchema(Schema):
    reason = fields.String(metadata={"description": "the termination reason"})
    message = fields.String()


class ErrorPayloadSchema(Schema):
    message = fields.String()
    provider = fields.String(metadata={"description": "when a provider failed"})


class LeaseLostPayloadSchema(Schema):
    holder = fields.String()
    epoch = fields.Integer()


class RequeuedPayloadSchema(Schema):
    reason = fields.String(metadata={"enum": ["lease_expired", "released"]})
    requeue = fields.Integer(metadata={"description": "lease_expired: how many times the run was requeued"})
    holder = fields.String(metadata={"description": "released: the process that let it go"})


class HandedBackPayloadSchema(Schema):
    holder = fields.String()
    epoch = fields.Integer()
    grace_seconds = fields.Float()


# kind -> the schema of its payload, in the order of docs/http-api.md's table. `pause` is a oneOf (below).
PAYLOADS: dict[str, type[Schema] | None] = {
    "status": StatusPayloadSchema, "llm": LlmPayloadSchema, "tool": ToolPayloadSchema, "note": NotePayloadSchema,
    "pause": None, "decision": DecisionPayloadSchema, "decision_refused": DecisionRefusedPayloadSchema,
    "resume": ResumePayloadSchema, "outbound": OutboundPayloadSchema,
    "cancel_requested": CancelRequestedPayloadSchema, "budget": BudgetPayloadSchema, "error": ErrorPayloadSchema,
    "lease_lost": LeaseLostPayloadSchema, "requeued": RequeuedPayloadSchema, "handed_back": HandedBackPayloadSchema,
}
PAUSES = {"approval": ApprovalPauseSchema, "input": InputPauseSchema, "dependency": DependencyPauseSchema}


def _reference(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _component_name(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("_")) + "Event"


def register(spec) -> None:
    """Add `Event` (a oneOf over every kind), the per-kind events and their payloads to the document."""
    components = spec.components
    for pause_kind, schema in PAUSES.items():
        components.schema(f"{pause_kind.capitalize()}PausePayload", schema=schema)
    components.schema("PausePayload", {
        "oneOf": [_reference(f"{k.capitalize()}PausePayload") for k in PAUSES],
        "discriminator": {"propertyName": "kind",
                          "mapping": {k: f"#/components/schemas/{k.capitalize()}PausePayload" for k in PAUSES}},
    })
    for kind, payload in PAYLOADS.items():
        payload_name = "PausePayload" if payload is None else _component_name(kind).removesuffix("Event") + "Payload"
        if payload is not None:
            components.schema(payload_name, schema=payload)
        components.schema(_component_name(kind), {
            "type": "object",
            "required": ["sequence", "kind", "at", "payload"],
            "properties": {
                "sequence": {"type": "integer", "description": "gap-free from 1 within the run"},
                "kind": {"type": "string", "enum": [kind]},
                "at": {"type": "string", "format": "date-time"},
                "payload": _reference(payload_name),
            },
            "additionalProperties": False,
        })
    components.schema("Event", {
        "description": EVENT_DESCRIPTION,
        "oneOf": [_reference(_component_name(kind)) for kind in PAYLOADS],
        "discriminator": {"propertyName": "kind",
                          "mapping": {kind: f"#/components/schemas/{_component_name(kind)}" for kind in PAYLOADS}},
    })
