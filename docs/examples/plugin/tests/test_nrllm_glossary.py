"""The plugin's own tests: its tool, its hooks checked against the sidecar's hook specifications (as the
sidecar loads it), and its entry point. Run with `pytest` where the sidecar and this package are installed."""

from importlib.metadata import entry_points

import pluggy
import pytest
from sidecar import hookspecs
from sidecar.engine.tools import ToolError
from sidecar.plugin_api import PLUGIN_API_VERSION, PluginContext

import nrllm_glossary


@pytest.fixture
def plugins():
    # The sidecar's own way to load a plugin: a pluggy manager with its hook specifications. check_pending
    # fails for a function named like no hook; a hook with an argument the spec does not have fails register.
    manager = pluggy.PluginManager("nrllm_sidecar")
    manager.add_hookspecs(hookspecs)
    manager.register(nrllm_glossary, name="glossary")
    manager.check_pending()
    return manager


# What every hook may take as `context`; one built from settings alone has no tools or providers to show.
CONTEXT = PluginContext(settings=None)


def test_it_was_written_for_this_plugin_api():
    assert PLUGIN_API_VERSION.split(".")[0] == "1"


def test_the_tool_defines_a_known_term(plugins):
    (tools,) = plugins.hook.nrllm_tools(settings=None, context=CONTEXT)
    (define,) = tools
    assert (define.name, define.effect.value) == ("define", "read_only")
    assert define.run({"term": "Lease"}, context=None) == nrllm_glossary.GLOSSARY["lease"]


def test_an_unknown_term_is_a_tool_error_the_model_sees():
    with pytest.raises(ToolError, match="no entry for 'quux'"):
        nrllm_glossary.DefineTool().run({"term": "quux"}, context=None)


def test_finished_runs_are_counted(plugins):
    before = nrllm_glossary.FINISHED["completed"]
    plugins.hook.nrllm_run_status_changed(run_id="r1", old_status="running", new_status="completed", context=CONTEXT)
    plugins.hook.nrllm_run_status_changed(run_id="r2", old_status="queued", new_status="running", context=CONTEXT)
    assert nrllm_glossary.FINISHED["completed"] == before + 1


def test_the_entry_point_names_the_module():
    (point,) = [p for p in entry_points(group="nrllm_sidecar") if p.name == "glossary"]
    assert point.load() is nrllm_glossary
