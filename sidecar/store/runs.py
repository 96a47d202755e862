"""Creating and reading runs. Everything a segment writes goes through leases.py instead."""

import json
import uuid
from datetime import timedelta

from peewee import fn

from .. import wakeup
from ..domain.clock import utcnow
from ..domain.vocabulary import RunStatus
from . import events
from .db import transactional
from .models import Run

BUDGET_LIMITS = ("max_delegations", "max_bytes", "max_tokens", "max_cost", "max_iterations")


@transactional
def _insert_queued(values: dict) -> str:
    Run.insert(**values).execute()
    events.append(values["id"], [], "status", {"from": None, "to": RunStatus.QUEUED.value})
    return values["id"]


def create_run(
    owner: str,
    input: str,
    *,
    workspace: str = "0",
    origin: str | None = None,
    spec: dict | None = None,
    budget: dict | None = None,
    run_id: str | None = None,
) -> str:
    """Insert a queued run (and its first event) and wake this process's worker."""
    now = utcnow()
    budget = budget or {}
    values = {
        "id": run_id or str(uuid.uuid4()),
        "owner": owner,
        "workspace": workspace,
        "origin": origin,
        "input": input,
        "spec": json.dumps(spec or {}, sort_keys=True),
        "status": RunStatus.QUEUED.value,
        "created_at": now,
        "updated_at": now,
        "queued_at": now,
        **{name: budget[name] for name in BUDGET_LIMITS if budget.get(name) is not None},
    }
    if budget.get("deadline_seconds") is not None:
        values["deadline_at"] = now + timedelta(seconds=budget["deadline_seconds"])
    run_id = _insert_queued(values)
    wakeup.runs_queued()
    return run_id


def get_run(run_id: str) -> Run | None:
    return Run.get_or_none(Run.id == run_id)


def count_by_status() -> dict[str, int]:
    rows = Run.select(Run.status, fn.COUNT(Run.id).alias("n")).group_by(Run.status).tuples()
    return {status: n for status, n in rows}


def oldest_queued_seconds() -> float:
    oldest = Run.select(fn.MIN(Run.queued_at)).where(Run.status == RunStatus.QUEUED.value).scalar()
    if oldest is None:
        return 0.0
    return max(0.0, (utcnow() - oldest).total_seconds())
