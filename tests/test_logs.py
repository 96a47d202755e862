"""Versions and logs: --version, the version in health and OpenAPI, JSON log lines with their context, and
X-Request-Id kept or made, echoed and logged with the request's access line."""

import io
import json
import logging
import os
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from sidecar import __version__, logs
from sidecar.cli import main
from tests.support import ROOT
from tests.support.api import as_host
from tests.support.delegation import journalled_send


@pytest.fixture
def json_lines():
    """The process's logging as NRLLM_LOG_FORMAT=json configures it, into a buffer; yields a reader."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    buffer = io.StringIO()
    logs.configure(log_format="json", stream=buffer)
    yield lambda: [json.loads(line) for line in buffer.getvalue().splitlines()]
    root.handlers[:] = handlers  # configure() replaced them: give pytest's capture back
    root.setLevel(level)


def test_version_option_prints_the_installed_package_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"nrllm-sidecar, version {__version__}"
    assert re.match(r"^\d+\.\d+", __version__), "the version comes from the installed package's metadata"


def test_health_and_openapi_carry_the_version_and_health_keeps_its_fields(client, host_token):
    health = client.get("/api/v1/health").get_json()
    assert health["version"] == __version__
    assert {"status", "database", "workers_alive", "oldest_queued_seconds", "unsealable_checkpoints"} <= set(health)
    spec = client.get("/api/v1/openapi.json", headers=as_host(host_token)).get_json()
    assert spec["info"]["version"] == __version__
    assert "version" in spec["components"]["schemas"]["Health"]["properties"]


def test_json_lines_carry_time_level_logger_message_context_and_the_exception(json_lines):
    log = logging.getLogger("nrllm_sidecar.test")
    with logs.context(run_id="run-1", remote_agent="summarizer"):
        log.warning("polling %s failed", "summarizer")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("outside any run")
    first, second = json_lines()
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", first["time"])
    assert (first["level"], first["logger"], first["message"]) == ("WARNING", "nrllm_sidecar.test",
                                                                    "polling summarizer failed")
    assert (first["run_id"], first["remote_agent"]) == ("run-1", "summarizer") and "request_id" not in first
    assert "run_id" not in second, "the context ends with its block"
    assert second["level"] == "ERROR" and "RuntimeError: boom" in second["exception"]


def test_text_lines_name_the_context_after_the_message():
    record = logging.makeLogRecord({"name": "nrllm_sidecar.test", "levelname": "INFO", "msg": "claimed"})
    with logs.context(run_id="run-1", request_id="req-1"):
        logs.ContextFilter().filter(record)
    line = logs.TextFormatter().format(record)
    assert line.endswith(" INFO nrllm_sidecar.test: claimed [run_id=run-1 request_id=req-1]")


def test_a_safe_request_id_is_echoed_and_logged_with_the_access_line(client, host_token, json_lines):
    answer = client.get("/api/v1/runs?limit=5&secret=hunter2", headers=as_host(host_token, **{
        "X-Request-Id": "req-42.a:b"}))
    assert answer.status_code == 200 and answer.headers["X-Request-Id"] == "req-42.a:b"
    access = [line for line in json_lines() if line["logger"] == "nrllm_sidecar.access"]
    assert len(access) == 1
    line = access[0]
    assert (line["request_id"], line["method"], line["path"], line["status"]) == ("req-42.a:b", "GET",
                                                                                 "/api/v1/runs", 200)
    assert line["duration_ms"] >= 0 and "hunter2" not in json.dumps(line), "the query string is never logged"


@pytest.mark.usefixtures("delegation_offered")
def test_an_accepted_push_answered_before_flask_has_its_request_id_and_access_line(client, json_lines):
    _, row, token = journalled_send(push=True)
    body = json.dumps({"statusUpdate": {"taskId": row.remote_task_id, "status": {"state": "TASK_STATE_WORKING"}}})
    answer = client.post("/api/v1/push", data=body, headers={"X-A2A-Notification-Token": token,
                                                             "X-Request-Id": "peer-42"})
    assert (answer.status_code, answer.headers["X-Request-Id"]) == (204, "peer-42")
    (line,) = [line for line in json_lines() if line["logger"] == "nrllm_sidecar.access"]
    assert (line["request_id"], line["method"], line["path"], line["status"]) == ("peer-42", "POST",
                                                                                 "/api/v1/push", 204)
    assert line["message"].startswith("POST /api/v1/push 204 ") and line["duration_ms"] >= 0


@pytest.mark.parametrize("sent", [None, "", "x" * 129, "a b", "evil;Set-Cookie=x", "ünïcode", "<script>"])
def test_a_missing_or_unsafe_request_id_is_replaced_by_a_fresh_one(client, sent, json_lines):
    headers = {} if sent is None else {"X-Request-Id": sent}
    answer = client.get("/api/v1/runs", headers=headers)  # no token: refused, still with an id and a line
    assert answer.status_code == 401
    made = answer.headers["X-Request-Id"]
    assert re.fullmatch(r"[0-9a-f]{32}", made)
    assert [line["request_id"] for line in json_lines() if line["logger"] == "nrllm_sidecar.access"] == [made]


def test_a_bad_log_format_stops_the_command_with_a_clear_message():
    env = {**os.environ, "NRLLM_LOG_FORMAT": "xml"}
    proc = subprocess.run([sys.executable, "-m", "sidecar.cli", "--version"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, "--version answers before anything is configured"
    proc = subprocess.run([sys.executable, "-m", "sidecar.cli", "plugins"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "NRLLM_LOG_FORMAT must be one of text, json" in proc.stderr
