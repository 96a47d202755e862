"""What hooks are handed: a context (the process's settings, the registered tools and providers, the plugin
API's version) and frozen views, never the store's rows."""

import dataclasses
from datetime import UTC

import pytest

from sidecar import bootstrap
from sidecar.engine.registry import build_registry
from sidecar.hookspecs import hookimpl
from sidecar.permissions import may
from sidecar.plugin_api import PLUGIN_API_VERSION, RunView
from sidecar.plugins import build_plugin_manager, plugin_manager
from sidecar.store import runs
from tests.support.engine import make_settings


class Recorder:
    def __init__(self):
        self.permission_asked = []
        self.status_told = []

    @hookimpl
    def nrllm_permission_check(self, action, run, context):
        self.permission_asked.append((run, context))
        return None  # the core's rule decides

    @hookimpl
    def nrllm_run_status_changed(self, run_id, new_status, context):
        self.status_told.append((run_id, new_status, context))


@pytest.fixture
def recorder(settings):
    bootstrap.start(settings, bind_database=False)
    plugin = Recorder()
    plugin_manager().register(plugin, name="context-recorder")
    yield plugin
    plugin_manager().unregister(plugin)


def test_the_permission_check_gets_a_frozen_run_view_and_the_context(recorder, settings):
    row = runs.get_run(runs.create_run("be_user:7", "x", workspace="3", origin="example:dashboard"))
    assert may("be_user:7", "3", "agent:approve", row)
    ((view, context),) = recorder.permission_asked
    assert type(view) is RunView
    assert (view.id, view.owner, view.workspace, view.origin, view.status) == (
        row.id, "be_user:7", "3", "example:dashboard", "queued")
    assert view.created_at.tzinfo is UTC and view.finished_at is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.owner = "be_user:8"
    assert context.settings is settings and context.api_version == PLUGIN_API_VERSION
    assert {"echo", "reverse"} <= set(context.tools) and "scripted" in context.providers
    with pytest.raises(TypeError):
        context.tools["echo"] = None  # read-only


def test_a_status_listener_gets_the_context(recorder, settings):
    run_id = runs.create_run("be_user:7", "x")
    ((told_run, status, context),) = recorder.status_told
    assert (told_run, status, context.settings) == (run_id, "queued", settings)


class ReadsTools:
    @hookimpl
    def nrllm_tools(self, context):
        return list(context.tools.values())


def test_the_hook_that_builds_the_tools_cannot_read_them():
    pm = build_plugin_manager()
    pm.register(ReadsTools(), name="reads-tools")
    with pytest.raises(RuntimeError, match="cannot read them"):
        build_registry(make_settings(), pm)
