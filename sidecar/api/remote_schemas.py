"""Schemas of the remote agents and outbound endpoints (docs/http-api.md, "Remote agents, the outbound
journal and push").

A secret's value is validated without ever being echoed: every message here is fixed text.
"""

from marshmallow import Schema, ValidationError, fields, validate

from ..domain.vocabulary import OutboundKind, OutboundOutcome
from .schemas import TEN_YEARS, StrictNumber

# Lower case only: MariaDB compares names case-insensitively and PostgreSQL does not, so "Research" and
# "research" would be one agent on one database and two on the other. Digits, "-" and "_" inside.
NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
NAME_RULE = "1 to 64 characters: lower-case letters, digits, '-' and '_', starting with a letter or digit"
MAX_URL = 2048
MIN_POLL_SECONDS = 0.2
MAX_POLL_SECONDS = 24 * 3600
# RFC 9110 token characters: anything else could not be sent as a header name.
HEADER_NAME_PATTERN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
# Headers the A2A client sets itself: an auth header may not replace them.
RESERVED_HEADERS = frozenset({"host", "content-length", "content-type", "transfer-encoding", "connection",
                              "a2a-version", "a2a-extensions"})
MAX_SECRET = 8192


class WholeMatch(validate.Regexp):
    """A pattern the whole value must match. The OpenAPI document shows the pattern, and OpenAPI patterns are
    ECMA-262 regexes, which have no `\\Z`; Python's `$` also matches before a final newline, so the value is
    matched whole here instead (fullmatch), and "name\\n" is refused as the document means."""

    def __call__(self, value: str) -> str:
        if self.regex.fullmatch(value) is None:
            raise ValidationError(self._format_error(value))
        return value


class StrictBoolean(fields.Boolean):
    """true or false only; marshmallow's Boolean would take "yes", 1 and "on" as well."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, bool):
            raise self.make_error("invalid")
        return value


def _not_reserved(header: str) -> None:
    if header.lower() in RESERVED_HEADERS:
        raise ValidationError("This header is set by the sidecar itself.")


class AuthSchema(Schema):
    header = fields.String(required=True, validate=[
        validate.Length(1, 128),
        WholeMatch(HEADER_NAME_PATTERN, error="Not a valid HTTP header name."),
        _not_reserved,
    ])
    value = fields.String(
        load_only=True,
        validate=[validate.Length(1, MAX_SECRET),
                  # CR or LF would let the value add headers of its own; no control character is needed.
                  WholeMatch(r"^[^\x00-\x1f\x7f]*$", error="Must not contain control characters.")],
        metadata={"description": "write-only: stored sealed, never returned. Required when registering; "
                                 "omitted in a PUT, the stored value is kept"},
    )


class AgentSettingsSchema(Schema):
    url = fields.String(required=True, validate=validate.Length(1, MAX_URL),
                        metadata={"description": "the agent's base URL (http or https)"})
    poll_interval_seconds = StrictNumber(load_default=30.0,
                                         validate=validate.Range(MIN_POLL_SECONDS, MAX_POLL_SECONDS))
    deadline_seconds = StrictNumber(load_default=3600.0, validate=validate.Range(0, TEN_YEARS, min_inclusive=False))
    auth = fields.Nested(AuthSchema, allow_none=True, load_default=None)
    push = StrictBoolean(load_default=False)


class AgentCreateSchema(AgentSettingsSchema):
    name = fields.String(required=True, validate=WholeMatch(NAME_PATTERN, error=NAME_RULE))


class AgentReplaceSchema(AgentSettingsSchema):
    name = fields.String(metadata={"description": "optional; must be the name in the path"})


class AuthStateSchema(Schema):
    header = fields.String()
    value_set = fields.Boolean(metadata={"description": "a value is stored (it is never returned)"})


class EndpointSchema(Schema):
    rpc_url = fields.String()
    protocol_version = fields.String()
    push_supported = fields.Boolean()


class AgentSchema(Schema):
    name = fields.String()
    url = fields.String()
    poll_interval_seconds = fields.Float()
    deadline_seconds = fields.Float()
    push = fields.Boolean()
    auth = fields.Nested(AuthStateSchema, allow_none=True)
    endpoint = fields.Nested(EndpointSchema, allow_none=True,
                             metadata={"description": "what the agent card said, once read; null before"})
    created_at = fields.String(metadata={"format": "date-time"})
    updated_at = fields.String(metadata={"format": "date-time"})


class AgentListSchema(Schema):
    items = fields.List(fields.Nested(AgentSchema))


class OutboundQuerySchema(Schema):
    outcome = fields.String(validate=validate.OneOf([o.value for o in OutboundOutcome]))
    run_id = fields.UUID()
    kind = fields.String(validate=validate.OneOf([k.value for k in OutboundKind]))
    limit = fields.Integer(load_default=100, validate=validate.Range(1, 1000))


class OutboundSchema(Schema):
    id = fields.String()
    kind = fields.String()
    owner = fields.String()
    run_id = fields.String()
    remote_agent = fields.String()
    message_id = fields.String()
    request_sha256 = fields.String()
    outcome = fields.String()
    remote_task_id = fields.String(allow_none=True)
    created_at = fields.String(metadata={"format": "date-time"})
    sent_at = fields.String(allow_none=True, metadata={"format": "date-time"})
    error = fields.String(allow_none=True)
    resend_of = fields.String(allow_none=True)


class OutboundListSchema(Schema):
    items = fields.List(fields.Nested(OutboundSchema))
