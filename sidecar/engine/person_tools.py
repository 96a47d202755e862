"""The built-in tools that wait for a person: `ask_user` (input) and `write_note` (needs approval).

`ask_user` never runs: the loop pauses the run in `waiting_for_input` on its call, and the input the
person submits (checked against the call's schema) becomes the call's result, as compact JSON. The schema
is held to the policy on schemas from models (domain/input_schemas.py) when the call is made.
`write_note` is an ordinary non-idempotent write whose turn a person approves first; its effect is a
note stored with the run (a row and a `note` event), so that it can be seen to happen exactly once.
"""

from ..domain.input_schemas import schema_problem
from ..domain.vocabulary import ToolEffect
from ..store import notes
from .tools import Tool, ToolContext, ToolError


class AskUserTool(Tool):
    name = "ask_user"
    # It changes nothing outside the run: the run waits, and the person's answer is its result.
    effect = ToolEffect.READ_ONLY
    pauses_for_input = True
    description = ("Asks the person a question and waits for their answer, which must match the given JSON "
                   "schema; the answer comes back as JSON.")
    parameters = {
        "type": "object",
        "properties": {
            "question": {"type": "string", "minLength": 1, "description": "What to ask the person."},
            # The limits are the policy of domain/input_schemas.py, said where the model reads them.
            "schema": {"type": "object",
                       "description": "A JSON schema the answer must match, e.g. {\"type\": \"string\"}. "
                                      "Self-contained: refer to its own parts with #/ JSON pointers only (nothing "
                                      "is fetched); "
                                      "patterns in RE2 syntax (no lookaround, no backreferences); at most 64 KiB."},
        },
        "required": ["question", "schema"],
        "additionalProperties": False,
    }

    def argument_problem(self, arguments) -> str | None:
        problem = super().argument_problem(arguments)
        if problem is None and (bad := schema_problem(arguments["schema"])):
            problem = f"invalid arguments for {self.name}: schema: {bad}"
        return problem

    def input_request(self, arguments: dict) -> tuple[str, dict]:
        """The question and the schema the person is shown."""
        return arguments["question"], arguments["schema"]

    def run(self, arguments, context):
        raise ToolError("ask_user pauses the run for input; it never runs")


class WriteNoteTool(Tool):
    name = "write_note"
    effect = ToolEffect.NON_IDEMPOTENT_WRITE
    requires_approval = True
    description = "Writes a note with the given text to the run's notes. A person approves it first."
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string", "minLength": 1, "description": "The note's text."}},
        "required": ["text"],
        "additionalProperties": False,
    }

    def run(self, arguments: dict, context: ToolContext) -> str:
        context.write(notes.write, arguments["text"])
        return f"note written: {arguments['text']}"


def person_tools() -> list[Tool]:
    return [AskUserTool(), WriteNoteTool()]
