"""NRLLM_DATABASE_URL's server part (store/db.py, connect): the URL's host, or a `host` parameter, which is how
a PostgreSQL URL names the directory of the server's Unix socket; on a real server, the store then talks to
it through that socket."""

from urllib.parse import urlsplit

import psycopg2
import pytest

from sidecar.store import db as store_db
from sidecar.store import runs, statements
from sidecar.store.models import Run
from tests.support.databases import PG_ADMIN


def test_a_host_parameter_names_the_server_in_place_of_the_urls_host():
    by_socket = store_db.connect("postgresql://postgres@/test?host=/var/run/postgresql&port=5433")
    assert by_socket.connect_params["host"] == "/var/run/postgresql"
    assert by_socket.connect_params["port"] == "5433"
    assert store_db.connect("postgresql://postgres@db.internal:5432/test").connect_params["host"] == "db.internal"
    assert store_db.connect("postgresql://postgres@/test").connect_params["host"] == "127.0.0.1"
    assert store_db.connect("mysql://root@/test?host=db.internal").connect_params["host"] == "db.internal"


def _socket_directory() -> str:
    with psycopg2.connect(PG_ADMIN, connect_timeout=3) as conn, conn.cursor() as cur:
        cur.execute("SHOW unix_socket_directories")
        directories = cur.fetchone()[0]
    conn.close()
    return directories.split(",")[0].strip()


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_the_store_talks_to_postgresql_through_its_unix_socket(database_url):
    directory = _socket_directory()
    if not directory:
        pytest.skip("this PostgreSQL server listens on no Unix socket")
    url = urlsplit(database_url)
    by_socket = f"postgresql://{url.username}@{url.path}?host={directory}&port={url.port or 5432}"
    over_tcp = store_db.database.obj
    socket_bound = store_db.bind(by_socket)
    try:
        address = store_db.database.execute_sql("SELECT inet_server_addr()").fetchone()[0]
        run_id = runs.create_run("owner", "through the socket")
        assert statements.select_value(Run, "status", id=run_id) == "queued"
    finally:
        socket_bound.close()
        socket_bound.close_all()
        store_db.database.initialize(over_tcp)
    assert address is None  # no network address: the connection is the Unix socket's
    assert runs.get_run(run_id).input == "through the socket"  # the same database, over TCP again
