"""What the tests read back about a run: its row, its events, its tool results; and a step script's input."""

import json

from sidecar.store import events
from sidecar.store.models import Run, ToolResult


def run_row(run_id: str) -> Run:
    return Run.get(Run.id == run_id)


def event_kinds(run_id: str) -> list[str]:
    return [e["kind"] for e in events.list_events(run_id)]


def event_payloads(run_id: str, kind: str) -> list[dict]:
    return [e["payload"] for e in events.list_events(run_id) if e["kind"] == kind]


def sequences(run_id: str) -> list[int]:
    return [e["sequence"] for e in events.list_events(run_id)]


def tool_results(run_id: str) -> list[str]:
    return [r.result for r in ToolResult.select().where(ToolResult.run == run_id).order_by(ToolResult.id)]


def steps_input(*steps, output="done") -> str:
    """The input of a run the step executor (sidecar/testing.py) executes."""
    return json.dumps({"steps": list(steps), "output": output})
