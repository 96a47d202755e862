"""`delegate_to_agent`: the built-in delegation tool (docs/http-api.md, "Built-in tools"), registered through
the tools hook like any plugin's (a core plugin: sidecar/plugins.py)."""

from ..domain.vocabulary import ToolEffect
from ..engine.tools import DelegationCall, Tool, ToolError
from ..hookspecs import hookimpl
from .start import Started, give_up_delegation, start_delegation


class DelegateTool(Tool):
    name = "delegate_to_agent"
    # The journal makes a retry land on the same row: at most one remote task per tool call.
    effect = ToolEffect.IDEMPOTENT_WRITE
    delegation = True
    journals_with_turn = True  # start.py saves a first attempt's turn with its journal row
    description = ("Hands a task to a remote agent and waits for its answer (minutes or hours). Must be the only "
                   "tool call of its turn. To answer a remote agent that asked for input, pass its task_id.")
    parameters = {
        "type": "object",
        "properties": {
            "agent": {"type": "string", "minLength": 1, "description": "The remote agent's registered name."},
            "message": {"type": "string", "minLength": 1, "description": "What to ask of it."},
            "task_id": {"type": "string", "minLength": 1,
                        "description": "A remote task that asked for input: answer on that task."},
        },
        "required": ["agent", "message"],
        "additionalProperties": False,
    }

    def __init__(self, settings):
        self.settings = settings

    def run(self, arguments, context):
        raise ToolError("delegate_to_agent starts through delegate(), never run()")

    def delegate(self, call: DelegationCall) -> Started:
        return start_delegation(call, self.settings)

    def give_up(self, call: DelegationCall):
        return give_up_delegation(call)


@hookimpl
def nrllm_tools(settings):
    return [DelegateTool(settings)]
