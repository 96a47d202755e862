"""The inbox of a host's actor: each pause it may decide, with its pending calls and their effects, or its
question and a form from its JSON schema; a decision taken by the decision service, with the API's checks
(grants, digest, generation, Idempotency-Key). A refused decision shows the API's reason by the form."""

import json
import uuid

from flask import current_app, flash, get_flashed_messages, redirect, render_template, request, url_for
from marshmallow import ValidationError

from ..api.auth import principal, roles
from ..api.decision_schemas import DecisionBodySchema
from ..api.documents import format_times, run_document
from ..api.runs import _request_digest, _scope
from ..api.schemas import RUN_SCHEMA
from ..decisions import service
from ..decisions.now import Continuation, holder_name
from ..domain.errors import SidecarError
from ..domain.lease import LeasePolicy
from ..engine import AgentLoop
from ..store import idempotency, runs
from . import route, schema_form
from .session import CSRF_FIELD

host_only = roles("host")


def _items(attempt: dict | None = None) -> list[dict]:
    items = []
    for item in service.inbox(principal().actor, principal().workspace):
        item = format_times(item)
        if item["kind"] == "input":
            item["fields"] = schema_form.fields_for(item.get("input_schema"))
            item["schema_text"] = json.dumps(item.get("input_schema"), indent=2, sort_keys=True)
        item["attempt"] = attempt if attempt and attempt["run_id"] == item["run_id"] else None
        items.append(item)
    return items


@route("/inbox")
@host_only
def inbox_page(attempt: dict | None = None, status: int = 200):
    items = _items(attempt)
    # A refusal for a pause no longer in the inbox (decided meanwhile) is shown above the list.
    orphan = attempt if attempt and not any(i["attempt"] for i in items) else None
    return render_template("console/inbox.html", items=items, orphan=orphan, notices=get_flashed_messages(),
                           new_key=lambda: str(uuid.uuid4()), pretty=lambda v: json.dumps(v, indent=2)), status


def _refused(run_id: str, status: int, code: str, message: str, errors: dict | None = None):
    attempt = {"run_id": run_id, "code": code, "message": message, "errors": schema_form.by_field(errors or {}),
               "form": request.form.to_dict()}
    return inbox_page(attempt, status)


def _body(run_id: str) -> dict:
    """The form as the API's decision body (before its schema checks it)."""
    form = request.form
    body = {"pause_id": form.get("pause_id", ""), "decision": form.get("decision", ""),
            "mode": form.get("mode", "now")}
    try:
        body["generation"] = int(form.get("generation", ""))
    except ValueError:
        body["generation"] = form.get("generation", "")
    if body["decision"] in ("approve", "deny"):
        body["turn_digest"] = form.get("turn_digest", "")
    if form.get("comment", "").strip():
        body["comment"] = form["comment"].strip()
    if body["decision"] == "input":
        pause = next((i for i in service.inbox(principal().actor, principal().workspace)
                      if i["run_id"] == run_id and i["pause_id"] == body["pause_id"]), None)
        if pause is None:
            # Not in this actor's inbox (not its to decide, or decided meanwhile): the service says which.
            body["input"] = {k.removeprefix("input."): v for k, v in form.items() if k.startswith("input.")}
        else:
            body["input"] = schema_form.input_from(schema_form.fields_for(pause.get("input_schema")), form)
    return body


def _sent() -> dict:
    """The form as sent (but its CSRF token): what a replay is compared by. The decision read from it
    depends on the pause, which the first submit took, so it cannot be."""
    return {name: request.form.getlist(name) for name in sorted(request.form) if name != CSRF_FIELD}


@route("/inbox/<uuid:run_id>/decide", methods=["POST"])
@host_only
def decide(run_id):
    who, run_id = principal(), str(run_id)
    try:
        body = DecisionBodySchema().load(_body(run_id))
    except schema_form.NotJson as exc:
        return _refused(run_id, 422, "invalid_input", "the answer is not JSON", {"input": [str(exc)]})
    except ValidationError as exc:
        errors = {k: v if isinstance(v, list) else [str(v)] for k, v in exc.messages.items()}
        return _refused(run_id, 422, "validation_failed", "the decision is not complete", errors)
    body = {**body, "pause_id": str(body["pause_id"])}
    now = body["mode"] == "now"
    lease = LeasePolicy(current_app.config["NRLLM_SETTINGS"].lease_seconds)
    decision = service.DecisionRequest(
        run_id=run_id, actor=who.actor, workspace=who.workspace, pause_id=body["pause_id"],
        generation=body["generation"], decision=body["decision"], mode=body["mode"],
        input=body.get("input", service.MISSING), turn_digest=body.get("turn_digest"), comment=body.get("comment"))
    taken: list[service.Taken] = []

    def action():
        taken[:] = [service.accept_decision(decision, holder=holder_name() if now else None, lease=lease)]
        return (None, None) if now else (202, {"stored": taken[0].decision.id})

    # The form's own key: a second submit of the same form (a double click, a retry) replays the first.
    key = request.form.get("idempotency_key", "").strip()[:255] or str(uuid.uuid4())
    scope = _scope(who)
    try:
        answer = idempotency.run_once(scope, key, _request_digest(who, _sent()), action)
    except SidecarError as refused:  # the service's refusals, and KeyReused for another form under this key
        if not refused.is_refusal():
            raise
        return _refused(run_id, refused.http_status, refused.code, refused.message, refused.errors)
    if answer.replayed or not now:
        if not answer.replayed:
            runs.wake_workers()
            flash(f"Decision stored for run {run_id}: a worker continues it.")
        return redirect(url_for("console.inbox_page") if not now else url_for("console.run_page", run_id=run_id))

    def record_answer(outcome):
        if outcome.value not in ("lease_lost", "requeued"):
            idempotency.complete(scope, key, 200, RUN_SCHEMA.dump(run_document(runs.get_run(run_id))))

    Continuation(AgentLoop(current_app.extensions["nrllm_registry"]), taken[0].claim, lease,
                 on_end=record_answer).start()
    # The run's page follows the continuation live over its event stream.
    return redirect(url_for("console.run_page", run_id=run_id))
