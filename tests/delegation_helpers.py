"""Plain helpers of the delegation tests (the fixtures are in delegation_support.py)."""

from sidecar.store import remote_agents, runs
from sidecar.store.events import list_events
from sidecar.store.models import ToolResult
from sidecar.store.remote_agents import AgentFields

A2A_DATABASES = ["sqlite", "postgresql"]  # the A2A flows run on these (architecture.md, "Real parts")


def register(name: str, url: str, *, poll: float = 0.2, deadline: float = 600.0, push: bool = False) -> None:
    remote_agents.create_agent(name, AgentFields(url=url, poll_interval_seconds=poll, deadline_seconds=deadline,
                                                 push=push))


def delegating_run(agent: str, message: str, *, then: str = "Remote said: {last_tool_result}", **budget) -> str:
    script = [
        {"tool_calls": [{"id": "call_1", "name": "delegate_to_agent",
                         "arguments": {"agent": agent, "message": message}}]},
        {"content": then},
    ]
    return runs.create_run("be_user:7", f"delegate {message}", spec={"provider": "scripted", "script": script},
                           budget=budget)


def tool_results(run_id: str) -> list[str]:
    return [r.result for r in ToolResult.select().where(ToolResult.run == run_id).order_by(ToolResult.id)]


def events_of(run_id: str, kind: str) -> list[dict]:
    return [e["payload"] for e in list_events(run_id) if e["kind"] == kind]
