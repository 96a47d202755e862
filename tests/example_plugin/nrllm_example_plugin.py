"""An example plugin for the nr-llm sidecar, one hook of each kind; docs/plugins.md quotes it.

- a read-only tool `reverse` ({"text"} -> the text reversed),
- a model provider `constant` that always answers with the same final text,
- a route GET /api/v1/example/reverse?text=... (it needs a token like every route),
- a status listener that records every committed status change,
- a consumer `example_dashboard` that reads only the runs it starts,
- a permission check: reviewers may approve any run, the dashboard's admins decide the runs it started;
  nobody decides in a frozen workspace.
"""

import os

from flask.views import MethodView
from marshmallow import Schema, fields

from sidecar.api.parsing import Blueprint
from sidecar.domain.vocabulary import BASE_STATUSES, ToolEffect
from sidecar.engine.tools import Tool, ToolError
from sidecar.engine.turns import Turn
from sidecar.hookspecs import hookimpl

# -- a tool ----------------------------------------------------------------------------------------


class ReverseTool(Tool):
    name = "reverse"
    effect = ToolEffect.READ_ONLY  # safe to run again after a crash: no approval, no journal
    description = "Returns the given text reversed."
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The text to reverse."}},
        "required": ["text"],
        "additionalProperties": False,
    }

    def run(self, arguments, context):
        # The loop has checked the arguments against `parameters`; ToolError becomes `error: <why>`.
        if not arguments["text"]:
            raise ToolError("there is no text to reverse")
        return arguments["text"][::-1]


@hookimpl
def nrllm_tools(settings):
    return [ReverseTool()]


# -- a model provider ------------------------------------------------------------------------------

CONSTANT_ANSWER = "constant answer from nrllm-example-plugin"


class ConstantProvider:
    """Answers every turn with the same final text, whatever it was asked (a run's spec names it)."""

    name = "constant"

    def next_turn(self, request):
        return Turn(content=CONSTANT_ANSWER)


@hookimpl
def nrllm_model_providers(settings):
    return [ConstantProvider()]


# -- a route ---------------------------------------------------------------------------------------

blp = Blueprint("example", __name__, url_prefix="/api/v1/example", description="The example plugin")


class ReverseQuery(Schema):
    text = fields.String(required=True)


class ReverseAnswer(Schema):
    text = fields.String()


@blp.route("/reverse")
class Reverse(MethodView):
    @blp.arguments(ReverseQuery, location="query")
    @blp.response(200, ReverseAnswer)
    def get(self, query):
        return {"text": query["text"][::-1]}


@hookimpl
def nrllm_register_routes():
    return [blp]


# -- a status listener -----------------------------------------------------------------------------

# (run_id, old status, new status) in the order this process was told; a test reads it.
NOTIFICATIONS: list[tuple[str, str | None, str]] = []
LOG_ENV = "NRLLM_EXAMPLE_STATUS_LOG"


@hookimpl
def nrllm_run_status_changed(run_id, old_status, new_status):
    # Called after the commit, on the thread that wrote: quick work only (no network, no waiting).
    NOTIFICATIONS.append((run_id, old_status, new_status))
    if path := os.environ.get(LOG_ENV):  # for a worker in another process
        with open(path, "a") as log:
            log.write(f"{run_id} {old_status} {new_status}\n")


# -- a consumer of run statuses --------------------------------------------------------------------

DASHBOARD_ORIGIN = "example:dashboard"
DASHBOARD_UPGRADE_NOTE = "https://example.org/dashboard/upgrading#2.0"
BASE = sorted(status.value for status in BASE_STATUSES)


@hookimpl
def nrllm_consumers():
    # The dashboard shows only the runs it started (their origin), and from 2.0 also the ones waiting
    # for a remote agent. The host reports the version it has loaded; until 2.0, delegation is not
    # offered to the dashboard's runs, and every other run is unaffected.
    return [{
        "name": "example_dashboard",
        "understands": {"<2.0": BASE, ">=2.0": BASE + ["waiting_for_dependency"]},
        "origins": [DASHBOARD_ORIGIN],
        "upgrade_note": DASHBOARD_UPGRADE_NOTE,  # the gate's reason cites it while 1.x is reported
    }]


# -- a permission check ----------------------------------------------------------------------------

REVIEWERS = frozenset({"example:reviewer"})
DASHBOARD_ADMINS = frozenset({"example:dashboard-admin"})
FROZEN_WORKSPACE = "example:frozen"


@hookimpl
def nrllm_permission_check(actor, workspace, action, run):
    if workspace == FROZEN_WORKSPACE:
        return False  # nobody decides there, not even a run's owner: a False ends the question
    if action == "agent:approve" and actor in REVIEWERS:
        return True
    if run is not None and run.origin == DASHBOARD_ORIGIN and actor in DASHBOARD_ADMINS:
        return True  # `run` is a read-only RunView: owner, workspace, origin, status, times
    return None  # not this plugin's business: the next one (last, the core's owner rule) decides
