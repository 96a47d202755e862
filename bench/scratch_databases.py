"""Scratch databases for the benchmarks: a temporary SQLite file, or a PostgreSQL or MariaDB database with a
unique name, created on the servers the tests use and dropped afterwards (like tests/conftest.py), so a
benchmark never sees rows of anything else and leaves nothing behind.
"""

import contextlib
import os
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlparse, urlsplit, urlunsplit

# The same servers and variables as the tests.
ADMIN_URLS = {
    "postgresql": os.environ.get("NRLLM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"),
    "mysql": os.environ.get("NRLLM_TEST_MYSQL", "mysql://root@127.0.0.1:3306/test"),
}


class Unreachable(Exception):
    """The database server could not be reached, so nothing was measured on it."""


def _admin_connection(dialect: str):
    url = ADMIN_URLS[dialect]
    try:
        if dialect == "postgresql":
            import psycopg2

            conn = psycopg2.connect(url, connect_timeout=3)
            conn.autocommit = True  # CREATE/DROP DATABASE refuse to run inside a transaction
            return conn
        import pymysql

        parsed = urlparse(url)
        return pymysql.connect(
            host=parsed.hostname or "127.0.0.1",
            port=parsed.port or 3306,
            user=parsed.username,
            password=parsed.password or "",
            connect_timeout=3,
            autocommit=True,
        )
    except Exception as exc:  # any failure to reach the server
        raise Unreachable(f"{dialect} at {url} is not reachable ({exc})") from exc


def _execute_as_admin(dialect: str, sql: str) -> None:
    conn = _admin_connection(dialect)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


@contextlib.contextmanager
def scratch_database(dialect: str):
    """Yield the URL of a new, empty database of this kind (sqlite, postgresql, mysql); drop it afterwards."""
    if dialect == "sqlite":
        with tempfile.TemporaryDirectory(prefix="nrllm-bench-") as directory:
            yield f"sqlite:///{Path(directory) / 'bench.db'}"
        return
    name = f"nrllm_bench_{uuid.uuid4().hex[:12]}"
    if dialect == "postgresql":
        create, drop = f'CREATE DATABASE "{name}"', f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
    else:
        create, drop = f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4", f"DROP DATABASE IF EXISTS `{name}`"
    _execute_as_admin(dialect, create)
    try:
        # The path replaced, the query kept (a PostgreSQL socket's ?host=/directory).
        yield urlunsplit(urlsplit(ADMIN_URLS[dialect])._replace(path=f"/{name}"))
    finally:
        _execute_as_admin(dialect, drop)
