"""The operator's pages: waiting runs, the outbound journal and its resend, remote agents, consumers and the
gate, health and worker heartbeats, tokens. Each action calls what the API's view calls, with its checks."""

import logging

from flask import current_app, flash, get_flashed_messages, redirect, render_template, request, url_for
from marshmallow import ValidationError

import nrllm_sidecar_compat.service as compat_service

from ..api import health
from ..api.auth import principal, roles
from ..api.compat import _reported_consumers
from ..api.remote_agents import _fields, _known_name, agent_document
from ..api.remote_schemas import AgentCreateSchema, AgentReplaceSchema
from ..delegation import resend
from ..domain.clock import rfc3339
from ..domain.errors import NotFound, ValidationFailed
from ..domain.lease import LeasePolicy
from ..store import console_queries, tokens
from ..store import remote_agents as agent_store
from . import route

log = logging.getLogger(__name__)
operator_only = roles("operator", actor=False)


def _notices() -> list[str]:
    return get_flashed_messages()


@route("/waiting")
@operator_only
def waiting_page():
    """Runs that wait for a person or a remote agent, the longest waiting first."""
    return render_template("console/waiting.html", rows=console_queries.waiting_runs(), rfc3339=rfc3339,
                           notices=_notices())


@route("/outbound")
@operator_only
def outbound_page():
    return render_template("console/outbound.html", rows=console_queries.outbound_rows(), rfc3339=rfc3339,
                           notices=_notices())


@route("/outbound/<outbound_id>/resend", methods=["GET", "POST"])
@operator_only
def resend_page(outbound_id):
    """GET: what a resend does, and the button that does it. POST: the API's resend (reconciliation first;
    409 not_resendable unless the run still waits on this send with its outcome unknown)."""
    row = resend.journal_row(outbound_id)
    if request.method == "GET":
        return render_template("console/resend.html", row=row, rfc3339=rfc3339)
    try:
        new = resend.resend(outbound_id, current_app.config["NRLLM_SETTINGS"], by=principal().label)
    except resend.NotResendable as exc:
        return render_template("console/resend.html", row=row, rfc3339=rfc3339,
                               refused=exc), 409
    flash(f"Resent {outbound_id} as {new.id} (outcome: {new.outcome}).")
    return redirect(url_for("console.outbound_page", _anchor=f"o-{new.id}"))


@route("/agents")
@operator_only
def agents_page():
    return render_template("console/agents.html", agents=[(row, agent_document(row))
                                                          for row in agent_store.list_agents()],
                           notices=_notices())


def _agent_body(form, *, name: str | None) -> dict:
    """The form as the API's JSON body: numbers as numbers, the checkbox as a boolean, auth when a header
    is named (an empty secret on an edit keeps the stored one)."""
    body = {"url": form.get("url", "").strip(), "push": form.get("push") == "on"}
    if name is None:
        body["name"] = form.get("name", "").strip()
    for field in ("poll_interval_seconds", "deadline_seconds"):
        text = form.get(field, "").strip()
        if text:
            try:
                body[field] = float(text)
            except ValueError:
                body[field] = text  # the schema says what is wrong with it, by the field
    header = form.get("auth_header", "").strip()
    if header:
        body["auth"] = {"header": header, **({"value": form["auth_value"]} if form.get("auth_value") else {})}
    else:
        body["auth"] = None
    return body


def _field_errors(messages: dict, prefix: str = "") -> dict[str, str]:
    """marshmallow's nested messages as form fields: auth.value -> auth_value."""
    flat = {}
    for key, value in messages.items():
        name = (f"{prefix}_{key}" if prefix else str(key)).replace(".", "_")  # the API's "auth.value" too
        if isinstance(value, dict):
            flat.update(_field_errors(value, name))
        else:
            flat[name] = " ".join(value) if isinstance(value, list) else str(value)
    return flat


def _save_agent(name: str | None):
    body = _agent_body(request.form, name=name)
    schema = AgentCreateSchema() if name is None else AgentReplaceSchema()
    try:
        loaded = schema.load(body)
        fields = _fields(loaded, keep_secret=name is not None)
        if name is None:
            row = agent_store.create_agent(loaded["name"], fields)
        else:
            row = agent_store.update_agent(name, fields)
    except ValidationError as exc:
        return _agent_form(name, body, _field_errors(exc.messages))
    except ValidationFailed as exc:  # the API's own checks (the URL guard): 422 on a field
        return _agent_form(name, body, _field_errors(exc.errors or {"url": [exc.message]}))
    except agent_store.NameTaken:
        return _agent_form(name, body, {"name": "Already registered."}, status=409)
    except agent_store.NoStoredSecret as exc:
        return _agent_form(name, body, {"auth_value": str(exc)})
    except NotFound:
        raise NotFound(f"no remote agent {name!r}") from None
    log.info("remote agent %s saved by %s: %s", row.name, principal().label, row.url)
    flash(f"Saved remote agent {row.name}.")
    return redirect(url_for("console.agents_page"))


def _agent_form(name: str | None, values: dict, errors: dict, status: int = 422):
    auth = values.get("auth") or {}
    shown = {**values, "auth_header": auth.get("header", "")}
    return render_template("console/agent_form.html", name=name, values=shown, errors=errors), \
        status if errors else 200


@route("/agents/new", methods=["GET", "POST"])
@operator_only
def agent_new():
    if request.method == "POST":
        return _save_agent(None)
    return _agent_form(None, {"poll_interval_seconds": 30.0, "deadline_seconds": 3600.0, "push": False}, {})


def _agent(name: str):
    row = agent_store.get_agent(_known_name(name))
    if row is None:
        raise NotFound(f"no remote agent {name!r}")
    return row


@route("/agents/<name>/edit", methods=["GET", "POST"])
@operator_only
def agent_edit(name):
    row = _agent(name)
    if request.method == "POST":
        return _save_agent(row.name)
    document = agent_document(row)
    return _agent_form(row.name, {**document, "auth": document["auth"]}, {})


@route("/agents/<name>/delete", methods=["GET", "POST"])
@operator_only
def agent_delete(name):
    row = _agent(name)
    if request.method == "GET":
        return render_template("console/agent_delete.html", row=row)
    try:
        agent_store.delete_agent(row.name)
    except NotFound:
        raise NotFound(f"no remote agent {name!r}") from None
    except agent_store.AgentInUse as exc:
        return render_template("console/agent_delete.html", row=row,
                               refused=exc), 409
    log.info("remote agent %s removed by %s", name, principal().label)
    flash(f"Removed remote agent {name}.")
    return redirect(url_for("console.agents_page"))


@route("/consumers")
@operator_only
def gate_page():
    gate = compat_service.compat_report()
    gate["reported_at"] = rfc3339(gate["reported_at"])
    return render_template("console/gate.html", gate=gate, consumers=_reported_consumers())


@route("/health")
@operator_only
def health_page():
    settings = current_app.config["NRLLM_SETTINGS"]
    document, status = health.health_report(settings)
    window = LeasePolicy(settings.lease_seconds).worker_alive_window
    return render_template("console/health.html", health=document, heartbeats=console_queries.heartbeats(),
                           window=window, rfc3339=rfc3339), status


@route("/tokens")
@operator_only
def tokens_page():
    return render_template("console/tokens.html", tokens=tokens.list_tokens(), rfc3339=rfc3339,
                           notices=_notices())


@route("/tokens/<name>/revoke", methods=["GET", "POST"])
@operator_only
def token_revoke(name):
    """GET: the confirmation; POST: revoke (as `nrllm-sidecar token revoke`). Its sessions end at once."""
    found = [t for t in tokens.list_tokens() if t.name == name]
    if not found:
        raise NotFound(f"no token named {name!r}")
    if request.method == "GET":
        return render_template("console/token_revoke.html", token=found[0])
    revoked = tokens.revoke(name)
    log.info("token %s revoked by %s", name, principal().label)
    flash(f"Token {name} revoked." if revoked else f"Token {name} was revoked already.")
    return redirect(url_for("console.tokens_page"))
