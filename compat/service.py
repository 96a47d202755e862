"""The gate as the rest of the sidecar sees it: declarations from the plugins, the report from the store."""

import time
from dataclasses import dataclass

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


# How long the offer of delegation tools (delegation_refusal) may go by a gate found current that long ago,
# without reading the report's time again. The offer is advice to the model, never the last word: the store's
# guard asks the gate as of now in the transaction that writes the status (install_store_guard), and a model
# turn takes longer than this anyway, so an offer was always as old as the turn by the time of its call. A
# change of the report made in this process is seen at once (store/consumers.py counts them).
OFFER_MAX_AGE_SECONDS = 1.0


@dataclass
class _Built:
    """The gate built last (Application.gate_built), with what it was built from and when that was last
    found unchanged."""

    key: tuple  # (the plugins loaded, the report's time)
    gate: Gate
    confirmed_at: float  # time.monotonic() just before the report's time was last read and found unchanged
    changes_here: int  # consumer_store.changes_here() then


def current_gate(*, max_age: float = 0.0, reported_at=status_guard.NOT_READ) -> Gate:
    """The gate as of now. Built again only when the report changed (every change of the report moves its
    time, in the transaction that changes its rows, so the time read in a transaction names the rows it sees)
    or the plugins did; otherwise the gate built last, which the application keeps with what it was built from
    (Application.gate_built). A segment asks the gate at least twice (the offer of delegation tools, the guard
    of the suspension), and building it reads the report's rows and every plugin's declarations; reading the
    report's time is one small indexed read, which `reported_at` saves: the time as the caller's transaction
    read it (the store's guard gets it from the statement that writes the run). With `max_age`, a gate found
    current less than `max_age` seconds ago is taken without that read, unless the plugins or, in this
    process, the report changed since."""
    app = current()
    plugins = _plugins_loaded()
    changes = consumer_store.changes_here()  # before the read: a change after it is seen by the next call
    built = app.gate_built
    if (max_age and built is not None and built.key[0] == plugins and built.changes_here == changes
            and time.monotonic() - built.confirmed_at < max_age):
        return built.gate
    confirmed_at = time.monotonic()
    time_read = consumer_store.reported_time() if reported_at is status_guard.NOT_READ else reported_at
    key = (plugins, time_read)
    if built is not None and built.key == key:
        built.confirmed_at, built.changes_here = confirmed_at, changes
        return built.gate
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
    app.gate_built = _Built(key, gate, confirmed_at, changes)
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
    return current_gate(max_age=OFFER_MAX_AGE_SECONDS).refusal("waiting_for_dependency", origin)


def install_store_guard() -> None:
    status_guard.install(lambda status, origin, reported_at: current_gate(reported_at=reported_at)
                         .refusal(status, origin))
