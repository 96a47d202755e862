"""One database object, bound from a URL, and the write transaction every store function uses."""

import functools
import random
import sqlite3
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlparse

from peewee import DatabaseProxy, MySQLDatabase, OperationalError, PeeweeException, SqliteDatabase
from playhouse.pool import PooledMySQLDatabase, PooledPostgresqlDatabase

# Models are declared against this proxy; bind() points it at a real database (the scout pattern).
database = DatabaseProxy()

# What any failure of the database looks like to the layers above the store (health reports it).
DatabaseError = PeeweeException

SQLITE_BUSY_TIMEOUT_SECONDS = 15
TRANSIENT_RETRIES = 8
POOL_SIZE = 16
POOL_WAIT_SECONDS = 10


class SidecarSqliteDatabase(SqliteDatabase):
    """WAL and a busy timeout; every transaction BEGIN IMMEDIATE.

    A deferred transaction that reads and then writes fails with a busy snapshot error that the busy
    timeout does not retry; taking the write lock at BEGIN makes writers queue instead.
    """

    def __init__(self, path: str):
        super().__init__(
            path,
            lock_type="IMMEDIATE",
            timeout=SQLITE_BUSY_TIMEOUT_SECONDS,
            pragmas={
                "journal_mode": "wal",
                "synchronous": "normal",
                "busy_timeout": SQLITE_BUSY_TIMEOUT_SECONDS * 1000,
                "foreign_keys": 1,
            },
        )


class SidecarMySQLDatabase(PooledMySQLDatabase):
    """MariaDB/MySQL: long bodies and microsecond times."""

    field_types = {
        **MySQLDatabase.field_types,
        "TEXT": "LONGTEXT",
        "BLOB": "LONGBLOB",
        "DATETIME": "DATETIME(6)",
    }


def connect(url: str):
    """A database object for a URL: sqlite:///path, postgresql://..., mysql://..."""
    parsed = urlparse(url)
    query = dict(parse_qsl(parsed.query))
    if parsed.scheme == "sqlite":
        # As elsewhere: sqlite:///relative.db is relative, sqlite:////abs/path.db absolute.
        path = parsed.path[1:] or ":memory:"
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        return SidecarSqliteDatabase(path)
    common = {
        "database": parsed.path.lstrip("/"),
        "host": parsed.hostname or "127.0.0.1",
        "user": parsed.username,
        # Per process. serve runs three (two HTTP workers and the worker): 48 of a server's default 100.
        "max_connections": int(query.pop("max_connections", POOL_SIZE)),
        "stale_timeout": 300,
        # A thread that finds the pool empty waits for a connection (a burst of requests queues) instead of
        # failing at once; after this many seconds it fails.
        "timeout": POOL_WAIT_SECONDS,
    }
    if parsed.port:
        common["port"] = parsed.port
    if parsed.scheme in ("postgres", "postgresql"):
        if parsed.password:
            common["password"] = parsed.password
        return PooledPostgresqlDatabase(**common, **query)
    if parsed.scheme in ("mysql", "mariadb"):
        from pymysql.constants import CLIENT

        if parsed.password:
            common["password"] = parsed.password
        # Without FOUND_ROWS an UPDATE that writes the values a row already has reports 0 rows, and a
        # lease renewed within the same microsecond would read as lost.
        return SidecarMySQLDatabase(**common, client_flag=CLIENT.FOUND_ROWS, **query)
    raise ValueError(f"unsupported database URL scheme {parsed.scheme!r} (sqlite, postgresql, mysql)")


def bind(url: str):
    db = connect(url)
    database.initialize(db)
    return db


def give_back() -> None:
    """A unit of work (a request, a poll) ended: give its connection back to the pool (PostgreSQL, MariaDB).
    SQLite has no pool, and opening a connection (with its pragmas) costs as much as a small request: the
    thread keeps it for its next one. Server threads live long (gunicorn's pool); a thread that ends closes
    its connection with itself."""
    if dialect() != "sqlite" and not database.is_closed():
        database.close()


def close_all() -> None:
    """Close every connection this process holds (a pool's idle ones too): before it forks, for instance."""
    if database.obj is None:
        return
    if not database.is_closed():
        database.close()
    if hasattr(database.obj, "close_all"):
        database.obj.close_all()


def ping() -> None:
    """Ask the database for a trivial answer: raises DatabaseError when it does not answer."""
    database.execute_sql("SELECT 1")


def dialect() -> str:
    db = database.obj
    if isinstance(db, SqliteDatabase):
        return "sqlite"
    if isinstance(db, MySQLDatabase):
        return "mysql"
    return "postgresql"


def supports_returning() -> bool:
    """UPDATE ... RETURNING: PostgreSQL and SQLite 3.35 and later; not MariaDB or MySQL."""
    kind = dialect()
    return kind == "postgresql" or (kind == "sqlite" and sqlite3.sqlite_version_info >= (3, 35))


def updated_value(update, column, key):
    """Execute `update`, an UPDATE of at most the row whose primary key is `key`, and return the new value of
    `column` (None when no row matched). One statement where UPDATE ... RETURNING exists (PostgreSQL, SQLite 3.35
    and later); the update and a read of the row where it does not (MariaDB, MySQL)."""
    if supports_returning():
        rows = list(update.returning(column).tuples().execute())
        return rows[0][0] if rows else None
    if update.execute() != 1:
        return None
    model = column.model
    return model.select(column).where(model._meta.primary_key == key).scalar()


def _is_transient(exc: BaseException) -> bool:
    """Deadlocks, serialization failures and a busy SQLite file: the whole transaction may be retried.

    Also an error raised while undoing one: MariaDB ends the whole transaction at a deadlock, so undoing an
    inner savepoint then fails ("SAVEPOINT ... does not exist") and that error hides the deadlock; the
    exception chain still holds it.
    """
    while exc is not None:
        # peewee keeps the driver's exception in .orig and takes over its args (MySQL: the error number first).
        driver = getattr(exc, "orig", None)
        if getattr(driver, "pgcode", None) in ("40P01", "40001"):
            return True
        codes = (*getattr(driver, "args", ())[:1], *exc.args[:1])
        if any(code in (1213, 1205) for code in codes):  # MySQL deadlock, lock wait timeout
            return True
        if "database is locked" in str(exc):
            return True
        exc = exc.__context__
    return False


def transactional(fn):
    """Run fn in one write transaction, retried whole on a deadlock or serialization failure.

    fn must do nothing but database work: it may run more than once. Called inside another transaction it
    is a savepoint of it and is not retried on its own: a deadlock aborts the outer transaction too (on
    MariaDB all of it), so only the outermost level can start again.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if database.in_transaction():
            with database.atomic():
                return fn(*args, **kwargs)
        for attempt in range(TRANSIENT_RETRIES):
            try:
                with database.atomic():
                    return fn(*args, **kwargs)
            except OperationalError as exc:
                if attempt + 1 == TRANSIENT_RETRIES or not _is_transient(exc):
                    raise
                time.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
        raise AssertionError("unreachable")

    return wrapper
