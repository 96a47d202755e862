"""The core's tools and model providers, registered through the same hooks as any plugin's."""

from ..hookspecs import hookimpl
from .openai import OpenAIProvider
from .person_tools import person_tools
from .providers import ScriptedProvider
from .tools import builtin_tools


@hookimpl
def nrllm_tools(settings):
    from ..delegation.tool import DelegateTool  # the delegation package builds on the engine's tools

    return [*builtin_tools(), *person_tools(), DelegateTool(settings)]


@hookimpl
def nrllm_model_providers(settings):
    return [ScriptedProvider(), OpenAIProvider.from_settings(settings)]
