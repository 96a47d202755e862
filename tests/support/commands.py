"""The command line in this process (click's runner)."""

from click.testing import CliRunner

from sidecar.application import current, set_default
from sidecar.store import db as store_db


def cli_in_process(database_url: str, *args: str, env: dict | None = None):
    """Invoke the command line in this process, then give the test back its own application (the command
    starts one, or binds the store to the URL again)."""
    from sidecar.cli import main

    test_application = current()
    bound = test_application.database
    result = CliRunner().invoke(main, list(args), env={"NRLLM_DATABASE_URL": database_url, **(env or {})})
    command_database = store_db.database.obj  # of the application the command started, or the test's rebound
    if command_database is not bound:
        command_database.close_all() if hasattr(command_database, "close_all") else command_database.close()
    test_application.database = bound
    set_default(test_application)
    return result
