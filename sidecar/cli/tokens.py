"""`nrllm-sidecar token ...`: API tokens. Standard output carries only the token or the listing; notes go to
standard error."""

import click

from ..bootstrap import from_env as _bind
from ..domain.clock import rfc3339
from ..domain.errors import NameTaken, NotFound
from ..store import tokens


@click.group("token")
def token_group() -> None:
    """API tokens (only a hash is stored; the token is shown once)."""


@token_group.command("create")
@click.option("--name", required=True, help="A unique name, to list and revoke it by.")
@click.option("--role", required=True, type=click.Choice(tokens.ROLES), help="host or operator.")
def token_create(name: str, role: str) -> None:
    """Create a token and print it, alone, on standard output."""
    _bind()
    try:
        plaintext, info = tokens.create(name, role)
    except (ValueError, NameTaken) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"created {info.role} token {info.name!r}; it is shown only now", err=True)
    click.echo(plaintext)


@token_group.command("list")
def token_list() -> None:
    """Tokens: name, role, created, revoked (tab-separated)."""
    _bind()
    for info in tokens.list_tokens():
        click.echo("\t".join([info.name, info.role, rfc3339(info.created_at), rfc3339(info.revoked_at) or "-"]))


@token_group.command("revoke")
@click.argument("name")
def token_revoke(name: str) -> None:
    """Revoke a token by name: it stops working at once."""
    _bind()
    try:
        revoked = tokens.revoke(name)
    except NotFound as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"revoked {name!r}" if revoked else f"{name!r} was already revoked", err=True)
