"""Tests about the tests and docs of the plugin hooks (as datasette does it): a hook added to
sidecar/hookspecs.py without a test naming it, or without its section in docs/plugins.md, fails here."""

import re
from pathlib import Path

import pytest

from sidecar import hookspecs
from sidecar.plugins import ENTRY_POINT_GROUP

TESTS = Path(__file__).resolve().parent
PLUGINS_DOC = TESTS.parent / "docs" / "plugins.md"
HOOKS = sorted(name for name, fn in vars(hookspecs).items() if hasattr(fn, f"{ENTRY_POINT_GROUP}_spec"))


def test_the_hooks_are_found():
    # Guards the two tests below against passing on an empty list.
    assert {"nrllm_tools", "nrllm_permission_check", "nrllm_register_routes"} <= set(HOOKS)


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_named_in_a_test(hook):
    texts = [p.read_text() for p in TESTS.glob("test_*.py") if p.name != Path(__file__).name]
    assert any(re.search(rf"\b{hook}\b", text) for text in texts), f"no test names {hook}"


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_has_a_section_in_the_plugin_docs(hook):
    assert f"\n## {hook}\n" in PLUGINS_DOC.read_text(), f"docs/plugins.md has no '## {hook}' section"


def test_every_hook_section_in_the_plugin_docs_is_a_hook():
    sections = re.findall(r"^## (nrllm_\w+)$", PLUGINS_DOC.read_text(), re.MULTILINE)
    assert sorted(sections) == HOOKS


# The two plugin packages the tests load: the hook sections quote the first, the package section the second.
EXAMPLES = (TESTS / "example_plugin", TESTS.parent / "docs" / "examples" / "plugin")


@pytest.mark.parametrize("language, pattern", [("python", "*.py"), ("toml", "pyproject.toml")])
def test_the_docs_examples_are_quoted_from_the_tested_example_plugins(language, pattern):
    blocks = re.findall(rf"^```{language}\n(.*?)^```$", PLUGINS_DOC.read_text(), re.MULTILINE | re.DOTALL)
    assert blocks, f"docs/plugins.md has no {language} example"
    texts = [path.read_text() for example in EXAMPLES for path in example.glob(pattern)]
    for block in blocks:
        assert any(block in text for text in texts), f"docs/plugins.md quotes what no example plugin has:\n{block}"
