"""What every process does before it serves, works or answers a command: build its application
(sidecar/application.py): bind the database, check (or bring) its schema up to date, load the plugins (a
broken one stops start-up here, named), install the compatibility gate in the store and the status
notification hook. Each call builds a new application, so tests and app factories may call it again."""

from nrllm_sidecar_compat.service import declarations, install_store_guard

from . import keys, metrics, plugins
from .application import Application, current, set_default
from .config import Settings
from .domain.errors import SchemaNotCurrent
from .store import db, events, migrations


def start(settings: Settings, *, bind_database: bool = True, migrate: bool = False,
          wait_for_database: bool = False, plugin_manager=None) -> Application:
    """Build the application for `settings`, make it the process's default (sidecar/application.py) and
    return it.

    bind_database=False: the application works on the database this process bound already (db.bind).
    plugin_manager: the one to use instead of the installed plugins' (`python -m sidecar.surface`). Without
    one, a manager that code built before any start-up in this thread (`plugins.plugin_manager()`, to
    register a plugin of its own before handing over to the command line) is kept, with what it registered.
    wait_for_database: a process that lives long (serve, worker) started during a database outage waits
    for the database; a one-shot command fails at once with the error."""
    before = current()
    if plugin_manager is None and before.settings is None:  # no start-up came before: an embedding program's
        plugin_manager = before.plugin_manager
    app = Application(settings, database=None if bind_database else before.database, plugin_manager=plugin_manager)
    app.run(_set_up, app, settings, bind_database=bind_database, migrate=migrate,
            wait_for_database=wait_for_database)
    set_default(app)  # last: an application whose start-up failed is never one a thread falls back to
    return app


def _set_up(app: Application, settings: Settings, *, bind_database: bool, migrate: bool,
            wait_for_database: bool) -> None:
    keys.configure(settings)  # first: a configuration error stops start-up before anything is touched
    if bind_database:
        db.bind(settings.database_url)
    if wait_for_database:
        db.retry_while_unavailable(lambda: _check_schema(migrate), "start-up")
    else:
        _check_schema(migrate)
    pm = plugins.plugin_manager()
    context = plugins.configure(settings)
    declarations()  # a consumer declaration the gate cannot read stops start-up here, naming its plugin
    install_store_guard()
    events.listen("status", lambda run_id, change: plugins.notify_each(
        pm.hook.nrllm_run_status_changed, run_id=run_id, old_status=change.get("from"), new_status=change["to"],
        context=context))
    events.listen("outbound", _count_outbound_outcome)


def _check_schema(migrate: bool) -> None:
    if migrate:
        migrations.upgrade()
    elif (version := migrations.current_version()) < migrations.latest_version():
        raise SchemaNotCurrent(
            f"the database schema is at version {version}, this sidecar needs {migrations.latest_version()}: "
            "run `nrllm-sidecar db upgrade` first"
        )
    if (version := migrations.current_version()) > migrations.latest_version():
        # A newer sidecar migrated this database; this one may not understand what it finds there.
        raise SchemaNotCurrent(
            f"the database schema is at version {version}, newer than this sidecar knows "
            f"({migrations.latest_version()}): run the newer sidecar, there are no down migrations"
        )


def _count_outbound_outcome(run_id: str, row: dict) -> None:
    metrics.OUTBOUND_OUTCOMES.labels(row["kind"], row["outcome"]).inc()


def from_env(*, migrate: bool = False, wait_for_database: bool = False) -> Settings:
    """Settings from the environment, then start(): what every command does first."""
    settings = Settings.from_env()
    start(settings, migrate=migrate, wait_for_database=wait_for_database)
    return settings
