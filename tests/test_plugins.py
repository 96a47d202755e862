"""A plugin as its author ships it: tests/example_plugin, a separate package made importable to the tests
as an installed one (tests/support/plugin_site.py), loaded through its entry point. Its tool, provider, route,
status listener and consumer at work, in this process and in a worker process."""

import os
import subprocess
import sys

import nrllm_example_plugin as example
import pytest

from nrllm_sidecar_compat import service as compat_service
from sidecar import bootstrap
from sidecar.engine import AgentLoop
from sidecar.engine.registry import build_registry
from sidecar.hookspecs import hookimpl
from sidecar.plugins import describe, plugin_manager
from sidecar.store import consumers as consumer_store
from sidecar.store import db as store_db
from sidecar.store import events, runs
from sidecar.store.models import Run
from tests.support import ROOT
from tests.support.api import as_host
from tests.support.runs import run_row
from tests.support.segments import drive_segment
from tests.support.waiting import wait_until
from tests.support.workers import start_worker_process, stop_process

EXAMPLE_HOOKS = ["nrllm_consumers", "nrllm_model_providers", "nrllm_permission_check", "nrllm_register_routes",
                 "nrllm_run_status_changed", "nrllm_tools"]


def test_the_example_plugin_is_loaded_through_its_entry_point():
    assert plugin_manager().get_plugin("example") is example
    (row,) = [r for r in describe() if r["name"] == "example"]
    assert row == {"name": "example", "hooks": EXAMPLE_HOOKS, "version": "0.1.0", "default": False,
                   "distribution": "nrllm-example-plugin", "consumers": ["example_dashboard"]}


def test_the_plugins_command_lists_it_with_its_version_and_hooks(sqlite_url):
    done = subprocess.run([sys.executable, "-m", "sidecar.cli", "plugins"], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "NRLLM_DATABASE_URL": sqlite_url}, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    consumers = "declares consumers example_dashboard (versions: the host's report, see `nrllm-sidecar compat`)"
    assert f"example\tplugin package nrllm-example-plugin 0.1.0\t{', '.join(EXAMPLE_HOOKS)}\t{consumers}" in lines
    assert "sidecar.permissions\tcore (sidecar 0.1.0)\tnrllm_permission_check" in lines
    # The bundled adapter carries the sidecar's version, never one that reads like nr_mcp_agent's own.
    (adapter,) = [line for line in lines if line.startswith("nr_mcp_agent\t")]
    assert adapter.split("\t")[1] == "bundled with sidecar 0.1.0"
    assert "declares consumers nr_mcp_agent" in adapter


def test_the_sidecar_that_make_run_serves_does_not_load_the_test_plugins(sqlite_url, tmp_path):
    # `make run` runs .venv's nrllm-sidecar without the tests' PYTHONPATH: after `make test` it must not load
    # the example plugin (its routes and its permission rule would be served).
    console_script = os.path.join(os.path.dirname(sys.executable), "nrllm-sidecar")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["NRLLM_DATABASE_URL"] = sqlite_url
    done = subprocess.run([console_script, "plugins"], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    names = [line.split("\t")[0] for line in done.stdout.splitlines()]
    assert "nr_mcp_agent" in names and "sidecar.permissions" in names  # the listing works
    assert "example" not in names, "the example plugin is installed in .venv: `make install` takes it out"


@pytest.fixture
def started(settings):
    """What a process does at start-up: the plugins loaded, the gate and the status listener installed."""
    bootstrap.start(settings, bind_database=False)
    return settings


def test_its_tool_is_offered_and_a_run_using_it_completes(started):
    registry = build_registry(started)
    assert "reverse" in registry.offered(None)
    assert registry.offered(["reverse"]) == {"reverse": registry.tools["reverse"]}
    run_id = runs.create_run("be_user:7", "reverse it", spec={"provider": "scripted", "tools": ["reverse"], "script": [
        {"tool_calls": [{"id": "c1", "name": "reverse", "arguments": {"text": "stressed"}},
                        {"id": "c2", "name": "reverse", "arguments": {"text": ""}}]},
        {"content": "done"},
    ]})
    drive_segment(loop=AgentLoop(registry))
    results = [e["payload"]["result"] for e in events.list_events(run_id) if e["kind"] == "tool"]
    assert results == ["desserts", "error: there is no text to reverse"]
    assert (run_row(run_id).status, run_row(run_id).output) == ("completed", "done")


def test_its_provider_answers_a_run_that_names_it(started):
    run_id = runs.create_run("be_user:7", "anything", spec={"provider": "constant"})
    drive_segment(loop=AgentLoop(build_registry(started)))
    row = run_row(run_id)
    assert (row.status, row.output) == ("completed", example.CONSTANT_ANSWER)


class SeenFromAnotherConnection:
    """Reads the run's status over a connection of its own when told of a change: only what was
    committed is visible there, so a notification sent before the commit would see the old status."""

    def __init__(self, url):
        self.db = store_db.connect(url)
        self.seen = []

    @hookimpl
    def nrllm_run_status_changed(self, run_id, old_status, new_status):
        sql = f"SELECT status FROM {Run._meta.table_name} WHERE id = {self.db.param}"
        row = self.db.execute_sql(sql, (run_id,)).fetchone()
        self.seen.append((new_status, row[0] if row else None))


@pytest.fixture
def observer(started, database_url):
    observer = SeenFromAnotherConnection(database_url)
    plugin_manager().register(observer, name="status-observer-test")
    yield observer
    plugin_manager().unregister(observer)
    observer.db.close()


def test_status_notifications_arrive_after_commit_in_order(started, observer):
    run_id = runs.create_run("be_user:7", "x", spec={"provider": "constant"})
    drive_segment(loop=AgentLoop(build_registry(started)))
    told = [(old, new) for rid, old, new in example.NOTIFICATIONS if rid == run_id]
    assert told == [(None, "queued"), ("queued", "running"), ("running", "completed")]
    statuses = [e["payload"] for e in events.list_events(run_id) if e["kind"] == "status"]
    assert told == [(status["from"], status["to"]) for status in statuses]
    assert observer.seen == [("queued", "queued"), ("running", "running"), ("completed", "completed")]


class FailingListener:
    @hookimpl(tryfirst=True)
    def nrllm_run_status_changed(self, run_id, old_status, new_status):
        raise RuntimeError("this listener is broken")


def test_a_failing_status_listener_does_not_silence_the_others(started, caplog):
    broken = FailingListener()
    plugin_manager().register(broken, name="broken-listener-test")
    try:
        run_id = runs.create_run("be_user:7", "x", spec={"provider": "constant"})
    finally:
        plugin_manager().unregister(broken)
    assert [(old, new) for rid, old, new in example.NOTIFICATIONS if rid == run_id] == [(None, "queued")]
    assert "broken-listener-test" in caplog.text and run_row(run_id).status == "queued"


@pytest.mark.slow
def test_a_worker_process_notifies_the_plugin(database_url, tmp_path, monkeypatch):
    run_id = runs.create_run("be_user:7", "x", spec={"provider": "constant"})
    # Set after the run is queued, so that only the worker's notifications are logged, not this process's.
    log = tmp_path / "statuses.log"
    monkeypatch.setenv(example.LOG_ENV, str(log))
    worker = start_worker_process(database_url, log_path=tmp_path / "worker.log")
    try:
        wait_until(lambda: run_row(run_id).status == "completed", what="the worker to complete the run")
        wait_until(lambda: f"{run_id} running completed\n" in log.read_text(), what="the last notification")
    finally:
        stop_process(worker)
    assert [line.split(" ", 1)[1] for line in log.read_text().splitlines() if line.startswith(run_id)] == [
        "queued running", "running completed"], "the worker notifies what it writes, in order"


def test_its_route_needs_a_token_and_is_documented(client, host_token):
    assert client.get("/api/v1/example/reverse?text=abc").status_code == 401
    answer = client.get("/api/v1/example/reverse?text=abc", headers=as_host(host_token))
    assert (answer.status_code, answer.get_json()) == (200, {"text": "cba"})
    missing = client.get("/api/v1/example/reverse", headers=as_host(host_token))
    assert (missing.status_code, missing.get_json()["code"]) == (422, "validation_failed")
    spec = client.get("/api/v1/openapi.json", headers=as_host(host_token)).get_json()
    operation = spec["paths"]["/api/v1/example/reverse"]["get"]
    assert "security" not in operation, "a plugin route takes the document's default: the bearer token"
    assert spec["security"] == [{"bearerToken": []}]


def test_its_consumer_gates_only_the_runs_it_reads(database_url):
    consumer_store.replace_report([{"name": "example_dashboard", "version": "1.4"}])
    assert compat_service.delegation_refusal(None) is None
    reason = compat_service.delegation_refusal(example.DASHBOARD_ORIGIN)
    assert "example_dashboard 1.4" in reason and "from 2.0" in reason
    assert reason.endswith(f"(see {example.DASHBOARD_UPGRADE_NOTE})")  # the consumer's own note, not the sidecar's
    assert compat_service.compat_report()["delegation"]["blocked_origins"] == [example.DASHBOARD_ORIGIN]
    consumer_store.replace_report([{"name": "example_dashboard", "version": "2.0"}])
    assert compat_service.delegation_refusal(example.DASHBOARD_ORIGIN) is None
