"""Fixtures of the decision tests (loaded with `pytest_plugins`, after tests.api_support): a worker that
runs the agent loop, and a server-sent events client that posts a decision."""

import http.client
import json
import socket
from urllib.parse import urlparse

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


class DecisionStream:
    """POST a decide-now decision with `Accept: text/event-stream`; iterate (id, event, data) messages."""

    def __init__(self, base_url: str, run_id: str, body: dict, headers: dict):
        url = urlparse(base_url)
        self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        self.conn.connect()
        self.sock = self.conn.sock  # kept to cut the connection at will
        self.conn.request("POST", f"/api/v1/runs/{run_id}/decision", body=json.dumps(body),
                          headers={**headers, "Accept": "text/event-stream", "Content-Type": "application/json"})
        self.response = self.conn.getresponse()
        self.status = self.response.status

    def __iter__(self):
        fields: dict[str, str] = {}
        while True:
            line = self.response.readline()
            if not line:
                return
            line = line.decode().rstrip("\n")
            if line == "":
                if "event" in fields:
                    yield fields.get("id"), fields["event"], json.loads(fields["data"])
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value

    def close(self):
        """Go away mid-stream, as a closed browser tab does."""
        self.sock.shutdown(socket.SHUT_RDWR)
        self.response.close()
