"""`serve --demo`: a host token, a demo run and the commands to follow it, for a first look.

A token's plaintext cannot be read back from its hash, so every demo start creates a new token: named
`demo-host`, or `demo-host-2`, `-3`, ... when earlier demos left theirs.
"""

import shlex

from .store import runs, tokens

DEMO_ACTOR = "be_user:1"
DEMO_TOKEN_NAME = "demo-host"
DEMO_SPEC = {
    "provider": "scripted",
    "script": [
        {"tool_calls": [{"id": "call_1", "name": "echo", "arguments": {"text": "hello from the nr-llm sidecar"}}]},
        {"content": "The echo tool answered: {last_tool_result}"},
    ],
    "tools": ["echo"],
    "on_denial": "continue",
}


def _free_token_name() -> str:
    name, n = DEMO_TOKEN_NAME, 1
    while tokens.exists(name):
        n += 1
        name = f"{DEMO_TOKEN_NAME}-{n}"
    return name


def prepare(base_url: str) -> str:
    """Create the token and the run; return the text to print (token, run id, commands)."""
    token, info = tokens.create(_free_token_name(), "host")
    run_id = runs.create_run(DEMO_ACTOR, "Say hello through the echo tool.", origin="demo", spec=DEMO_SPEC)
    api = f"{base_url}/api/v1"
    auth = f'-H "Authorization: Bearer $NRLLM_TOKEN" -H "X-Nrllm-Actor: {DEMO_ACTOR}"'
    body = shlex.quote('{"input": "hello again", "script": [{"content": "hi"}]}')
    return "\n".join([
        "",
        "nr-llm sidecar demo",
        f"  host token ({info.name}, shown only now): {token}",
        f"  actor:    {DEMO_ACTOR}",
        f"  demo run: {run_id}",
        "",
        "Follow the demo run:",
        f"  export NRLLM_TOKEN={token}",
        f"  curl -s {auth} {api}/runs/{run_id}",
        f"  curl -s {auth} {api}/runs/{run_id}/events",
        f'  curl -sN {auth} -H "Accept: text/event-stream" {api}/runs/{run_id}/events',
        "Create another run:",
        f'  curl -s {auth} -H "Content-Type: application/json" -d {body} {api}/runs',
        f"API documentation: {api}/openapi.json (with the same Authorization header)",
        "",
    ])
