"""Which tools and model providers exist, collected from every plugin's hooks (the core's included)."""

from collections.abc import Mapping
from dataclasses import dataclass

import pluggy

from ..config import Settings
from ..plugins import collect_tools_and_providers, plugin_manager
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


def build_registry(settings: Settings, pm: pluggy.PluginManager | None = None) -> Registry:
    collected = collect_tools_and_providers(settings, pm or plugin_manager())
    return Registry(tools=collected.tools, providers=collected.providers, default_provider=settings.default_provider)
