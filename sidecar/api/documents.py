"""The contract's JSON documents (docs/http-api.md, "Runs") built from store rows (and store reads). No Flask:
the command line prints the same documents."""

import base64
import binascii
import json
from datetime import datetime

from ..domain.clock import rfc3339
from ..domain.vocabulary import RunStatus
from ..store import pauses, waits
from ..store.models import Run

_WAITING_KIND = {
    RunStatus.WAITING_FOR_INPUT: "input",
    RunStatus.WAITING_FOR_APPROVAL: "approval",
    RunStatus.WAITING_FOR_DEPENDENCY: "dependency",
}


def run_document(run: Run) -> dict:
    status = RunStatus(run.status)
    doc = {
        "id": run.id,
        "status": run.status,
        "owner": run.owner,
        "workspace": run.workspace,
        "origin": run.origin,
        "input": run.input,
        "output": run.output,
        "termination_reason": run.termination_reason,
        "created_at": rfc3339(run.created_at),
        "updated_at": rfc3339(run.updated_at),
        "finished_at": rfc3339(run.finished_at),
        "cancel_requested_at": rfc3339(run.cancel_requested_at),
        "lease": (
            {"holder": run.lease_holder, "expires_at": rfc3339(run.lease_expires_at)}
            if status.holds_lease and run.lease_holder
            else None
        ),
        "budget": {
            "deadline_at": rfc3339(run.deadline_at),
            "max_delegations": run.max_delegations,
            "delegations_used": run.delegations_used,
            "max_bytes": run.max_bytes,
            "bytes_used": run.bytes_used,
            "max_tokens": run.max_tokens,
            "tokens_used": run.tokens_used,
            "max_cost": run.max_cost,
            "cost_used": run.cost_used,
            "max_iterations": run.max_iterations,
            "iterations_used": run.iterations_used,
        },
    }
    if status.is_waiting:
        doc["waiting"] = {"kind": _WAITING_KIND[status]}
        details = waits.dependency_view(run) if status.awaits_dependency else pauses.person_view(run)
        if details:
            doc["waiting"].update(format_times(details))
    return doc


def format_times(details: dict) -> dict:
    return {key: rfc3339(value) if isinstance(value, datetime) else value for key, value in details.items()}


def event_document(event: dict) -> dict:
    return {"sequence": event["sequence"], "kind": event["kind"], "at": rfc3339(event["at"]),
            "payload": event["payload"]}


def encode_cursor(key: tuple[datetime, str] | None) -> str | None:
    """An opaque page cursor: clients pass it back unchanged and may not rely on what is inside."""
    if key is None:
        return None
    raw = json.dumps([key[0].isoformat(timespec="microseconds"), key[1]]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """Raises ValueError for anything encode_cursor did not make."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, run_id = json.loads(raw)
        key = datetime.fromisoformat(created_at), str(run_id)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise ValueError("not a cursor this server gave out") from exc
    if key[0].tzinfo is not None:
        raise ValueError("not a cursor this server gave out")
    return key
