"""`nrllm-sidecar keys ...`: the sealing keys."""

import click

from ..bootstrap import from_env as _bind


@click.group("keys")
def keys_group() -> None:
    """Sealing keys (NRLLM_SECRET_KEYS, newest first)."""


@keys_group.command("rotate")
def keys_rotate() -> None:
    """Re-seal waiting checkpoints and remote agents' auth values under the newest key.

    Idempotent. Exits 1 when a value could not be re-sealed (its key is not configured, or it was
    tampered with): it is named and left alone, and the older keys must not be removed yet.
    """
    from ..store import rotation

    _bind()
    report = rotation.rotate()
    for what, counts in (("checkpoints", report.checkpoints), ("remote agent auth values", report.agent_secrets)):
        click.echo(f"{what}: {counts.resealed} re-sealed, {counts.current} already under the newest key, "
                   f"{counts.gone} resolved or removed meanwhile")
    for line in report.left_alone:
        click.echo(f"not re-sealed: {line}", err=True)
    if not report.complete:
        raise click.ClickException(f"{len(report.left_alone)} sealed value(s) are not under the newest key "
                                   f"{report.newest}; keep the older keys configured")
    click.echo(f"every sealed value is under the newest key {report.newest}; older keys may be removed", err=True)
