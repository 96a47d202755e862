"""`serve --demo` as a real process, followed as its reader would: the printed commands, run by a shell.

The delegation run waits for the demo's own A2A agent and completes with its answer; the approval run
waits until the printed decision command approves it; a second start reuses the demo token.
"""

import json
import os
import re
import stat
import subprocess
from pathlib import Path

from sidecar.store import notes
from sidecar.store.models import ApiToken
from tests.support.servers import Served, start_serve
from tests.support.waiting import wait_until


def _serve_demo(database_url: str, instance: Path, log_path: Path) -> Served:
    # Without NRLLM_REMOTE_ALLOW: the demo must need nothing more than its own flag.
    return start_serve(database_url, log_path, "--demo", "--poll-interval", "0.1", read_stdout=True,
                       env={"NRLLM_INSTANCE_PATH": str(instance), "NRLLM_LOG_FORMAT": "json",
                            "NRLLM_REMOTE_ALLOW": None})


def _read_until(served: Served, marker: str) -> str:
    lines = []
    for line in served.proc.stdout:
        lines.append(line)
        if marker in line:
            return "".join(lines)
    raise AssertionError(f"serve --demo ended before printing {marker!r}:\n{''.join(lines)}")


def _command(text: str, pattern: str) -> str:
    """The printed command line that matches `pattern`."""
    return next(line.strip() for line in text.splitlines() if line.strip().startswith("curl")
                and re.search(pattern, line))


def _shell(command: str, token: str) -> dict:
    """Run a printed command as the reader would, after the printed `export NRLLM_TOKEN=...`."""
    done = subprocess.run(["bash", "-c", command], env={**os.environ, "NRLLM_TOKEN": token}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _logged_with_context(log_path: Path, delegating: str) -> None:
    """The process logged JSON lines that name the run, the remote agent and the request they are about."""
    # Log records only: serve also prints where it listens on standard error.
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    coordinator = [line for line in lines if line["logger"] == "nrllm_sidecar.coordinator"]
    assert any(line.get("run_id") == delegating and line.get("remote_agent") == "demo-agent" for line in coordinator)
    segments = [line for line in lines
                if line["logger"] == "nrllm_sidecar.worker" and "segment of run" in line["message"]]
    assert segments and all(line["run_id"] in line["message"] for line in segments)
    access = [line for line in lines if line["logger"] == "nrllm_sidecar.access"]
    assert access and all(len(line["request_id"]) == 32 and line["path"].startswith("/api/v1/") for line in access)


def test_serve_demo_shows_a_run_waiting_for_a_remote_agent_and_one_waiting_for_approval(database_url, tmp_path):
    instance, log_path = tmp_path / "instance", tmp_path / "serve.log"
    served = _serve_demo(database_url, instance, log_path)
    try:
        text = _read_until(served, "API documentation")
        token = re.search(r"export NRLLM_TOKEN=(\S+)", text).group(1)
        delegating = re.search(r"delegation run: (\S+)", text).group(1)
        approving = re.search(r"approval run:   (\S+)", text).group(1)
        watch_delegation = _command(text, rf"/runs/{delegating}$")

        seen = []

        def delegation_done():
            run = _shell(watch_delegation, token)
            seen.append(run["status"])
            return run if run["status"] in ("completed", "failed", "cancelled") else None

        finished = wait_until(delegation_done, timeout=120, interval=0.2, what="the delegation run to finish")
        assert "waiting_for_dependency" in seen, f"the run visibly waited for the remote agent: {seen}"
        assert finished["status"] == "completed"
        assert "The demo agent answered: Summary (" in finished["output"]

        waiting = _shell(_command(text, rf"/runs/{approving}$"), token)
        assert waiting["status"] in ("queued", "running", "waiting_for_approval")
        announced = _read_until(served, "/decision")
        decided = _shell(_command(announced, "/decision"), token)
        assert (decided["id"], decided["status"]) == (approving, "completed")
        assert notes.of_run(approving) == ["approved in the demo"]
    finally:
        assert served.stop() == 0, "serve stops cleanly on SIGTERM"

    token_file = instance / "demo-token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and token_file.read_text().strip() == token
    tokens_before = ApiToken.select().count()
    _logged_with_context(log_path, delegating)
    again = _serve_demo(database_url, instance, tmp_path / "again.log")
    try:
        text = _read_until(again, "API documentation")
        assert re.search(r"export NRLLM_TOKEN=(\S+)", text).group(1) == token and "reused from" in text
        assert ApiToken.select().count() == tokens_before == 1, "a second start adds no token"
    finally:
        assert again.stop() == 0
