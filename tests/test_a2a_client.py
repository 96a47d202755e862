"""The A2A client against real a2a-sdk peers and real misbehaving sockets on 127.0.0.1."""

import datetime
import ipaddress
import json
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sidecar.delegation import a2a
from sidecar.delegation.a2a import A2AClient, PushTarget, read_card
from sidecar.delegation.address_guard import AddressRefused, AllowList
from sidecar.delegation.results import lost_task_text, result_text
from sidecar.delegation.types import (
    TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND,
    UNSUPPORTED_OPERATION,
    AgentEndpoint,
    RemoteError,
)
from tests.support.network import CannedServer, SilentServer, http_answer
from tests.support.peers import V03_PATH, V1_PATH, PeerPool
from tests.support.waiting import wait_until

ALLOW = ["127.0.0.1"]


@pytest.fixture(scope="module")
def pool():
    with PeerPool() as peers:
        yield peers


@pytest.fixture(scope="module")
def shared(pool):
    """One 1.0 peer for tests that count nothing on it."""
    return pool.start(card="1.0")


def client_for(peer, **kw) -> A2AClient:
    return A2AClient(read_card(peer.url, allow=ALLOW), allow=ALLOW, **kw)


def wait_for(client, task_id, states):
    """The task once the peer (in its own thread) has moved it into one of `states`."""
    def reached():
        task = client.get_task(task_id)
        return task if task.state in states else None

    return wait_until(reached, timeout=60, interval=0.1, what=f"task {task_id} to be one of {sorted(states)}")


def send(client, text, context_id="ctx", message_id=None, **kw):
    message_id = message_id or f"m-{time.monotonic_ns()}"
    return client.send(client.build_send(message_id, context_id, text, **kw))


# --- cards -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("card", "path", "version"), [
    ("1.0", V1_PATH, "1.0"), ("both", V1_PATH, "1.0"), ("0.3", V03_PATH, "0.3"), ("0.3-legacy", V03_PATH, "0.3"),
])
def test_card_names_the_json_rpc_endpoint(pool, card, path, version):
    peer = pool.start(card=card, push=card == "both")
    endpoint = read_card(peer.url, allow=ALLOW, auth_header="X-Key", auth_value="s3cret")
    assert (endpoint.rpc_url, endpoint.protocol_version) == (peer.url + path, version)
    assert endpoint.push_supported is (card == "both")
    assert (endpoint.auth_header, endpoint.auth_value) == ("X-Key", "s3cret")
    assert "s3cret" not in repr(endpoint)


def test_without_a_card_the_url_is_a_1_0_endpoint(pool):
    peer = pool.start(card=None)
    endpoint = read_card(peer.url + "/", allow=ALLOW)
    assert (endpoint.rpc_url, endpoint.protocol_version, endpoint.push_supported) == (peer.url + "/", "1.0", False)
    assert send(A2AClient(endpoint, allow=ALLOW), "complete:no card").task.text == "no card"


def test_card_urls_are_guarded_too(shared):
    with pytest.raises(AddressRefused):
        read_card(shared.url)
    # The name is allowed, but the card points at 127.0.0.1, which is not.
    local = shared.url.replace("127.0.0.1", "localhost")
    with pytest.raises(AddressRefused, match="127.0.0.1"):
        read_card(local, allow=["localhost"])


def test_unreadable_card_is_a_remote_error():
    with CannedServer(http_answer(500, "oops", "text/plain")) as server, pytest.raises(RemoteError, match="HTTP 500"):
        read_card(server.url, allow=ALLOW)
    with CannedServer(http_answer(200, "[1]")) as server, pytest.raises(RemoteError, match="not a JSON object"):
        read_card(server.url, allow=ALLOW)
    grpc_only = {"supportedInterfaces": [{"url": "http://127.0.0.1:1", "protocolBinding": "GRPC",
                                          "protocolVersion": "1.0"}]}
    with CannedServer(http_answer(200, json.dumps(grpc_only))) as server, pytest.raises(RemoteError, match="JSON-RPC"):
        read_card(server.url, allow=ALLOW)


# --- request bodies ----------------------------------------------------------------------------------


def test_send_bodies_are_deterministic_in_both_dialects():
    v1 = A2AClient(AgentEndpoint("http://127.0.0.1:1/", "1.0"))
    body = v1.build_send("msg-1", "ctx-1", "hello", task_id="t-1", push=PushTarget("https://me/push", "tok"))
    assert body == v1.build_send("msg-1", "ctx-1", "hello", task_id="t-1", push=PushTarget("https://me/push", "tok"))
    assert body == json.dumps(json.loads(body), sort_keys=True, separators=(",", ":"))
    doc = json.loads(body)
    assert (doc["id"], doc["method"]) == ("msg-1", "SendMessage")
    assert doc["params"]["message"] == {"role": "ROLE_USER", "parts": [{"text": "hello"}], "messageId": "msg-1",
                                        "contextId": "ctx-1", "taskId": "t-1"}
    assert doc["params"]["configuration"]["returnImmediately"] is True
    assert doc["params"]["configuration"]["taskPushNotificationConfig"]["token"] == "tok"

    v03 = json.loads(A2AClient(AgentEndpoint("http://127.0.0.1:1/", "0.3")).build_send("msg-2", "ctx-2", "hi"))
    assert (v03["id"], v03["method"]) == ("msg-2", "message/send")
    assert v03["params"]["message"] == {"kind": "message", "role": "user", "parts": [{"kind": "text", "text": "hi"}],
                                        "messageId": "msg-2", "contextId": "ctx-2"}
    assert v03["params"]["configuration"] == {"blocking": False}
    assert json.loads(v1.build_cancel("t-9")) == {"jsonrpc": "2.0", "id": "cancel-t-9", "method": "CancelTask",
                                                  "params": {"id": "t-9"}}


# --- a 1.0 peer --------------------------------------------------------------------------------------


def test_send_returns_at_once_and_the_task_completes_later(pool):
    peer = pool.start()
    client = client_for(peer, timeout=30)
    result = send(client, "work:5:the report", context_id="ctx-work", message_id="m-work")
    # Still submitted or working: the send returned before the task's work was done, whatever the load.
    assert result.outcome == "accepted" and result.task.state in ("submitted", "working")
    assert (result.task.context_id, result.task.message_ids) == ("ctx-work", ("m-work",))
    assert result_text(result.task) is None  # not finished: the run waits
    assert client.get_task(result.task.id).state in ("submitted", "working")
    done = wait_for(client, result.task.id, {"completed"})
    assert (done.state, done.text) == ("completed", "the report")
    assert result_text(done) == "the report"
    assert peer.task_count == 1 and peer.calls["SendMessage"] == 1


def test_an_answer_can_be_final_at_once(shared):
    client = client_for(shared)
    result = send(client, "complete:at once")
    assert (result.task.state, result.task.text, result_text(result.task)) == ("completed", "at once", "at once")
    direct = send(client, "message:just a message")
    assert (direct.outcome, direct.task, direct.message_text) == ("accepted", None, "just a message")


@pytest.mark.parametrize(("script", "state", "expected"), [
    ("fail:disk full", "failed", "error: remote task failed: disk full"),
    ("reject:not my job", "rejected", "error: remote task rejected: not my job"),
    ("input:which year?", "input-required", "input-required: which year? task_id={id}"),
    ("auth:log in first", "auth-required", "auth-required: log in first task_id={id}"),
])
def test_remote_states_and_their_results(shared, script, state, expected):
    client = client_for(shared)
    task = wait_for(client, send(client, script).task.id, {state})
    assert task.state == state
    assert result_text(task) == expected.format(id=task.id)


def test_a_follow_up_answers_an_input_required_task(pool):
    peer = pool.start()
    client = client_for(peer)
    first = send(client, "input:which year?", context_id="ctx-follow")
    asked = wait_for(client, first.task.id, {"input-required"})
    reply = send(client, "1999", context_id="ctx-follow", task_id=asked.id)
    assert reply.outcome == "accepted" and reply.task.id == asked.id
    assert wait_for(client, asked.id, {"completed"}).text == "answer: 1999"
    assert peer.task_count == 1


def test_cancel_and_a_second_cancel(pool):
    peer = pool.start()
    client = client_for(peer)
    task = send(client, "work:30:never").task
    canceled = client.cancel_task(task.id)
    assert canceled.state == "canceled"
    assert result_text(canceled) == "error: remote task was canceled"
    with pytest.raises(RemoteError) as second:
        client.cancel_task(task.id)
    assert second.value.code == TASK_NOT_CANCELABLE
    assert client.get_task(task.id).state == "canceled"
    assert peer.calls["CancelTask"] == 2


def test_a_message_to_a_finished_task_is_rejected(pool):
    peer = pool.start()
    client = client_for(peer)
    done = send(client, "complete:done", context_id="ctx-t").task
    again = send(client, "more please", context_id="ctx-t", task_id=done.id)
    assert (again.outcome, again.error_code) == ("rejected", UNSUPPORTED_OPERATION)
    assert "terminal" in again.error
    assert peer.task_count == 1


def test_unknown_task_and_a_restarted_peer(pool):
    peer = pool.start()
    client = client_for(peer)
    with pytest.raises(RemoteError) as unknown:
        client.get_task("no-such-task")
    assert unknown.value.code == TASK_NOT_FOUND
    task = send(client, "complete:remembered").task
    peer.restart()
    with pytest.raises(RemoteError) as lost:
        client.get_task(task.id)
    assert lost.value.code == TASK_NOT_FOUND
    assert lost_task_text(task.id) == f"error: the remote agent no longer knows task {task.id}"
    unknown_follow_up = send(client, "hello?", task_id=task.id)
    assert (unknown_follow_up.outcome, unknown_follow_up.error_code) == ("rejected", TASK_NOT_FOUND)


def test_a_lost_answer_is_unknown_and_list_tasks_finds_the_task(pool):
    peer = pool.start()
    proxy = pool.lossy_proxy(peer)
    client = A2AClient(read_card(proxy.url, allow=ALLOW), allow=ALLOW)
    assert client.endpoint.rpc_url.startswith(proxy.url)
    result = send(client, "work:0.2:found", context_id="ctx-lost", message_id="m-lost")
    assert (result.outcome, result.task) == ("outcome_unknown", None)
    assert proxy.dropped == 1 and peer.calls["SendMessage"] == 1
    assert peer.task_count == 1
    send(client, "complete:other context", context_id="ctx-other")
    found = client.list_tasks("ctx-lost")
    assert [t.id for t in found] == peer.tasks_in("ctx-lost")
    assert (found[0].context_id, found[0].message_ids) == ("ctx-lost", ("m-lost",))
    assert wait_for(client, found[0].id, {"completed"}).text == "found"
    assert client.list_tasks("ctx-nothing") == []


@pytest.mark.parametrize("card", ["1.0", "0.3-legacy"])
def test_an_inline_push_registration_reaches_the_webhook(pool, card):
    peer = pool.start(card=card, push=True)
    client = client_for(peer)
    with CannedServer(http_answer(204, "")) as webhook:
        task = send(client, "complete:pushed", push=PushTarget(webhook.url + "/api/v1/push", "tok-1")).task
        wait_until(lambda: webhook.requests, timeout=60, what="the peer's push to reach the webhook")
    pushed = webhook.requests[0]
    assert pushed.startswith(b"POST /api/v1/push ")
    assert b"X-A2A-Notification-Token: tok-1" in pushed and b"Authorization: Bearer tok-1" in pushed
    assert task.id.encode() in pushed


# --- failures: not delivered or unknown --------------------------------------------------------------


def test_a_closed_port_is_not_delivered():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = A2AClient(AgentEndpoint(f"http://127.0.0.1:{port}/", "1.0"), allow=ALLOW)
    result = send(client, "hello")
    assert result.outcome == "not_delivered" and "refused" in result.error
    with pytest.raises(RemoteError):
        client.get_task("t")


def test_a_connect_timeout_is_not_delivered():
    # A listener whose accept queue is full drops further SYNs: connecting times out.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        fillers = [socket.socket() for _ in range(3)]
        for filler in fillers:
            filler.setblocking(False)
            filler.connect_ex(listener.getsockname())
        client = A2AClient(AgentEndpoint(f"http://127.0.0.1:{listener.getsockname()[1]}/", "1.0"), allow=ALLOW,
                           timeout=0.5)
        result = send(client, "hello")
        for filler in fillers:
            filler.close()
    assert (result.outcome, result.error) == ("not_delivered", "connecting timed out after 0.5s")


def test_the_guard_refuses_before_anything_is_sent(pool):
    peer = pool.start()
    client = A2AClient(AgentEndpoint(peer.rpc_url, "1.0"))  # 127.0.0.1 not allowed
    result = send(client, "hello")
    assert result.outcome == "not_delivered" and "loopback" in result.error
    with pytest.raises(AddressRefused):
        client.get_task("t")
    assert sum(peer.calls.values()) == 0 and peer.task_count == 0


def test_a_read_timeout_is_unknown():
    with SilentServer() as server:
        client = A2AClient(AgentEndpoint(server.url, "1.0"), allow=ALLOW, timeout=0.5)
        started = time.monotonic()
        result = send(client, "hello", message_id="m-silent")
        assert result.outcome == "outcome_unknown" and "0.5s" in result.error
        assert time.monotonic() - started < 5, "the client's own timeout ended it, not the default 10 s"
        assert b"m-silent" in server.received  # it did leave


def test_an_answer_over_the_size_limit_is_unknown(pool):
    peer = pool.start()
    client = client_for(peer, max_bytes=100)
    result = send(client, "complete:fits in nothing")
    assert result.outcome == "outcome_unknown" and "larger than 100 bytes" in result.error
    assert peer.task_count == 1
    # Calls other than a send raise: the finished task's artifact no longer fits.
    roomy = client_for(peer, max_bytes=4096)
    big = send(roomy, "big:10000")
    assert big.outcome == "accepted"
    with pytest.raises(RemoteError, match="larger than 4096 bytes"):
        wait_for(roomy, big.task.id, {"completed"})


def _rpc(doc: dict) -> str:
    return json.dumps({"jsonrpc": "2.0", **doc})


@pytest.mark.parametrize(("answer", "outcome"), [
    (http_answer(502, "<html>bad gateway</html>", "text/html"), "outcome_unknown"),
    (http_answer(200, '{"jsonrpc": "2.0", "id": "m-c", "result": {"task": {"id"'), "outcome_unknown"),
    (http_answer(200, '{"jsonrpc":"2.0","id":"m-c","result":{"task":{}}}' + " " * 50, Content_Length="20"),
     "outcome_unknown"),
    (http_answer(200, _rpc({"id": "m-c", "result": {"neither": 1}})), "outcome_unknown"),
    (http_answer(200, _rpc({"id": "other", "result": {"message": {"parts": []}}})), "outcome_unknown"),
    (http_answer(302, "", Location="http://127.0.0.1:1/"), "outcome_unknown"),
    (http_answer(500, _rpc({"id": "m-c", "error": {"code": -32603, "message": "internal"}})), "outcome_unknown"),
    (http_answer(500, _rpc({"id": "m-c", "error": {"code": -32602, "message": "bad params"}})), "rejected"),
    (http_answer(200, _rpc({"id": None, "error": {"code": -32700, "message": "parse error"}})), "rejected"),
    (http_answer(401, "unauthorized", "text/plain"), "rejected"),
])
def test_what_an_answer_means(answer, outcome):
    with CannedServer(answer) as server:
        result = send(A2AClient(AgentEndpoint(server.url, "1.0"), allow=ALLOW), "hello", message_id="m-c")
    assert result.outcome == outcome, result


def test_a_truncated_or_reset_answer_is_unknown():
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"jsonrpc\""
    for reset in (False, True):
        with CannedServer(head, reset=reset) as server:
            result = send(A2AClient(AgentEndpoint(server.url, "1.0"), allow=ALLOW), "hello")
        assert result.outcome == "outcome_unknown", result


def test_headers_version_and_auth():
    answer = http_answer(200, _rpc({"id": "get-t", "result": {"id": "t", "status": {"state": "working"}}}))
    with CannedServer(answer) as server:
        endpoint = AgentEndpoint(server.url, "1.0", auth_header="X-Api-Key", auth_value="s3cret")
        A2AClient(endpoint, allow=ALLOW).get_task("t")
        A2AClient(AgentEndpoint(server.url, "0.3"), allow=ALLOW).get_task("t")
    v1, v03 = (r.lower() for r in server.requests)
    assert b"a2a-version: 1.0" in v1 and b"x-api-key: s3cret" in v1
    assert b"a2a-version" not in v03 and b"x-api-key" not in v03


# --- the 0.3 dialect ---------------------------------------------------------------------------------


def test_the_0_3_dialect_end_to_end(pool):
    peer = pool.start(card="0.3-legacy")
    client = client_for(peer)
    assert client.dialect == "0.3"
    result = send(client, "work:0.3:old but fine", context_id="ctx-03", message_id="m-03")
    assert result.outcome == "accepted" and result.task.message_ids == ("m-03",)
    assert wait_for(client, result.task.id, {"completed"}).text == "old but fine"
    asked = wait_for(client, send(client, "input:why?").task.id, {"input-required"})
    assert asked.status_text == "why?"
    slow = send(client, "work:30:never").task
    assert client.cancel_task(slow.id).state == "canceled"
    with pytest.raises(RemoteError) as missing:
        client.get_task("no-such-task")
    assert missing.value.code == TASK_NOT_FOUND
    with pytest.raises(RemoteError) as no_list:
        client.list_tasks("ctx-03")
    assert no_list.value.code == UNSUPPORTED_OPERATION
    assert set(peer.calls) == {"message/send", "tasks/get", "tasks/cancel"}


def test_the_connected_address_is_checked_again(monkeypatch):
    # What a name that resolves differently on the second lookup (DNS rebinding) meets: the socket's real
    # peer is checked after connecting and before anything is written.
    monkeypatch.setattr(a2a, "check_url", lambda url, allow: [])  # the first lookup found an address allowed
    with SilentServer() as server:
        host, port = server.url.removeprefix("http://").split(":")
        token = a2a._CALL.set(a2a._Call(AllowList([]), server.url))
        try:
            connection = a2a._GuardedHTTPConnection(host, int(port), timeout=2)
            with pytest.raises(AddressRefused, match="loopback"):
                connection.request("POST", "/", body=b"{}")
            assert a2a._CALL.get().sent is False
            connection.close()
        finally:
            a2a._CALL.reset(token)
        # Once the server read to the closed connection's end, it has every byte that was written.
        wait_until(lambda: server.connections_ended == 1, what="the server to see the connection end")
        assert server.received == b""


# --- kept-alive connections ----------------------------------------------------------------------------


class _CountingAgent(ThreadingHTTPServer):
    """Answers every JSON-RPC call with a working task over HTTP/1.1 and counts the connections it accepted.
    With `drop_second`, a connection's second request is read and the connection closed without an answer
    (what a peer that closes an idle kept-alive connection looks like to the request sent on it)."""

    daemon_threads = True

    def __init__(self, drop_second: bool = False):
        self.connections = 0
        self.requests = 0
        self.drop_second = drop_second
        super().__init__(("127.0.0.1", 0), _CountingHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()


class _CountingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.server.connections += 1
        self.answered = 0

    def do_POST(self):  # noqa: N802 - http.server's name
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests += 1
        if self.server.drop_second and self.answered == 1:
            self.close_connection = True
            return
        task = {"id": "task-1", "contextId": "ctx", "status": {"state": "TASK_STATE_WORKING"}}
        result = {"task": task} if request["method"] == "SendMessage" else task
        body = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.answered += 1

    def log_message(self, *args):
        pass


def _client_of(agent: _CountingAgent) -> A2AClient:
    return A2AClient(AgentEndpoint(rpc_url=agent.url, protocol_version="1.0"), allow=ALLOW)


def test_reads_keep_their_connection_alive_and_sends_never_do():
    with _CountingAgent() as agent:
        client = _client_of(agent)
        for _ in range(3):
            assert client.get_task("task-1").state == "working"
        assert agent.connections == 1  # one connection, kept alive between the polls
        for number in range(2):
            assert send(client, "hello", message_id=f"m-keep-{number}").outcome == "accepted"
        assert agent.connections == 3  # a send on a connection of its own, every time


def test_the_guard_resolves_the_name_for_every_new_connection_and_not_for_a_kept_alive_one(monkeypatch):
    checked, check = [], a2a.check_url
    monkeypatch.setattr(a2a, "check_url", lambda url, allow: checked.append(url) or check(url, allow))
    with _CountingAgent() as agent:
        client = _client_of(agent)
        for _ in range(3):
            assert client.get_task("task-1").state == "working"
        assert len(checked) == agent.connections == 1
        assert send(client, "hello", message_id="m-guarded").outcome == "accepted"
        assert len(checked) == agent.connections == 2


def test_a_kept_alive_connection_the_peer_closed_costs_a_read_nothing_and_a_send_is_never_retried():
    with _CountingAgent(drop_second=True) as agent:
        client = _client_of(agent)
        assert client.get_task("task-1").state == "working"
        assert client.get_task("task-1").state == "working"  # the kept-alive one failed; a new one answered
        assert (agent.connections, agent.requests) == (2, 3)
    with _CountingAgent(drop_second=True) as agent:
        client = _client_of(agent)
        assert send(client, "hello", message_id="m-once").outcome == "accepted"
        assert agent.requests == 1 and agent.connections == 1


def test_every_new_kept_alive_connection_is_checked_by_the_guard():
    with _CountingAgent() as agent:
        refused = A2AClient(AgentEndpoint(rpc_url=agent.url, protocol_version="1.0"), allow=[])
        with pytest.raises(RemoteError):
            refused.get_task("task-1")
        assert agent.requests == 0
        assert _client_of(agent).get_task("task-1").state == "working"
        with pytest.raises(RemoteError):
            refused.get_task("task-1")  # the connection kept for the allowed client is not the refused one's
        assert agent.requests == 1


def test_a_poll_on_a_kept_alive_connection_is_not_held_back_by_delayed_acknowledgements(pool):
    # The a2a-sdk's server (uvicorn) writes an answer's headers and body in two sends with Nagle's algorithm
    # on: the body waits until the client acknowledges the headers, which Linux delays by 40 ms on a
    # kept-alive connection, so every poll but a connection's first took at least 40 ms. Fails without the
    # client's quick acknowledgement: then no poll of these twenty is faster than that delay.
    peer = pool.start(card="1.0")
    client = client_for(peer)
    task_id = send(client, "work:0:done").task.id
    client.get_task(task_id)  # the connection's first answer: Linux acknowledges the start of a connection at once
    durations = []
    for _ in range(20):
        started = time.perf_counter()
        client.get_task(task_id)
        durations.append(time.perf_counter() - started)
    assert min(durations) < 0.03, f"fastest of twenty polls {min(durations) * 1000:.1f} ms"


# --- TLS -------------------------------------------------------------------------------------------------


def _self_signed(directory) -> tuple[str, str]:
    """A certificate for 127.0.0.1 that no CA signed, and its key: (certificate file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                  critical=False)
                   .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_file), str(key_file)


class _TlsAgent(_CountingAgent):
    """The counting agent behind TLS, with a certificate of its own making; `handshakes` counts the TLS
    handshakes it saw begin, finished or not."""

    def __init__(self, cert_file: str, key_file: str):
        self.handshakes = 0
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(cert_file, key_file)
        super().__init__()

    def get_request(self):
        sock, address = super().get_request()
        self.handshakes += 1
        return self._context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}/"


def test_an_agent_whose_certificate_is_not_trusted_gets_no_request(tmp_path):
    with _TlsAgent(*_self_signed(tmp_path)) as agent:
        client = _client_of(agent)
        result = send(client, "hello", message_id="m-untrusted")
        assert result.outcome == "not_delivered" and "certificate verify failed" in result.error
        with pytest.raises(RemoteError, match="certificate verify failed"):
            client.get_task("task-1")
        assert agent.handshakes == 2 and agent.requests == 0


def test_the_guard_refuses_an_https_address_before_any_handshake(tmp_path):
    with _TlsAgent(*_self_signed(tmp_path)) as agent:
        refused = A2AClient(AgentEndpoint(rpc_url=agent.url, protocol_version="1.0"), allow=[])
        result = send(refused, "hello", message_id="m-refused")
        assert result.outcome == "not_delivered" and "loopback" in result.error
        assert agent.handshakes == 0


def test_failure_texts_name_what_failed_even_without_a_message():
    """The texts a failed call is recorded with: an exception without a message still says what it was (an
    exception object is always true, so its text is what is tested), and an OSError without an errno gives its
    reason alone."""
    call = a2a._Call(AllowList([]), "http://127.0.0.1:1/", sent=True)
    assert a2a._describe(ConnectionResetError(), 5, call) == "the connection broke: ConnectionResetError()"
    assert a2a._describe(ConnectionResetError(104, "Connection reset by peer"), 5, call) == \
        "the connection broke: [Errno 104] Connection reset by peer"
    unsent = a2a._Call(AllowList([]), "http://127.0.0.1:1/")
    assert a2a._describe(ConnectionRefusedError(111, "Connection refused"), 5, unsent) == \
        "[Errno 111] Connection refused"
    assert a2a._describe(OSError(None, "no route"), 5, unsent) == "no route"
    assert a2a._describe(TimeoutError(), 5, unsent) == "connecting timed out after 5s"
