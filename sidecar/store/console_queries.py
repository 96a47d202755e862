"""Reads the operator console needs beyond the API's (sidecar/console/), and the bulk insert its benchmark
fills a database with. Kept apart from the other store modules: nothing here changes what they do."""

import json
import uuid
from datetime import datetime, timedelta

from ..domain.clock import utcnow
from ..domain.vocabulary import RunStatus
from .db import transactional
from .models import ApiToken, DependencyWait, Outbound, PersonPause, Run, WorkerHeartbeat

WAITING = tuple(status.value for status in RunStatus if status.is_waiting)


def live_token(token_id: str) -> ApiToken | None:
    """The token with this id unless it was revoked (or removed): a console session re-checks it on every
    request, so a revoked token's sessions end at their next request."""
    return ApiToken.get_or_none(ApiToken.id == token_id, ApiToken.revoked_at.is_null())


def heartbeats() -> list[WorkerHeartbeat]:
    """Every worker's last heartbeat, the most recent first."""
    return list(WorkerHeartbeat.select().order_by(WorkerHeartbeat.seen_at.desc(), WorkerHeartbeat.id))


def waiting_runs(limit: int = 200) -> list[dict]:
    """Runs that wait (for a person or a remote agent), the longest waiting first, with what they wait on:
    the open pause or dependency wait, and for a dependency its journalled send."""
    rows = list(Run.select().where(Run.status.in_(WAITING)).order_by(Run.updated_at, Run.id).limit(limit))
    ids = [row.waiting_on for row in rows if row.waiting_on]
    waits = {w.id: w for w in DependencyWait.select().where(DependencyWait.id.in_(ids))} if ids else {}
    pauses = {p.id: p for p in PersonPause.select().where(PersonPause.id.in_(ids))} if ids else {}
    sends_ids = [w.outbound_id for w in waits.values()]
    sends = {o.id: o for o in Outbound.select().where(Outbound.id.in_(sends_ids))} if sends_ids else {}
    found = []
    for row in rows:
        wait = waits.get(row.waiting_on)
        found.append({"run": row, "wait": wait, "pause": pauses.get(row.waiting_on),
                      "send": sends.get(wait.outbound_id) if wait else None})
    return found


def outbound_rows(limit: int = 200) -> list[Outbound]:
    """The journal for the console: unknown outcomes first (they may need a resend), then newest first."""
    unknown = list(Outbound.select().where(Outbound.outcome == "outcome_unknown")
                   .order_by(Outbound.created_at.desc(), Outbound.id.desc()).limit(limit))
    rest = list(Outbound.select().where(Outbound.outcome != "outcome_unknown")
                .order_by(Outbound.created_at.desc(), Outbound.id.desc()).limit(max(0, limit - len(unknown))))
    return unknown + rest


@transactional
def bulk_insert_runs(count: int, *, owners: int = 50, origins: tuple = ("typo3", None), batch: int = 5000,
                     start: datetime | None = None) -> None:
    """Insert `count` finished-looking runs in multi-row INSERTs (benchmarks only: no events, no wake-up).
    Statuses, owners and origins rotate so that the console's filters have something to find."""
    statuses = [s.value for s in RunStatus]
    start = start or utcnow() - timedelta(seconds=count)
    spec = json.dumps({})
    for first in range(0, count, batch):
        rows = []
        for i in range(first, min(count, first + batch)):
            at = start + timedelta(seconds=i)
            rows.append({"id": str(uuid.uuid4()), "owner": f"be_user:{i % owners}", "workspace": "0",
                         "origin": origins[i % len(origins)], "input": f"run {i}", "spec": spec,
                         "status": statuses[i % len(statuses)], "created_at": at, "updated_at": at,
                         "last_event_sequence": 0})
        Run.insert_many(rows).execute()
