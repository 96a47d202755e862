"""The layers of docs/architecture.md ("Layers"), checked on the source: SQL lives in sidecar/store/ only,
and domain/ is pure."""

import ast
from pathlib import Path

from tests.support import ROOT

PACKAGES = ("sidecar", "compat", "plugins")  # the folders
# The names they are imported by: compat/ and plugins/ install as nrllm_sidecar_compat and nrllm_sidecar_plugins.
IMPORT_NAMES = ("sidecar", "nrllm_sidecar_compat", "nrllm_sidecar_plugins")
STORE = ROOT / "sidecar" / "store"
DOMAIN = ROOT / "sidecar" / "domain"
# What domain/ may import besides the standard library and itself.
DOMAIN_MAY_IMPORT = {"cryptography", "jsonschema", "referencing", "re2"}  # referencing: jsonschema's own


def _sources():
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
    return names


def test_only_the_store_imports_peewee_or_runs_sql_text():
    offenders = []
    for path in _sources():
        if STORE in path.parents:
            continue
        if any(name.split(".")[0] in ("peewee", "playhouse") for name in _imports(path)):
            offenders.append(f"{path.relative_to(ROOT)} imports peewee")
        if "execute_sql(" in path.read_text():
            offenders.append(f"{path.relative_to(ROOT)} runs SQL text")
    assert offenders == []


def test_the_domain_imports_only_the_standard_library_and_itself():
    import sys

    offenders = []
    for path in sorted(DOMAIN.rglob("*.py")):
        for name in _imports(path):
            top = name.lstrip(".").split(".")[0]
            if name.startswith(".") and not name.startswith(".."):
                continue  # domain/ itself
            outside = name.startswith("..") or top in IMPORT_NAMES
            if outside or (top not in sys.stdlib_module_names and top not in DOMAIN_MAY_IMPORT):
                offenders.append(f"{path.name} imports {name}")
    assert offenders == []


def test_the_project_is_imported_by_its_installed_names_only():
    """`compat` and `plugins` resolve from a checkout but are no installed names: code importing them breaks
    in the wheel."""
    offenders = []
    for path in [*_sources(), *sorted((ROOT / "tests").glob("*.py"))]:
        for name in _imports(path):
            if name.split(".")[0] in ("compat", "plugins"):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []
