"""Fixtures for the API tests (loaded with `pytest_plugins`): the app on each database, tokens, a real
HTTP server on 127.0.0.1 and an in-process worker."""

import threading

import pytest
from werkzeug.serving import make_server

from sidecar.app import create_app
from sidecar.config import Settings
from sidecar.domain.lease import LeasePolicy
from sidecar.store import tokens
from sidecar.testing import StepExecutor
from sidecar.worker import Worker
from tests.api_helpers import TEST_SECRET_KEY


@pytest.fixture
def settings(database_url, tmp_path):
    return Settings(instance_path=tmp_path, database_url=database_url, lease_seconds=5.0,
                    secret_keys=(TEST_SECRET_KEY,))


@pytest.fixture
def app(settings):
    app = create_app(settings, bind_database=False)  # database_url already bound the store
    app.config["PROPAGATE_EXCEPTIONS"] = False  # a bug answers 500 as in production, and the test sees it
    return app


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def host_token(database_url):
    return tokens.create("host-test", "host")[0]


@pytest.fixture
def operator_token(database_url):
    return tokens.create("operator-test", "operator")[0]


@pytest.fixture
def live_server(app):
    """The app behind a real threaded HTTP server on 127.0.0.1; yields its base URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="live-server", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(10)


@pytest.fixture
def worker(database_url):
    """A worker in this process, executing runs with the step executor (sidecar/testing.py)."""
    w = Worker(StepExecutor(), LeasePolicy(5.0), concurrency=2, poll_interval=0.05)
    w.start()
    yield w
    w.stop(grace=10)
