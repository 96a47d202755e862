"""Plugins that cannot work stop start-up with a message naming them: one that raises on import, one
whose hook implementation is named like no hook, one whose consumer declaration the gate cannot read,
and two that claim the same tool or provider name."""

import os
import subprocess
import sys
import textwrap

import pytest

from sidecar.app import create_app
from sidecar.config import Settings
from sidecar.engine.registry import build_registry
from sidecar.engine.tools import EchoTool
from sidecar.hookspecs import hookimpl
from sidecar.plugins import PluginLoadError, build_plugin_manager
from tests.support import ROOT
from tests.support.engine import make_settings


def _installed_plugin(root, name: str, source: str) -> None:
    """A module and the metadata an installed distribution has, declaring it in the group nrllm_sidecar."""
    (root / f"{name}.py").write_text(textwrap.dedent(source))
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[nrllm_sidecar]\n{name} = {name}\n")


def _plugins_command(sqlite_url, plugin_dir) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(plugin_dir), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "NRLLM_DATABASE_URL": sqlite_url, "PYTHONPATH": path}
    return subprocess.run([sys.executable, "-m", "sidecar.cli", "plugins"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_plugin_that_raises_on_import_stops_start_up_naming_it(sqlite_url, tmp_path):
    _installed_plugin(tmp_path, "broken_plugin", 'raise RuntimeError("the licence server is unreachable")\n')
    done = _plugins_command(sqlite_url, tmp_path)
    assert done.returncode == 1
    assert "plugin 'broken_plugin' (broken_plugin) failed to load: the licence server is unreachable" in done.stderr
    assert "Traceback" not in done.stderr, "a clear message, not a stack trace"
    assert done.stdout == ""


@pytest.mark.parametrize("definition, message", [
    ("def nrllm_tool(settings):", "plugin 'typo_plugin' is broken: unknown hook 'nrllm_tool'"),  # nrllm_tools
    ("def nrllm_tools(settings, run):", "plugin 'typo_plugin' (typo_plugin) failed to load"),
])
def test_a_hook_implementation_that_fits_no_hook_stops_start_up_naming_it(sqlite_url, tmp_path, definition, message):
    _installed_plugin(tmp_path, "typo_plugin", f"""
        from sidecar.hookspecs import hookimpl

        @hookimpl
        {definition}
            return []
    """)
    done = _plugins_command(sqlite_url, tmp_path)
    assert done.returncode == 1
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_a_consumer_declaration_the_gate_cannot_read_stops_start_up_naming_it(sqlite_url, tmp_path):
    _installed_plugin(tmp_path, "wall_display", """
        from sidecar.hookspecs import hookimpl

        @hookimpl
        def nrllm_consumers():
            return [{"name": "wall_display", "understands": {">=1.0": ["queued", "waiting_for_godot"]}}]
    """)
    done = _plugins_command(sqlite_url, tmp_path)
    assert done.returncode == 1
    assert "plugin 'wall_display'" in done.stderr and "waiting_for_godot" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_working_plugin_beside_them_is_listed(sqlite_url, tmp_path):
    # The same set-up with a plugin that works: what the two tests above see is the plugin, not the set-up.
    _installed_plugin(tmp_path, "fine_plugin", """
        from sidecar.hookspecs import hookimpl

        @hookimpl
        def nrllm_tools(settings):
            return []
    """)
    done = _plugins_command(sqlite_url, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "fine_plugin\tplugin package fine_plugin 0.1\tnrllm_tools" in done.stdout.splitlines()


class OffersTool:
    def __init__(self, tool):
        self.tool = tool

    @hookimpl
    def nrllm_tools(self, settings):
        return [self.tool]


class OffersProvider:
    name = "constant"  # the example plugin's provider

    @hookimpl
    def nrllm_model_providers(self, settings):
        return [self]

    def next_turn(self, request):
        raise AssertionError("never asked: start-up stops first")


class Twin(EchoTool):
    name = "twin"


def test_two_plugins_registering_one_tool_name_stop_start_up_naming_both():
    pm = build_plugin_manager()
    pm.register(OffersTool(Twin()), name="first-twin")
    pm.register(OffersTool(Twin()), name="second-twin")
    with pytest.raises(PluginLoadError, match="tool 'twin' is registered by both 'first-twin' and 'second-twin'"):
        build_registry(make_settings(), pm)


def test_a_plugin_cannot_take_a_core_tool_or_another_plugins_provider():
    pm = build_plugin_manager()
    pm.register(OffersTool(EchoTool()), name="echo-again")
    with pytest.raises(PluginLoadError, match="tool 'echo' is registered by both 'sidecar.engine.builtin' and "
                                              "'echo-again'"):
        build_registry(make_settings(), pm)
    pm = build_plugin_manager()
    pm.register(OffersProvider(), name="copycat")
    with pytest.raises(PluginLoadError, match="model provider 'constant' is registered by both 'example' and "
                                              "'copycat'"):
        build_registry(make_settings(), pm)


def test_the_api_does_not_start_with_a_clash(sqlite_url, tmp_path):
    pm = build_plugin_manager()
    pm.register(OffersTool(EchoTool()), name="echo-clash-test")
    with pytest.raises(PluginLoadError, match="'echo-clash-test'"):
        create_app(Settings(instance_path=tmp_path, database_url=sqlite_url), bind_database=False, plugin_manager=pm)
