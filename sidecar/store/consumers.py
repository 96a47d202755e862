"""The host's report of loaded consumers, kept in the database so every process gates alike."""

import functools
import json

from ..domain.clock import utcnow
from . import statements
from .db import transactional
from .models import REPORT_STATE_ID, ConsumerReportState, ReportedConsumerRow

_changes_here = 0  # changes of the report this process made, each counted once its function returned


def changes_here() -> int:
    """How many changes of the report this process has made: a gate kept without reading the report's time
    (compat/service.py, the offer of delegation tools) is built again once this moves."""
    return _changes_here


def _changed(change):
    """`change`, then counted: after its transaction has committed (unless a caller's transaction encloses it),
    so a gate built from the report as it was before is not kept as current."""

    @functools.wraps(change)
    def wrapper(*args, **kwargs):
        global _changes_here
        try:
            return change(*args, **kwargs)
        finally:
            _changes_here += 1

    return wrapper


def _mark_reported(now) -> None:
    updated = ConsumerReportState.update(reported_at=now).where(ConsumerReportState.id == REPORT_STATE_ID).execute()
    if not updated:
        ConsumerReportState.insert(id=REPORT_STATE_ID, reported_at=now).on_conflict_ignore().execute()


def _insert(name: str, version: str, understands, now) -> None:
    ReportedConsumerRow.insert(
        name=name, version=version, reported_at=now,
        understands=None if understands is None else json.dumps(sorted(understands)),
    ).execute()


@_changed
@transactional
def replace_report(consumers: list[dict]) -> None:
    """The host's whole report: replaces the previous one (an empty list is a report too)."""
    now = utcnow()
    ReportedConsumerRow.delete().execute()
    for consumer in consumers:
        _insert(consumer["name"], consumer["version"], consumer.get("understands"), now)
    _mark_reported(now)


@_changed
@transactional
def put_consumer(name: str, version: str, understands) -> None:
    now = utcnow()
    ReportedConsumerRow.delete().where(ReportedConsumerRow.name == name).execute()
    _insert(name, version, understands, now)
    _mark_reported(now)


@_changed
@transactional
def delete_consumer(name: str) -> bool:
    deleted = ReportedConsumerRow.delete().where(ReportedConsumerRow.name == name).execute()
    if deleted:
        _mark_reported(utcnow())
    return bool(deleted)


def load_report():
    """(reported_at or None, [{"name", "version", "understands"}]); reported_at None: never reported."""
    state = ConsumerReportState.get_or_none(ConsumerReportState.id == REPORT_STATE_ID)
    rows = [
        {"name": r.name, "version": r.version,
         "understands": None if r.understands is None else json.loads(r.understands)}
        for r in ReportedConsumerRow.select().order_by(ReportedConsumerRow.name)
    ]
    return (state.reported_at if state else None), rows


def reported_time():
    """The time of the last report as stored (None: never reported), in one small read: it changes with every
    change of the report, so it tells whether a gate built earlier still holds. A write of a run can read it
    in its own statement instead (statements.update_run's `with_report_time`)."""
    return statements.select_value(ConsumerReportState, "reported_at", id=REPORT_STATE_ID)
