"""Fixtures of the decision tests (loaded with `pytest_plugins`, after tests.api_support): a worker that
runs the agent loop."""

import pytest

from sidecar.domain.lease import LeasePolicy
from sidecar.engine import AgentLoop
from sidecar.engine.registry import build_registry
from sidecar.worker import Worker


@pytest.fixture
def agent_worker(settings):
    """A worker in this process that executes runs with the agent loop, as `nrllm-sidecar worker` does."""
    started = []

    def start() -> Worker:
        worker = Worker(AgentLoop(build_registry(settings)), LeasePolicy(settings.lease_seconds), concurrency=2,
                        poll_interval=0.05)
        worker.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop(grace=10)
