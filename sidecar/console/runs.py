"""Runs in the console: the list (filters, counts per status, keyset pages), a run's page, and its events
as a stream the page's EventSource reads with the session's cookie."""

import json

from flask import abort, render_template, request

from ..api import streaming
from ..api.auth import principal, roles
from ..api.documents import decode_cursor, encode_cursor, event_document, run_document
from ..api.runs import visible_run
from ..decisions.service import list_visibility
from ..domain.vocabulary import RunStatus
from ..store import runs
from ..store.events import list_events
from . import route

PAGE_SIZE = 50
FILTERS = ("status", "owner", "origin")
STATUSES = [s.value for s in RunStatus]
MAX_FILTER = 255


def _filters() -> tuple[dict, dict]:
    """The list's filters from the query string, and the errors of those that cannot match anything."""
    chosen, errors = {}, {}
    for name in FILTERS:
        value = request.args.get(name, "").strip()
        if not value:
            continue
        if name == "status" and value not in STATUSES:
            errors[name] = f"One of {', '.join(STATUSES)}."
        elif len(value) > MAX_FILTER:
            errors[name] = f"At most {MAX_FILTER} characters."
        else:
            chosen[name] = value
    return chosen, errors


@route("/runs")
@roles("host", "operator")
def runs_page():
    """Newest first, PAGE_SIZE at a time: `cursor` is the API's keyset cursor, so a page never repeats or
    skips a run created meanwhile. A host's actor sees what the API lists for it."""
    who = principal()
    chosen, errors = _filters()
    after = None
    if request.args.get("cursor"):
        try:
            after = decode_cursor(request.args["cursor"])
        except ValueError:
            errors["cursor"] = "Not a page of this list: start again from the first page."
    rows, next_key = [], None
    if not errors:
        rows, next_key = runs.list_runs(
            **({} if who.is_operator else list_visibility(who.actor, who.workspace)),
            limit=PAGE_SIZE, after=after, **chosen)
    # The counts are of every run (an operator's overview); a host's actor sees only its list.
    counts = runs.count_by_status() if who.is_operator else None
    return render_template("console/runs.html", rows=rows, filters=chosen, errors=errors, statuses=STATUSES,
                           counts=counts, next_cursor=encode_cursor(next_key), first_page=after is None), \
        422 if errors else 200


@route("/runs/<uuid:run_id>")
@roles("host", "operator")
def run_page(run_id):
    run = visible_run(run_id, principal())
    document = run_document(run)
    events = [event_document(e) for e in list_events(run.id)]
    return render_template("console/run.html", run=document, events=events,
                           last_sequence=events[-1]["sequence"] if events else 0,
                           compact=lambda value: json.dumps(value, sort_keys=True, ensure_ascii=False))


@route("/runs/<uuid:run_id>/events")
@roles("host", "operator")
def run_events(run_id):
    """The API's event stream (the same generator and stream limits), for the page's EventSource, which
    can send the session's cookie but no bearer token."""
    run = visible_run(run_id, principal())
    if not streaming.wants_stream():
        abort(406)
    after = request.args.get("after", "0")
    return streaming.stream(run.id, streaming.resume_after(int(after) if after.isdigit() and len(after) < 10 else 0))
