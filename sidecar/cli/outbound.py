"""`nrllm-sidecar outbound ...`: the outbound journal, for operators (as GET /api/v1/outbound and
POST /api/v1/outbound/{id}/resend)."""

import click

from ..bootstrap import from_env as _bind
from ..domain.clock import rfc3339
from ..domain.errors import NotFound
from ..domain.vocabulary import OutboundKind, OutboundOutcome


@click.group("outbound")
def outbound_group() -> None:
    """The outbound journal: every request that creates or cancels a remote task."""


@outbound_group.command("list")
@click.option("--outcome", type=click.Choice([o.value for o in OutboundOutcome]))
@click.option("--run", "run_id", help="Only rows of this run.")
@click.option("--kind", type=click.Choice([k.value for k in OutboundKind]))
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000))
def outbound_list(outcome, run_id, kind, limit) -> None:
    """Rows, newest first: id, kind, outcome, run, remote agent, remote task, created (tab-separated)."""
    from ..store import outbound_listing

    _bind()
    for row in outbound_listing.list_outbound(outcome=outcome, run_id=run_id, kind=kind, limit=limit):
        click.echo("\t".join([row.id, row.kind, row.outcome, row.run_id, row.remote_agent,
                              row.remote_task_id or "-", rfc3339(row.created_at)]))


@outbound_group.command("resend")
@click.argument("outbound_id")
def outbound_resend(outbound_id: str) -> None:
    """Resend a send whose outcome is unknown (after reconciliation found nothing); prints the new row's id.

    Exits 1 when the row cannot be resent: not a send row that is outcome_unknown, or its run no longer
    waits on it (reconciliation may just have found its task).
    """
    from ..delegation import resend

    settings = _bind()
    try:
        row = resend.resend(outbound_id, settings, by="operator:cli")
    except (NotFound, resend.NotResendable) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"resent {outbound_id} as {row.id} ({row.outcome})", err=True)
    click.echo(row.id)
