"""`nrllm-sidecar token ...` and `nrllm-sidecar runs ...`: thin wrappers over the store.

Standard output carries only what a script would capture (the token, the listing, the run); notes go
to standard error.
"""

import json

import click

from .bootstrap import from_env as _bind
from .domain.clock import rfc3339, utcnow
from .domain.errors import InvalidState, NotFound
from .domain.retention import parse_cutoff
from .domain.vocabulary import RunStatus
from .store import retention, runs, tokens


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
    except (ValueError, tokens.NameTaken) as exc:
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


@click.group("runs")
def runs_group() -> None:
    """Inspect and cancel runs (as an operator would: all runs)."""


@runs_group.command("list")
@click.option("--status", type=click.Choice([s.value for s in RunStatus]))
@click.option("--owner")
@click.option("--origin")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
def runs_list(status, owner, origin, limit) -> None:
    """Runs, newest first: id, status, owner, origin, created (tab-separated)."""
    _bind()
    rows, _ = runs.list_runs(status=status, owner=owner, origin=origin, limit=limit)
    for run in rows:
        click.echo("\t".join([run.id, run.status, run.owner, run.origin or "-", rfc3339(run.created_at)]))


@runs_group.command("show")
@click.argument("run_id")
def runs_show(run_id: str) -> None:
    """A run as the API shows it (JSON)."""
    from .api.documents import run_document

    _bind()
    run = runs.get_run(run_id)
    if run is None:
        raise click.ClickException(f"no run {run_id}")
    click.echo(json.dumps(run_document(run), indent=2))


@runs_group.command("cancel")
@click.argument("run_id")
def runs_cancel(run_id: str) -> None:
    """Cancel a run: queued or waiting at once, running at its next step boundary."""
    _bind()
    try:
        outcome = runs.request_cancel(run_id, by="operator:cli")
    except (NotFound, InvalidState) as exc:
        raise click.ClickException(str(exc)) from None
    messages = {
        "cancelled": "cancelled",
        "requested": "cancel requested; it stops at its next step boundary",
        "already_requested": "cancel was already requested",
    }
    click.echo(f"{run_id}\t{messages[outcome]}")


@runs_group.command("purge")
@click.option("--finished-before", "finished_before", required=True, metavar="AGE|DATE",
              help="A duration (30d, 12h, 90m: finished longer ago than that) or an ISO date or date-time (UTC).")
@click.option("--dry-run", is_flag=True, help="Count what would go; delete nothing.")
@click.option("--batch", default=retention.DEFAULT_BATCH, show_default=True, type=click.IntRange(min=1),
              help="Runs deleted per transaction.")
def runs_purge(finished_before: str, dry_run: bool, batch: int) -> None:
    """Delete finished runs (completed, failed, cancelled) with their events, turns, tool results, pauses,
    decisions, waits and journal rows. A run whose journal still has a pending or unknown outcome is kept."""
    try:
        cutoff = parse_cutoff(finished_before, utcnow())
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--finished-before") from None
    _bind()
    report = retention.purge(cutoff, batch=batch, dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    click.echo(f"runs finished before {rfc3339(cutoff)}: {verb} {report.runs}, "
               f"skipped {report.skipped} (journal rows still pending)", err=True)
    for table, count in report.deleted.items():
        click.echo(f"{table}\t{count}")
    click.echo(f"skipped_runs\t{report.skipped}")


@click.group("keys")
def keys_group() -> None:
    """Sealing keys (NRLLM_SECRET_KEYS, newest first)."""


@keys_group.command("rotate")
def keys_rotate() -> None:
    """Re-seal waiting checkpoints and remote agents' auth values under the newest key.

    Idempotent. Exits 1 when a value could not be re-sealed (its key is not configured, or it was
    tampered with): it is named and left alone, and the older keys must not be removed yet.
    """
    from .store import rotation

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
