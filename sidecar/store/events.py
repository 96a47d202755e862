"""The per-run event log. Sequences are gap-free from 1: the run row's counter is bumped in the same
transaction that inserts the event, under the same guard as the write the event describes."""

import functools
import json
import logging
from collections.abc import Callable

from ..application import current
from ..domain.clock import utcnow
from . import statements
from .db import database, dialect, updated_value
from .models import Run, RunEvent

log = logging.getLogger("nrllm_sidecar.store")

# Told of each event of a kind once its transaction commits: (run_id, payload). One listener per kind:
# "status" tells the plugins of status changes, "outbound" counts the journal's outcomes for /metrics.
# The application keeps them (Application.event_listeners).
EventListener = Callable[[str, dict], None]


def listen(kind: str, listener: EventListener | None) -> None:
    """Install the listener of events of `kind` (bootstrap does); None removes it."""
    listeners = current().event_listeners
    if listener is None:
        listeners.pop(kind, None)
    else:
        listeners[kind] = listener


def _tell(listener: EventListener, run_id: str, kind: str, payload: dict) -> None:
    try:
        listener(run_id, payload)
    except Exception:  # a listener's failure must not fail the write that already committed
        log.exception("listener of %s events failed for run %s", kind, run_id)


def append(run_id: str, guard, kind: str, payload: dict, *, also: dict | None = None) -> int | None:
    """Append one event if the run row still matches `guard` (a list of peewee expressions); `also`, the
    columns of the run the event describes, are written by the same UPDATE (one statement, not two).

    Returns the sequence, or None when the guard no longer holds (nothing written). Call inside a
    write transaction.
    """
    bump = Run.update(last_event_sequence=Run.last_event_sequence + 1, **(also or {})).where(Run.id == run_id, *guard)
    sequence = updated_value(bump, Run.last_event_sequence, run_id)
    if sequence is None:
        return None
    record(run_id, sequence, kind, payload)
    return sequence


def record(run_id: str, sequence: int, kind: str, payload: dict) -> None:
    """Insert the event numbered `sequence`, a number the caller took by bumping the run's counter in this
    transaction (append() does both; the lease's hot path bumps the counter with the write it describes)."""
    record_many([(run_id, sequence, kind, payload)])


def record_many(numbered_events: list[tuple[str, int, str, dict]]) -> None:
    """record() of several events, each `(run_id, sequence, kind, payload)`, in one INSERT: the events a
    write transaction takes its sequences for at once (a suspension's three, a resolution's, a claim's runs)."""
    at = utcnow()
    statements.insert_events([(run_id, sequence, kind, at, json.dumps(payload, sort_keys=True))
                              for run_id, sequence, kind, payload in numbered_events])
    listeners = current().event_listeners
    for run_id, _, kind, payload in numbered_events:
        if (listener := listeners.get(kind)) is not None:
            database.after_commit(functools.partial(_tell, listener, run_id, kind, payload))


def numbered(run_id: str, last: int, described_by: list[tuple[str, dict]]) -> list[tuple[str, int, str, dict]]:
    """The events `described_by` ((kind, payload) in their order) of one run numbered up to `last`, for
    record_many()."""
    first = last - len(described_by) + 1
    return [(run_id, sequence, kind, payload) for sequence, (kind, payload) in enumerate(described_by, start=first)]


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


POSITIONS_CHUNK = 500


def positions(run_ids) -> dict[str, int]:
    """The sequence of each run's last event (runs that no longer exist are left out): what an event stream's
    poll compares to tell which runs moved. One indexed read per chunk of ids."""
    ids = list(run_ids)
    found: dict[str, int] = {}
    for start in range(0, len(ids), POSITIONS_CHUNK):
        chunk = ids[start:start + POSITIONS_CHUNK]
        found.update(Run.select(Run.id, Run.last_event_sequence).where(Run.id.in_(chunk)).tuples())
    return found


def change_marker() -> int | None:
    """SQLite: a number that changes whenever another connection commits to the file (PRAGMA data_version),
    so a poll can skip reading positions while nothing was written. Meaningful only on a connection kept
    open between calls. None elsewhere: there is nothing as cheap."""
    if dialect() != "sqlite":
        return None
    return database.execute_sql("PRAGMA data_version").fetchone()[0]
