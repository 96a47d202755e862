"""Version 9: indexes of the runs list. Newest first, whole or filtered by status or origin, the list reads an
index instead of sorting every run (the console renders it within 200 ms with 100,000 runs:
bench/bench_console.py). On a very large table, building them blocks writes to `runs` meanwhile
(docs/upgrading.md)."""

from playhouse.migrate import SchemaMigrator, migrate

NAME = "indexes of the runs list"
TABLE = "runs"
INDEXES = [("created_at", "id"), ("status", "created_at", "id"), ("origin", "created_at", "id")]


def apply(db) -> None:
    present = {tuple(index.columns) for index in db.get_indexes(TABLE)}
    missing = [columns for columns in INDEXES if columns not in present]
    if missing:
        migrator = SchemaMigrator.from_database(db)
        migrate(*(migrator.add_index(TABLE, columns, False) for columns in missing))
