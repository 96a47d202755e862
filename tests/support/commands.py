"""The command line in this process (click's runner)."""

from click.testing import CliRunner

from sidecar.store import db as store_db


def cli_in_process(database_url: str, *args: str, env: dict | None = None):
    """Invoke the command line in this process, then give the test back its own database binding (the
    command binds the store to the URL again)."""
    from sidecar.cli import main

    bound = store_db.database.obj
    result = CliRunner().invoke(main, list(args), env={"NRLLM_DATABASE_URL": database_url, **(env or {})})
    if store_db.database.obj is not bound:
        store_db.database.obj.close_all() if hasattr(store_db.database.obj, "close_all") else \
            store_db.database.obj.close()
        store_db.database.initialize(bound)
    return result
