"""The next request on a kept-alive connection, answered by the thread that answered the last
(sidecar/serving/http_worker.py): a real `serve` process, clients on raw sockets."""

import signal
import socket
import time
from pathlib import Path

import pytest

from sidecar.config import Settings
from sidecar.serving.http_worker import threads_lingering
from tests.support.network import read_message
from tests.support.servers import parse_answer, process_tree, start_serve

pytestmark = pytest.mark.slow

HEALTH = b"GET /api/v1/health HTTP/1.1\r\nHost: t\r\n\r\n"


def _serve(url: str, tmp_path: Path, threads: int, linger: str | None):
    return start_serve(url, tmp_path / "serve.log", "--no-worker", "--workers", "1", "--threads", str(threads),
                       env={"NRLLM_KEEPALIVE_LINGER": linger})


def _kept_alive(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def _answer(sock: socket.socket) -> int:
    """Send a health request on the kept-alive connection; the answer's status."""
    sock.sendall(HEALTH)
    return parse_answer(read_message(sock))[0]


def _loop_thread_wake_ups(http_worker: int) -> int:
    """How often the HTTP worker's loop thread (its main thread) has gone to sleep and woken since it started."""
    status = Path(f"/proc/{http_worker}/task/{http_worker}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("voluntary_ctxt_switches")))


@pytest.mark.parametrize(("linger", "loop_thread_wakes"), [("0.5", False), ("0", True)])
def test_the_next_request_on_a_kept_alive_connection_does_not_wake_the_loop_thread(sqlite_url, tmp_path, linger,
                                                                                    loop_thread_wakes):
    """40 requests 5 ms apart on one connection. With a linger (0.5 s here, so that a client a busy machine
    is slow to run still counts), the thread that answered one waits for the next and answers it too; the
    loop thread sleeps through them. With the linger off, as gunicorn does alone, the connection goes back
    to the loop thread after every answer: two wake-ups a request (one when the loop thread is busy enough
    to find the next request there already)."""
    served = _serve(sqlite_url, tmp_path, 8, linger)
    try:
        (http_worker,) = process_tree(served.proc.pid)[1:]
        with _kept_alive(served.port) as sock:
            assert _answer(sock) == 200
            before = _loop_thread_wake_ups(http_worker)
            for _ in range(40):
                time.sleep(0.005)
                assert _answer(sock) == 200
            wake_ups = _loop_thread_wake_ups(http_worker) - before
        assert wake_ups >= 40 if loop_thread_wakes else wake_ups < 10, wake_ups
    finally:
        assert served.stop() == 0, served.log()[-3000:]


def test_threads_waiting_on_kept_alive_connections_leave_threads_for_new_ones(sqlite_url, tmp_path):
    """Four threads, of which one may linger: after four kept-alive connections had an answer each (and
    their clients went quiet), a fifth connection is answered at once, not after a linger of 5 s."""
    assert threads_lingering(4) == 1
    served = _serve(sqlite_url, tmp_path, 4, "5")
    quiet = [_kept_alive(served.port) for _ in range(4)]
    try:
        for sock in quiet:
            assert _answer(sock) == 200
        started = time.monotonic()
        with _kept_alive(served.port) as fifth:
            assert _answer(fifth) == 200
        assert time.monotonic() - started < 2.5, "answered without waiting for a lingering thread"
    finally:
        for sock in quiet:
            sock.close()
        assert served.stop() == 0, served.log()[-3000:]


def test_a_stopping_http_worker_does_not_wait_out_a_linger(sqlite_url, tmp_path):
    """A thread lingers on a quiet kept-alive connection (up to 5 s) when serve gets SIGTERM: the worker
    stops as it does without the linger, keeping the connection for gunicorn's 2 s at the most."""
    served = _serve(sqlite_url, tmp_path, 8, "5")
    with _kept_alive(served.port) as sock:
        assert _answer(sock) == 200
        started = time.monotonic()
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(30) == 0, served.log()[-3000:]
        # Waiting out the linger would take 5 s, and then gunicorn's 2 s.
        assert time.monotonic() - started < 5.0, "stopped without waiting for the linger to end"


@pytest.mark.parametrize(("raw", "seconds"), [(None, 0.05), ("0", 0.0), ("0.2", 0.2)])
def test_the_linger_is_seconds_and_zero_turns_it_off(raw, seconds):
    assert Settings.from_env({} if raw is None else {"NRLLM_KEEPALIVE_LINGER": raw}).keepalive_linger == seconds


@pytest.mark.parametrize("raw", ["-1", "nan", "soon"])
def test_a_linger_that_is_no_number_of_seconds_stops_the_command(raw):
    with pytest.raises(SystemExit, match="NRLLM_KEEPALIVE_LINGER"):
        Settings.from_env({"NRLLM_KEEPALIVE_LINGER": raw})
