"""Derived ids of a delegation: a retried segment derives the same ones and lands on the same journal row."""

import uuid

# Fixed namespace: message and context ids are derived, so a retried segment derives the same ones.
ID_NAMESPACE = uuid.UUID("2f8c8f1e-8d6b-4f6e-9b1a-281281281281")


def message_id_for(run_id: str, tool_call_id: str, resend_count: int = 0) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, f"message/{run_id}/{tool_call_id}/{resend_count}"))


def context_id_for(run_id: str, tool_call_id: str) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, f"context/{run_id}/{tool_call_id}"))
