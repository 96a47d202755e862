"""`token create|list|revoke` and `runs list|show|cancel`, on each database (`serve --demo`: test_demo.py)."""

import hashlib
import json
import os
import re
import subprocess
import sys

from sidecar.store import runs
from sidecar.store.models import ApiToken
from tests.support import ROOT
from tests.support.api import ACTOR, as_host
from tests.support.commands import cli_in_process
from tests.support.runs import run_row

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
