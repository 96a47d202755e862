"""Database outages: a server restart (PostgreSQL, MariaDB) or a SQLite lock held past the busy timeout.

The process tests run a real `nrllm-sidecar worker` against a private server (tests/support/private_servers.py),
stop the server for a few seconds and start it again: the same worker process goes on (runs queued before
the outage and after it complete), its log says once that the database is unavailable and once that it is
back, and the API answers 503 database_unavailable with Retry-After meanwhile and 2xx after.
"""

import logging
import random
import sqlite3
import threading
import time
import urllib.request
import uuid

import pytest

from sidecar.store import db as store_db
from sidecar.store import migrations, notify, runs, tokens
from tests.support.api import app_for, as_host, row_counts, settings_for
from tests.support.private_servers import free_port
from tests.support.runs import run_row, steps_input
from tests.support.waiting import wait_until
from tests.support.workers import start_worker_process, stop_process

STEPS = ("--executor", "sidecar.testing:StepExecutor")
UNAVAILABLE = "the database is unavailable"
AVAILABLE_AGAIN = "the database is available again"
OUTAGE_SECONDS = 3.0


# -- the pieces ------------------------------------------------------------------------------------------


def test_reconnect_backoff_doubles_up_to_its_bound_and_jitters_within_half_of_it():
    backoff = store_db.RECONNECT_BACKOFF
    assert [backoff.delay(n) for n in range(1, 8)] == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert backoff.delay(10_000) == 5.0
    assert backoff.delay(3, 0.0) == 0.5
    assert backoff.delay(3, 0.999999) == pytest.approx(1.5, rel=1e-5)
    assert all(2.5 <= backoff.delay(50, random.random()) <= 5.0 for _ in range(200))


@pytest.mark.parametrize("url", [
    "postgresql://postgres@127.0.0.1:{port}/nothing",
    "mysql://root@127.0.0.1:{port}/nothing",
])
def test_a_server_that_does_not_answer_is_unavailable_and_a_wrong_statement_is_not(url, tmp_path):
    store_db.bind(url.format(port=free_port()))  # nothing listens there
    with pytest.raises(store_db.DatabaseError) as refused:
        store_db.ping()
    assert store_db.is_unavailable(refused.value)
    store_db.bind(f"sqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(store_db.DatabaseError) as wrong:
        store_db.database.execute_sql("SELECT * FROM no_such_table")
    assert not store_db.is_unavailable(wrong.value)
    store_db.database.close()


def test_a_thread_logs_an_outage_once_and_its_end_once(tmp_path, caplog):
    store_db.outage.ended()  # whatever an earlier test left
    reconnect = store_db.Reconnect("a test thread")
    store_db.bind(f"postgresql://postgres@127.0.0.1:{free_port()}/nothing")
    pauses = []
    with caplog.at_level(logging.INFO, logger="nrllm_sidecar.database"):
        for _ in range(6):
            try:
                store_db.ping()
            except store_db.DatabaseError as exc:
                pauses.append(reconnect.after_failure(exc))
        assert store_db.outage.seconds() > 0
        store_db.bind(f"sqlite:///{tmp_path / 'x.db'}")
        store_db.ping()
        reconnect.after_success()
        reconnect.after_success()
    store_db.database.close()
    assert pauses[0] == 0.0  # a connection found dead is replaced at once
    assert all(0 < pause <= store_db.RECONNECT_BACKOFF.cap for pause in pauses[1:])
    messages = [record.getMessage() for record in caplog.records]
    assert sum(UNAVAILABLE in m for m in messages) == 1, messages
    assert sum(AVAILABLE_AGAIN in m for m in messages) == 1, messages
    assert store_db.outage.seconds() == 0.0


# -- a server restart, with real processes ---------------------------------------------------------------


@pytest.fixture(params=["postgresql", "mysql"])
def restartable(request):
    """(the private server, the URL of a new migrated database on it, bound as the store's database)."""
    server = request.getfixturevalue("private_postgres" if request.param == "postgresql" else "private_mariadb")
    name = f"nrllm_outage_{uuid.uuid4().hex[:10]}"
    server.create_database(name)
    url = server.url(name)
    bound = store_db.bind(url)
    migrations.upgrade()
    yield server, url
    if not server.is_running():
        server.start()
    bound.close_all()


def _api(url: str, tmp_path):
    # The lease of the worker processes below: health judges their heartbeats by it.
    return app_for(settings_for(url, tmp_path, lease_seconds=3.0)).test_client()


def _unavailable_seconds(metrics_port: int) -> float:
    """The worker's nrllm_database_unavailable_seconds gauge, scraped from its --metrics-port."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("nrllm_database_unavailable_seconds "):
                return float(line.split()[1])
    raise AssertionError("the worker's metrics have no nrllm_database_unavailable_seconds")


def _log_lines(path, text: str) -> int:
    return sum(text in line for line in path.read_text().splitlines())


@pytest.mark.slow
def test_a_worker_goes_on_after_a_server_restart_and_the_api_answers_503_meanwhile(restartable, tmp_path):
    server, url = restartable
    client = _api(url, tmp_path)
    token = tokens.create("host", "host")[0]
    log_path = tmp_path / "worker.log"
    metrics_port = free_port()
    worker = start_worker_process(url, *STEPS, "--concurrency", "1", "--metrics-port", str(metrics_port), lease=3.0,
                                  log_path=log_path)
    try:
        warm = runs.create_run("owner", steps_input({"event": "warm"}))
        wait_until(lambda: run_row(warm).status == "completed", what="the first run")
        # One run holds the only slot through the outage; the others stay queued until after it.
        busy = runs.create_run("owner", steps_input({"sleep": 1.0}, {"event": "after"}))
        wait_until(lambda: run_row(busy).status == "running", what="the busy run to be claimed")
        queued = [runs.create_run("owner", steps_input({"event": "queued"})) for _ in range(3)]
        assert all(run_row(run_id).status == "queued" for run_id in queued)
        store_db.release_connection()
        server.stop()
        # Meanwhile: 503 in the error shape for a write, a read and the token lookup; health says why.
        created = client.post("/api/v1/runs", json={"input": "x"}, headers=as_host(token))
        assert created.status_code == 503, created.get_data(as_text=True)
        assert created.get_json()["code"] == "database_unavailable"
        assert int(created.headers["Retry-After"]) > 0
        listed = client.get("/api/v1/runs", headers=as_host(token))
        assert (listed.status_code, listed.get_json()["code"]) == (503, "database_unavailable")
        health = client.get("/api/v1/health")
        assert health.status_code == 503 and "Retry-After" in health.headers
        body = health.get_json()
        assert body["database"] == "unavailable" and body["status"] == "degraded"
        assert body["workers_alive"] == 0 and body["database_unavailable_seconds"] >= 0
        wait_until(lambda: _log_lines(log_path, UNAVAILABLE) > 0, timeout=30, what="the worker to log the outage")
        # The worker process says it is waiting for the database on its own metrics.
        wait_until(lambda: _unavailable_seconds(metrics_port) > 0, what="the worker's gauge to show the outage")
        time.sleep(OUTAGE_SECONDS)  # the outage itself: the server stays down this long
        assert worker.poll() is None, log_path.read_text()
        server.start()
        # After: the same worker process completes what was queued before and what is created now.
        assert client.get("/api/v1/health").get_json()["database_unavailable_seconds"] == 0.0
        created = client.post("/api/v1/runs", json={"input": steps_input({"event": "new"})}, headers=as_host(token))
        assert created.status_code == 201, created.get_data(as_text=True)
        every = [busy, *queued, created.get_json()["id"]]
        wait_until(lambda: all(run_row(run_id).status == "completed" for run_id in every), timeout=45,
                   what="every run to complete after the restart")
        health = wait_until(lambda: (answer := client.get("/api/v1/health").get_json())["workers_alive"] and answer,
                            what="health to see the worker again")
        assert health["database"] == "ok" and health["database_unavailable_seconds"] == 0.0
        assert _unavailable_seconds(metrics_port) == 0.0
        assert worker.poll() is None
    finally:
        if not server.is_running():
            server.start()
        stop_process(worker)
    text = log_path.read_text()
    assert _log_lines(log_path, UNAVAILABLE) == 1, text
    assert _log_lines(log_path, AVAILABLE_AGAIN) == 1, text
    assert "connection already closed" not in text


@pytest.mark.slow
def test_the_coordinators_listen_connection_listens_again_after_a_postgresql_restart(private_postgres):
    name = f"nrllm_listen_{uuid.uuid4().hex[:10]}"
    private_postgres.create_database(name)
    bound = store_db.bind(private_postgres.url(name))
    woken = threading.Event()
    listener = notify.Listener(woken.set)
    listener.start()
    try:
        wait_until(lambda: listener.listening, what="the listener to listen")
        assert woken.wait(10)
        woken.clear()
        private_postgres.stop()
        wait_until(lambda: not listener.listening, what="the listener to notice the restart")
        private_postgres.start()
        wait_until(lambda: listener.listening, timeout=30, what="the listener to listen again")
        assert woken.wait(10), "a listener that listens again wakes its coordinator once"
        woken.clear()
        with store_db.database.atomic():
            notify.notify()
        assert woken.wait(10), "a notification after the restart did not wake the listener"
    finally:
        listener.stop()
        if not private_postgres.is_running():
            private_postgres.start()
        bound.close_all()


# -- SQLite: a lock held past the busy timeout -----------------------------------------------------------


@pytest.mark.slow
def test_a_worker_goes_on_after_a_sqlite_lock_held_past_the_busy_timeout(tmp_path):
    path = tmp_path / "sidecar.db"
    url = f"sqlite:///{path}?busy_timeout=0.3"
    store_db.bind(url)
    migrations.upgrade()
    token = tokens.create("host", "host")[0]
    client = _api(url, tmp_path)
    log_path = tmp_path / "worker.log"
    worker = start_worker_process(url, *STEPS, log_path=log_path)
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        first = runs.create_run("owner", steps_input({"event": "before"}))
        wait_until(lambda: run_row(first).status == "completed", what="the first run")
        counts = row_counts()
        holder.execute("BEGIN EXCLUSIVE")  # every writer now waits for it, past its busy timeout
        wait_until(lambda: _log_lines(log_path, UNAVAILABLE) > 0, timeout=40, what="the worker to log the outage")
        refused = client.post("/api/v1/runs", json={"input": "x"}, headers=as_host(token))
        assert (refused.status_code, refused.get_json()["code"]) == (503, "database_unavailable")
        assert "Retry-After" in refused.headers
        holder.execute("COMMIT")
        assert row_counts() == counts  # the refused request left nothing behind
        assert client.get("/api/v1/health").get_json()["database_unavailable_seconds"] == 0.0
        after = runs.create_run("owner", steps_input({"event": "after"}))
        wait_until(lambda: run_row(after).status == "completed", timeout=30, what="a run after the lock")
        wait_until(lambda: _log_lines(log_path, AVAILABLE_AGAIN) > 0, what="the worker to log the recovery")
        assert worker.poll() is None
    finally:
        holder.close()
        stop_process(worker)
        store_db.database.close()
    text = log_path.read_text()
    assert _log_lines(log_path, UNAVAILABLE) == 1, text
    assert _log_lines(log_path, AVAILABLE_AGAIN) == 1, text


def test_a_request_that_fails_for_another_reason_is_still_a_500(tmp_path):
    """Only an unavailable database is a 503: a store error of any other kind stays an internal error."""
    url = f"sqlite:///{tmp_path / 'sidecar.db'}"
    store_db.bind(url)
    migrations.upgrade()
    token = tokens.create("host", "host")[0]
    client = _api(url, tmp_path)
    store_db.database.execute_sql("DROP TABLE runs")
    answer = client.get("/api/v1/runs", headers=as_host(token))
    assert (answer.status_code, answer.get_json()["code"]) == (500, "internal_error")
    store_db.database.close()



@pytest.mark.slow
def test_a_worker_started_during_an_outage_waits_for_the_database_instead_of_exiting(restartable, tmp_path):
    server, url = restartable
    queued = runs.create_run("owner", steps_input({"event": "queued"}))
    server.stop()
    log_path = tmp_path / "worker.log"
    worker = start_worker_process(url, *STEPS, "--concurrency", "1", lease=3.0, log_path=log_path)
    try:
        wait_until(lambda: _log_lines(log_path, UNAVAILABLE) == 1, timeout=40, what="the worker to log the outage")
        assert worker.poll() is None, f"the worker exited during the outage:\n{log_path.read_text()}"
        server.start()
        store_db.discard_connection()  # this test's own connection died with the server
        wait_until(lambda: run_row(queued).status == "completed", timeout=60, what="the run queued before it")
        assert _log_lines(log_path, UNAVAILABLE) == 1 and _log_lines(log_path, AVAILABLE_AGAIN) == 1
    finally:
        assert stop_process(worker) == 0
