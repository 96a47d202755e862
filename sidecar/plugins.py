"""The one plugin manager: the core's own features, then every entry point in the group `nrllm_sidecar`.

The core registers its tools, providers and consumers through the same hooks a third-party plugin uses,
so both take one path (bundled plugins under plugins/ are entry points like any other). Every hook is called
with the application's context (sidecar/plugin_api.py), set up at start-up by configure().
"""

import importlib
import logging
from dataclasses import dataclass
from importlib.metadata import entry_points

import pluggy

from . import hookspecs
from .application import current
from .config import Settings
from .plugin_api import PluginContext

log = logging.getLogger("nrllm_sidecar.plugins")

ENTRY_POINT_GROUP = "nrllm_sidecar"

# Modules of the core that implement hooks, registered before any entry point.
DEFAULT_PLUGINS = (
    "sidecar.engine.builtin",
    "sidecar.delegation.tool",
    "sidecar.consumers",
    "sidecar.permissions",
)


class PluginLoadError(RuntimeError):
    """A plugin could not be loaded; start-up stops with a message naming it."""


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    """pluggy's own loader (it records each plugin's distribution), one entry point at a time, so a plugin
    that fails to load is named."""
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP, name=ep.name)
        except Exception as exc:
            raise PluginLoadError(f"plugin {ep.name!r} ({ep.value}) failed to load: {exc}") from exc


def build_plugin_manager(extra_plugins=()) -> pluggy.PluginManager:
    pm = pluggy.PluginManager(ENTRY_POINT_GROUP)
    pm.add_hookspecs(hookspecs)
    for name in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
    _load_entry_points(pm)
    for plugin in extra_plugins:
        pm.register(plugin)
    try:
        pm.check_pending()  # a hookimpl named like no hook is a plugin bug: say so at start-up
    except pluggy.PluginValidationError as exc:
        raise PluginLoadError(f"plugin {pm.get_name(exc.plugin)!r} is broken: {exc}") from exc
    return pm


def results_by_plugin(hook, **kwargs):
    """Call each implementation of `hook` like pluggy would (only the arguments it takes), and yield
    (plugin name, result): callers that must say which plugin gave what use this instead of hook()."""
    for impl in hook.get_hookimpls():  # registration order: the core first
        yield impl.plugin_name, impl.function(*[kwargs[name] for name in impl.argnames])


def notify_each(hook, **kwargs) -> None:
    """Call every implementation of a notification hook; one that raises is logged and the others still
    run (pluggy would stop at the first exception)."""
    for impl in hook.get_hookimpls():
        try:
            impl.function(*[kwargs[name] for name in impl.argnames])
        except Exception:
            log.exception("plugin %r failed in %s", impl.plugin_name, hook.name)


@dataclass(frozen=True)
class Collected:
    """The tools and the model providers of every plugin (the core's first), by name."""

    tools: dict
    providers: dict


def collect_tools_and_providers(settings: Settings, pm: pluggy.PluginManager) -> Collected:
    """What the tools and providers hooks return; the engine's registry (engine/registry.py) is built on it."""
    return Collected(tools=_collect(pm.hook.nrllm_tools, settings, "tool"),
                     providers=_collect(pm.hook.nrllm_model_providers, settings, "model provider"))


def _collect(hook, settings: Settings, what: str) -> dict:
    """name -> item from every implementation of `hook`; two plugins claiming one name stop start-up."""
    found: dict = {}
    owner: dict[str, str] = {}
    collecting = PluginContext(settings)  # without tools and providers: these hooks return them
    for plugin_name, items in results_by_plugin(hook, settings=settings, context=collecting):
        for item in items or []:
            if item.name in found:
                raise PluginLoadError(
                    f"{what} {item.name!r} is registered by both {owner[item.name]!r} and {plugin_name!r}"
                )
            found[item.name] = item
            owner[item.name] = plugin_name
    return found


def plugin_manager() -> pluggy.PluginManager:
    """The application's plugin manager, built on first use (never at import)."""
    app = current()
    if app.plugin_manager is None:
        with app.lock:
            if app.plugin_manager is None:
                app.plugin_manager = build_plugin_manager()
    return app.plugin_manager


def configure(settings: Settings) -> PluginContext:
    """Set up the context every hook of this application gets (bootstrap.start does, with its settings); its
    tools and providers are collected from the plugins when a hook first reads them."""
    pm = plugin_manager()
    context = PluginContext(settings, lambda: collect_tools_and_providers(settings, pm))
    current().plugin_context = context
    return context


def plugin_context() -> PluginContext:
    """The context of this application's hooks; set up from its settings (the environment's, in a process
    that did not start an application) if start-up did not."""
    app = current()
    if app.plugin_context is not None:
        return app.plugin_context
    return configure(app.settings or Settings.from_env())


def describe() -> list[dict]:
    """What is loaded, where it comes from and which hooks each plugin implements (`nrllm-sidecar plugins`).

    `distribution` and `version` are the installed package a plugin comes from (the sidecar's own for the
    core and the bundled plugins); `consumers` are the consumers of run statuses it declares, whose
    versions are the host's report, not this one.
    """
    pm = plugin_manager()
    dists = {pm.get_name(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
    declared: dict[str, list[str]] = {}
    for plugin_name, entries in results_by_plugin(pm.hook.nrllm_consumers, context=plugin_context()):
        declared.setdefault(plugin_name, []).extend(entry["name"] for entry in entries or [])
    rows = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        hooks = sorted(impl.name for impl in pm.get_hookcallers(plugin) or [])
        dist = dists.get(name)
        rows.append({
            "name": name,
            "hooks": hooks,
            "version": dist.version if dist else None,
            "distribution": dist.metadata["Name"] if dist else None,
            "default": name in DEFAULT_PLUGINS,
            "consumers": sorted(declared.get(name, [])),
        })
    return rows
