"""nrllm-glossary: a plugin for the nr-llm sidecar.

- the tool `define` ({"term"} -> the glossary's definition of the term), read-only;
- a status listener that counts the runs that finished, by how they finished.
"""

from collections import Counter
from threading import Lock

from sidecar.domain.vocabulary import ToolEffect
from sidecar.engine.tools import Tool, ToolError
from sidecar.hookspecs import hookimpl
from sidecar.plugin_api import PLUGIN_API_VERSION

# Written for plugin API 1.x: under another major version, refuse to load (the sidecar then does not start,
# and names this plugin) rather than misbehave.
if PLUGIN_API_VERSION.split(".")[0] != "1":
    raise ImportError(f"nrllm-glossary needs the sidecar's plugin API 1.x, not {PLUGIN_API_VERSION}")

GLOSSARY = {
    "sidecar": "A service that runs beside an application and does one job for it.",
    "lease": "A time-limited claim on a run; whoever holds it may write the run.",
}


class DefineTool(Tool):
    name = "define"
    effect = ToolEffect.READ_ONLY  # looks something up, changes nothing: retried freely after a crash
    description = "Returns the glossary's definition of a term."
    parameters = {
        "type": "object",
        "properties": {"term": {"type": "string", "minLength": 1, "description": "The term to define."}},
        "required": ["term"],
        "additionalProperties": False,
    }

    def run(self, arguments, context):
        definition = GLOSSARY.get(arguments["term"].strip().lower())
        if definition is None:  # the model gets `error: ...` and may try another term
            raise ToolError(f"the glossary has no entry for {arguments['term']!r}")
        return definition


@hookimpl
def nrllm_tools(settings):
    return [DefineTool()]


FINISHED = Counter()  # status -> runs that reached it, in this process
_lock = Lock()  # the hook is called on whichever thread wrote the status


@hookimpl
def nrllm_run_status_changed(run_id, old_status, new_status):
    if new_status in ("completed", "failed", "cancelled"):
        with _lock:
            FINISHED[new_status] += 1
