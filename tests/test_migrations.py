"""Migrations as steps: a database created at the first schema and upgraded one version at a time has the
schema of one created from today's models (columns, types, nullability, defaults, indexes, constraints),
on SQLite, PostgreSQL and MariaDB."""

import pytest
from peewee import ForeignKeyField, sort_models
from playhouse.migrate import SchemaMigrator, migrate

from sidecar.store import db as store_db
from sidecar.store import migrations
from sidecar.store.migrations import v11_redundant_indexes
from sidecar.store.migrations.snapshot import snapshot
from sidecar.store.models import BaseModel, PersonPause

MODELS = sort_models(BaseModel.__subclasses__())


def _upgraded_step_by_step() -> dict:
    assert migrations.upgrade(to=1) == [1]
    first = snapshot()
    assert "pause_generation" not in first["runs"]["columns"]  # the first schema, not today's
    assert "outbound" not in first
    for version, _, _ in migrations.MIGRATIONS[1:]:
        assert migrations.upgrade(to=version) == [version]
    assert migrations.current_version() == migrations.latest_version()
    return snapshot()


def _created_from_the_models(db) -> dict:
    db.create_tables(MODELS)
    return snapshot()


def _differences(upgraded: dict, new: dict) -> list[str]:
    """`table part name: upgraded != new` for every column, index or constraint that is not alike."""
    found = [f"table {table}: only in the {'upgraded' if table in upgraded else 'new'} database"
             for table in sorted(set(upgraded) ^ set(new))]
    for table in sorted(set(upgraded) & set(new)):
        for part, items in new[table].items():
            theirs = upgraded[table][part]
            found += [f"{table} {part} {name}: {theirs.get(name)} != {items.get(name)}"
                      for name in sorted(set(items) | set(theirs)) if theirs.get(name) != items.get(name)]
    return found


def test_an_upgraded_database_equals_a_new_one(fresh_database_url):
    db = store_db.bind(fresh_database_url)
    try:
        upgraded = _upgraded_step_by_step()
        db.drop_tables(MODELS)
        assert snapshot() == {}
        new = _created_from_the_models(db)
        assert _differences(upgraded, new) == []
    finally:
        db.close()
        if hasattr(db, "close_all"):
            db.close_all()


def test_the_comparison_sees_an_index_a_nullability_and_a_foreign_key(fresh_database_url):
    """What a model change without its step would leave behind is a difference the comparison shows."""
    db = store_db.bind(fresh_database_url)
    try:
        migrations.upgrade()
        before = snapshot()
        migrator = SchemaMigrator.from_database(db)
        migrate(migrator.add_index("notes", ("created_at",), unique=True))
        with_index = snapshot()
        assert with_index["notes"]["indexes"] != before["notes"]["indexes"]
        migrate(migrator.drop_not_null("grants", "created_at"))
        assert snapshot()["grants"]["columns"] != before["grants"]["columns"]
        migrate(migrator.add_column("notes", "pause_id", ForeignKeyField(PersonPause, null=True, field=PersonPause.id)))
        assert snapshot()["notes"]["constraints"] != with_index["notes"]["constraints"]
    finally:
        db.close()
        if hasattr(db, "close_all"):
            db.close_all()


@pytest.mark.parametrize("table", sorted(v11_redundant_indexes.REDUNDANT))
def test_a_lookup_by_run_still_reads_an_index_after_the_redundant_ones_are_dropped(sqlite_url, table):
    # Fails if migration 11 dropped an index without another beginning with run_id: the lookups by run (a
    # run's events, turns, results, pauses; the cascade of a purge) would scan the whole table.
    dropped, serving = v11_redundant_indexes.REDUNDANT[table]
    plan = " ".join(row[-1] for row in store_db.database.execute_sql(
        f'EXPLAIN QUERY PLAN SELECT * FROM "{table}" WHERE run_id = ?', ("r",)).fetchall())
    names = {index.name: tuple(index.columns) for index in store_db.database.get_indexes(table)}
    assert dropped not in names and serving in names.values()
    assert "USING INDEX" in plan and "SCAN" not in plan, plan
