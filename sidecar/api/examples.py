"""The examples of the OpenAPI document: one for every request body and every answer. tests/test_openapi_contract.py
checks that every operation has them and that each one is valid against its own schema, so an example cannot
drift from the shape it shows."""

from .. import __version__
from .error_codes import ERROR_CODES

RUN_ID = "0f5c8d3e-6a4b-4c1e-9d2a-7b8e9f0a1b2c"
PAUSE_ID = "5b1e2d3c-4f5a-4b6c-8d7e-9f0a1b2c3d4e"
RECEIPT_ID = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
OUTBOUND_ID = "3c2b1a09-8f7e-4d6c-9b5a-4f3e2d1c0b9a"
AT = "2026-12-01T10:00:00.123456Z"
LATER = "2026-12-01T10:00:02.500000Z"
DIGEST = "4e1f0c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"

RUN_CREATE = {
    "input": "Write a note that the page was reviewed",
    "provider": "scripted",
    "script": [{"tool_calls": [{"id": "call_1", "name": "write_note", "arguments": {"text": "page 42 reviewed"}}]},
               {"content": "Done: {last_tool_result}"}],
    "tools": ["write_note"],
    "origin": "typo3:page-module",
    "on_denial": "continue",
    "budget": {"deadline_seconds": 3600, "max_iterations": 20},
}

_BUDGET_STATE = {
    "deadline_at": "2026-12-01T11:00:00.123456Z", "max_delegations": None, "delegations_used": 0,
    "max_bytes": None, "bytes_used": 0, "max_tokens": None, "tokens_used": 0, "max_cost": None, "cost_used": 0.0,
    "max_iterations": 20, "iterations_used": 0,
}

RUN = {
    "id": RUN_ID, "status": "queued", "owner": "be_user:7", "workspace": "0", "origin": "typo3:page-module",
    "input": RUN_CREATE["input"], "output": None, "termination_reason": None, "created_at": AT, "updated_at": AT,
    "finished_at": None, "cancel_requested_at": None, "lease": None, "budget": _BUDGET_STATE,
}

PENDING_CALLS = [{"id": "call_1", "name": "write_note", "arguments": {"text": "page 42 reviewed"},
                  "effect": "non_idempotent_write"}]

RUN_WAITING = {
    **RUN, "status": "waiting_for_approval", "updated_at": LATER,
    "budget": {**_BUDGET_STATE, "iterations_used": 1},
    "waiting": {"kind": "approval", "pause_id": PAUSE_ID, "generation": 1, "since": LATER,
                "turn_digest": DIGEST, "pending_calls": PENDING_CALLS},
}

RUN_COMPLETED = {
    **RUN, "status": "completed", "output": "Done: note written: page 42 reviewed", "termination_reason": "completed",
    "updated_at": LATER, "finished_at": LATER, "budget": {**_BUDGET_STATE, "iterations_used": 2},
}

RUN_CANCELLED = {**RUN, "status": "cancelled", "termination_reason": "cancelled", "updated_at": LATER,
                 "finished_at": LATER, "cancel_requested_at": LATER}

RUN_LIST = {"items": [RUN_WAITING], "next_cursor": None}

EVENTS = {"items": [
    {"sequence": 1, "kind": "status", "at": AT, "payload": {"from": None, "to": "queued"}},
    {"sequence": 2, "kind": "status", "at": AT, "payload": {"from": "queued", "to": "running"}},
    {"sequence": 3, "kind": "llm", "at": AT, "payload": {
        "index": 0, "provider": "scripted", "content": None, "tokens": 0, "cost": 0.0,
        "tool_calls": [{"id": "call_1", "name": "write_note", "arguments": {"text": "page 42 reviewed"}}]}},
    {"sequence": 4, "kind": "pause", "at": LATER, "payload": {
        "kind": "approval", "pause_id": PAUSE_ID, "generation": 1, "turn_index": 0, "turn_digest": DIGEST,
        "pending_calls": PENDING_CALLS}},
    {"sequence": 5, "kind": "status", "at": LATER, "payload": {"from": "running", "to": "waiting_for_approval"}},
]}

EVENT_STREAM = (
    f'id: 5\nevent: run_event\ndata: {{"sequence": 5, "kind": "status", "at": "{LATER}", "payload": '
    '{"from": "running", "to": "waiting_for_approval"}}\n\n'
    f'event: run\ndata: {{"id": "{RUN_ID}", "status": "waiting_for_approval", "...": "..."}}\n\n')

INBOX = {"items": [{"run_id": RUN_ID, "pause_id": PAUSE_ID, "generation": 1, "kind": "approval",
                    "turn_digest": DIGEST, "pending_calls": PENDING_CALLS, "since": LATER}]}

DECISION = {"pause_id": PAUSE_ID, "generation": 1, "decision": "approve", "turn_digest": DIGEST,
            "comment": "fine", "mode": "now"}

RECEIPT = {"receipt_id": RECEIPT_ID, "run_id": RUN_ID, "pause_id": PAUSE_ID, "generation": 1,
           "decision": "approve", "stored_at": LATER}

GRANTS_BODY = {"workspace": "0", "grants": ["agent:approve", "agent:input"]}
GRANTS = {"actor": "be_user:9", "workspace": "0", "grants": ["agent:approve", "agent:input"]}

CONSUMER_REPORT = {"consumers": [
    {"name": "nr_mcp_agent", "version": "0.16.0"},
    {"name": "typo3_run_views", "version": "1.0.0",
     "understands": ["queued", "running", "waiting_for_input", "waiting_for_approval", "waiting_for_dependency",
                     "completed", "failed", "cancelled"]},
]}
CONSUMER_VERSION = {"version": "0.16.0"}
_NR_MCP_AGENT = {"name": "nr_mcp_agent", "version": "0.16.0",
                 "understands": ["queued", "running", "waiting_for_input", "waiting_for_approval",
                                 "waiting_for_dependency", "completed", "failed", "cancelled"],
                 "declared_by": "plugin nr_mcp_agent"}
CONSUMERS = {"reported_at": AT, "consumers": [_NR_MCP_AGENT]}

COMPAT = {
    "reported_at": AT,
    "statuses": {"waiting_for_dependency": {
        "writable": False,
        "blocked_by": [{"consumer": "nr_mcp_agent", "version": "0.15.1", "understands_from": "0.16.0"}]}},
    "delegation": {"offered": False, "blocked_origins": [],
                   "reason": "nr_mcp_agent 0.15.1 is loaded and does not handle waiting_for_dependency; it does "
                             "from 0.16.0 (see docs/upgrading.md)"},
    "consumers": [{**_NR_MCP_AGENT, "version": "0.15.1",
                   "understands": ["queued", "running", "waiting_for_input", "waiting_for_approval", "completed",
                                   "failed", "cancelled"]}],
    "runs_in_unreadable_status": 0,
}

AGENT_CREATE = {"name": "research", "url": "https://agents.example/research", "poll_interval_seconds": 30,
                "deadline_seconds": 3600, "auth": {"header": "Authorization", "value": "Bearer s3cr3t"},
                "push": True}
AGENT_REPLACE = {key: value for key, value in AGENT_CREATE.items() if key != "name"}
AGENT = {"name": "research", "url": "https://agents.example/research", "poll_interval_seconds": 30.0,
         "deadline_seconds": 3600.0, "push": True, "auth": {"header": "Authorization", "value_set": True},
         "endpoint": {"rpc_url": "https://agents.example/research/a2a", "protocol_version": "1.0",
                      "push_supported": True},
         "created_at": AT, "updated_at": AT}
AGENTS = {"items": [AGENT]}

OUTBOUND = {"id": OUTBOUND_ID, "kind": "send", "owner": "be_user:7", "run_id": RUN_ID, "remote_agent": "research",
            "message_id": "b7e6d5c4-b3a2-4190-8f7e-6d5c4b3a2190",
            "request_sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "outcome": "outcome_unknown", "remote_task_id": None, "created_at": AT, "sent_at": AT,
            "error": "the answer was lost: read timed out", "resend_of": None}
OUTBOUND_RESENT = {**OUTBOUND, "id": "6e5d4c3b-2a19-4f08-9e7d-6c5b4a392817", "outcome": "pending",
                   "message_id": "c8f7e6d5-c4b3-4a21-9f8e-7d6c5b4a3921", "sent_at": None, "error": None,
                   "resend_of": OUTBOUND_ID}
OUTBOUNDS = {"items": [OUTBOUND]}

HEALTH = {"status": "ok", "database": "ok", "workers_alive": 2, "oldest_queued_seconds": 0.4,
          "unsealable_checkpoints": 0, "version": __version__, "database_unavailable_seconds": 0.0,
          "failing_agents": []}
HEALTH_UNAVAILABLE = {**HEALTH, "status": "degraded", "database": "unavailable", "workers_alive": 0,
                      "oldest_queued_seconds": 0.0, "database_unavailable_seconds": 12.5}

PUSH = {"statusUpdate": {"taskId": "task-7", "contextId": "ctx-7",
                         "status": {"state": "TASK_STATE_COMPLETED", "timestamp": AT}}}

METRICS = ('# HELP nrllm_runs Runs by status (counted in the database)\n# TYPE nrllm_runs gauge\n'
           'nrllm_runs{status="queued"} 0.0\nnrllm_runs{status="waiting_for_approval"} 1.0\n')

_ERROR_FIELDS = {"validation_failed": {"budget.max_iterations": ["Must be greater than or equal to 1."]},
                 "invalid_input": {"input.pages": ["'pages' is a required property"]}}


def error_examples(status: int) -> dict:
    """The OpenAPI `examples` of an error answer with this status: one per code it may carry."""
    return {
        code: {"summary": when, "value": {"code": code, "message": when,
                                          **({"errors": _ERROR_FIELDS[code]} if code in _ERROR_FIELDS else {})}}
        for code, (answered, when) in ERROR_CODES.items() if answered == status
    }
