"""The runs API (docs/http-api.md, "Runs"): create, get, list, events (JSON or server-sent), cancel."""

import hashlib
import json

from flask import Response, current_app, request
from flask.views import MethodView

from ..decisions.service import can_see, list_visibility
from ..domain.errors import NotFound, ValidationFailed
from ..store import idempotency, runs
from ..store.events import list_events
from ..store.models import Run
from . import examples, streaming
from .auth import Principal, principal, roles
from .documents import decode_cursor, encode_cursor, event_document, run_document
from .errors import errors
from .parsing import IDEMPOTENCY_PARAMETER, Blueprint, idempotency_key
from .schemas import (
    RUN_SCHEMA,
    EventListSchema,
    EventsQuerySchema,
    RunCreateSchema,
    RunListQuerySchema,
    RunListSchema,
    RunSchema,
)

blp = Blueprint("runs", __name__, url_prefix="/api/v1", description="Agent runs")
HEADERS = ["Actor", "Workspace"]  # header parameters, registered in app.py


def _json(body: dict, status: int, **headers) -> Response:
    """A JSON answer serialized as every other answer is (flask-smorest's go through app.json too)."""
    response = current_app.json.response(body)
    response.status_code = status
    response.headers.update(headers)
    return response


def visible_run(run_id, who: Principal, *, owner_only: bool = False) -> Run:
    """The run, if this principal may see it (a host's actor: its own, and those it may decide); a run of
    another actor is as absent as a missing one."""
    run = runs.get_run(str(run_id))
    if run is None or (not who.is_operator and run.owner != who.actor
                       and (owner_only or not can_see(who.actor, who.workspace, run))):
        raise NotFound(f"no run {run_id}")
    return run


@blp.route("/runs", parameters=HEADERS)
class Runs(MethodView):
    @roles("host")
    @errors(400, 401, 403, 413)
    @blp.arguments(RunCreateSchema(), example=examples.RUN_CREATE)
    @blp.response(201, RunSchema, example=examples.RUN)
    @blp.doc(parameters=[IDEMPOTENCY_PARAMETER])
    def post(self, body):
        """Create a run (host). The owner is the acting actor."""
        who = principal()
        check_names(body)
        key = idempotency_key()
        if key is None:
            return _json(_create(who, body), 201)
        answer = idempotency.run_once(_scope(who), key, _request_digest(who, body),  # KeyReused for another body
                                      lambda: (201, _create(who, body, wake=False)))
        if not answer.replayed:
            runs.wake_workers()
        return _json(answer.body, answer.status, **({"Idempotent-Replayed": "true"} if answer.replayed else {}))

    @roles("host", "operator")
    @errors(400, 401, 403)
    @blp.arguments(RunListQuerySchema(), location="query")
    @blp.response(200, RunListSchema, example=examples.RUN_LIST)
    def get(self, query):
        """List runs, newest first: a host's actor sees the runs it owns or may decide, an operator all."""
        who = principal()
        after = None
        if "cursor" in query:
            try:
                after = decode_cursor(query["cursor"])
            except ValueError as exc:
                raise ValidationFailed("the cursor is not valid", {"cursor": [str(exc)]}) from None
        rows, next_key = runs.list_runs(
            **({} if who.is_operator else list_visibility(who.actor, who.workspace)),
            owner=query.get("owner"), status=query.get("status"), origin=query.get("origin"),
            limit=query["limit"], after=after,
        )
        return {"items": [run_document(r) for r in rows], "next_cursor": encode_cursor(next_key)}


def check_names(body: dict) -> None:
    """A provider or a tool this sidecar does not have is the host's mistake: 422 now, not a failed run later."""
    registry = current_app.extensions["nrllm_registry"]
    errors = {}
    provider = body.get("provider")
    if provider is not None and provider not in registry.providers:
        errors["provider"] = [f"unknown provider {provider!r}; known: {', '.join(sorted(registry.providers))}"]
    unknown = [name for name in body.get("tools") or [] if name not in registry.tools]
    if unknown:
        errors["tools"] = [f"unknown tools {unknown}; known: {', '.join(sorted(registry.tools))}"]
    if errors:
        raise ValidationFailed("the run names a provider or tools this sidecar does not have",
                       errors)


def _create(who: Principal, body: dict, wake: bool = True) -> dict:
    spec = {k: body[k] for k in ("provider", "model", "script", "tools", "on_denial") if body.get(k) is not None}
    if "script" in spec:
        spec.setdefault("provider", "scripted")  # a script means nothing to any other provider
    run = runs.new_run(who.actor, body["input"], workspace=who.workspace, origin=body.get("origin"),
                       spec=spec, budget=body.get("budget") or {}, wake=wake)
    return RUN_SCHEMA.dump(run_document(run))


def _scope(who: Principal) -> str:
    """Keys belong to one token and actor: another caller's key never collides with this one's."""
    return hashlib.sha256(f"{who.token_id}\n{who.actor}".encode()).hexdigest()


def _request_digest(who: Principal, body: dict) -> str:
    canonical = json.dumps({"path": request.path, "workspace": who.workspace, "body": body}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


@blp.route("/runs/<uuid:run_id>", parameters=HEADERS)
class RunById(MethodView):
    @roles("host", "operator")
    @errors(400, 401, 403, 404)
    @blp.response(200, RunSchema, example=examples.RUN_WAITING)
    def get(self, run_id):
        """A run: the actor's own (host) or any (operator)."""
        return run_document(visible_run(run_id, principal()))


@blp.route("/runs/<uuid:run_id>/events", parameters=HEADERS)
class RunEvents(MethodView):
    @roles("host", "operator")
    @errors(400, 401, 403, 404, 429)  # 429: as many event streams as allowed are open
    @blp.arguments(EventsQuerySchema(), location="query")
    @blp.response(200, EventListSchema, example=examples.EVENTS,
                  description="JSON, or with `Accept: text/event-stream` server-sent events: `id:` the sequence, "
                  "`event: run_event`, `data:` the event; a last `event: run` with the Run once it is terminal or "
                  "waiting. `Last-Event-ID` resumes after that sequence.")
    @blp.doc(responses={200: {"content": {"text/event-stream": {"schema": {"type": "string"},
                                                                  "example": examples.EVENT_STREAM}}}})
    def get(self, query, run_id):
        """A run's events after `after`, in sequence order (JSON: up to 1000 per answer)."""
        run = visible_run(run_id, principal())
        if streaming.wants_stream():
            return streaming.stream(run.id, streaming.resume_after(query["after"]))
        return {"items": [event_document(e) for e in list_events(run.id, after=query["after"])]}


@blp.route("/runs/<uuid:run_id>/cancel", parameters=HEADERS)
class RunCancel(MethodView):
    @roles("host", "operator")
    @errors(400, 401, 403, 404, 409)
    @blp.response(200, RunSchema, example=examples.RUN_CANCELLED)
    def post(self, run_id):
        """Cancel: queued or waiting at once; running at its next step boundary; terminal is 409."""
        who = principal()
        run = visible_run(run_id, who, owner_only=True)
        try:
            runs.request_cancel(run.id, by=who.label)  # InvalidState for a run that has ended
        except NotFound:
            raise NotFound(f"no run {run_id}") from None
        return run_document(runs.get_run(run.id))
