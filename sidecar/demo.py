"""`serve --demo`: what the sidecar is for, on one machine: a run that waits for a remote agent and a run that
waits for a person's approval, with the commands to watch both and to approve the second.

- A small A2A agent of its own (sidecar/demo_agent.py) listens on 127.0.0.1 and is registered as the
  remote agent `demo-agent`. The address guard refuses loopback addresses unless NRLLM_REMOTE_ALLOW names
  them, so `serve --demo` adds exactly 127.0.0.1 to it for its own process (allow_demo_agent, called
  before the settings are read).
- The compatibility gate offers delegation only once the host reported its consumers: on a database where
  no host ever did, the demo records an empty report, as a host with no status consumers would.
- A host token named `demo-host`: its plaintext is kept in `<instance>/demo-token` (mode 0600), because
  only a hash is stored; a later start reuses it. A new one is made (`demo-host-2`, ...) only when that
  file is gone or its token no longer works (revoked, another database).
"""

import json
import logging
import os
import shlex
import threading
import time
import urllib.request
from pathlib import Path

from .config import Settings
from .demo_agent import DemoAgent
from .domain.errors import NotFound
from .domain.vocabulary import RunStatus
from .store import consumers, remote_agents, runs, tokens
from .store.remote_agents import AgentFields

log = logging.getLogger("nrllm_sidecar.demo")

DEMO_ACTOR = "be_user:1"
DEMO_TOKEN_NAME = "demo-host"
DEMO_TOKEN_FILE = "demo-token"
DEMO_AGENT_NAME = "demo-agent"
DEMO_AGENT_ADDRESS = "127.0.0.1"
DEMO_AGENT_POLL_SECONDS = 1.0
DEMO_AGENT_DEADLINE_SECONDS = 300.0
ANNOUNCE_POLL_SECONDS = 0.5

DELEGATION_SPEC = {
    "provider": "scripted",
    "script": [
        {"tool_calls": [{"id": "call_1", "name": "delegate_to_agent", "arguments": {
            "agent": DEMO_AGENT_NAME,
            "message": "Summarise: the sidecar holds every run that waits, for a person or for a remote agent."}}]},
        {"content": "The demo agent answered: {last_tool_result}"},
    ],
    "tools": ["delegate_to_agent"],
}
APPROVAL_SPEC = {
    "provider": "scripted",
    "script": [
        {"tool_calls": [{"id": "call_1", "name": "write_note", "arguments": {"text": "approved in the demo"}}]},
        {"content": "Done: {last_tool_result}"},
    ],
    "tools": ["write_note"],
    "on_denial": "continue",
}


def allow_demo_agent(env=os.environ) -> None:
    """Let this process's remote-agent calls reach the demo agent's address, and only that one more."""
    entries = [e.strip() for e in env.get("NRLLM_REMOTE_ALLOW", "").split(",") if e.strip()]
    if DEMO_AGENT_ADDRESS not in entries:
        env["NRLLM_REMOTE_ALLOW"] = ",".join([*entries, DEMO_AGENT_ADDRESS])


def _free_token_name() -> str:
    name, n = DEMO_TOKEN_NAME, 1
    while tokens.exists(name):
        n += 1
        name = f"{DEMO_TOKEN_NAME}-{n}"
    return name


def _demo_token(instance: Path) -> tuple[str, str, bool]:
    """(plaintext, name, reused): the token the file keeps while it still works, else a new one kept there."""
    path = instance / DEMO_TOKEN_FILE
    if path.exists():
        kept = path.read_text(encoding="utf-8").strip()
        info = tokens.lookup(kept) if kept else None
        if info is not None and info.role == "host":
            return kept, info.name, True
    plaintext, info = tokens.create(_free_token_name(), "host")
    instance.mkdir(parents=True, exist_ok=True)
    # Created 0600 (and made so if an old file was wider): the file holds a live host token.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(plaintext + "\n")
    return plaintext, info.name, False


def _register(agent: DemoAgent) -> None:
    fields = AgentFields(url=agent.url, poll_interval_seconds=DEMO_AGENT_POLL_SECONDS,
                         deadline_seconds=DEMO_AGENT_DEADLINE_SECONDS)
    try:
        remote_agents.update_agent(DEMO_AGENT_NAME, fields)  # an earlier demo's port is gone
    except NotFound:
        remote_agents.create_agent(DEMO_AGENT_NAME, fields)


def _open_gate_if_never_reported() -> bool:
    reported_at, _ = consumers.load_report()
    if reported_at is None:
        consumers.replace_report([])
        return True
    return False


def _announce_approval(run_id: str, api: str, auth: str, token: str) -> None:
    """Print the command that approves the run once it waits for approval (the pause id exists only then).

    It follows the run over the API, as a host would, and never through the database: under `serve` this
    thread lives in the server's main process, whose connections are closed before the HTTP workers are
    forked from it."""
    request = urllib.request.Request(f"{api}/runs/{run_id}",
                                     headers={"Authorization": f"Bearer {token}", "X-Nrllm-Actor": DEMO_ACTOR})
    while True:
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                run = json.load(answer)
        except (OSError, ValueError):
            run = None  # not listening yet, or a passing failure: ask again
        if run is not None and RunStatus(run["status"]).is_terminal:
            return
        waiting = (run or {}).get("waiting") or {}
        if run is not None and run["status"] == RunStatus.WAITING_FOR_APPROVAL:
            body = json.dumps({"pause_id": waiting["pause_id"], "generation": waiting["generation"],
                               "decision": "approve", "turn_digest": waiting["turn_digest"]})
            print("\n".join([
                "",
                "The approval run waits for approval of write_note. Approve it (the run then completes):",
                f"  curl -s {auth} -H \"Content-Type: application/json\" -d {shlex.quote(body)} "
                f"{api}/runs/{run_id}/decision",
                "",
            ]), flush=True)
            return
        time.sleep(ANNOUNCE_POLL_SECONDS)


def prepare(settings: Settings, base_url: str) -> str:
    """Start the demo agent, register it, make the token and the two runs; return the text to print. A thread
    prints the approval command once the second run waits for it."""
    token, token_name, reused = _demo_token(settings.instance_path)
    agent = DemoAgent().start()
    _register(agent)
    gate_opened = _open_gate_if_never_reported()
    delegating = runs.create_run(DEMO_ACTOR, "Ask the demo agent for a summary.", origin="demo",
                                 spec=DELEGATION_SPEC)
    approving = runs.create_run(DEMO_ACTOR, "Write a note, once a person approves.", origin="demo",
                                spec=APPROVAL_SPEC)
    api = f"{base_url}/api/v1"
    auth = f'-H "Authorization: Bearer $NRLLM_TOKEN" -H "X-Nrllm-Actor: {DEMO_ACTOR}"'
    threading.Thread(target=_announce_approval, args=(approving, api, auth, token), name="demo-announce",
                     daemon=True).start()
    body = shlex.quote('{"input": "hello again", "script": [{"content": "hi"}]}')
    token_file = settings.instance_path / DEMO_TOKEN_FILE
    return "\n".join([
        "",
        "nr-llm sidecar demo",
        f"  host token:     {token_name}, " + (f"reused from {token_file}" if reused else f"kept in {token_file}"),
        f"  actor:          {DEMO_ACTOR}",
        f"  remote agent:   {DEMO_AGENT_NAME} at {agent.url} (an A2A agent in this process; it answers after "
        f"{agent.work_seconds:g} s)",
        f"  delegation run: {delegating} (waits for {DEMO_AGENT_NAME}, then completes with its answer)",
        f"  approval run:   {approving} (waits until a person approves its write_note call)",
        *(["  (no host had reported its consumers: the demo reported none, which lets runs delegate)"]
          if gate_opened else []),
        "",
        f"  export NRLLM_TOKEN={token}",
        "Watch the delegation run wait (waiting_for_dependency), then complete:",
        f"  curl -s {auth} {api}/runs/{delegating}",
        f'  curl -sN {auth} -H "Accept: text/event-stream" {api}/runs/{delegating}/events',
        "Watch the approval run wait for a person (waiting_for_approval), in the run and in the inbox:",
        f"  curl -s {auth} {api}/runs/{approving}",
        f"  curl -s {auth} {api}/inbox",
        "The command that approves it is printed below as soon as the run waits.",
        "Create another run:",
        f'  curl -s {auth} -H "Content-Type: application/json" -d {body} {api}/runs',
        f"API documentation: {api}/docs in a browser (Authorize with the token), {api}/openapi.json",
        "",
    ])
