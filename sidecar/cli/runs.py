"""`nrllm-sidecar runs ...`: thin wrappers over the store.

Standard output carries only what a script would capture (the listing, the run); notes go to standard error.
"""

import json

import click

from ..bootstrap import from_env as _bind
from ..domain.clock import rfc3339, utcnow
from ..domain.errors import InvalidState, NotFound
from ..domain.retention import parse_cutoff
from ..domain.vocabulary import RunStatus
from ..store import retention, runs


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
    from ..api.documents import run_document

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
