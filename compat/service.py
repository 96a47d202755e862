"""The gate as the rest of the sidecar sees it: declarations from the plugins, the report from the store."""

from sidecar.application import current
from sidecar.consumers import core_consumer_versions
from sidecar.plugins import PluginLoadError, plugin_context, plugin_manager, results_by_plugin
from sidecar.store import consumers as consumer_store
from sidecar.store import runs, status_guard

from .gate import Declaration, Gate, ReportedConsumer


def declarations() -> dict[str, Declaration]:
    """Every consumer declared through the consumer hook, by name (a later plugin's declaration wins)."""
    found = {}
    for plugin_name, entries in results_by_plugin(plugin_manager().hook.nrllm_consumers, context=plugin_context()):
        for entry in entries or []:
            try:
                found[entry["name"]] = Declaration.build(
                    entry["name"], entry["understands"], entry.get("origins", ()), declared_by=plugin_name,
                    upgrade_note=entry.get("upgrade_note"),
                )
            except (KeyError, TypeError, AttributeError, ValueError) as exc:
                # Checked at start-up (bootstrap), so a bad declaration never surfaces later as a 500.
                raise PluginLoadError(f"plugin {plugin_name!r} declares a consumer the gate cannot read: "
                                      f"{exc!r} in {entry!r}") from exc
    return found


def _plugins_loaded() -> tuple:
    """What the declarations depend on: the plugin manager and the plugins registered with it now."""
    pm = plugin_manager()
    return id(pm), frozenset(map(id, pm.get_plugins()))


def current_gate() -> Gate:
    """The gate as of now. Built again only when the report changed (every change of the report moves its
    time, in the transaction that changes its rows, so the time read in a transaction names the rows it sees)
    or the plugins did; otherwise the gate built last, which the application keeps with what it was built from
    (Application.gate_built). A segment asks the gate at least twice (the offer of delegation tools, the guard
    of the suspension), and building it reads the report's rows and every plugin's declarations; reading the
    report's time is one small indexed read."""
    app = current()
    key = (_plugins_loaded(), consumer_store.reported_time())
    built = app.gate_built
    if built is not None and built[0] == key:
        return built[1]
    reported_at, rows = consumer_store.load_report()
    report = None
    if reported_at is not None:
        report = [
            ReportedConsumer(r["name"], r["version"], None if r["understands"] is None else frozenset(r["understands"]))
            for r in rows
        ]
        # The sidecar's own consumers are always loaded, in its own version: a host report naming one of
        # them does not replace it.
        core = core_consumer_versions()
        report = [r for r in report if r.name not in core] + [ReportedConsumer(n, v) for n, v in core.items()]
    gate = Gate(declarations(), report, reported_at)
    # Rows read after the time are never older than it: at worst newer, and the next call builds again.
    app.gate_built = (key, gate)
    return gate


def runs_in_unreadable_status(gate: Gate) -> int:
    """Runs already in a status some loaded consumer cannot read: counted, never rewritten."""
    counts = runs.count_by_status_and_origin()
    return sum(n for (status, origin), n in counts.items() if not gate.may_write(status, origin))


def compat_report() -> dict:
    gate = current_gate()
    return gate.report_dict(runs_in_unreadable_status=runs_in_unreadable_status(gate))


def delegation_refusal(origin: str | None) -> str | None:
    """Why delegation tools are not offered to a run with this origin; None when they are."""
    return current_gate().refusal("waiting_for_dependency", origin)


def install_store_guard() -> None:
    status_guard.install(lambda status, origin: current_gate().refusal(status, origin))
