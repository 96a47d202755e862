"""Fixtures of the delegation tests (loaded with `pytest_plugins`): started sidecar parts around a real
a2a-sdk peer on 127.0.0.1, on SQLite and PostgreSQL."""

import pytest

from sidecar import bootstrap
from sidecar.config import Settings
from sidecar.delegation.coordinator import Coordinator
from sidecar.domain.lease import LeasePolicy
from sidecar.domain.sealing import generate_key
from sidecar.engine import AgentLoop
from sidecar.engine.registry import build_registry
from sidecar.store import consumers
from sidecar.worker import Worker
from tests.a2a_peer import PeerPool


@pytest.fixture
def sealing_key():
    return generate_key()


@pytest.fixture
def settings(database_url, tmp_path, sealing_key):
    settings = Settings(instance_path=tmp_path, database_url=database_url, lease_seconds=5.0,
                        remote_allow=("127.0.0.1",), secret_keys=(sealing_key,))
    bootstrap.start(settings, bind_database=False)
    consumers.replace_report([])  # an empty report opens the gate
    return settings


@pytest.fixture
def peers():
    with PeerPool() as pool:
        yield pool


@pytest.fixture
def start_worker(settings):
    """Start an in-process worker (agent loop + coordinator); stopped at the end of the test."""
    started = []

    def start(concurrency: int = 2, coordinators: int = 1) -> Worker:
        worker = Worker(AgentLoop(build_registry(settings)), LeasePolicy(settings.lease_seconds),
                        concurrency=concurrency, poll_interval=0.05,
                        companions=tuple(Coordinator(settings, tick_seconds=0.05) for _ in range(coordinators)))
        worker.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop(grace=5)
