"""Every hook a plugin can implement. A plugin is a module (or object) with functions named like these,
marked with `@hookimpl`, and an entry point in the group `nrllm_sidecar`. docs/plugins.md shows each one
with a working example.

Every hook may also take `context` (sidecar.plugin_api.PluginContext): the process's settings and the
registered tools and model providers. An implementation takes only the arguments it names.
"""

from pluggy import HookimplMarker, HookspecMarker

hookspec = HookspecMarker("nrllm_sidecar")
hookimpl = HookimplMarker("nrllm_sidecar")


@hookspec
def nrllm_consumers(context):
    """Declare consumers of run statuses, as a list of dicts: {"name": str, "understands": {version
    specifier: [status, ...]}, "origins": [origin, ...] (optional: the consumer reads only runs with these
    origins), "upgrade_note": str (optional: where the consumer's upgrade note is; the gate's reason cites
    it)}. A status is written only when every loaded consumer understands it."""


@hookspec
def nrllm_tools(settings, context):
    """Return a list of tools (sidecar.engine.tools.Tool instances) to offer to runs. `context.tools` and
    `context.providers` are not readable here: this hook builds them."""


@hookspec
def nrllm_model_providers(settings, context):
    """Return a list of model providers (objects with a `name` and `next_turn(request)`). `context.tools`
    and `context.providers` are not readable here: this hook builds them."""


@hookspec(firstresult=True)
def nrllm_permission_check(actor, workspace, action, run, context):
    """May `actor` in `workspace` do `action` (such as "agent:approve" or "agent:input") on `run` (a
    sidecar.plugin_api.RunView)? Return True or False to decide, None to leave it to the next plugin; the
    first answer wins."""


@hookspec
def nrllm_run_status_changed(run_id, old_status, new_status, context):
    """Called after a run's status change is committed. Must be quick and must not raise."""


@hookspec
def nrllm_register_routes(context):
    """Return a list of flask-smorest Blueprints to add to the API; their routes need a token like every
    other route."""
