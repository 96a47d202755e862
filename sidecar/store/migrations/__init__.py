"""Versioned migrations, applied under a database-wide lock so two processes starting at once do not race.

Each version is a step of its own module (v01_runs.py, ...) that says what it changes and declares the tables
and columns it adds as they were at that version: a step never reads today's models. Each step runs once and
is recorded in schema_migrations; `upgrade()` is idempotent. A released step is never edited: a later schema
change is a new step at the end of STEPS. A new database runs every step too, so a database created at any
version reaches the same schema, which tests/test_migrations.py compares with the models on every database.
"""

import contextlib
import logging

from peewee import OperationalError

from ...domain.clock import utcnow
from ..db import database, dialect
from ..models import SchemaMigration
from . import (
    v01_runs,
    v02_runs_api,
    v03_consumer_report,
    v04_delegation,
    v05_decisions,
    v06_early_pushes,
    v07_remote_failures,
    v08_push_tokens,
    v09_runs_list_indexes,
    v10_pushes_seen,
    v11_redundant_indexes,
)

LOCK_NAME = "nrllm_sidecar_migrate"
STEPS = {
    1: v01_runs,
    2: v02_runs_api,
    3: v03_consumer_report,
    4: v04_delegation,
    5: v05_decisions,
    6: v06_early_pushes,
    7: v07_remote_failures,
    8: v08_push_tokens,
    9: v09_runs_list_indexes,
    10: v10_pushes_seen,
    11: v11_redundant_indexes,
}
# (version, name, apply): the order they run in.
MIGRATIONS = [(version, step.NAME, step.apply) for version, step in sorted(STEPS.items())]
# Steps that replace secrets: on SQLite the file is compacted afterwards (_scrub_sqlite_file).
SCRUBS_SQLITE_FILE = {version for version, step in STEPS.items() if getattr(step, "SCRUBS_SQLITE_FILE", False)}

log = logging.getLogger("nrllm_sidecar.migrations")
PG_LOCK_KEY = 281_000_001  # any constant; it names the advisory lock


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


def upgrade(to: int | None = None) -> list[int]:
    """Apply every migration not yet applied (up to version `to`); returns the versions applied now."""
    db = database.obj
    applied_now = []
    with _migration_lock():
        db.create_tables([SchemaMigration], safe=True)
        done = {row.version for row in SchemaMigration.select(SchemaMigration.version)}
        for version, name, migrate in MIGRATIONS:
            if version in done or (to is not None and version > to):
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
