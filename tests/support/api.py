"""The one `settings`, `app` and `client` of the tests, tokens and their headers, and the app on a real HTTP
server on 127.0.0.1: `live_server` for clients, `webhook` for the a2a-sdk peers that post notifications."""

import dataclasses
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from sidecar import bootstrap
from sidecar.app import create_app
from sidecar.config import Settings
from sidecar.domain.clock import utcnow
from sidecar.store import tokens
from sidecar.store.models import ApiToken, IdempotencyRecord, Run, RunEvent
from tests.support import GENEROUS_LEASE

ACTOR = "be_user:7"
OTHER_ACTOR = "be_user:8"
# The sealing key of every test, in this process (the settings fixture) and in the processes tests start
# (tests/conftest.py puts it into NRLLM_SECRET_KEYS).
TEST_SECRET_KEY = "aDx54tm13xXSGYKe2DcA7pPT1AsbB-JDwZ3t8ThQlFc="


def as_host(token: str, actor: str | None = ACTOR, **extra) -> dict:
    headers = {"Authorization": f"Bearer {token}", **extra}
    if actor is not None:
        headers["X-Nrllm-Actor"] = actor
    return headers


def as_operator(token: str, **extra) -> dict:
    return {"Authorization": f"Bearer {token}", **extra}


def row_counts() -> dict[str, int]:
    """Rows of every table a request could write: compared before and after a refused request."""
    return {model.__name__: model.select().count() for model in (Run, RunEvent, IdempotencyRecord, ApiToken)}


@pytest.fixture
def sealing_key():
    """The key the settings seal with: the one worker processes get from the environment."""
    return TEST_SECRET_KEY


def settings_for(database_url: str, instance_path: Path, **overrides) -> Settings:
    """The tests' settings on a database the store is bound to already: generous leases, remote agents
    allowed on 127.0.0.1 (where the tests' peers live), the tests' sealing key."""
    values = {"lease_seconds": GENEROUS_LEASE, "remote_allow": ("127.0.0.1",), "secret_keys": (TEST_SECRET_KEY,),
              **overrides}
    return Settings(instance_path=instance_path, database_url=database_url, **values)


def app_for(settings: Settings):
    """The API app on a database the store is bound to already."""
    app = create_app(settings, bind_database=False)
    app.config["PROPAGATE_EXCEPTIONS"] = False  # a bug answers 500 as in production, and the test sees it
    return app


@pytest.fixture
def settings(database_url, tmp_path, sealing_key):
    """The sidecar's settings on the test's database, started as a process starts them (keys, plugins,
    listeners). A test module that needs other settings overrides this fixture with
    `dataclasses.replace(settings, ...)`."""
    settings = settings_for(database_url, tmp_path, secret_keys=(sealing_key,))
    bootstrap.start(settings, bind_database=False)  # database_url already bound the store
    return settings


@pytest.fixture
def app(settings):
    return app_for(settings)


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
def host_headers(host_token):
    return as_host(host_token)


@pytest.fixture
def operator_headers(operator_token):
    return as_operator(operator_token)


@contextmanager
def served(app):
    """The app behind a real threaded HTTP server on 127.0.0.1; yields its base URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="live-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(10)


@pytest.fixture
def live_server(app):
    """The test's app on a real HTTP server; its base URL."""
    with served(app) as url:
        yield url


@dataclass
class Webhook:
    url: str  # the sidecar's base URL (NRLLM_PUBLIC_URL)
    settings: Settings  # the test's settings with public_url set: give them to the workers whose sends push
    pushes: list = field(default_factory=list)  # (utcnow(), status) of every POST /api/v1/push

    def last_push_before(self, moment: datetime, status: int = 204) -> datetime | None:
        times = [t for t, s in list(self.pushes) if s == status and t <= moment]
        return max(times) if times else None


@pytest.fixture
def webhook(app, settings):
    """The test's app on a real HTTP server, so real a2a-sdk peers post their notifications to its webhook;
    every push it answered is recorded."""
    pushes: list = []
    answered_by_app = app.wsgi_app

    def recording_pushes(environ, start_response):
        if environ.get("PATH_INFO") != "/api/v1/push":
            return answered_by_app(environ, start_response)

        def start_recorded(status, headers, exc_info=None):
            pushes.append((utcnow(), int(status.split()[0])))
            return start_response(status, headers, exc_info)
        return answered_by_app(environ, start_recorded)

    # Around the whole app: an accepted push is answered before Flask (api/push.py), so no Flask hook sees it.
    app.wsgi_app = recording_pushes
    try:
        with served(app) as url:
            yield Webhook(url=url, settings=dataclasses.replace(settings, public_url=url), pushes=pushes)
    finally:
        app.wsgi_app = answered_by_app
