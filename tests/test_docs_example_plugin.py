"""docs/examples/plugin, the complete plugin package docs/plugins.md describes: found through its entry point
by a real sidecar (as if pip had installed it), its tool used by a run over HTTP, and its own tests passing."""

import json
import os
import subprocess
import sys
import urllib.request

import pytest

from tests.support import ROOT
from tests.support.plugin_site import write_metadata
from tests.support.servers import live_sidecar
from tests.support.waiting import wait_until

PACKAGE = ROOT / "docs" / "examples" / "plugin"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The package's metadata in a directory of its own, and the import path that makes it installed."""
    site = tmp_path_factory.mktemp("glossary-site")
    write_metadata(site, PACKAGE)
    return (site, PACKAGE)


def test_a_sidecar_loads_it_through_its_entry_point_and_a_run_uses_its_tool(installed, tmp_path):
    with live_sidecar(tmp_path, python_path=installed) as sidecar:
        listing = sidecar.command("plugins").splitlines()
        assert "glossary\tplugin package nrllm-glossary 0.1.0\tnrllm_run_status_changed, nrllm_tools" in listing
        token = sidecar.command("token", "create", "--name", "glossary", "--role", "host")
        headers = {"Authorization": f"Bearer {token}", "X-Nrllm-Actor": "be_user:7"}
        run = _call(sidecar.url + "/api/v1/runs", headers, {
            "input": "What is a lease?", "tools": ["define"],
            "script": [{"tool_calls": [{"id": "d1", "name": "define", "arguments": {"term": "lease"}},
                                       {"id": "d2", "name": "define", "arguments": {"term": "quux"}}]},
                       {"content": "{last_tool_result}"}]})
        done = wait_until(lambda: (r := _call(f"{sidecar.url}/api/v1/runs/{run['id']}", headers))["status"]
                          not in ("queued", "running") and r, timeout=60, what="the run to finish")
        assert done["status"] == "completed", done
        events = _call(f"{sidecar.url}/api/v1/runs/{run['id']}/events", headers)["items"]
        results = [e["payload"]["result"] for e in events if e["kind"] == "tool"]
        assert results == ["A time-limited claim on a run; whoever holds it may write the run.",
                           "error: the glossary has no entry for 'quux'"]


def test_its_own_tests_pass(installed):
    path = os.pathsep.join(str(p) for p in installed)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "no:randomly"], cwd=PACKAGE, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed" in done.stdout


def _call(url: str, headers: dict, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if data else "GET")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)
