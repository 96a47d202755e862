"""Creating and reading runs. Everything a segment writes goes through leases.py instead."""

import json
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from peewee import fn

from .. import wakeup
from ..domain.clock import utcnow
from ..domain.errors import InvalidState, NotFound
from ..domain.vocabulary import RunStatus, TerminationReason
from . import events, grants, pauses, resolutions, statements
from .db import transactional
from .models import Decision, Run, RunEvent

PERSON_WAITING = (RunStatus.WAITING_FOR_INPUT.value, RunStatus.WAITING_FOR_APPROVAL.value)
BUDGET_LIMITS = ("max_delegations", "max_bytes", "max_tokens", "max_cost", "max_iterations")


@transactional
def _insert_queued(values: dict) -> Run:
    values = {**values, "last_event_sequence": 1}  # its first event, inserted next
    statements.insert_row(Run, values, deferred=True)  # a new id: no duplicate key to expect
    events.record(values["id"], 1, "status", {"from": None, "to": RunStatus.QUEUED.value})
    return Run(**values)  # the row as inserted, without reading it back


def create_run(owner: str, input: str, **options) -> str:
    """new_run(), for a caller that needs only the new run's id."""
    return new_run(owner, input, **options).id


def new_run(
    owner: str,
    input: str,
    *,
    workspace: str = "0",
    origin: str | None = None,
    spec: dict | None = None,
    budget: dict | None = None,
    run_id: str | None = None,
    wake: bool = True,
) -> Run:
    """Insert a queued run (and its first event), wake this process's worker, and return the run as inserted.

    Pass wake=False inside a surrounding transaction, and call wake_workers() after it commits.
    """
    now = utcnow()
    budget = budget or {}
    values = {
        "id": run_id or str(uuid.uuid4()),
        "owner": owner,
        "workspace": workspace,
        "origin": origin,
        "input": input,
        "spec": json.dumps(spec or {}, sort_keys=True),
        "status": RunStatus.QUEUED.value,
        "created_at": now,
        "updated_at": now,
        "queued_at": now,
        **{name: budget[name] for name in BUDGET_LIMITS if budget.get(name) is not None},
    }
    if budget.get("deadline_seconds") is not None:
        values["deadline_at"] = now + timedelta(seconds=budget["deadline_seconds"])
    run = _insert_queued(values)
    if wake:
        wake_workers()
    return run


def wake_workers() -> None:
    """Tell this process's worker that runs were queued; from the API's processes also the worker processes
    of this machine (store/doorbell.py). Others find them by polling."""
    wakeup.runs_queued()


def get_run(run_id: str) -> Run | None:
    return statements.select_one(Run, id=run_id)


def cancel_requested(run_id: str) -> bool:
    """Whether a cancel was requested (False for no such run). Asked at every step boundary of a segment, so it
    reads the one column, not the whole row."""
    return statements.select_value(Run, "cancel_requested_at", id=run_id) is not None


def list_runs(
    *,
    visible_to: str | None = None,
    owner: str | None = None,
    status: str | None = None,
    origin: str | None = None,
    limit: int = 50,
    after: tuple[datetime, str] | None = None,
    candidates_for: str | None = None,
    keep: Callable[[Run], bool] | None = None,
) -> tuple[list[Run], tuple[datetime, str] | None]:
    """Runs newest first, and the key to pass as `after` for the next page (None on the last page).

    `visible_to` restricts to one owner's runs (a host's actor); `owner` is the caller's filter.
    `candidates_for` (an actor) restricts to the runs it might see: those it owns, those in a workspace where
    it holds any grant, those waiting for a person (a plugin may let it decide them), and those it decided
    before; `keep` (asked of each row) then says which of them the caller really sees.
    Keyset paging on (created_at, id): a page never repeats or skips a run created meanwhile.
    """
    query = Run.select()
    for column, value in ((Run.owner, visible_to), (Run.owner, owner), (Run.status, status), (Run.origin, origin)):
        if value is not None:
            query = query.where(column == value)
    if candidates_for is not None:
        actor = candidates_for
        decided = Decision.select(Decision.run).where(Decision.decider == actor)
        query = query.where((Run.owner == actor) | Run.workspace.in_(grants.workspaces_of(actor))
                            | Run.status.in_(PERSON_WAITING) | Run.id.in_(decided))
    rows: list[Run] = []
    while True:
        page = query
        if after is not None:
            created_at, run_id = after
            page = page.where((Run.created_at < created_at) | ((Run.created_at == created_at) & (Run.id < run_id)))
        batch = list(page.order_by(Run.created_at.desc(), Run.id.desc()).limit(limit + 1))
        rows += [row for row in batch if keep is None or keep(row)]
        if len(rows) > limit:
            rows = rows[:limit]
            return rows, (rows[-1].created_at, rows[-1].id)
        if len(batch) <= limit:
            return rows, None
        after = (batch[-1].created_at, batch[-1].id)  # rows `keep` left out: read on past them


class _Raced(Exception):
    """The row changed between our read and our guarded write: start over with a fresh snapshot."""


def request_cancel(run_id: str, by: str) -> str:
    """Cancel a run: "cancelled" (queued or waiting: at once), "requested" (running: the segment stops at
    its next step boundary) or "already_requested". Raises NotFound, or InvalidState for a terminal run.
    """
    for _ in range(10):
        try:
            return _cancel(run_id, by)
        except _Raced:
            continue
    raise InvalidState(f"run {run_id} kept changing while being cancelled; try again")


@transactional
def _cancel(run_id: str, by: str) -> str:
    row = Run.get_or_none(Run.id == run_id)
    if row is None:
        raise NotFound(f"run {run_id} does not exist")
    status = RunStatus(row.status)
    now = utcnow()
    if status.is_terminal:
        raise InvalidState(f"run {run_id} is already {status.value}")
    if status is RunStatus.RUNNING:
        if row.cancel_requested_at is not None:
            return "already_requested"
        guard = [Run.status == status.value, Run.lease_epoch == row.lease_epoch, Run.cancel_requested_at.is_null()]
        if events.append(run_id, guard, "cancel_requested", {"by": by}) is None:
            raise _Raced()
        Run.update(cancel_requested_at=now, updated_at=now).where(Run.id == run_id, *guard).execute()
        return "requested"
    if status is RunStatus.WAITING_FOR_DEPENDENCY and row.waiting_on:
        # The resolution's own guard, and the remote task's CancelTask journalled in this transaction.
        if not resolutions.cancel_dependency(row, by, now):
            raise _Raced()
        return "cancelled"
    # Queued or waiting: nobody holds a lease, so the cancel is ours to finish now. The epoch grows, as on
    # every revocation, so a segment that claimed it meanwhile is fenced out.
    guard = [Run.status == status.value, Run.lease_epoch == row.lease_epoch]
    if status.awaits_person:
        # The cancel takes the pause as a decision would (and locks it first, as a decision does), so of
        # a cancel and decisions racing for it exactly one wins (store/pauses.py).
        guard.append(Run.waiting_on == row.waiting_on)
        if not pauses.close_for_cancel(row, now):
            raise _Raced()
    change = {"from": status.value, "to": RunStatus.CANCELLED.value, "by": by}
    if events.append(run_id, guard, "status", change) is None:
        raise _Raced()
    Run.update(
        status=RunStatus.CANCELLED.value,
        termination_reason=TerminationReason.CANCELLED.value,
        cancel_requested_at=row.cancel_requested_at or now,
        finished_at=now,
        queued_at=None,
        lease_epoch=Run.lease_epoch + 1,
        updated_at=now,
    ).where(Run.id == run_id, *guard).execute()
    return "cancelled"


def cancel_requested_meanwhile(run_id: str) -> bool:
    """After a segment suspended on a remote agent: a cancel requested after its last step boundary and before
    its suspension committed found the run running and only marked it. The run now waits, so the cancel is
    finished here, in the name of whoever asked (True when it was). (A person's pause checks for the mark in
    its own transaction instead: pauses.pause.)"""
    rows = statements.select_rows(Run, ("status", "cancel_requested_at"), id=run_id)
    if not rows or rows[0][1] is None or not RunStatus(rows[0][0]).is_waiting:
        return False
    asked = (RunEvent.select(RunEvent.payload).where(RunEvent.run == run_id, RunEvent.kind == "cancel_requested")
             .order_by(RunEvent.sequence.desc()).scalar())
    try:
        return request_cancel(run_id, json.loads(asked or "{}").get("by", "unknown")) == "cancelled"
    except InvalidState:
        return False  # decided, continued and finished meanwhile: nothing is left to cancel


def count_by_status() -> dict[str, int]:
    rows = Run.select(Run.status, fn.COUNT(Run.id).alias("n")).group_by(Run.status).tuples()
    return {status: n for status, n in rows}


def count_by_status_and_origin() -> dict[tuple[str, str | None], int]:
    """How many runs there are of each (status, origin) pair present: what the compatibility gate asks of each."""
    rows = Run.select(Run.status, Run.origin, fn.COUNT(Run.id)).group_by(Run.status, Run.origin).tuples()
    return {(status, origin): n for status, origin, n in rows}


def oldest_queued_seconds() -> float:
    oldest = Run.select(fn.MIN(Run.queued_at)).where(Run.status == RunStatus.QUEUED.value).scalar()
    if oldest is None:
        return 0.0
    return max(0.0, (utcnow() - oldest).total_seconds())
