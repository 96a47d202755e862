"""Databases for the tests: a SQLite file per test; a PostgreSQL and a MariaDB database per test process.

Server databases are created with a unique name and dropped at the end, so concurrent runs never see
each other's rows; tables are emptied between tests. Without a reachable server those tests skip with a
message, except under CI=true, where they fail.
"""

import contextlib
import fcntl
import os
import select
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
from peewee import sort_models

from sidecar.application import Application, set_default
from sidecar.store import db as store_db
from sidecar.store import migrations, push_counts
from sidecar.store.models import BaseModel, SchemaMigration

PG_ADMIN = os.environ.get("NRLLM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL_ADMIN = os.environ.get("NRLLM_TEST_MYSQL", "mysql://root@127.0.0.1:3306/test")
IN_CI = os.environ.get("CI", "").lower() == "true"
DIALECTS = ["sqlite", "postgresql", "mysql"]


def file_lock_is_free(path) -> bool:
    """Whether no process holds the exclusive `flock` of the file at `path` (a SQLite database's `-writer` or
    `-checkpointer` companion): taken for a moment and let go again."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def sqlite_files_open_in(pid: int, path) -> list[str]:
    """The process's open descriptors of a SQLite database file, its WAL and its shared memory: what a
    connection holds open."""
    database = os.path.realpath(path)
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):  # closed meanwhile (listdir's own descriptor, say)
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return [target for target in targets if target in (database, f"{database}-wal", f"{database}-shm")]


@contextlib.contextmanager
def round_trips():
    """PostgreSQL: what this thread's connection sends the server meanwhile, one text a round trip (peewee
    sends even BEGIN and COMMIT through a cursor)."""
    import psycopg2.extensions

    sent: list[str] = []

    class Recording(psycopg2.extensions.cursor):
        def execute(self, query, vars=None):
            sent.append(query.decode() if isinstance(query, bytes) else query)
            return super().execute(query, vars)

    connection = store_db.database.connection()
    connection.cursor_factory = Recording
    try:
        yield sent
    finally:
        connection.cursor_factory = None


def listening_connection():
    """A PostgreSQL connection of its own that LISTENs on the coordinators' channel, as another worker
    process's would (store/notify.py); for `notifications()`."""
    import psycopg2

    from sidecar.store import notify

    connection = psycopg2.connect(**store_db.database.obj.connect_params, dbname=store_db.database.obj.database)
    connection.autocommit = True
    connection.cursor().execute(f"LISTEN {notify.CHANNEL}")
    return connection


def notifications(connection) -> int:
    """How many notifications reached a `listening_connection()` since the last call (a moment is left for
    the last to arrive)."""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        select.select([connection], [], [], 0.1)
        connection.poll()
    count = len(connection.notifies)
    connection.notifies.clear()
    return count


def _unavailable(what: str, exc: Exception):
    message = f"{what} is not reachable ({exc}); its tests are skipped"
    if IN_CI:
        pytest.fail(f"{message}, but CI=true requires them", pytrace=False)
    pytest.skip(message)


def _with_database(admin_url: str, name: str) -> str:
    """The admin URL with another database: its path replaced, its query (a socket's ?host=/dir) kept."""
    return urlunsplit(urlsplit(admin_url)._replace(path=f"/{name}"))


def _create_postgres(name: str) -> None:
    import psycopg2

    conn = psycopg2.connect(PG_ADMIN, connect_timeout=3)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()


def _drop_postgres(name: str) -> None:
    import psycopg2

    conn = psycopg2.connect(PG_ADMIN, connect_timeout=3)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.close()


def _mysql_admin():
    import pymysql

    from sidecar.store.db import connect

    params = connect(MYSQL_ADMIN).connect_params
    return pymysql.connect(
        host=params["host"], port=params.get("port", 3306), user=params["user"], password=params.get("password", ""),
        connect_timeout=3, autocommit=True,
    )


def _create_mysql(name: str) -> None:
    conn = _mysql_admin()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    conn.close()


def _drop_mysql(name: str) -> None:
    conn = _mysql_admin()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    conn.close()


_SERVERS = {
    "postgresql": (PG_ADMIN, _create_postgres, _drop_postgres),
    "mysql": (MYSQL_ADMIN, _create_mysql, _drop_mysql),
}


@pytest.fixture(scope="session")
def server_databases():
    """Lazily created server databases of this test process: dialect -> URL (or the error)."""
    created: dict[str, object] = {}

    def get(dialect: str) -> str:
        if dialect not in created:
            admin, create, _ = _SERVERS[dialect]
            name = f"nrllm_test_{uuid.uuid4().hex[:12]}"
            try:
                create(name)
                created[dialect] = (name, _with_database(admin, name))
            except Exception as exc:  # any failure to reach the server
                created[dialect] = exc
        value = created[dialect]
        if isinstance(value, Exception):
            _unavailable(dialect, value)
        return value[1]

    yield get
    for dialect, value in created.items():
        if not isinstance(value, Exception):
            _SERVERS[dialect][2](value[0])


def _empty_tables() -> None:
    """Every table but the migration log, rows that others refer to last."""
    for model in reversed(sort_models(BaseModel.__subclasses__())):
        if model is not SchemaMigration:
            model.delete().execute()


@pytest.fixture(params=DIALECTS)
def database_url(request, tmp_path, server_databases):
    """A migrated, empty database of each kind, bound as the store's database for this test."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'sidecar.db'}"
    else:
        url = server_databases(request.param)
    set_default(Application())  # each test starts from an application of its own: nothing of an earlier one's
    bound = store_db.bind(url)
    migrations.upgrade()
    _empty_tables()
    yield url
    # Pushes the test counted are written now, as a stopping process writes them, not by a timer that would
    # outlive the test and find its database gone.
    push_counts.flush()
    if not bound.is_closed():
        bound.close()
    if hasattr(bound, "close_all"):
        bound.close_all()


@pytest.fixture(params=DIALECTS)
def fresh_database_url(request, tmp_path):
    """A new, empty, unmigrated database of each kind (not bound), dropped after the test."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
        return
    admin, create, drop = _SERVERS[request.param]
    name = f"nrllm_test_{uuid.uuid4().hex[:12]}"
    try:
        create(name)
    except Exception as exc:
        _unavailable(request.param, exc)
    yield _with_database(admin, name)
    drop(name)


@pytest.fixture
def sqlite_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'sidecar.db'}"
    set_default(Application())
    store_db.bind(url)
    migrations.upgrade()
    yield url
    push_counts.flush()  # as in database_url
    store_db.database.close()
