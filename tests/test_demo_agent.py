"""The demo's A2A agent (sidecar/demo_agent.py) as a sender of push notifications: the completed task,
posted once with the send's token, and never to an address outside the machine."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from sidecar.delegation.push import TOKEN_HEADER
from sidecar.demo_agent import PUSHING_THREADS, DemoAgent

WORK_SECONDS = 0.2


@pytest.fixture
def agent():
    started = DemoAgent(work_seconds=WORK_SECONDS).start()
    yield started
    started.stop()


@pytest.fixture
def receiver():
    """A local HTTP server noting every POST: (path, headers, body)."""
    received: list = []
    arrived = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            pass

        def do_POST(self):  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, dict(self.headers), json.loads(body)))
            self.send_response(204)
            self.end_headers()
            arrived.set()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", received, arrived
    server.shutdown()
    server.server_close()


def _send(agent: DemoAgent, push_url: str | None, message_id: str = "m-1") -> dict:
    configuration = {"returnImmediately": True}
    if push_url is not None:
        configuration["taskPushNotificationConfig"] = {"url": push_url, "token": "secret-token"}
    body = {"jsonrpc": "2.0", "id": message_id, "method": "SendMessage", "params": {
        "message": {"role": "ROLE_USER", "messageId": message_id, "contextId": "ctx-1", "parts": [{"text": "push me"}]},
        "configuration": configuration}}
    return requests.post(agent.url + "/", json=body, timeout=10).json()


def test_a_send_asking_for_pushes_gets_the_completed_task_posted_with_its_token(agent, receiver):
    url, received, arrived = receiver
    answer = _send(agent, url + "/api/v1/push?x=1")
    task_id = answer["result"]["task"]["id"]
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    assert arrived.wait(10)
    ((path, headers, body),) = received
    assert path == "/api/v1/push?x=1"
    assert headers[TOKEN_HEADER] == "secret-token"
    assert body["task"]["id"] == task_id and body["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "push me" in body["task"]["artifacts"][0]["parts"][0]["text"]


def test_a_send_without_push_config_is_never_pushed(agent, receiver):
    _, received, arrived = receiver
    assert _send(agent, None)["result"]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    assert not arrived.wait(WORK_SECONDS * 3) and received == []


@pytest.mark.parametrize("push_url", ["http://10.1.2.3/push", "https://127.0.0.1/push", "http://example.com/p",
                                      "http://127.0.0.1:notaport/p", "ftp://127.0.0.1/p"])
def test_a_push_url_off_the_machine_is_refused_and_makes_no_task(agent, push_url):
    answer = _send(agent, push_url)
    assert answer["error"]["code"] == -32602 and "loopback" in answer["error"]["message"]
    listed = requests.post(agent.url + "/", timeout=10, json={
        "jsonrpc": "2.0", "id": "l", "method": "ListTasks", "params": {"contextId": "ctx-1"}}).json()
    assert listed["result"]["tasks"] == []


def _http11_receiver(*, close_silently: bool = False, together: int = 1):
    """An HTTP/1.1 receiver noting each POST's client port. With `close_silently` it closes the connection
    after every answer without saying so, as a server whose keep-alive timeout passed does. With `together`
    it answers no POST before that many are in its hands at once (a push waiting for that longer than 10 s
    is answered 500)."""
    ports: list[int] = []
    arrived = threading.Semaphore(0)  # released once a push
    gathered = threading.Barrier(together, timeout=10)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            pass

        def do_POST(self):  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers["Content-Length"]))
            try:
                gathered.wait()
            except threading.BrokenBarrierError:
                self.send_response(500)
                self.end_headers()
                return
            ports.append(self.client_address[1])
            self.send_response(204)
            self.end_headers()
            self.close_connection = close_silently
            arrived.release()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, ports, arrived


@pytest.mark.parametrize("close_silently", [False, True])
def test_pushes_keep_their_connections_alive_and_survive_their_closing(agent, close_silently):
    server, ports, arrived = _http11_receiver(close_silently=close_silently)
    pushes = 3 * PUSHING_THREADS
    try:
        url = f"http://127.0.0.1:{server.server_port}/api/v1/push"
        for number in range(pushes):
            _send(agent, url, f"m-{number}")
        for _ in range(pushes):
            assert arrived.acquire(timeout=10)
        # Kept alive: a connection for each pushing thread at most. Closed after each: every push still
        # arrives, on a new one.
        assert len(set(ports)) == pushes if close_silently else len(set(ports)) <= PUSHING_THREADS
    finally:
        server.shutdown()
        server.server_close()


def test_pushes_are_posted_side_by_side_not_each_after_the_last_answer(agent):
    server, ports, arrived = _http11_receiver(together=PUSHING_THREADS)
    try:
        url = f"http://127.0.0.1:{server.server_port}/api/v1/push"
        for number in range(PUSHING_THREADS):
            _send(agent, url, f"m-{number}")
        for _ in range(PUSHING_THREADS):  # none is answered before all of them have arrived
            assert arrived.acquire(timeout=15)
        assert len(set(ports)) == PUSHING_THREADS
    finally:
        server.shutdown()
        server.server_close()
