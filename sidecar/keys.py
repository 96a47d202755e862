"""The sealing keys of the application, set up once at start-up (bootstrap) and read through `sealer()`.

Keys come from NRLLM_SECRET_KEYS, newest first. They are required on PostgreSQL and MariaDB, where
several processes on several machines must open each other's checkpoints. On SQLite (one machine) a
development key is generated once into the instance folder and reused, so `serve` works with no setup.
"""

import os
from pathlib import Path
from urllib.parse import urlparse

from .application import current
from .config import Settings
from .domain.errors import SecretKeysError
from .domain.sealing import Sealer, check_key, generate_key

DEV_KEY_FILE = "secret-key.dev"


def _is_sqlite(database_url: str) -> bool:
    return urlparse(database_url).scheme == "sqlite"


def _is_in_memory(database_url: str) -> bool:
    return urlparse(database_url).path in ("", "/", "/:memory:")


def validate(keys: tuple[str, ...]) -> None:
    """SecretKeysError naming the position of the first bad key; the key itself is never shown."""
    for position, key in enumerate(keys, start=1):
        try:
            check_key(key)
        except ValueError as exc:
            raise SecretKeysError(
                f"NRLLM_SECRET_KEYS: key {position} of {len(keys)} is {exc}; create one with "
                "`python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'`"
            ) from None


def development_key(instance_path: Path) -> str:
    """The instance folder's development key, created on first use (mode 0600).

    Two processes starting at once (serve and a worker) must end up with the same key: the key is written
    to a private temporary file and linked into place, which fails if the other process got there first;
    then both read the one that won.
    """
    path = instance_path / DEV_KEY_FILE
    if not path.exists():
        instance_path.mkdir(mode=0o700, parents=True, exist_ok=True)  # the keys and the database: private
        temporary = instance_path / f".{DEV_KEY_FILE}.{os.getpid()}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, (generate_key() + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
        finally:
            temporary.unlink()
    key = path.read_text(encoding="ascii").strip()
    try:
        check_key(key)
    except ValueError as exc:
        raise SecretKeysError(f"{path} is {exc}; remove it to have a new one generated") from None
    return key


def keys_for(settings: Settings) -> tuple[str, ...]:
    """The keys this configuration seals with, newest first; SecretKeysError if there are none or a bad one."""
    if settings.secret_keys:
        validate(settings.secret_keys)
        return settings.secret_keys
    if not _is_sqlite(settings.database_url):
        raise SecretKeysError(
            "NRLLM_SECRET_KEYS is required with PostgreSQL and MariaDB/MySQL: set it to one or more "
            "comma-separated Fernet keys, newest first, the same in every sidecar process"
        )
    if _is_in_memory(settings.database_url):
        # The data dies with the process, so a key of the process's own is as durable as what it seals.
        return (generate_key(),)
    return (development_key(settings.instance_path),)


def configure(settings: Settings) -> Sealer:
    """Set up the application's sealer from the settings (called by bootstrap; calling it again replaces it)."""
    sealer = current().sealer = Sealer(keys_for(settings))
    return sealer


def sealer() -> Sealer:
    """The application's sealer; SecretKeysError before start-up configured one."""
    found = current().sealer
    if found is None:
        raise SecretKeysError("no sealing keys are configured in this application (bootstrap.start was not called)")
    return found
