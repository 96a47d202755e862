"""Fixtures of the push, deadline, cancel and lost-answer tests (load with `pytest_plugins`, after
tests.delegation_support): the sidecar's app on a real HTTP server on 127.0.0.1, so real a2a-sdk peers
post their notifications to its webhook, and workers whose sends register that webhook."""

import dataclasses
import threading
from dataclasses import dataclass, field
from datetime import datetime

import pytest
from flask import request
from werkzeug.serving import make_server

from sidecar.app import create_app
from sidecar.config import Settings
from sidecar.delegation.coordinator import Coordinator
from sidecar.domain.clock import utcnow
from sidecar.domain.lease import LeasePolicy
from sidecar.engine import AgentLoop
from sidecar.engine.registry import build_registry
from sidecar.store import tokens
from sidecar.worker import Worker
from tests.api_helpers import as_host, as_operator


@dataclass
class Webhook:
    url: str  # the sidecar's base URL (NRLLM_PUBLIC_URL)
    settings: Settings  # the test's settings with public_url set
    app: object
    pushes: list = field(default_factory=list)  # (utcnow(), status) of every POST /api/v1/push

    def last_push_before(self, moment: datetime, status: int = 204) -> datetime | None:
        times = [t for t, s in list(self.pushes) if s == status and t <= moment]
        return max(times) if times else None


@pytest.fixture
def webhook(settings):
    app = create_app(settings, bind_database=False)  # the database_url fixture bound the store
    app.config["PROPAGATE_EXCEPTIONS"] = False
    pushes: list = []

    @app.after_request
    def _record_push(response):
        if request.path == "/api/v1/push":
            pushes.append((utcnow(), response.status_code))
        return response

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="webhook", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}"
    yield Webhook(url=url, settings=dataclasses.replace(settings, public_url=url), app=app, pushes=pushes)
    server.shutdown()
    thread.join(10)


@pytest.fixture
def client(webhook):
    return webhook.app.test_client()


@pytest.fixture
def host_headers(settings):
    return as_host(tokens.create("host-test", "host")[0])


@pytest.fixture
def operator_headers(settings):
    return as_operator(tokens.create("operator-test", "operator")[0])


@pytest.fixture
def start_push_worker(webhook):
    """An in-process worker (agent loop + coordinator) whose sends register the webhook."""
    started = []

    def start(concurrency: int = 2, coordinators: int = 1, tick: float = 0.05) -> Worker:
        settings = webhook.settings
        worker = Worker(AgentLoop(build_registry(settings)), LeasePolicy(settings.lease_seconds),
                        concurrency=concurrency, poll_interval=0.05,
                        companions=tuple(Coordinator(settings, tick_seconds=tick) for _ in range(coordinators)))
        worker.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop(grace=5)

