"""HTTP hardening and stream limits of a real `serve` process (gunicorn), over raw sockets where the
request is one no ordinary client would send."""

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from sidecar.store import db as store_db
from sidecar.store import migrations, runs, status_guard, tokens
from tests.support import ROOT
from tests.support.api import ACTOR, as_host
from tests.support.delegation import journalled_send
from tests.support.servers import parse_answer, raw_request, read_until_closed, start_serve
from tests.support.streams import EventStream
from tests.support.waiting import wait_until
from tests.support.workers import stop_process

pytestmark = pytest.mark.slow

ALLOWED_ORIGIN = "https://editor.example"
HEADER_TIMEOUT = 2
PER_TOKEN = 3
PER_PROCESS = 5


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One API process (no worker: queued runs stay queued, so their streams stay open) for the module."""
    folder = tmp_path_factory.mktemp("served")
    url = f"sqlite:///{folder / 'sidecar.db'}"
    store_db.bind(url)
    migrations.upgrade()
    server = start_serve(url, folder / "serve.log", "--no-worker", "--workers", "1", "--threads", "32", env={
        "NRLLM_HEADER_TIMEOUT": str(HEADER_TIMEOUT), "NRLLM_BODY_TIMEOUT": "2",
        "NRLLM_STREAMS_PER_TOKEN": str(PER_TOKEN), "NRLLM_STREAMS_PER_PROCESS": str(PER_PROCESS),
        "NRLLM_CORS_ORIGINS": ALLOWED_ORIGIN})
    yield server
    assert server.stop() == 0, server.log()[-3000:]
    store_db.bind(url).close()


def test_the_servers_own_log_lines_are_written_whole(served):
    """gunicorn's lines (its start, the address, each HTTP worker) in the sidecar's log, each one written: a
    format field the sidecar's records no longer fill would print a logging error instead."""
    log = served.log()
    assert "Listening at: http://127.0.0.1:" in log and "Booting worker with pid" in log
    assert "Logging error" not in log


@pytest.fixture
def host(served):
    return tokens.create(f"host-{time.monotonic_ns()}", "host")[0]


def _get(port: int, path: str, *headers: str) -> tuple[int, dict, bytes]:
    lines = "".join(f"{h}\r\n" for h in headers)
    return raw_request(port, f"GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{lines}\r\n".encode())


def _assert_error_shape(headers: dict, body: bytes, code: str) -> dict:
    assert headers["content-type"] == "application/json"
    assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"
    document = json.loads(body)
    assert document["code"] == code and document["message"], document
    return document


@pytest.mark.parametrize(("request_bytes", "status", "code"), [
    (b"NOT A REQUEST LINE\r\n\r\n", 400, "malformed_request"),
    (b"GET /api/v1/health HTTP/1.1\r\nBad Header Name: x\r\n\r\n", 400, "malformed_request"),
    (b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: t\r\n\r\n", 414, "request_line_too_long"),
    (b"GET / HTTP/1.1\r\n" + b"".join(b"X-N%d: v\r\n" % i for i in range(101)) + b"\r\n", 431, "headers_too_large"),
    (b"GET / HTTP/1.1\r\nX-Big: " + b"v" * 9000 + b"\r\n\r\n", 431, "headers_too_large"),
    (b"GET /api/v1/health HTTP/3.0\r\nHost: t\r\n\r\n", 505, "http_version_not_supported"),
], ids=["request-line", "header-name", "414", "431-count", "431-size", "505"])
def test_errors_the_server_answers_itself_are_json_in_the_error_shape(served, request_bytes, status, code):
    answer_status, headers, body = raw_request(served.port, request_bytes)
    assert answer_status == status
    _assert_error_shape(headers, body, code)
    assert headers["connection"] == "close"


def test_answers_carry_nosniff_and_no_store_and_the_server_header_names_no_version(served, host):
    status, headers, body = _get(served.port, "/api/v1/health")
    assert status in (200, 503) and json.loads(body)["database"] == "ok"
    assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"
    assert not any(ch.isdigit() for ch in headers.get("server", "")), headers["server"]
    assert "access-control-allow-origin" not in headers
    status, headers, body = _get(served.port, "/api/v1/runs/not-a-uuid", f"Authorization: Bearer {host}",
                                 f"X-Nrllm-Actor: {ACTOR}")
    assert status == 404
    _assert_error_shape(headers, body, "not_found")


def test_cors_is_closed_unless_the_origin_is_configured(served, host):
    _, headers, _ = _get(served.port, "/api/v1/health", "Origin: https://elsewhere.example")
    assert "access-control-allow-origin" not in headers
    _, headers, _ = _get(served.port, "/api/v1/health", f"Origin: {ALLOWED_ORIGIN}")
    assert headers["access-control-allow-origin"] == ALLOWED_ORIGIN and "Origin" in headers["vary"]
    preflight = ("OPTIONS /api/v1/runs HTTP/1.1\r\nHost: t\r\nConnection: close\r\nOrigin: {}\r\n"
                 "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization\r\n\r\n")
    status, headers, _ = raw_request(served.port, preflight.format(ALLOWED_ORIGIN).encode())
    assert status == 204 and "Authorization" in headers["access-control-allow-headers"]
    assert headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    status, headers, _ = raw_request(served.port, preflight.format("https://elsewhere.example").encode())
    assert status == 401 and "access-control-allow-origin" not in headers


def test_a_client_that_sends_half_its_headers_and_stalls_is_cut_off_with_408(served):
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", served.port), timeout=60) as sock:
        sock.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: t\r\n")
        # A slowloris: a byte now and then, never the end of the headers.
        for _ in range(6):
            time.sleep(0.5)
            try:
                sock.sendall(b"X")
            except OSError:
                break
        status, headers, body = parse_answer(read_until_closed(sock))
    assert status == 408
    _assert_error_shape(headers, body, "request_timeout")
    assert time.monotonic() - started < HEADER_TIMEOUT + 20, "cut off about its header timeout, not never"
    assert _get(served.port, "/api/v1/health")[0] in (200, 503), "the server answers others meanwhile"


def _push_token() -> str:
    """The token of a journalled send (the gate opened for the write, as a worker's would be)."""
    status_guard.install(lambda status, origin, reported_at: None)
    try:
        return journalled_send(push=True)[2]
    finally:
        status_guard.install(None)


# A push with a valid token is read before Flask (api/push.py); what stops it reaches the view all the same.
@pytest.mark.parametrize("path", ["/api/v1/runs", "/api/v1/push"])
def test_a_body_that_stops_arriving_is_answered_408_by_the_view(served, host, path):
    credentials = (f"X-A2A-Notification-Token: {_push_token()}" if path == "/api/v1/push"
                   else f"Authorization: Bearer {host}\r\nX-Nrllm-Actor: {ACTOR}")
    with socket.create_connection(("127.0.0.1", served.port), timeout=60) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: t\r\n{credentials}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: 200\r\n\r\n{{\"input\"".encode())
        status, headers, body = parse_answer(read_until_closed(sock))
    assert status == 408
    _assert_error_shape(headers, body, "request_timeout")
    assert "x-request-id" in headers, "answered by the view, as any request, not by the server alone"


def _stream(served, token: str, run_id: str) -> EventStream:
    return EventStream(served.base_url, "GET", f"/api/v1/runs/{run_id}/events", as_host(token))


def test_streams_beyond_a_tokens_limit_and_the_process_limit_are_refused_with_429(served, host):
    run_id = runs.create_run(ACTOR, "stays queued")
    other = tokens.create(f"other-{time.monotonic_ns()}", "host")[0]
    held = [_stream(served, host, run_id) for _ in range(PER_TOKEN)]
    try:
        assert [s.status for s in held] == [200] * PER_TOKEN
        refused = _stream(served, host, run_id)
        assert refused.status == 429 and refused.response.getheader("Retry-After").isdigit()
        assert json.loads(refused.response.read())["code"] == "too_many_streams"
        # Another token is not held back by this one's streams, up to the process's limit.
        held += [_stream(served, other, run_id) for _ in range(PER_PROCESS - PER_TOKEN)]
        assert [s.status for s in held] == [200] * PER_PROCESS
        refused = _stream(served, other, run_id)
        assert refused.status == 429
        assert "server process" in json.loads(refused.response.read())["message"]
        # Streams that end give their places back: the run is cancelled, so every one of them ends.
        runs.request_cancel(run_id, by="test")

        def reopened():
            stream = _stream(served, host, runs.create_run(ACTOR, "another"))
            held.append(stream)
            return stream.status == 200

        wait_until(reopened, timeout=30, interval=0.2, what="the ended streams' places to be given back")
    finally:
        for stream in held:
            stream.close()


def test_gunicorn_run_by_hand_serves_sidecar_wsgi_app_with_the_sidecars_worker_class(tmp_path):
    url = f"sqlite:///{tmp_path / 'own.db'}"
    env = {**os.environ, "NRLLM_DATABASE_URL": url}
    assert subprocess.run([sys.executable, "-m", "sidecar.cli", "db", "upgrade"], cwd=ROOT, env=env,
                          capture_output=True, timeout=120).returncode == 0
    log_path = tmp_path / "gunicorn.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "sidecar.wsgi:app", "-k",
                                 "sidecar.serving.http_worker.SidecarWorker", "--threads", "8",
                                 "--bind", "127.0.0.1:0", "--no-control-socket"],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        def port():
            assert proc.poll() is None, log_path.read_text()
            match = re.search(r"Listening at: http://127\.0\.0\.1:(\d+)", log_path.read_text())
            return int(match.group(1)) if match else None

        bound = wait_until(port, timeout=60, what="gunicorn to listen")
        status, headers, body = wait_until(lambda: _answer_or_none(bound), timeout=60, what="the app to answer")
        assert status == 200 and json.loads(body)["status"] == "degraded", "no worker runs beside it"
        assert headers["x-content-type-options"] == "nosniff"
        status, headers, body = raw_request(bound, b"GET / HTTP/3.0\r\n\r\n")
        assert status == 505
        _assert_error_shape(headers, body, "http_version_not_supported")
    finally:
        assert stop_process(proc, 60) == 0, log_path.read_text()[-3000:]


def _answer_or_none(port: int):
    try:
        return _get(port, "/api/v1/health")
    except OSError:
        return None
