"""Looking for secrets where they must not be: in the bytes of a SQLite database's files, and in every text
and binary column of every table of any database."""

from pathlib import Path

from sidecar.store.db import SQLITE_COMPANIONS, database, dialect

TEXT_TYPES = ("char", "text", "clob", "blob", "binary", "bytea", "json")


def sqlite_files(url: str) -> list[Path]:
    """The database file and its companions that exist now (-wal and -shm while a connection is open)."""
    path = Path(url.removeprefix("sqlite:///"))
    return [p for p in (path, *(path.with_name(path.name + s) for s in SQLITE_COMPANIONS)) if p.exists()]


def found_in_files(files: list[Path], secrets: dict[str, str]) -> list[str]:
    found = []
    for file in files:
        data = file.read_bytes()
        found += [f"{name} in {file.name}" for name, secret in secrets.items() if secret.encode() in data]
    return found


def found_in_columns(secrets: dict[str, str]) -> list[str]:
    """Every text or binary column of every table, read whole: where each secret's text occurs."""
    found = []
    for table in database.get_tables():
        columns = [c.name for c in database.get_columns(table) if any(t in c.data_type.lower() for t in TEXT_TYPES)]
        if not columns:
            continue
        quote = "`" if dialect() == "mysql" else '"'
        listed = ", ".join(f"{quote}{c}{quote}" for c in columns)
        for row in database.execute_sql(f"SELECT {listed} FROM {quote}{table}{quote}").fetchall():
            for column, value in zip(columns, row, strict=True):
                text = bytes(value).decode("utf-8", "replace") if isinstance(value, bytes | memoryview) else value
                found += [f"{name} in {table}.{column}" for name, secret in secrets.items()
                          if isinstance(text, str) and secret in text]
    return found
