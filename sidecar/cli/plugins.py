"""`nrllm-sidecar plugins` and `compat`: what is loaded, and whether the hosts' consumers can read it."""

import sys

import click

from ..bootstrap import from_env as _bind


def _plugin_source(row: dict) -> str:
    """Where a plugin comes from, worded so that no version is taken for another program's: the core and the
    bundled plugins carry the sidecar's version, a third-party plugin its own distribution's."""
    from .. import __version__

    if row["default"]:
        return f"core (sidecar {__version__})"
    if row["distribution"] is None:
        return "plugin (no installed distribution)"
    if row["distribution"] == "nrllm-sidecar":
        return f"bundled with sidecar {row['version']}"
    return f"plugin package {row['distribution']} {row['version']}"


@click.command()
def plugins() -> None:
    """List the loaded plugins: name, where each comes from, its hooks, the consumers it declares."""
    from ..plugins import describe

    _bind()
    for row in describe():
        columns = [row["name"], _plugin_source(row), ", ".join(row["hooks"])]
        if row["consumers"]:
            columns.append(f"declares consumers {', '.join(row['consumers'])} (versions: the host's report, "
                           "see `nrllm-sidecar compat`)")
        click.echo("\t".join(columns))


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (as GET /api/v1/compat).")
def compat(as_json: bool) -> None:
    """Show the compatibility gate; exit 1 while delegation is not offered."""
    import json

    from nrllm_sidecar_compat.service import compat_report as gate_report

    from ..domain.clock import rfc3339

    _bind()
    report = gate_report()
    report["reported_at"] = rfc3339(report["reported_at"])
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        delegation = report["delegation"]
        click.echo(f"consumer report: {report['reported_at'] or 'none yet'}")
        for status, state in report["statuses"].items():
            blockers = ", ".join(f"{b['consumer']} {b['version']}" for b in state["blocked_by"])
            click.echo(f"{status}: {'writable' if state['writable'] else 'not writable'}"
                       + (f" (blocked by {blockers})" if blockers else ""))
        click.echo(f"delegation: {'offered' if delegation['offered'] else 'not offered'}"
                   + (f": {delegation['reason']}" if delegation["reason"] else ""))
        if delegation["blocked_origins"]:
            click.echo(f"not offered for origins: {', '.join(delegation['blocked_origins'])}")
        click.echo(f"runs in a status a loaded consumer cannot read: {report['runs_in_unreadable_status']}")
    sys.exit(0 if report["delegation"]["offered"] else 1)
