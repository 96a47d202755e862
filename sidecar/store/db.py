"""The application's database, bound from a URL, and the write transaction every store function uses."""

import functools
import logging
import os
import random
import select
import sqlite3
import threading
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlparse

from peewee import (
    DatabaseProxy,
    MySQLDatabase,
    OperationalError,
    PeeweeException,
    SqliteDatabase,
    __exception_wrapper__,
)
from playhouse.pool import PooledDatabase, PooledMySQLDatabase, PooledPostgresqlDatabase

from ..application import current
from ..domain.backoff import Backoff
from .wal_checkpoints import AUTOCHECKPOINT_PAGES, Checkpointer
from .write_lock import WriteLock

try:
    from psycopg2.extensions import TRANSACTION_STATUS_IDLE
    from psycopg2.extensions import connection as _DriverConnection
except ImportError:  # PostgreSQL's driver is optional
    TRANSACTION_STATUS_IDLE = 0
    _DriverConnection = object

log = logging.getLogger("nrllm_sidecar.database")


class ApplicationDatabase(DatabaseProxy):
    """The proxy the models are declared against (the scout pattern), pointing at the database of the
    application the calling thread runs in (sidecar/application.py): two applications in one process each
    work on their own. bind() sets the current application's."""

    __slots__ = ()

    def __init__(self):
        object.__setattr__(self, "_callbacks", [])

    @property
    def obj(self):
        return current().database

    def __getattr__(self, attr):
        # peewee's Proxy looks its object up twice an attribute (to test it, then to use it), and the store
        # reaches the database through this proxy hundreds of times a delegation: once is enough.
        obj = self.obj
        if obj is None:
            raise AttributeError("Cannot use uninitialized Proxy.")
        return getattr(obj, attr)

    def initialize(self, obj) -> None:
        current().database = obj
        for callback in self._callbacks:
            callback(obj)


database = ApplicationDatabase()

# What any failure of the database looks like to the layers above the store (health reports it).
DatabaseError = PeeweeException

SQLITE_BUSY_TIMEOUT_SECONDS = 15
# Pages of the database file are read through a memory map instead of a read() each: every commit of another
# connection empties a connection's page cache in WAL mode, so each transaction reads its pages again (about
# 4 % of a delegation cycle's CPU, docs/performance.md). Writes and the WAL's pages still go through the file.
SQLITE_MMAP_BYTES = 256 * 1024 * 1024
TRANSIENT_RETRIES = 8
POOL_SIZE = 16
POOL_WAIT_SECONDS = 10


class _NothingPrepared:
    """execute_kept() of a database that prepares nothing: the statement as it is; and defer_kept() of one that
    sends nothing later: the statement now."""

    def execute_kept(self, sql: str, params=()):
        return self.execute_sql(sql, params)

    def defer_kept(self, sql: str, params=()) -> None:
        self.execute_sql(sql, params)


class SidecarSqliteDatabase(_NothingPrepared, SqliteDatabase):
    """WAL and a busy timeout; every transaction BEGIN IMMEDIATE, its writers queued.

    A deferred transaction that reads and then writes fails with a busy snapshot error that the busy
    timeout does not retry; taking the write lock at BEGIN makes writers queue instead. They queue on the
    sidecar's own lock first (sidecar/store/write_lock.py): SQLite's busy handler sleeps in growing steps of
    up to 100 ms, so a writer that found SQLite's lock taken slept on long after it was free.
    """

    def __init__(self, path: str, busy_timeout: float = SQLITE_BUSY_TIMEOUT_SECONDS):
        self.busy_timeout = busy_timeout
        self.write_lock = WriteLock(path)
        in_memory = path == ":memory:" or path.startswith("file::memory:")
        self.checkpointer = None if in_memory else Checkpointer(os.path.realpath(path), self.write_lock)
        super().__init__(
            path,
            lock_type="IMMEDIATE",
            timeout=busy_timeout,
            pragmas={
                "journal_mode": "wal",
                "synchronous": "normal",
                "busy_timeout": int(busy_timeout * 1000),
                "foreign_keys": 1,
                "mmap_size": SQLITE_MMAP_BYTES,
                "wal_autocheckpoint": AUTOCHECKPOINT_PAGES,  # the WAL is copied by a thread of its own
            },
        )

    def begin(self, lock_type=None):
        """BEGIN IMMEDIATE once this thread holds the write lock of all the sidecar's processes
        (sidecar/store/write_lock.py), waiting for it up to the busy timeout, then "database is locked"."""
        if not self.write_lock.acquire(self.busy_timeout):
            with __exception_wrapper__:
                raise sqlite3.OperationalError("database is locked")
        try:
            super().begin(lock_type)
        except BaseException:
            self.write_lock.release()
            raise

    def commit(self):
        super().commit()
        self.write_lock.release()
        if self.checkpointer is not None:
            self.checkpointer.committed()

    def rollback(self):
        try:
            super().rollback()
        finally:
            self.write_lock.release()

    def _close(self, conn):
        try:
            super()._close(conn)  # an open transaction ends with its connection
        finally:
            self.write_lock.release()

    def close_all(self):
        """The calling thread's connection and the checkpointing thread's: before the process forks, for
        instance, since a child must not inherit an open SQLite connection (wal_checkpoints.py). Other
        threads close their own."""
        if not self.is_closed():
            self.close()
        if self.checkpointer is not None:
            self.checkpointer.close()


class _EndsOutages:
    """A connection handed out means the server answered (the pool tests one it lends again): an outage this
    process noticed is over, also in a process whose only users are requests (serve --no-worker)."""

    def _initialize_connection(self, conn):
        super()._initialize_connection(conn)
        outage.ended()


class PreparingConnection(_DriverConnection):
    """A PostgreSQL connection that knows which of the store's statements it prepared: a name by SQL text."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.prepared: dict[str, str] = {}


@functools.lru_cache(maxsize=2048)
def _numbered(sql: str) -> str | None:
    """`sql` with its `%s` parameters numbered ($1, $2, ...) for PREPARE; None if it has any other `%`."""
    parts = sql.split("%s")
    if any("%" in part for part in parts):
        return None
    return "".join(part + (f"${index}" if index < len(parts) else "") for index, part in enumerate(parts, 1))


@functools.lru_cache(maxsize=2048)
def _execute_text(name: str, count: int) -> str:
    return f"EXECUTE {name}({', '.join(['%s'] * count)})" if count else f"EXECUTE {name}"


class SidecarPostgresqlDatabase(_EndsOutages, PooledPostgresqlDatabase):
    """Fewer round trips: each costs the server's answer and, in this process, a send, a wait and a receive
    (docs/performance.md, "The delegation cycle").

    BEGIN, and the statements a transaction defers (`defer`: writes whose results nobody reads, such as the
    inserts of its events, of a turn or of a wait, store/statements.py), go to the server with the
    transaction's next statement or its COMMIT, as one query string, in the order they were made. PostgreSQL
    runs them in that order, stops at the first that fails (the error is raised by the call that sent them,
    and the transaction is undone as before), and takes a transaction's snapshot at its first statement, not
    at BEGIN, so nothing it reads or locks changes. A transaction that ran no statement sends neither BEGIN
    nor its COMMIT or ROLLBACK; a rollback drops what was deferred.

    A connection lent again by the pool is asked `SELECT 1` only when its socket has something to read:
    an idle connection the server closed (a restart, a terminated backend, a timeout) has the server's
    goodbye or the end of the stream waiting there; an idle one with nothing to read is the server's as it
    was. A statement on a connection that dies after the check fails as it always could.

    The store's kept statements (store/statements.py: `execute_kept`, `defer_kept`) are prepared once per
    connection and then executed by name, so the server parses and plans each of them once, not at every
    call. The PREPARE is a round trip of its own, sent before anything the transaction deferred: while the
    transaction's BEGIN has not been sent yet, it runs outside the transaction, and a statement the server
    will not prepare is then sent as it is instead. `prepared_statements=False` (the URL's
    `?prepared_statements=off`) sends every statement as it is: for a pooler between the sidecar and the
    server that hands one session's transactions to different server connections, which do not know the
    names."""

    def __init__(self, database, *, prepared_statements: bool = True, **kwargs):
        self.prepared_statements = prepared_statements
        self._unpreparable: set[str] = set()  # texts the server refused to prepare (each is logged once)
        if prepared_statements:
            kwargs["connection_factory"] = PreparingConnection
        super().__init__(database, **kwargs)

    def execute_kept(self, sql: str, params=()):
        """execute_sql() of a kept statement text: by its name on this thread's connection."""
        return self.execute_sql(self._by_name(sql, len(params)), params)

    def defer_kept(self, sql: str, params=()) -> None:
        """defer() of a kept statement text: by its name on this thread's connection."""
        self.defer(self._by_name(sql, len(params)), params)

    def _by_name(self, sql: str, count: int) -> str:
        """The text that executes `sql` on this thread's connection: EXECUTE of its prepared statement, prepared
        now if this connection has not yet; `sql` itself where it cannot be."""
        if not self.prepared_statements:
            return sql
        conn = self.connection()
        name = conn.prepared.get(sql)
        if name is not None:
            return _execute_text(name, count)
        if sql in self._unpreparable or (numbered := _numbered(sql)) is None:
            return sql
        name = f"nrllm_{len(conn.prepared) + 1}"
        try:
            self._prepare(conn, name, numbered)
        except PeeweeException:
            if conn.get_transaction_status() != TRANSACTION_STATUS_IDLE:
                raise  # the transaction had begun on the server: the failure aborted it
            log.warning("PostgreSQL does not prepare this statement; it is sent as it is: %s", sql)
            self._unpreparable.add(sql)
            return sql
        conn.prepared[sql] = name
        return _execute_text(name, count)

    def _prepare(self, conn, name: str, numbered: str) -> None:
        statement = f"PREPARE {name} AS {numbered}"
        self._log_query(statement, None)
        with __exception_wrapper__, conn.cursor() as cursor:
            cursor.execute(statement)

    def begin(self, isolation_level=None):
        if isolation_level is None:
            isolation_level = self._isolation_level
        statement = "BEGIN"
        if isolation_level:
            statement += " TRANSACTION ISOLATION LEVEL " + self._adapter.isolation_level_str(isolation_level)
        if self.is_closed():
            self.connect()
        self._state.pending = (self._state.conn, [statement.encode()])

    def defer(self, sql: str, params=()) -> None:
        """Inside a transaction: execute `sql` with the transaction's next statement (or its COMMIT)."""
        if not self.in_transaction():
            self.execute_sql(sql, params)
            return
        if self._pending() is None:
            self._state.pending = (self._state.conn, [])
        self._pending().append(self.cursor().mogrify(sql, params or ()))

    def _pending(self) -> list[bytes] | None:
        pending = getattr(self._state, "pending", None)
        if pending is None or pending[0] is not self._state.conn:
            return None
        return pending[1]

    def _take_pending(self) -> list[bytes] | None:
        pending = self._pending()
        self._state.pending = None
        return pending

    def _execute_pending(self, pending: list[bytes], last: bytes):
        sql = b"; ".join([*pending, last])
        self._log_query(sql, None)
        with __exception_wrapper__:
            cursor = self.cursor()
            cursor.execute(sql)  # no parameters: every part is already a literal statement
        return cursor

    def _execute_cursor(self, sql, params, **cursor_options):
        pending = self._take_pending()
        if not pending:
            return super()._execute_cursor(sql, params, **cursor_options)
        return self._execute_pending(pending, self.cursor().mogrify(sql, params or ()))

    def commit(self):
        pending = self._take_pending()
        if not pending:
            super().commit()
        elif len(pending) > 1 or not pending[0].startswith(b"BEGIN"):  # BEGIN alone: nothing ran
            self._execute_pending(pending, b"COMMIT")

    def rollback(self):
        pending = self._take_pending()
        if not pending or not pending[0].startswith(b"BEGIN"):  # the transaction reached the server
            super().rollback()

    def close(self):
        self._state.pending = None
        return super().close()

    def _is_closed(self, conn):
        if conn.closed:
            return True
        if conn.get_transaction_status() == TRANSACTION_STATUS_IDLE and not _readable(conn.fileno()):
            return False
        return super()._is_closed(conn)


def _readable(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


class SidecarMySQLDatabase(_NothingPrepared, _EndsOutages, PooledMySQLDatabase):
    """MariaDB/MySQL: long bodies and microsecond times."""

    field_types = {
        **MySQLDatabase.field_types,
        "TEXT": "LONGTEXT",
        "BLOB": "LONGBLOB",
        "DATETIME": "DATETIME(6)",
    }


PRIVATE_DIRECTORY_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def make_private(path: Path) -> None:
    """A SQLite file readable and writable by the sidecar's user alone, before SQLite opens it.

    A folder created for it is 0700. The file is created 0600 if it is missing (an empty file is an empty
    database) and set to 0600 if it exists (an older release left it 0644), as are companions already there.
    SQLite creates its write-ahead log and shared-memory files (-wal, -shm) later, with the mode of the
    database file: so they are 0600 too, whatever the process's umask.
    """
    path.parent.mkdir(mode=PRIVATE_DIRECTORY_MODE, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE))
    for file in (path, *(path.with_name(path.name + suffix) for suffix in SQLITE_COMPANIONS)):
        if file.exists():
            os.chmod(file, PRIVATE_FILE_MODE)


def connect(url: str):
    """A database object for a URL: sqlite:///path, postgresql://..., mysql://...

    SQLite takes one parameter, ?busy_timeout=SECONDS: how long a statement waits for another connection's
    lock before it fails (default SQLITE_BUSY_TIMEOUT_SECONDS)."""
    parsed = urlparse(url)
    query = dict(parse_qsl(parsed.query))
    if parsed.scheme == "sqlite":
        # As elsewhere: sqlite:///relative.db is relative, sqlite:////abs/path.db absolute.
        path = parsed.path[1:] or ":memory:"
        if path != ":memory:":
            make_private(Path(path))
        return SidecarSqliteDatabase(path, float(query.get("busy_timeout", SQLITE_BUSY_TIMEOUT_SECONDS)))
    common = {
        "database": parsed.path.lstrip("/"),
        # A `host` parameter names the server as the URL's host would: libpq's way to give the directory of
        # a Unix socket (postgresql://user@/db?host=/var/run/postgresql), which a URL's host cannot hold.
        "host": query.pop("host", None) or parsed.hostname or "127.0.0.1",
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
        prepared = query.pop("prepared_statements", "on").lower()
        if prepared not in ("on", "off"):
            raise ValueError(f"prepared_statements must be on or off, not {prepared!r}")
        return SidecarPostgresqlDatabase(**common, prepared_statements=prepared == "on", **query)
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
    return dialect_of(type(database.obj))


def dialect_of(database_class) -> str:
    if issubclass(database_class, SqliteDatabase):
        return "sqlite"
    if issubclass(database_class, MySQLDatabase):
        return "mysql"
    return "postgresql"


def supports_returning() -> bool:
    return returning_in(dialect())


def returning_in(kind: str) -> bool:
    """UPDATE ... RETURNING: PostgreSQL and SQLite 3.35 and later; not MariaDB or MySQL."""
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
        return _retrying(fn, args, kwargs, atomic=True)

    return wrapper


def retried(fn):
    """fn, which runs one statement: outside a transaction that statement is a transaction of its own (no
    BEGIN, no COMMIT: one round trip), retried as transactional() retries a whole one. Inside a transaction
    it is part of it, and not retried on its own."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if database.in_transaction():
            return fn(*args, **kwargs)
        return _retrying(fn, args, kwargs, atomic=False)

    return wrapper


def _retrying(fn, args, kwargs, *, atomic: bool):
    for attempt in range(TRANSIENT_RETRIES):
        try:
            if not atomic:
                return fn(*args, **kwargs)
            with database.atomic():
                return fn(*args, **kwargs)
        except OperationalError as exc:
            if attempt + 1 == TRANSIENT_RETRIES or not _is_transient(exc):
                raise
            time.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
    raise AssertionError("unreachable")


# -- database outages: a server restart, a network cut, a SQLite lock held past the busy timeout ---------------

# PostgreSQL SQLSTATEs: class 08 (connection exception); the server shutting down or not yet accepting work.
_PG_GONE_CLASSES = ("08",)
_PG_GONE_CODES = {"57P01", "57P02", "57P03"}
# MySQL/MariaDB error numbers: cannot connect (2002, 2003), server gone away (2006), connection lost (2013,
# 2055), server shutdown in progress (1053), connection killed (1927), disconnected for inactivity (4031).
_MYSQL_GONE_CODES = {2002, 2003, 2006, 2013, 2055, 1053, 1927, 4031}
# What each long-lived thread waits between attempts while the database is unavailable.
# From 0.25 s doubling to 5 s, each wait spread by half either way.
RECONNECT_BACKOFF = Backoff(initial=0.25, cap=5.0, jitter=0.5)


def is_unavailable(exc: BaseException) -> bool:
    """The connection is gone or the database does not answer, as opposed to a statement that is wrong.

    Accepts peewee's errors (the driver's exception in .orig) and the drivers' own (the LISTEN connection
    uses psycopg2 directly); an error raised while undoing a transaction hides the first one, so the whole
    exception chain is looked at.
    """
    while exc is not None:
        driver = getattr(exc, "orig", None) or exc
        module = type(driver).__module__.split(".")[0]
        name = type(driver).__name__
        if module == "psycopg2":
            code = getattr(driver, "pgcode", None)
            if name == "InterfaceError" or (
                isinstance(driver, _psycopg2_operational_error())
                and (code is None or code.startswith(_PG_GONE_CLASSES) or code in _PG_GONE_CODES)
            ):
                return True
        elif module == "pymysql":
            number = (getattr(driver, "args", ()) or (None,))[0]
            if name == "InterfaceError" or number in _MYSQL_GONE_CODES:
                return True
        elif "database is locked" in str(exc):
            return True
        exc = exc.__context__
    return False


def _psycopg2_operational_error():
    import psycopg2

    return psycopg2.OperationalError


def discard_connection() -> None:
    """Drop this thread's connection without handing it back to a pool: the next query opens a new one.

    A pooled connection whose server went away still looks open to the thread that holds it, which would
    otherwise fail on it for ever ("connection already closed").
    """
    db = database.obj
    while db.in_transaction():  # left by an error inside atomic(); the server has forgotten it anyway
        db.pop_transaction()
    if db.is_closed():
        return
    if isinstance(db, PooledDatabase):
        db.manual_close()  # closes the driver's connection and takes it out of the pool's books
        return
    try:
        db.close()
    except (PeeweeException, sqlite3.Error):
        db.dispose()  # forget it: closing failed, it cannot be used either


def release_connection(*, pooled_only: bool = False) -> None:
    """At the end of a unit of work on a thread that outlives it (a request, a task on a thread pool): hand
    the connection back to the pool, which tests it before it lends it again; a connection that cannot be
    handed back is discarded. pooled_only: leave a SQLite connection open (it cannot go stale)."""
    db = database.obj
    if db.is_closed() or (pooled_only and not isinstance(db, PooledDatabase)):
        return
    try:
        db.close()
    except Exception:  # noqa: BLE001 - whatever went wrong, the thread must not keep this connection
        discard_connection()


def retry_while_unavailable(fn, who: str):
    """fn(), tried again for as long as the database is unavailable (with the reconnect backoff, the outage
    logged once): a long-lived process that starts during an outage waits for the database instead of
    exiting. Any other error is raised."""
    reconnect = Reconnect(who)
    while True:
        try:
            result = fn()
        except DatabaseError as exc:
            if (pause := reconnect.after_failure(exc)) is None:
                raise
            time.sleep(pause)
        else:
            reconnect.after_success()
            return result


def releasing_connection(fn):
    """fn, run on a thread pool, hands its pooled connection back when it returns (release_connection)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            release_connection(pooled_only=True)

    return wrapper


class DatabaseOutage:
    """Whether this process finds the database unavailable now, and since when: logged once when an outage
    begins (a warning) and once when it ends (info), whichever thread notices first."""

    def __init__(self):
        self._lock = threading.Lock()
        self._since: float | None = None

    def began(self, exc: BaseException, noticed_by: str) -> None:
        with self._lock:
            if self._since is not None:
                return
            self._since = time.monotonic()
        log.warning("the database is unavailable (%s: %s), noticed by %s; waiting for it, trying again every "
                    "%.2g to %.2g s", type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc) else "",
                    noticed_by, RECONNECT_BACKOFF.initial / 2, RECONNECT_BACKOFF.cap)

    def ended(self) -> None:
        if self._since is None:
            return
        with self._lock:
            if self._since is None:
                return
            lasted, self._since = time.monotonic() - self._since, None
        log.info("the database is available again after %.1f s", lasted)

    def seconds(self) -> float:
        """How long the current outage has lasted (0.0: none)."""
        since = self._since
        return 0.0 if since is None else time.monotonic() - since


outage = DatabaseOutage()


class Reconnect:
    """One long-lived thread's way through database outages (the worker loop, heartbeat, coordinator, listener).

    In the thread's except clause, after_failure(exc) says how long to wait before the next attempt, or None
    when exc is not the database being unavailable (the thread handles it as before). The thread's
    connection is discarded each time. A connection found dead once is just replaced (a restart the thread
    slept through): the first retry comes at once, and only when a new connection fails too is the outage
    logged. After the next attempt that reaches the database, after_success() logs the end of the outage.
    """

    def __init__(self, thread: str, backoff: Backoff = RECONNECT_BACKOFF):
        self.thread = thread
        self.backoff = backoff
        self.failures = 0

    def after_failure(self, exc: BaseException) -> float | None:
        if not is_unavailable(exc):
            return None
        discard_connection()
        self.failures += 1
        if self.failures == 1:
            log.debug("%s: its database connection was gone (%s); reconnecting", self.thread, exc)
            return 0.0
        outage.began(exc, self.thread)
        return self.backoff.delay(self.failures - 1, random.random())

    def after_success(self) -> None:
        if self.failures:
            self.failures = 0
            outage.ended()
