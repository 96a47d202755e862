"""Worker heartbeat rows: health tells from them whether any worker is alive."""

from ..domain.clock import utcnow
from .models import WorkerHeartbeat


def beat(worker_id: str, host: str, pid: int, concurrency: int) -> None:
    now = utcnow()
    updated = WorkerHeartbeat.update(seen_at=now).where(WorkerHeartbeat.id == worker_id).execute()
    if updated == 0:
        WorkerHeartbeat.insert(
            id=worker_id, host=host, pid=pid, concurrency=concurrency, started_at=now, seen_at=now
        ).on_conflict_ignore().execute()


def forget(worker_id: str) -> None:
    WorkerHeartbeat.delete().where(WorkerHeartbeat.id == worker_id).execute()


def alive_count(window) -> int:
    return WorkerHeartbeat.select().where(WorkerHeartbeat.seen_at > utcnow() - window).count()
