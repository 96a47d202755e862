"""The schema of the bound database as plain data, to compare two databases: per table its columns (type,
nullability, default, primary key), its indexes (columns, uniqueness) and its constraints (foreign keys
with their ON DELETE; on PostgreSQL every constraint's definition). Column order is left out: a column a
later version adds comes last in an upgraded table and where the model declares it in a new one."""

from collections import defaultdict

from ..db import database, dialect


def snapshot() -> dict[str, dict]:
    """table -> {"columns": {...}, "indexes": {...}, "constraints": {...}}."""
    read = {"sqlite": _sqlite, "postgresql": _postgresql, "mysql": _mysql}[dialect()]
    tables: dict[str, dict] = defaultdict(lambda: {"columns": {}, "indexes": {}, "constraints": {}})
    read(database.obj, tables)
    return {name: dict(parts) for name, parts in sorted(tables.items())}


def _rows(db, sql: str, params=()) -> list[tuple]:
    return list(db.execute_sql(sql, params).fetchall())


def _sqlite(db, tables) -> None:
    names = [row[0] for row in _rows(db, "SELECT name FROM sqlite_master WHERE type = 'table' "
                                         "AND name NOT LIKE 'sqlite_%'")]
    for table in names:
        for _, column, kind, notnull, default, pk in _rows(db, f'PRAGMA table_info("{table}")'):
            tables[table]["columns"][column] = {"type": kind.upper(), "null": not notnull, "default": default,
                                                "primary_key": bool(pk)}
        for _, index, unique, origin, _partial in _rows(db, f'PRAGMA index_list("{table}")'):
            columns = [row[2] for row in _rows(db, f'PRAGMA index_info("{index}")')]
            tables[table]["indexes"][index] = {"columns": columns, "unique": bool(unique), "origin": origin}
        for key_id, _, target, column, to, on_update, on_delete, _match in _rows(
                db, f'PRAGMA foreign_key_list("{table}")'):
            tables[table]["constraints"][f"foreign key {key_id}"] = {
                "column": column, "references": f"{target}({to})", "on_update": on_update, "on_delete": on_delete}


def _postgresql(db, tables) -> None:
    for table, column, kind, length, nullable, default in _rows(db, """
            SELECT table_name, column_name, data_type, character_maximum_length, is_nullable, column_default
            FROM information_schema.columns WHERE table_schema = current_schema()"""):
        tables[table]["columns"][column] = {"type": kind if length is None else f"{kind}({length})",
                                            "null": nullable == "YES", "default": default}
    for table, index, definition in _rows(db, """
            SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"""):
        tables[table]["indexes"][index] = definition
    for table, name, definition in _rows(db, """
            SELECT rel.relname, con.conname, pg_get_constraintdef(con.oid)
            FROM pg_constraint con JOIN pg_class rel ON rel.oid = con.conrelid
            WHERE con.connamespace = current_schema()::regnamespace"""):
        tables[table]["constraints"][name] = definition


def _mysql(db, tables) -> None:
    for table, column, kind, nullable, default, key, extra in _rows(db, """
            SELECT table_name, column_name, column_type, is_nullable, column_default, column_key, extra
            FROM information_schema.columns WHERE table_schema = DATABASE()"""):
        tables[table]["columns"][column] = {"type": kind, "null": nullable == "YES", "default": default,
                                            "primary_key": key == "PRI", "extra": extra}
    indexes: dict[tuple, dict] = {}
    for table, index, non_unique, _, column in _rows(db, """
            SELECT table_name, index_name, non_unique, seq_in_index, column_name
            FROM information_schema.statistics WHERE table_schema = DATABASE()
            ORDER BY table_name, index_name, seq_in_index"""):
        entry = indexes.setdefault((table, index), {"columns": [], "unique": not non_unique})
        entry["columns"].append(column)
    for (table, index), entry in indexes.items():
        tables[table]["indexes"][index] = entry
    for table, name, column, target, to, on_update, on_delete in _rows(db, """
            SELECT k.table_name, k.constraint_name, k.column_name, k.referenced_table_name,
                   k.referenced_column_name, r.update_rule, r.delete_rule
            FROM information_schema.key_column_usage k
            JOIN information_schema.referential_constraints r
              ON r.constraint_schema = k.constraint_schema AND r.constraint_name = k.constraint_name
             AND r.table_name = k.table_name
            WHERE k.table_schema = DATABASE()"""):
        tables[table]["constraints"][name] = {"column": column, "references": f"{target}({to})",
                                              "on_update": on_update, "on_delete": on_delete}
