"""`nrllm-sidecar grants ...`: what an actor may decide besides their own runs, per workspace (as
PUT/GET /api/v1/actors/{actor}/grants). Standard output carries the tab-separated listing only."""

import click

from ..bootstrap import from_env as _bind
from ..store import grants


@click.group("grants")
def grants_group() -> None:
    """Grants: agent:approve and agent:input per actor and workspace (an owner needs none for their own runs)."""


def _print(by_workspace: dict[str, list[str]]) -> None:
    for workspace, held in sorted(by_workspace.items()):
        for grant in held:
            click.echo(f"{workspace}\t{grant}")


@grants_group.command("show")
@click.argument("actor")
@click.option("--workspace", default="0", show_default=True, help="The workspace, as GET .../grants.")
@click.option("--all-workspaces", is_flag=True, help="Every workspace the actor holds grants in.")
def grants_show(actor: str, workspace: str, all_workspaces: bool) -> None:
    """The actor's grants in one workspace (default 0, as the API), or in all: workspace, grant (tab-separated)."""
    _bind()
    _print(grants.by_workspace(actor) if all_workspaces else {workspace: grants.of(actor, workspace)})


@grants_group.command("set")
@click.argument("actor")
@click.argument("granted", metavar="[GRANT]...", nargs=-1, type=click.Choice(grants.GRANTS))
@click.option("--workspace", default="0", show_default=True, help="The workspace the grants hold in.")
def grants_set(actor: str, granted: tuple[str, ...], workspace: str) -> None:
    """Replace the actor's grants in the workspace with GRANT... (none: take them all away)."""
    _bind()
    if not 1 <= len(actor) <= 255 or not 1 <= len(workspace) <= 64:
        raise click.ClickException("an actor has 1 to 255 characters and a workspace 1 to 64")
    saved = grants.replace(actor, workspace, list(granted))
    click.echo(f"{actor} in workspace {workspace}: {', '.join(saved) or 'no grants'}", err=True)
    _print({workspace: saved})
