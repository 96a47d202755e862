"""Sealing keys at start-up: from NRLLM_SECRET_KEYS, validated without being shown; required on PostgreSQL
and MariaDB; on SQLite a development key generated once into the instance folder."""

import os
import stat
import subprocess
import sys

import pytest

from sidecar import keys
from sidecar.app import create_app
from sidecar.application import Application, current
from sidecar.config import Settings
from sidecar.domain.sealing import fingerprint, generate_key
from tests.support import ROOT

SERVER_URLS = ["postgresql://nobody@127.0.0.1:1/none", "mysql://nobody@127.0.0.1:1/none"]


def _settings(tmp_path, url, *secret_keys):
    return Settings(instance_path=tmp_path / "instance", database_url=url, secret_keys=tuple(secret_keys))


@pytest.mark.parametrize("url", SERVER_URLS)
def test_keys_are_required_on_server_databases(tmp_path, url):
    with pytest.raises(keys.SecretKeysError, match="NRLLM_SECRET_KEYS is required"):
        keys.keys_for(_settings(tmp_path, url))
    # Before anything else: the app factory stops without touching the (here unreachable) database.
    with pytest.raises(keys.SecretKeysError):
        create_app(_settings(tmp_path, url), bind_database=False)
    assert not (tmp_path / "instance").exists()


def test_configured_keys_are_used_newest_first(tmp_path):
    new, old = generate_key(), generate_key()

    def configure_and_read():
        sealer = keys.configure(_settings(tmp_path, SERVER_URLS[0], new, old))
        assert keys.sealer() is sealer
        return sealer

    application = Application()  # one of its own: the process's default keeps its sealer
    sealer = application.run(configure_and_read)
    assert application.sealer is sealer and current() is not application
    assert sealer.fingerprints == (fingerprint(new), fingerprint(old))


def test_a_bad_key_is_named_by_its_position_and_never_shown(tmp_path):
    secretish = "my-passphrase-that-is-no-fernet-key"
    with pytest.raises(keys.SecretKeysError) as raised:
        keys.keys_for(_settings(tmp_path, SERVER_URLS[0], generate_key(), secretish, generate_key()))
    message = str(raised.value)
    assert "key 2 of 3" in message and "Fernet" in message
    assert secretish not in message


def test_sqlite_gets_a_development_key_once_private_and_reused(tmp_path):
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    first = keys.keys_for(_settings(tmp_path, url))
    path = tmp_path / "instance" / keys.DEV_KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert keys.keys_for(_settings(tmp_path, url)) == first
    assert [p.name for p in path.parent.iterdir()] == [keys.DEV_KEY_FILE]  # no temporary file left
    # Configured keys win over the development key.
    configured = generate_key()
    assert keys.keys_for(_settings(tmp_path, url, configured)) == (configured,)


def test_a_damaged_development_key_stops_start_up_with_the_file_named(tmp_path):
    path = tmp_path / "instance" / keys.DEV_KEY_FILE
    path.parent.mkdir()
    path.write_text("garbage")
    with pytest.raises(keys.SecretKeysError, match=keys.DEV_KEY_FILE):
        keys.keys_for(_settings(tmp_path, f"sqlite:///{tmp_path / 'db.sqlite'}"))


def test_an_in_memory_database_gets_a_key_of_its_own_and_writes_no_file(tmp_path):
    assert len(keys.keys_for(_settings(tmp_path, "sqlite://"))) == 1
    assert not (tmp_path / "instance").exists()


def _command(env_keys: str | None, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NRLLM_SECRET_KEYS"}
    env["NRLLM_DATABASE_URL"] = SERVER_URLS[0]
    if env_keys is not None:
        env["NRLLM_SECRET_KEYS"] = env_keys
    return subprocess.run([sys.executable, "-m", "sidecar.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_command_line_says_what_is_wrong_without_a_traceback():
    missing = _command(None, "runs", "list")
    assert missing.returncode == 1
    assert missing.stderr.startswith("Error: NRLLM_SECRET_KEYS is required") and "Traceback" not in missing.stderr

    secretish = "hunter2-hunter2-hunter2"
    bad = _command(f"{generate_key()}, {secretish}", "runs", "list")
    assert bad.returncode == 1 and "key 2 of 2" in bad.stderr
    assert secretish not in bad.stderr + bad.stdout and "Traceback" not in bad.stderr
