"""What the steps build on: a base for tables frozen as a step created them, and adding a column where it is
missing.

A step never imports sidecar.store.models: the models say what the code reads and writes today, a step
what its version changed then. Each step declares the tables (or the columns) it adds as they were at its
version, so a database created at any version and upgraded reaches the schema of a new one
(tests/test_migrations.py compares them on every database).
"""

from peewee import Model
from playhouse.migrate import SchemaMigrator, migrate

from ..db import database


class FrozenModel(Model):
    """A table (or the part of it a step touches) as one version left it."""

    class Meta:
        database = database
        legacy_table_names = False


def add_missing_columns(db, *fields) -> None:
    """Add columns of one table that it lacks. Before the steps were frozen, a step created its tables from the
    models of the day, so a database created later already has the columns later steps add."""
    table = fields[0].model._meta.table_name
    present = {column.name for column in db.get_columns(table)}
    missing = [field for field in fields if field.column_name not in present]
    if missing:
        migrator = SchemaMigrator.from_database(db)
        migrate(*(migrator.add_column(table, field.column_name, field) for field in missing))
