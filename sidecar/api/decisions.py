"""The inbox and the decision endpoint (docs/http-api.md, "Inbox and decisions"): host actors only.

A decision is checked and stored as it claims its pause, in one transaction (sidecar/decisions/service.py).
`mode: "store"` answers 202 with the receipt and a worker continues the run. `mode: "now"` also claimed
the run's lease in that transaction: the segment continues in a thread of its own (decisions/now.py), and
the answer follows the run's events: JSON when the segment ends, or a stream of server-sent events.
"""

import time

from flask import current_app
from flask.views import MethodView

from ..decisions import service
from ..decisions.now import Continuation, holder_name
from ..domain.lease import LeasePolicy
from ..domain.vocabulary import RunStatus
from ..engine import AgentLoop
from ..store import idempotency, runs
from ..store.db import database
from . import examples, streaming
from .auth import principal, roles
from .decision_schemas import DecisionBodySchema, InboxSchema, ReceiptSchema
from .documents import format_times, run_document
from .errors import errors
from .parsing import IDEMPOTENCY_PARAMETER, Blueprint, idempotency_key
from .runs import HEADERS, _json, _request_digest, _scope
from .schemas import RUN_SCHEMA, RunSchema

blp = Blueprint("decisions", __name__, url_prefix="/api/v1", description="Inbox and decisions")
FOLLOW_POLL_SECONDS = 0.1


@blp.route("/inbox", parameters=HEADERS)
class Inbox(MethodView):
    @roles("host")
    @errors(400, 401, 403)
    @blp.response(200, InboxSchema, example=examples.INBOX)
    def get(self):
        """The pauses the actor may decide, oldest first (never a run waiting for a dependency)."""
        who = principal()
        return {"items": [format_times(item) for item in service.inbox(who.actor, who.workspace)]}


@blp.route("/runs/<uuid:run_id>/decision", parameters=HEADERS)
class RunDecision(MethodView):
    @roles("host")
    @errors(400, 401, 403, 404, 409, 413, 422, 429)  # 429: with a stream, as many as allowed are open
    @blp.arguments(DecisionBodySchema(), example=examples.DECISION)
    @blp.response(200, RunSchema, example=examples.RUN_COMPLETED,
                  description="mode now: the Run when the segment ends (terminal or waiting again); with "
                  "`Accept: text/event-stream` the run's events as server-sent events instead")
    @blp.alt_response(202, schema=ReceiptSchema, example=examples.RECEIPT,
                      description="mode store: the receipt; a worker continues the run")
    @blp.doc(parameters=[IDEMPOTENCY_PARAMETER])
    def post(self, body, run_id):
        """Decide a pause: approve or deny a turn's calls, or give the input asked for."""
        who = principal()
        body = {**body, "pause_id": str(body["pause_id"])}
        now = body["mode"] == "now"
        if now and streaming.wants_stream():
            streaming.reserve()  # a stream refused by its limits must not leave the decision taken
        lease = LeasePolicy(current_app.config["NRLLM_SETTINGS"].lease_seconds)
        holder = holder_name() if now else None
        decision = service.DecisionRequest(
            run_id=str(run_id), actor=who.actor, workspace=who.workspace, pause_id=body["pause_id"],
            generation=body["generation"], decision=body["decision"], mode=body["mode"],
            input=body.get("input", service.MISSING), turn_digest=body.get("turn_digest"),
            comment=body.get("comment"))
        taken: list[service.Taken] = []

        def action():
            taken[:] = [service.accept_decision(decision, holder=holder, lease=lease)]
            return (None, None) if now else (202, ReceiptSchema().dump(service.receipt(taken[0].decision)))

        key = idempotency_key()
        if key is None:
            answer = idempotency.Answer(*action(), replayed=False)
        else:  # KeyReused for another body
            answer = idempotency.run_once(_scope(who), key, _request_digest(who, body), action)
        if answer.replayed:
            if answer.status is None:
                return _follow(str(run_id))  # the first request is still continuing the run (or died doing so)
            return _json(answer.body, answer.status, **{"Idempotent-Replayed": "true"})
        if not now:
            runs.wake_workers()
            return _json(answer.body, 202)
        return _continue_now(taken[0], lease, (_scope(who), key) if key else None)


def _continue_now(taken: service.Taken, lease: LeasePolicy, idempotency_record):
    run_id = taken.claim.run_id

    def record_answer(outcome):
        # The first answer a replay gets: the Run as this segment left it (unless another holder took it).
        if idempotency_record and outcome.value not in ("lease_lost", "requeued"):
            idempotency.complete(*idempotency_record, 200, RUN_SCHEMA.dump(run_document(runs.get_run(run_id))))

    continuation = Continuation(AgentLoop(current_app.extensions["nrllm_registry"]), taken.claim, lease,
                                on_end=record_answer).start()
    if streaming.wants_stream():
        # From the decision event on; the stream ends when the run is terminal or waiting again. A client
        # that goes away ends only the stream: the continuation is not tied to it.
        return streaming.stream(run_id, taken.events_before)
    database.close()  # nothing to read while the segment runs: give the connection back meanwhile
    continuation.wait()
    return _json(RUN_SCHEMA.dump(run_document(runs.get_run(run_id))), 200)


def _follow(run_id: str):
    """Answer a replayed decide-now whose first answer is not recorded yet: the Run once it leaves
    queued/running (whoever continues it), as the first request would have answered."""
    moving = (RunStatus.QUEUED.value, RunStatus.RUNNING.value)
    while (run := runs.get_run(run_id)) is not None and run.status in moving:
        database.close()
        time.sleep(FOLLOW_POLL_SECONDS)
    return _json(RUN_SCHEMA.dump(run_document(run)), 200, **{"Idempotent-Replayed": "true"})
