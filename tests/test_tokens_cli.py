"""`token create|list|revoke`, `runs list|show|cancel` and `serve --demo`, on each database."""

import hashlib
import json
import os
import re
import subprocess
import sys
import urllib.request

from sidecar.store import runs
from sidecar.store.models import ApiToken
from tests.api_helpers import ACTOR, as_host
from tests.helpers import ROOT, cli_in_process, run_row, stop_process, wait_until

pytest_plugins = ["tests.api_support"]


_cli = cli_in_process


def test_token_create_prints_the_token_alone_on_stdout_and_stores_only_its_hash(database_url):
    env = {**os.environ, "NRLLM_DATABASE_URL": database_url}
    proc = subprocess.run([sys.executable, "-m", "sidecar.cli", "token", "create", "--name", "typo3", "--role",
                           "host"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    token = proc.stdout.rstrip("\n")
    assert "\n" not in token and re.fullmatch(r"nrllm_[A-Za-z0-9_-]{40,}", token)
    assert "typo3" in proc.stderr
    row = ApiToken.get(ApiToken.name == "typo3")
    assert row.role == "host" and row.token_sha256 == hashlib.sha256(token.encode()).hexdigest()
    assert token not in json.dumps(list(ApiToken.select().dicts()), default=str)


def test_token_create_refuses_a_taken_name_and_an_unknown_role(database_url):
    assert _cli(database_url, "token", "create", "--name", "a", "--role", "operator").exit_code == 0
    taken = _cli(database_url, "token", "create", "--name", "a", "--role", "host")
    assert taken.exit_code == 1 and taken.stdout == "" and "already exists" in taken.stderr
    bad_role = _cli(database_url, "token", "create", "--name", "b", "--role", "admin")
    assert bad_role.exit_code == 2 and ApiToken.select().count() == 1


def test_token_list_and_revoke_and_the_api_refuses_a_revoked_token(database_url, client):
    token = _cli(database_url, "token", "create", "--name", "h", "--role", "host").stdout.strip()
    assert client.get("/api/v1/runs", headers=as_host(token)).status_code == 200
    listed = _cli(database_url, "token", "list").stdout.splitlines()
    assert len(listed) == 1 and listed[0].split("\t")[:2] == ["h", "host"] and listed[0].endswith("\t-")
    assert _cli(database_url, "token", "revoke", "h").exit_code == 0
    refused = client.get("/api/v1/runs", headers=as_host(token))
    assert (refused.status_code, refused.json["code"]) == (401, "unauthenticated")
    assert not _cli(database_url, "token", "list").stdout.strip().endswith("\t-")
    again = _cli(database_url, "token", "revoke", "h")
    assert again.exit_code == 0 and "already revoked" in again.stderr
    assert _cli(database_url, "token", "revoke", "nobody").exit_code == 1


def test_runs_list_show_and_cancel(database_url):
    first = runs.create_run(ACTOR, "one", origin="typo3:test")
    second = runs.create_run("be_user:9", "two")
    listed = _cli(database_url, "runs", "list").stdout.splitlines()
    assert [line.split("\t")[:3] for line in listed] == [[second, "queued", "be_user:9"], [first, "queued", ACTOR]]
    assert _cli(database_url, "runs", "list", "--owner", ACTOR).stdout.split("\t")[0] == first
    shown = json.loads(_cli(database_url, "runs", "show", first).stdout)
    assert (shown["id"], shown["origin"], shown["status"]) == (first, "typo3:test", "queued")
    assert _cli(database_url, "runs", "show", "no-such-run").exit_code == 1
    cancelled = _cli(database_url, "runs", "cancel", first)
    assert cancelled.exit_code == 0 and run_row(first).status == "cancelled"
    terminal = _cli(database_url, "runs", "cancel", first)
    assert terminal.exit_code == 1 and "already cancelled" in terminal.stderr


def test_serve_demo_prints_a_token_a_run_and_commands_that_work(database_url):
    env = {**os.environ, "NRLLM_DATABASE_URL": database_url, "NRLLM_LEASE_SECONDS": "5"}
    proc = subprocess.Popen([sys.executable, "-m", "sidecar.cli", "serve", "--demo", "--port", "0",
                             "--poll-interval", "0.1"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        printed = []
        for line in proc.stdout:
            printed.append(line)
            if line.startswith("API documentation"):
                break
        text = "".join(printed)
        token = re.search(r"export NRLLM_TOKEN=(\S+)", text).group(1)
        run_id = re.search(r"demo run: (\S+)", text).group(1)
        url = re.search(r"curl -s .* (http://\S+/runs/" + run_id + ")\n", text).group(1)
        assert "text/event-stream" in text and "demo-host" in text

        def fetch():
            request = urllib.request.Request(url, headers=as_host(token, actor="be_user:1"))
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.load(response)

        assert fetch()["id"] == run_id
        wait_until(lambda: fetch()["status"] == "completed", what="the demo run to complete")
    finally:
        assert stop_process(proc) == 0, "serve stops cleanly on SIGTERM"
