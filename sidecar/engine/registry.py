"""Which tools and model providers exist, collected from every plugin's hooks (the core's included)."""

from collections.abc import Mapping
from dataclasses import dataclass

import pluggy

from ..config import Settings
from ..plugin_api import PluginContext
from ..plugins import PluginLoadError, plugin_manager, results_by_plugin
from .providers import ModelProvider
from .tools import Tool


@dataclass(frozen=True)
class Registry:
    tools: Mapping[str, Tool]
    providers: Mapping[str, ModelProvider]
    default_provider: str = "scripted"

    def offered(self, requested) -> dict[str, Tool]:
        """The tools a run may be offered: the ones it names (in its order) that exist; all when it names none.

        Delegation tools among them are offered only while the compatibility gate allows the run to wait
        for a dependency; the loop asks the gate (see AgentLoop).
        """
        if requested is None:
            return dict(self.tools)
        return {name: self.tools[name] for name in requested if isinstance(name, str) and name in self.tools}


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


def build_registry(settings: Settings, pm: pluggy.PluginManager | None = None) -> Registry:
    pm = pm or plugin_manager()
    return Registry(
        tools=_collect(pm.hook.nrllm_tools, settings, "tool"),
        providers=_collect(pm.hook.nrllm_model_providers, settings, "model provider"),
        default_provider=settings.default_provider,
    )
