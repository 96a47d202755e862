"""The public surface, generated from the code into docs/public-surface.json (docs/stability.md).

    python -m sidecar.surface           print it
    python -m sidecar.surface --write   write docs/public-surface.json

It lists what hosts, operators and plugin authors build against: the plugin API's version, the hooks and
their arguments, the entry-point group, every command with its options and arguments, every HTTP path with
its methods, the fields of the documented bodies, the built-in tools and providers, and the exact
vocabulary strings.
tests/test_public_surface.py fails when the code and the committed file differ.

Only the core and the plugins bundled with the sidecar count: a third-party plugin installed beside it
is not loaded here. Hidden command options (such as the workers' `--executor`) are left out: they are
test and debugging aids, not promised to anyone, and listing them would make them look public.
"""

import importlib
import json
import re
import sys
import tempfile
from importlib.metadata import entry_points
from pathlib import Path

import click
import pluggy

from . import hookspecs
from . import plugins as plugin_module
from .config import Settings
from .domain import vocabulary as v
from .plugin_api import PLUGIN_API_VERSION, PluginContext
from .store import db, migrations

SURFACE_FILE = Path(__file__).resolve().parent.parent / "docs" / "public-surface.json"
COMMAND = "nrllm-sidecar"
DISTRIBUTION = "nrllm-sidecar"  # entry points of this distribution are the bundled plugins


def own_plugin_manager() -> pluggy.PluginManager:
    """The core's plugins and the bundled ones (entry points of this distribution), nothing else."""
    pm = pluggy.PluginManager(plugin_module.ENTRY_POINT_GROUP)
    pm.add_hookspecs(hookspecs)
    for name in plugin_module.DEFAULT_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
    for ep in entry_points(group=plugin_module.ENTRY_POINT_GROUP):
        if ep.dist is not None and ep.dist.name == DISTRIBUTION:
            pm.load_setuptools_entrypoints(plugin_module.ENTRY_POINT_GROUP, name=ep.name)
    return pm


def hooks(pm: pluggy.PluginManager) -> dict:
    """Every hook of sidecar/hookspecs.py: its argument names, and whether the first result wins."""
    return {
        name: {"arguments": list(caller.spec.argnames), "firstresult": bool(caller.spec.opts.get("firstresult")),
               "historic": bool(caller.spec.opts.get("historic"))}
        for name, caller in sorted(vars(pm.hook).items())
        if caller.spec is not None
    }


def _option(param: click.Option) -> tuple[str, dict]:
    info = param.to_info_dict()
    names = sorted(param.opts, key=len)
    kind = info["type"]
    entry = {"flag": param.is_flag, "required": param.required, "type": kind["name"], "default": info["default"]}
    if names[:-1]:
        entry["aliases"] = names[:-1]
    if param.secondary_opts:
        entry["off"] = sorted(param.secondary_opts)
    if "choices" in kind:
        entry["choices"] = sorted(kind["choices"])
    for bound in ("min", "max"):
        if kind.get(bound) is not None:
            entry[bound] = kind[bound]
    return names[-1], entry


def commands(group: click.Command | None = None, path: str = COMMAND) -> dict:
    """Every command path (groups too) with its options and arguments; hidden ones left out."""
    if group is None:
        from .cli import main as group
    options, arguments = {}, []
    for param in group.params:
        if isinstance(param, click.Argument):
            arguments.append({"name": param.name, "required": param.required, "nargs": param.nargs})
        elif isinstance(param, click.Option) and not param.hidden:
            key, entry = _option(param)
            options[key] = entry
    found = {path: {"options": options, "arguments": arguments}}
    for name, sub in sorted(getattr(group, "commands", {}).items()):
        if not sub.hidden:
            found.update(commands(sub, f"{path} {name}"))
    return found


def _parameter(spec: dict, param: dict) -> str:
    if "$ref" in param:
        param = spec["components"]["parameters"][param["$ref"].rsplit("/", 1)[-1]]
    text = f"{param['in']}:{param['name']}"
    return f"{text} (required)" if param.get("required") and param["in"] != "path" else text


def _referenced_schemas(spec: dict) -> set[str]:
    """The schemas the paths use, directly or nested (flask-smorest also defines some nothing uses)."""
    components = spec["components"]
    names: set[str] = set()
    text = json.dumps([spec["paths"], components.get("responses", {})])
    while found := set(re.findall(r'"#/components/schemas/([^"]+)"', text)) - names:
        names |= found
        text = json.dumps([components["schemas"][name] for name in found])
    return names


def openapi(spec: dict) -> dict:
    """Paths with their methods (parameters, success statuses, whether a token is needed) and the fields
    of every documented body."""
    paths = {}
    for path, item in spec["paths"].items():
        shared = item.get("parameters", [])
        paths[path] = {
            method: {
                "parameters": sorted(_parameter(spec, p) for p in shared + op.get("parameters", [])),
                "success": sorted(code for code in op["responses"] if code.startswith("2")),
                "token": op.get("security", spec.get("security")) != [],
            }
            for method, op in item.items()
            if method != "parameters"
        }
    used = _referenced_schemas(spec)
    schemas = {
        name: {"fields": sorted(schema.get("properties", {})), "required": sorted(schema.get("required", []))}
        for name, schema in spec["components"].get("schemas", {}).items()
        if name in used
    }
    return {"paths": dict(sorted(paths.items())), "schemas": dict(sorted(schemas.items()))}


def vocabularies() -> dict:
    """The exact strings of every vocabulary (sorted), and how run statuses are grouped."""
    groups = {
        "base": v.BASE_STATUSES.__contains__,
        "terminal": lambda s: s.is_terminal,
        "awaits_person": lambda s: s.awaits_person,
        "awaits_dependency": lambda s: s.awaits_dependency,
        "waiting": lambda s: s.is_waiting,
        "holds_lease": lambda s: s.holds_lease,
    }
    enums = {"run_status": v.RunStatus, "segment_outcome": v.SegmentOutcome,
             "termination_reason": v.TerminationReason, "tool_effect": v.ToolEffect,
             "outbound_kind": v.OutboundKind, "outbound_outcome": v.OutboundOutcome}
    found = {key: sorted(e.value for e in enum) for key, enum in enums.items()}
    found["run_status_groups"] = {
        name: sorted(s.value for s in v.RunStatus if test(s)) for name, test in groups.items()
    }
    return found


def generate() -> dict:
    """Build the surface: the app against a new, migrated SQLite database, with only our own plugins.

    Run it in a process of its own (as the command and the test do): its application becomes the process's
    default.
    """
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(instance_path=Path(folder), database_url=f"sqlite:///{folder}/surface.db")
        db.bind(settings.database_url)
        migrations.upgrade()
        pm = own_plugin_manager()
        from .app import create_app

        app = create_app(settings, bind_database=False, plugin_manager=pm)
        spec = app.extensions["flask-smorest"]["apis"][""]["ext_obj"].spec.to_dict()
        collecting = PluginContext(settings)
        tools = {
            tool.name: {"effect": tool.effect.value, "delegation": tool.delegation,
                        "requires_approval": tool.requires_approval, "pauses_for_input": tool.pauses_for_input,
                        "arguments": sorted(tool.parameters.get("properties", {})),
                        "required": sorted(tool.parameters.get("required", []))}
            for found in pm.hook.nrllm_tools(settings=settings, context=collecting) for tool in found or []
        }
        providers = sorted(p.name for found in pm.hook.nrllm_model_providers(settings=settings, context=collecting)
                           for p in found or [])
        db.database.close()
    return {
        "entry_point_group": plugin_module.ENTRY_POINT_GROUP,
        "plugin_api_version": PLUGIN_API_VERSION,
        "hooks": hooks(pm),
        "commands": commands(),
        "http": openapi(spec),
        "builtin_tools": dict(sorted(tools.items())),
        "builtin_providers": providers,
        "vocabulary": vocabularies(),
    }


def render(surface: dict) -> str:
    return json.dumps(surface, indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    text = render(generate())
    if argv == ["--write"]:
        SURFACE_FILE.write_text(text)
        print(f"wrote {SURFACE_FILE}", file=sys.stderr)
    elif argv:
        print("usage: python -m sidecar.surface [--write]", file=sys.stderr)
        return 2
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
