"""Remote agents, the outbound journal and its resend (docs/http-api.md, "Remote agents, the outbound
journal and push"): operators only.

Auth values are write-only: they are sealed before they are stored and no answer, log line or error
message carries them.
"""

import json
import logging
import re
from urllib.parse import urlsplit

from flask import current_app
from flask.views import MethodView

from ..delegation import resend
from ..delegation.address_guard import AddressRefused, check_url
from ..domain.clock import rfc3339
from ..domain.errors import NameTaken, NoStoredSecret, NotFound, ValidationFailed
from ..store import outbound_listing
from ..store import remote_agents as store
from ..store.models import Outbound, RemoteAgent
from . import examples
from .auth import principal, roles
from .errors import errors
from .parsing import Blueprint
from .remote_schemas import (
    NAME_PATTERN,
    AgentCreateSchema,
    AgentListSchema,
    AgentReplaceSchema,
    AgentSchema,
    OutboundListSchema,
    OutboundQuerySchema,
    OutboundSchema,
)

log = logging.getLogger(__name__)
blp = Blueprint("remote_agents", __name__, url_prefix="/api/v1", description="Remote agents and the outbound journal")


def _invalid(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, {field: [message]})


def _check_url(url: str) -> None:
    """422 on `url` unless it is a plain http(s) URL whose addresses the guard lets the sidecar reach."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        raise _invalid("url", "Not a valid URL.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _invalid("url", "Must be an http or https URL with a host.")
    if re.search(r"[\x00-\x20\x7f]", url):
        raise _invalid("url", "Must not contain spaces or control characters.")
    if parts.username is not None or parts.password is not None:
        # Credentials in the URL would be shown to anyone who reads the agent: they belong in `auth`.
        raise _invalid("url", "Must not contain credentials; send them as auth.")
    if parts.fragment:
        raise _invalid("url", "Must not have a fragment.")
    try:
        check_url(url, current_app.config["NRLLM_SETTINGS"].remote_allow)
    except AddressRefused as exc:
        raise _invalid("url", str(exc)) from None


def _fields(body: dict, *, keep_secret: bool) -> store.AgentFields:
    _check_url(body["url"])
    auth = body["auth"]
    if auth is not None and "value" not in auth and not keep_secret:
        raise _invalid("auth.value", "Missing data for required field.")
    return store.AgentFields(
        url=body["url"],
        poll_interval_seconds=body["poll_interval_seconds"],
        deadline_seconds=body["deadline_seconds"],
        push=body["push"],
        auth_header=auth["header"] if auth else None,
        auth_value=(auth.get("value", store.KEEP) if auth else None),
    )


def _endpoint(raw: str | None) -> dict | None:
    """What the card said, without anything else the cache may hold (such as an auth value)."""
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    return {key: data.get(key) for key in ("rpc_url", "protocol_version", "push_supported")}


def agent_document(row: RemoteAgent) -> dict:
    return {
        "name": row.name,
        "url": row.url,
        "poll_interval_seconds": row.poll_interval_seconds,
        "deadline_seconds": row.deadline_seconds,
        "push": bool(row.push),
        "auth": ({"header": row.auth_header, "value_set": row.auth_value_sealed is not None}
                 if row.auth_header else None),
        "endpoint": _endpoint(row.endpoint),
        "created_at": rfc3339(row.created_at),
        "updated_at": rfc3339(row.updated_at),
    }


def outbound_document(row: Outbound) -> dict:
    return {
        "id": row.id, "kind": row.kind, "owner": row.owner, "run_id": row.run_id,
        "remote_agent": row.remote_agent, "message_id": row.message_id, "request_sha256": row.request_sha256,
        "outcome": row.outcome, "remote_task_id": row.remote_task_id, "created_at": rfc3339(row.created_at),
        "sent_at": rfc3339(row.sent_at), "error": row.error, "resend_of": row.resend_of,
    }


def _known_name(name: str) -> str:
    # A name that cannot exist is as absent as an unregistered one (as a malformed run id is).
    if not re.fullmatch(NAME_PATTERN, name):
        raise NotFound("no remote agent with that name")
    return name


@blp.route("/remote-agents")
class RemoteAgents(MethodView):
    @roles("operator", actor=False)
    @errors(400, 401, 403, 409, 413)
    @blp.arguments(AgentCreateSchema(), example=examples.AGENT_CREATE)
    @blp.response(201, AgentSchema, example=examples.AGENT)
    def post(self, body):
        """Register a remote agent. A name already registered is 409 invalid_state."""
        try:
            row = store.create_agent(body["name"], _fields(body, keep_secret=False))
        except NameTaken as exc:
            raise NameTaken(exc.message, {"name": ["Already registered."]}) from None
        log.info("remote agent %s registered: %s (auth header: %s)", row.name, row.url, row.auth_header or "none")
        return agent_document(row)

    @roles("operator", actor=False)
    @errors(401, 403)
    @blp.response(200, AgentListSchema, example=examples.AGENTS)
    def get(self):
        """Every registered agent, by name."""
        return {"items": [agent_document(row) for row in store.list_agents()]}


@blp.route("/remote-agents/<name>")
class RemoteAgentByName(MethodView):
    @roles("operator", actor=False)
    @errors(401, 403, 404)
    @blp.response(200, AgentSchema, example=examples.AGENT)
    def get(self, name):
        """One agent."""
        row = store.get_agent(_known_name(name))
        if row is None:
            raise NotFound(f"no remote agent {name!r}")
        return agent_document(row)

    @roles("operator", actor=False)
    @errors(400, 401, 403, 404, 413)
    @blp.arguments(AgentReplaceSchema(), example=examples.AGENT_REPLACE)
    @blp.response(200, AgentSchema, example=examples.AGENT)
    def put(self, body, name):
        """Replace an agent's settings. `auth` with a header and no value keeps the stored value; no `auth`
        removes it."""
        if store.get_agent(_known_name(name)) is None:  # 404 before any field is judged, as everywhere
            raise NotFound(f"no remote agent {name!r}")
        if body.get("name", name) != name:
            raise _invalid("name", "A remote agent cannot be renamed: register it under the new name.")
        try:
            row = store.update_agent(name, _fields(body, keep_secret=True))
        except NotFound:
            raise NotFound(f"no remote agent {name!r}") from None
        except NoStoredSecret as exc:
            raise _invalid("auth.value", str(exc)) from None
        log.info("remote agent %s updated: %s (auth header: %s)", row.name, row.url, row.auth_header or "none")
        return agent_document(row)

    @roles("operator", actor=False)
    @errors(401, 403, 404, 409)
    @blp.response(204)
    def delete(self, name):
        """Remove an agent; 409 invalid_state while runs wait on it."""
        try:
            store.delete_agent(_known_name(name))
        except NotFound:
            raise NotFound(f"no remote agent {name!r}") from None
        log.info("remote agent %s removed", name)


@blp.route("/outbound")
class OutboundJournal(MethodView):
    @roles("operator", actor=False)
    @errors(401, 403)
    @blp.arguments(OutboundQuerySchema(), location="query")
    @blp.response(200, OutboundListSchema, example=examples.OUTBOUNDS)
    def get(self, query):
        """Journal rows, newest first (at most `limit`), filtered by outcome, run and kind."""
        rows = outbound_listing.list_outbound(
            outcome=query.get("outcome"), kind=query.get("kind"), limit=query["limit"],
            run_id=str(query["run_id"]) if "run_id" in query else None,
        )
        return {"items": [outbound_document(row) for row in rows]}


@blp.route("/outbound/<outbound_id>/resend")
class OutboundResend(MethodView):
    @roles("operator", actor=False)
    @errors(401, 403, 404, 409)
    @blp.response(201, OutboundSchema, example=examples.OUTBOUND_RESENT)
    def post(self, outbound_id):
        """Resend a send row whose outcome is unknown, under a new message id (the old row `superseded`).
        Reconciliation is tried first; anything but an `outcome_unknown` send its run still waits on is
        409 not_resendable."""
        row = resend.resend(outbound_id, current_app.config["NRLLM_SETTINGS"], by=principal().label)
        return outbound_document(row)  # NotFound and NotResendable are answered as errors (api/errors.py)
