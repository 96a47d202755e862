"""What the sidecar hands its plugins besides each hook's own arguments: the plugin API's version, the context
every hook may take, and read-only views of what a hook is asked about (docs/plugins.md). Public.

A hook gets views, never the store's rows: what a view has is promised (docs/stability.md), the columns of a
row are not, and a plugin cannot write through a view.
"""

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

# "major.minor". Minor: an additive change of the plugin API (a new hook, a new hook argument, a new field of
# the context or of a view). Major: a breaking one, only with a new major version of the sidecar.
PLUGIN_API_VERSION = "1.0"


class PluginContext:
    """What every hook may take as its `context` argument: the sidecar's settings, and the tools and model
    providers the plugins registered (read-only, by name). One per application (a process runs one), shared
    by its threads."""

    api_version = PLUGIN_API_VERSION

    def __init__(self, settings, load_registry: Callable[[], Any] | None = None):
        """load_registry: builds the tools and providers on first use; None while the hooks that return them
        are being collected (nrllm_tools and nrllm_model_providers cannot read what they are building)."""
        self._settings = settings
        self._load_registry = load_registry
        self._registry = None
        self._lock = threading.Lock()

    @property
    def settings(self):
        """The process's configuration (sidecar.config.Settings): read it, never change it."""
        return self._settings

    @property
    def tools(self) -> Mapping:
        """Tool name -> the tool (sidecar.engine.tools.Tool), every plugin's and the core's."""
        return self._loaded().tools

    @property
    def providers(self) -> Mapping:
        """Model provider name -> the provider."""
        return self._loaded().providers

    def _loaded(self) -> "_Registries":
        if self._load_registry is None:
            raise RuntimeError("nrllm_tools and nrllm_model_providers build context.tools and context.providers: "
                               "those two hooks cannot read them")
        with self._lock:
            if self._registry is None:
                built = self._load_registry()
                self._registry = _Registries(MappingProxyType(dict(built.tools)),
                                             MappingProxyType(dict(built.providers)))
            return self._registry


@dataclass(frozen=True)
class _Registries:
    tools: Mapping
    providers: Mapping


def _utc(moment: datetime | None) -> datetime | None:
    return None if moment is None else moment.replace(tzinfo=UTC)


@dataclass(frozen=True)
class RunView:
    """A run as a hook sees it: the fields of the API's Run that say whose it is and where it stands. Times
    are aware UTC datetimes; `status` and `termination_reason` are vocabulary strings (docs/stability.md)."""

    id: str
    owner: str
    workspace: str
    origin: str | None
    status: str
    termination_reason: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    cancel_requested_at: datetime | None

    @classmethod
    def of(cls, run) -> "RunView":
        """The view of a stored run (the store's row)."""
        return cls(
            id=run.id, owner=run.owner, workspace=run.workspace, origin=run.origin, status=run.status,
            termination_reason=run.termination_reason, created_at=_utc(run.created_at),
            updated_at=_utc(run.updated_at), finished_at=_utc(run.finished_at),
            cancel_requested_at=_utc(run.cancel_requested_at),
        )
