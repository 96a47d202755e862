"""Which tools and model providers exist: built in one function, so one place can be swapped.

The plugin manager will register tools and providers through hooks; it replaces `build_registry` and
the rest of the engine takes whatever Registry it is given.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from ..config import Settings
from .openai import OpenAIProvider
from .providers import ModelProvider, ScriptedProvider
from .tools import Tool, builtin_tools


@dataclass(frozen=True)
class Registry:
    tools: Mapping[str, Tool]
    providers: Mapping[str, ModelProvider]
    default_provider: str = "scripted"

    def offered(self, requested) -> dict[str, Tool]:
        """The tools a run is offered: the ones it names (in its order) that exist; all when it names none."""
        if requested is None:
            return dict(self.tools)
        return {name: self.tools[name] for name in requested if isinstance(name, str) and name in self.tools}


def build_registry(settings: Settings) -> Registry:
    providers = (ScriptedProvider(), OpenAIProvider.from_settings(settings))
    return Registry(
        tools={tool.name: tool for tool in builtin_tools()},
        providers={provider.name: provider for provider in providers},
        default_provider=settings.default_provider,
    )
