"""The per-run event log. Sequences are gap-free from 1: the run row's counter is bumped in the same
transaction that inserts the event, under the same guard as the write the event describes."""

import json

from ..domain.clock import utcnow
from .models import Run, RunEvent


def append(run_id: str, guard, kind: str, payload: dict) -> int | None:
    """Append one event if the run row still matches `guard` (a list of peewee expressions).

    Returns the sequence, or None when the guard no longer holds (nothing written). Call inside a
    write transaction.
    """
    bumped = (
        Run.update(last_event_sequence=Run.last_event_sequence + 1)
        .where(Run.id == run_id, *guard)
        .execute()
    )
    if bumped != 1:
        return None
    sequence = Run.select(Run.last_event_sequence).where(Run.id == run_id).scalar()
    RunEvent.insert(
        run=run_id, sequence=sequence, kind=kind, at=utcnow(), payload=json.dumps(payload, sort_keys=True)
    ).execute()
    return sequence


def list_events(run_id: str, after: int = 0, limit: int = 1000) -> list[dict]:
    query = (
        RunEvent.select()
        .where(RunEvent.run == run_id, RunEvent.sequence > after)
        .order_by(RunEvent.sequence)
        .limit(limit)
    )
    return [
        {"sequence": e.sequence, "kind": e.kind, "at": e.at, "payload": json.loads(e.payload)}
        for e in query
    ]
