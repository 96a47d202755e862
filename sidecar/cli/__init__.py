"""The command line, `nrllm-sidecar`: thin wrappers that parse, call the store or a service, print.

One module per command family; this one holds the top group and the console script.
"""

import os
import sys

import click

from .. import __version__, logs
from ..bootstrap import SchemaNotCurrent
from ..keys import SecretKeysError
from ..plugins import PluginLoadError
from . import database, grants, keys, outbound, plugins, processes, runs, tokens


# -h everywhere: the context settings of the top group are inherited by every command under it.
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nrllm-sidecar")
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
def main(verbose: bool) -> None:
    """nr-llm sidecar: agent runs that can wait for people and remote agents."""
    logs.configure(verbose=verbose, log_format=os.environ.get("NRLLM_LOG_FORMAT") or "text")


for _command in (database.db_group, processes.worker, processes.reap, processes.serve, tokens.token_group,
                runs.runs_group, keys.keys_group, outbound.outbound_group, grants.grants_group, plugins.plugins,
                plugins.compat):
    main.add_command(_command)


def run() -> None:
    """The console script: a plugin that fails to load ends the command with its name, not a traceback."""
    try:
        main()
    except (PluginLoadError, SchemaNotCurrent, SecretKeysError) as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
