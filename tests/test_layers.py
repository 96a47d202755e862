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


# -- the import graph between the project's parts ---------------------------------------------------------------
#
# A part is a subpackage of sidecar (`store`), a module at its top (`worker`), the package itself (`sidecar`:
# its version), `compat` or the `bundled_plugins` (the folders compat/ and plugins/). Imports go only downward
# along LAYERS (lowest first; a part imports only parts of lower layers, never one of its own layer), which also
# means no cycle. docs/architecture.md ("Layers") explains the order.
LAYERS = (
    {"sidecar", "domain", "failpoints", "affinity"},
    {"config", "logs", "hookspecs", "plugin_api"},
    {"application"},
    {"keys", "wakeup"},
    {"store"},
    {"metrics", "plugins"},
    {"consumers", "permissions", "purger"},
    {"compat", "segment"},
    {"bootstrap", "testing"},
    {"decisions"},
    {"engine"},
    {"delegation"},
    {"worker", "demo_agent"},
    {"api", "demo"},
    {"console"},
    {"app"},
    {"serving", "wsgi"},
    {"cli"},
    {"surface", "bundled_plugins"},
)
# The folders, and the names the parts in them are imported by.
FOLDERS = {"sidecar": "sidecar", "compat": "nrllm_sidecar_compat", "plugins": "nrllm_sidecar_plugins"}


def _part_of(module: str, root: Path) -> str | None:
    """The part an absolute module name belongs to; None outside the project."""
    top, _, rest = module.partition(".")
    if top == "nrllm_sidecar_compat":
        return "compat"
    if top == "nrllm_sidecar_plugins":
        return "bundled_plugins"
    if top != "sidecar":
        return None
    name = rest.split(".")[0]
    exists = name and ((root / "sidecar" / f"{name}.py").exists() or (root / "sidecar" / name).is_dir())
    return name if exists else "sidecar"  # `from sidecar import __version__`


def _imported_modules(path: Path, module: str, is_package: bool):
    """(absolute module name, line) of every import in the file, inside functions too; a name imported from a
    package may be a module of it, so both are given."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module
            yield source, node.lineno
            for alias in node.names:
                yield f"{source}.{alias.name}", node.lineno


def import_graph(root: Path = ROOT) -> dict[str, dict[str, list[str]]]:
    """part -> part it imports -> where (file:line): the imports between different parts."""
    graph: dict[str, dict[str, list[str]]] = {}
    for folder, installed_as in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            relative = path.relative_to(root / folder).with_suffix("").parts
            is_package = relative[-1] == "__init__"
            module = ".".join((installed_as, *(relative[:-1] if is_package else relative)))
            part = _part_of(module, root)
            graph.setdefault(part, {})
            for imported, line in _imported_modules(path, module, is_package):
                target = _part_of(imported, root)
                if target is not None and target != part:
                    where = f"{path.relative_to(root)}:{line}"
                    found = graph[part].setdefault(target, [])
                    if where not in found:
                        found.append(where)
    return graph


def find_cycle(graph: dict[str, dict]) -> list[str] | None:
    """A cycle of parts (its first part repeated at the end), or None."""
    visiting: list[str] = []
    done: set[str] = set()

    def visit(part: str) -> list[str] | None:
        if part in visiting:
            return [*visiting[visiting.index(part):], part]
        if part in done:
            return None
        visiting.append(part)
        for target in sorted(graph.get(part, {})):
            if (cycle := visit(target)) is not None:
                return cycle
        visiting.pop()
        done.add(part)
        return None

    for part in sorted(graph):
        if (cycle := visit(part)) is not None:
            return cycle
    return None


def not_downward(graph: dict[str, dict[str, list[str]]], layers) -> list[str]:
    """Every import of a part from its own layer or a higher one, with where it is."""
    layer_of = {part: index for index, layer in enumerate(layers) for part in layer}
    return [f"{part} imports {target} ({', '.join(where)})"
            for part, targets in sorted(graph.items()) for target, where in sorted(targets.items())
            if layer_of[target] >= layer_of[part]]


def test_every_part_has_one_layer():
    placed = [part for layer in LAYERS for part in layer]
    assert len(placed) == len(set(placed))
    assert set(import_graph()) == set(placed)  # a new module or subpackage is placed in LAYERS


def test_no_part_imports_another_in_a_cycle():
    assert find_cycle(import_graph()) is None


def test_imports_go_only_downward():
    assert not_downward(import_graph(), LAYERS) == []


def test_the_graph_checks_fail_on_a_sample_tree(tmp_path):
    """A cycle made by an import inside a function, and the upward import it contains, are both found."""
    (tmp_path / "sidecar" / "engine").mkdir(parents=True)
    (tmp_path / "sidecar" / "delegation").mkdir()
    for folder in ("compat", "plugins"):
        (tmp_path / folder).mkdir()
    (tmp_path / "sidecar" / "__init__.py").write_text("")
    (tmp_path / "sidecar" / "engine" / "__init__.py").write_text("")
    (tmp_path / "sidecar" / "engine" / "loop.py").write_text("from ..delegation import start\n")
    (tmp_path / "sidecar" / "delegation" / "__init__.py").write_text("")
    (tmp_path / "sidecar" / "delegation" / "tool.py").write_text("def tool():\n    from ..engine import loop\n")
    graph = import_graph(tmp_path)
    assert graph["engine"] == {"delegation": ["sidecar/engine/loop.py:1"]}
    assert graph["delegation"] == {"engine": ["sidecar/delegation/tool.py:2"]}
    assert find_cycle(graph) == ["delegation", "engine", "delegation"]
    assert not_downward(graph, ({"sidecar"}, {"engine"}, {"delegation"})) == [
        "engine imports delegation (sidecar/engine/loop.py:1)"]
    assert not_downward(graph, ({"sidecar"}, {"engine", "delegation"})) == [
        "delegation imports engine (sidecar/delegation/tool.py:2)",
        "engine imports delegation (sidecar/engine/loop.py:1)"]
    del graph["delegation"]["engine"]
    assert find_cycle(graph) is None
