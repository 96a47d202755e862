"""The core's tools and model providers, registered through the same hooks as any plugin's."""

from ..hookspecs import hookimpl
from .openai import OpenAIProvider
from .person_tools import person_tools
from .providers import ScriptedProvider
from .tools import builtin_tools


@hookimpl
def nrllm_tools():
    # delegate_to_agent is the delegation package's (sidecar.delegation.tool), registered the same way.
    return [*builtin_tools(), *person_tools()]


@hookimpl
def nrllm_model_providers(settings):
    return [ScriptedProvider(), OpenAIProvider.from_settings(settings)]
