"""The command line as an operator uses it: migrations from several processes, serve (started as every test
starts it, tests/support/servers.py) and its health."""

import json
import os
import signal
import subprocess
import sys
import urllib.request

from peewee import fn

from sidecar.domain.clock import utcnow
from sidecar.store import db as store_db
from sidecar.store import events, runs
from sidecar.store.migrations import MIGRATIONS
from sidecar.store.models import Run, SchemaMigration
from tests.support import ROOT
from tests.support.servers import start_serve
from tests.support.waiting import wait_until


def _cli(*args, env):
    return subprocess.Popen(
        [sys.executable, "-m", "sidecar.cli", *args], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _health(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=10) as response:
        return json.load(response)


def _alive_health(port: int) -> dict | None:
    health = _health(port)
    return health if health["workers_alive"] == 1 else None


def test_three_processes_upgrading_one_fresh_database_at_once_apply_each_migration_once(fresh_database_url):
    env = {**os.environ, "NRLLM_DATABASE_URL": fresh_database_url}
    procs = [_cli("db", "upgrade", env=env) for _ in range(3)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    latest = MIGRATIONS[-1][0]
    assert all(f"schema at version {latest}" in out for out, _ in outputs)
    assert sum("applied" in out for out, _ in outputs) == 1, "more than one process applied migrations"
    bound = store_db.bind(fresh_database_url)
    try:
        counts = (SchemaMigration.select(SchemaMigration.version, fn.COUNT(SchemaMigration.version))
                  .group_by(SchemaMigration.version).tuples())
        assert sorted(counts) == [(version, 1) for version, _, _ in MIGRATIONS]
    finally:
        bound.close()
        if hasattr(bound, "close_all"):
            bound.close_all()


def test_serve_migrates_answers_health_and_stops_on_sigterm(tmp_path):
    served = start_serve(f"sqlite:///{tmp_path / 'serve.db'}", tmp_path / "serve.log")
    try:
        # The embedded worker writes its heartbeat row right after start.
        health = wait_until(lambda: _alive_health(served.port), timeout=60, what="the embedded worker's heartbeat")
        assert health["database"] == "ok" and health["status"] == "ok"
        assert health["oldest_queued_seconds"] == 0
    finally:
        assert served.stop(30) == 0, served.log()[-3000:]


def test_serve_hands_back_a_run_its_worker_still_holds_after_the_grace_and_exits(sqlite_url, tmp_path):
    tool_log = tmp_path / "tool.log"
    run_id = runs.create_run("be_user:7", "work", spec={"provider": "scripted", "script": [
        {"tool_calls": [{"id": "call_1", "name": "tick", "arguments": {"seconds": 60}}]}, {"content": "never"}]})
    served = start_serve(sqlite_url, tmp_path / "serve.log", "--grace", "0.5",
                         "--executor", "tests.support.engine:TickingAgentLoop",
                         env={"NRLLM_TEST_CALL_LOG": str(tool_log)})
    try:
        wait_until(lambda: "start" in tool_log.read_text() if tool_log.exists() else False, timeout=60,
                   what="the embedded worker to start the tool")
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(30) == 0, "serve waited for the tool instead of handing its run back"
    finally:
        served.stop()
    row = Run.get_by_id(run_id)
    assert (row.status, row.lease_holder, row.requeue_count) == ("queued", None, 0)
    assert [e["kind"] for e in events.list_events(run_id)][-3:] == ["handed_back", "status", "requeued"]
    assert not any(line.startswith("end") for line in tool_log.read_text().splitlines())


def test_serve_without_worker_reports_degraded_health(tmp_path):
    served = start_serve(f"sqlite:///{tmp_path / 'serve.db'}", tmp_path / "serve.log", "--no-worker")
    try:
        health = _health(served.port)
        assert (health["status"], health["workers_alive"]) == ("degraded", 0)
    finally:
        assert served.stop(30) == 0, served.log()[-3000:]


def test_commands_refuse_a_database_migrated_by_a_newer_sidecar(tmp_path):
    url = f"sqlite:///{tmp_path / 'newer.db'}"
    env = {**os.environ, "NRLLM_DATABASE_URL": url}
    assert _cli("db", "upgrade", env=env).wait(60) == 0
    bound = store_db.bind(url)
    SchemaMigration.create(version=MIGRATIONS[-1][0] + 1, name="from the future", applied_at=utcnow())
    bound.close()
    proc = _cli("runs", "list", env=env)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "newer than this sidecar knows" in err and "Traceback" not in err


def _command_paths(group, prefix=()):
    yield prefix
    for name, command in getattr(group, "commands", {}).items():
        yield from _command_paths(command, (*prefix, name))


def test_dash_h_is_help_on_every_command():
    from click.testing import CliRunner

    from sidecar.cli import main

    paths = list(_command_paths(main))
    assert ("grants", "show") in paths and ("runs", "list") in paths  # the walk reaches nested commands
    for path in paths:
        result = CliRunner().invoke(main, [*path, "-h"])
        assert result.exit_code == 0, (path, result.output)
        long_form = CliRunner().invoke(main, [*path, "--help"]).output
        assert result.output.startswith("Usage:") and result.output == long_form


def test_worker_defaults_follow_the_database():
    from sidecar.cli.processes import sized

    cores = os.cpu_count() or 1
    # SQLite: a process per core (at most 4: one writer at a time), each with the 8 threads every database gets.
    assert sized("sqlite", None, None) == (8, min(cores, 4))
    # A server database: each thread holds a pooled connection, and more workers are started where it allows.
    assert sized("postgresql", None, None) == (8, 1) and sized("mysql", None, None) == (8, 1)
    assert sized("sqlite", 3, 2) == (3, 2) and sized("postgresql", 5, 3) == (5, 3)  # what was given is kept
