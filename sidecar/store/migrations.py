"""Versioned migrations, applied under a database-wide lock so two processes starting at once do not race.

Each migration runs once and is recorded in schema_migrations; `upgrade()` is idempotent. A released
migration is never edited: a later schema change is a new entry at the end of MIGRATIONS, so a database
created at any version reaches the same schema. Tables are created from the current models; a column
added to an existing table later is added by its own migration only where it is missing.
"""

import contextlib
import hashlib
import logging

from peewee import OperationalError
from playhouse.migrate import SchemaMigrator, migrate

from ..domain import push_tokens
from ..domain.clock import utcnow
from .db import database, dialect
from .models import (
    ApiToken,
    ConsumerReportState,
    Decision,
    DependencyWait,
    Grant,
    IdempotencyRecord,
    ModelTurn,
    Note,
    Outbound,
    PersonPause,
    RemoteAgent,
    ReportedConsumerRow,
    Run,
    RunEvent,
    SchemaMigration,
    ToolResult,
    WorkerHeartbeat,
)

LOCK_NAME = "nrllm_sidecar_migrate"
MIGRATION_BATCH = 500  # rows a data migration reads at once
# Migrations that replace secrets: on SQLite the file is compacted afterwards (_scrub_sqlite_file).
SCRUBS_SQLITE_FILE = {8}

log = logging.getLogger("nrllm_sidecar.migrations")
PG_LOCK_KEY = 281_000_001  # any constant; it names the advisory lock


def _v1_initial(db):
    db.create_tables([Run, RunEvent, WorkerHeartbeat], safe=True)


def _v2_runs_api(db):
    db.create_tables([ApiToken, IdempotencyRecord, ModelTurn, ToolResult], safe=True)


def _v3_consumer_report(db):
    db.create_tables([ReportedConsumerRow, ConsumerReportState], safe=True)


def _add_missing_columns(db, model, *fields) -> None:
    """Add columns a model gained after its table was first created.

    Earlier migrations create tables from the current models, so on a new database the columns already
    exist; on an older one they are added here.
    """
    table = model._meta.table_name
    present = {column.name for column in db.get_columns(table)}
    missing = [field for field in fields if field.column_name not in present]
    if missing:
        migrator = SchemaMigrator.from_database(db)
        migrate(*(migrator.add_column(table, field.column_name, field) for field in missing))


def _v4_delegation(db):
    _add_missing_columns(db, Run, Run.pause_generation, Run.waiting_on)
    db.create_tables([RemoteAgent, Outbound, DependencyWait], safe=True)


def _v5_decisions(db):
    _add_missing_columns(db, Run, Run.continuation)
    db.create_tables([PersonPause, Decision, Grant, Note], safe=True)


def _v6_early_pushes(db):
    _add_missing_columns(db, Outbound, Outbound.push_received_at)


def _v7_remote_failures(db):
    _add_missing_columns(db, RemoteAgent, RemoteAgent.consecutive_failures, RemoteAgent.failing_since,
                         RemoteAgent.last_error)
    _add_missing_columns(db, DependencyWait, DependencyWait.failed_polls)
    _add_missing_columns(db, Outbound, Outbound.attempts, Outbound.next_attempt_at)


def _v8_push_tokens_out_of_the_journal(db):
    """Sends journalled before the push token was kept out of the journal carry it in their body: each such
    body gets the token masked, and its row the token's digest (and the digest of the new body). The token
    stays valid: its wait already keeps only its digest. On SQLite the old text is zeroed where it stood
    (secure_delete), and the file is compacted after the upgrade (_scrub_sqlite_file)."""
    _add_missing_columns(db, Outbound, Outbound.push_token_sha256)
    if dialect() != "sqlite":
        _mask_journalled_push_tokens()
        return
    (before,) = db.execute_sql("PRAGMA secure_delete").fetchone()
    db.execute_sql("PRAGMA secure_delete = ON")
    try:
        _mask_journalled_push_tokens()
    finally:
        db.execute_sql(f"PRAGMA secure_delete = {int(before)}")


def _mask_journalled_push_tokens() -> None:
    after = ""
    while True:
        page = list(Outbound.select(Outbound.id, Outbound.request_body)
                    .where(Outbound.id > after, Outbound.request_body.contains('"token"'))
                    .order_by(Outbound.id).limit(MIGRATION_BATCH))
        for row in page:
            token = push_tokens.token_in_body(row.request_body)
            if token is not None:
                body = push_tokens.mask(row.request_body, token)
                Outbound.update(request_body=body, request_sha256=hashlib.sha256(body.encode()).hexdigest(),
                                push_token_sha256=push_tokens.digest(token)).where(Outbound.id == row.id).execute()
        if len(page) < MIGRATION_BATCH:
            return
        after = page[-1].id


def _v9_runs_list_indexes(db):
    """The runs list newest first, whole or filtered by status or origin, reads an index instead of sorting
    every run (the console renders it within 200 ms with 100,000 runs: bench/bench_console.py). A database
    created at version 9 or later has them from its models already."""
    present = {tuple(index.columns) for index in db.get_indexes(Run._meta.table_name)}
    wanted = [("created_at", "id"), ("status", "created_at", "id"), ("origin", "created_at", "id")]
    missing = [columns for columns in wanted if columns not in present]
    if missing:
        migrator = SchemaMigrator.from_database(db)
        migrate(*(migrator.add_index(Run._meta.table_name, columns, False) for columns in missing))


MIGRATIONS = [
    (1, "runs, run events, worker heartbeats", _v1_initial),
    (2, "api tokens, idempotency records, model turns, tool results", _v2_runs_api),
    (3, "the host's consumer report", _v3_consumer_report),
    (4, "remote agents, the outbound journal, dependency waits", _v4_delegation),
    (5, "person pauses, decisions, grants, notes", _v5_decisions),
    (6, "pushes that come before the suspension", _v6_early_pushes),
    (7, "failing remote agents, backoff of polls and CancelTask attempts", _v7_remote_failures),
    (8, "push tokens out of the outbound journal", _v8_push_tokens_out_of_the_journal),
    (9, "indexes of the runs list", _v9_runs_list_indexes),
]


@contextlib.contextmanager
def _migration_lock():
    db = database.obj
    kind = dialect()
    if kind == "postgresql":
        db.execute_sql("SELECT pg_advisory_lock(%s)", (PG_LOCK_KEY,))
        try:
            yield
        finally:
            db.execute_sql("SELECT pg_advisory_unlock(%s)", (PG_LOCK_KEY,))
    elif kind == "mysql":
        (got,) = db.execute_sql("SELECT GET_LOCK(%s, 120)", (LOCK_NAME,)).fetchone()
        if got != 1:
            raise RuntimeError("could not take the migration lock within 120 s")
        try:
            yield
        finally:
            db.execute_sql("SELECT RELEASE_LOCK(%s)", (LOCK_NAME,))
    else:
        # SQLite: BEGIN IMMEDIATE holds the file's write lock for the whole upgrade.
        with db.atomic():
            yield


def upgrade() -> list[int]:
    """Apply every migration not yet applied; returns the versions applied now."""
    db = database.obj
    applied_now = []
    with _migration_lock():
        db.create_tables([SchemaMigration], safe=True)
        done = {row.version for row in SchemaMigration.select(SchemaMigration.version)}
        for version, name, migrate in MIGRATIONS:
            if version in done:
                continue
            migrate(db)
            SchemaMigration.create(version=version, name=name, applied_at=utcnow())
            applied_now.append(version)
    if dialect() == "sqlite" and SCRUBS_SQLITE_FILE.intersection(applied_now):
        _scrub_sqlite_file(db)
    return applied_now


def _scrub_sqlite_file(db) -> None:
    """After a migration that replaced secrets: no old copy of them is left in the SQLite files. VACUUM
    rewrites the database without its free pages (rows deleted earlier keep their text there), and the
    checkpoint copies the write-ahead log into the file and empties it. Both need the file to themselves:
    while another process uses it they cannot run, and the upgrade says so instead of failing."""
    try:
        db.execute_sql("VACUUM")
        busy, _, _ = db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    except OperationalError as exc:
        busy = str(exc)
    if busy:
        log.warning("could not compact the SQLite file after the upgrade (%s): old copies of replaced secrets "
                    "may remain in its free pages until `VACUUM` is run with no sidecar process running", busy)


def current_version() -> int:
    if not database.obj.table_exists(SchemaMigration._meta.table_name):
        return 0
    latest = SchemaMigration.select(SchemaMigration.version).order_by(SchemaMigration.version.desc()).first()
    return latest.version if latest else 0


def latest_version() -> int:
    return MIGRATIONS[-1][0]
