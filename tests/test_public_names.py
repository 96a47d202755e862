"""A public function name means one thing: two modules that define the same module-level public function do
so on purpose, for the same thing, and the name is listed here with what it means. A new name defined twice
(a `take` that claims a pause beside a `take` that checks a decision) fails: name each for what it does."""

import ast
from collections import defaultdict
from pathlib import Path

from tests.support import ROOT

PACKAGES = ("sidecar", "compat", "plugins")

# Names several modules define for the same thing.
SHARED = {
    "apply": "a migration step's entry point (sidecar/store/migrations/)",
    "authenticate": "check a request's credential: the API's bearer token, a push's delegation token",
    "configure": "set a module up from the settings at start-up",
    "digest": "what the store keeps of a secret token (its SHA-256)",
    "get": "a store module's row by its id",
    "install": "register this module's parts on what is passed (the app, the store)",
    "main": "a program's entry point",
    "reap": "act on expired leases: the command, and the store's function it runs",
    "run_events": "a run's event stream, as the API and the console serve it",
    "token_revoke": "revoke a token by name: the command, and the console's page",
}
# Hook implementations carry their specification's name (sidecar/hookspecs.py): pluggy matches them by it.
HOOK_PREFIX = "nrllm_"


def definers(roots: list[Path]) -> dict[str, list[str]]:
    """Public module-level function name -> the modules (paths relative to their root's parent) defining it."""
    found: dict[str, list[str]] = defaultdict(list)
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for node in ast.parse(path.read_text(), filename=str(path)).body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                    found[node.name].append(str(path.relative_to(root.parent)))
    return found


def collisions(roots: list[Path]) -> dict[str, list[str]]:
    """The names defined by more than one module that are neither listed in SHARED nor hooks."""
    return {name: paths for name, paths in definers(roots).items()
            if len(paths) > 1 and name not in SHARED and not name.startswith(HOOK_PREFIX)}


def test_no_two_modules_define_one_public_function_name_for_different_things():
    assert collisions([ROOT / package for package in PACKAGES]) == {}


def test_a_name_defined_twice_is_caught(tmp_path):
    package = tmp_path / "sidecar"
    (package / "store").mkdir(parents=True)
    (package / "store" / "pauses.py").write_text("def take(run):\n    pass\n\ndef _inner():\n    pass\n")
    (package / "service.py").write_text("def take(request):\n    pass\n\ndef _inner():\n    pass\n")
    (package / "hooks.py").write_text("def nrllm_tools(settings):\n    pass\n\ndef get(x):\n    pass\n")
    (package / "rows.py").write_text("def get(x):\n    pass\n\nclass Slots:\n    def take(self):\n        pass\n")
    (package / "more_hooks.py").write_text("def nrllm_tools(settings):\n    pass\n")
    assert collisions([package]) == {"take": ["sidecar/service.py", "sidecar/store/pauses.py"]}
