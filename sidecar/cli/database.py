"""`nrllm-sidecar db ...`: the database schema."""

import click

from ..config import Settings
from ..store import db, migrations


@click.group("db")
def db_group() -> None:
    """The database schema."""


@db_group.command("upgrade")
def db_upgrade() -> None:
    """Apply pending migrations (idempotent; safe to run from several processes at once)."""
    db.bind(Settings.from_env().database_url)  # no plugins needed: a broken one must not block migrating
    applied = migrations.upgrade()
    click.echo(f"schema at version {migrations.current_version()}" + (f" (applied {applied})" if applied else ""))
