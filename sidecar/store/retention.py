"""Retention: deleting finished runs with everything that belongs to them, in batches.

Only runs in a terminal status go, and only when their outbound journal holds no row whose outcome is
still open (`pending`, `outcome_unknown`: a CancelTask not yet sent, a send not yet reconciled); such a
run is skipped and counted. Each batch is one transaction that first locks its runs (on PostgreSQL and
MariaDB with SELECT ... FOR UPDATE in id order; SQLite's BEGIN IMMEDIATE makes it the only writer), checks
them again there, then deletes the rows of every table that references a run and the runs themselves.
Purgers racing over the same runs therefore queue on the first run row: the later one finds the rows
gone and deletes nothing, without an error and without a lock-order deadlock.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from ..domain.vocabulary import OutboundOutcome, RunStatus
from .db import dialect, transactional
from .models import Decision, DependencyWait, ModelTurn, Note, Outbound, PersonPause, Run, RunEvent, ToolResult

TERMINAL = [status.value for status in RunStatus if status.is_terminal]
OPEN_OUTCOMES = [OutboundOutcome.PENDING.value, OutboundOutcome.OUTCOME_UNKNOWN.value]
DEFAULT_BATCH = 500
# Every table that references a run, in delete order (decisions reference pauses); the runs go last.
RUN_TABLES = (RunEvent, ModelTurn, ToolResult, Decision, PersonPause, DependencyWait, Outbound, Note)


@dataclass
class PurgeReport:
    """Rows deleted (or, in a dry run, that would be) per table, and the finished runs skipped."""

    deleted: dict[str, int] = field(default_factory=lambda: {m._meta.table_name: 0 for m in (*RUN_TABLES, Run)})
    skipped: int = 0

    @property
    def runs(self) -> int:
        return self.deleted[Run._meta.table_name]

    def add(self, other: "PurgeReport") -> None:
        for table, count in other.deleted.items():
            self.deleted[table] += count
        self.skipped += other.skipped


def _candidates(before: datetime, after_id: str, batch: int) -> list[str]:
    query = (Run.select(Run.id)
             .where(Run.status.in_(TERMINAL), Run.finished_at < before, Run.id > after_id)
             .order_by(Run.id).limit(batch))
    return [run_id for (run_id,) in query.tuples()]


def _still_finished(ids: list[str], *, lock: bool) -> list[str]:
    query = Run.select(Run.id).where(Run.id.in_(ids), Run.status.in_(TERMINAL)).order_by(Run.id)
    if lock and dialect() != "sqlite":
        query = query.for_update()
    return [run_id for (run_id,) in query.tuples()]


def _with_open_journal_rows(ids: list[str]) -> set[str]:
    query = Outbound.select(Outbound.run).where(Outbound.run.in_(ids), Outbound.outcome.in_(OPEN_OUTCOMES))
    return {run_id for (run_id,) in query.distinct().tuples()}


def _split(ids: list[str], *, lock: bool) -> tuple[list[str], int]:
    """The runs of `ids` that may go now, and how many finished ones are kept for their open journal rows."""
    finished = _still_finished(ids, lock=lock)
    kept = _with_open_journal_rows(finished) if finished else set()
    return [run_id for run_id in finished if run_id not in kept], len(kept)


@transactional
def _purge_batch(ids: list[str]) -> PurgeReport:
    report = PurgeReport()
    going, report.skipped = _split(ids, lock=True)
    if going:
        for model in RUN_TABLES:
            report.deleted[model._meta.table_name] = model.delete().where(model.run.in_(going)).execute()
        report.deleted[Run._meta.table_name] = Run.delete().where(
            Run.id.in_(going), Run.status.in_(TERMINAL)).execute()
    return report


def _count_batch(ids: list[str]) -> PurgeReport:
    report = PurgeReport()
    going, report.skipped = _split(ids, lock=False)
    if going:
        for model in RUN_TABLES:
            report.deleted[model._meta.table_name] = model.select().where(model.run.in_(going)).count()
        report.deleted[Run._meta.table_name] = len(going)
    return report


def _batches(before: datetime, batch: int) -> Iterator[list[str]]:
    """Candidate ids in id order, a batch at a time; a skipped run is not looked at twice."""
    after_id = ""
    while ids := _candidates(before, after_id, batch):
        yield ids
        if len(ids) < batch:
            return
        after_id = ids[-1]


def purge(before: datetime, *, batch: int = DEFAULT_BATCH, dry_run: bool = False) -> PurgeReport:
    """Delete the runs that finished before `before` (naive UTC) and all their rows, `batch` runs per
    transaction; with `dry_run` only count what would go. Safe to run in several processes at once."""
    if batch < 1:
        raise ValueError("batch must be at least 1")
    total = PurgeReport()
    for ids in _batches(before, batch):
        total.add(_count_batch(ids) if dry_run else _purge_batch(ids))
    return total
