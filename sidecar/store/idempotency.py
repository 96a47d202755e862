"""Idempotency keys: the first answer to a keyed request, replayed for the same key and body.

The key's record is inserted in the same transaction as the work it guards, and the answer is written
there too, so a record is never seen half-done: a concurrent request with the same key blocks on the
unique (scope, key) index until the first commits, then fails its insert with an IntegrityError and
its retry reads the finished answer. Records live for 24 hours.

A decide-now decision is the exception: its answer (the Run when the segment ends) exists only after the
transaction that stores the decision. Its action answers status None; the record is then committed
without an answer and completed later (`complete`), and until then a replay gets an Answer whose status
is None (the caller follows the run instead of replaying).
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from peewee import IntegrityError

from ..application import current
from ..domain.clock import utcnow
from ..domain.errors import KeyReused
from .db import transactional
from .models import IdempotencyRecord

RETENTION = timedelta(hours=24)
PURGE_EVERY_SECONDS = 60.0


@dataclass(frozen=True)
class Answer:
    status: int | None  # None: the first request has not answered yet (a decide-now still continuing)
    body: dict | None
    replayed: bool


def run_once(scope: str, key: str, request_sha256: str, action: Callable[[], tuple[int, dict]]) -> Answer:
    """Answer a keyed request: the stored answer if the key was used with this request, else action().

    action runs inside the transaction that records the key, must do database work only (it may run
    again when the transaction is retried) and returns (status, JSON body).
    """
    _maybe_purge()
    for _ in range(3):
        try:
            return _attempt(scope, key, request_sha256, action)
        except IntegrityError:
            # Another request with this key committed first: the next attempt finds its answer.
            continue
    raise RuntimeError("an idempotency record kept conflicting; giving up")


@transactional
def _attempt(scope, key, request_sha256, action) -> Answer:
    existing = IdempotencyRecord.get_or_none(IdempotencyRecord.scope == scope, IdempotencyRecord.key == key)
    if existing is not None and existing.created_at < utcnow() - RETENTION:
        IdempotencyRecord.delete().where(IdempotencyRecord.id == existing.id).execute()
        existing = None
    if existing is not None:
        if existing.request_sha256 != request_sha256:
            raise KeyReused("this Idempotency-Key was used with another request")
        if existing.status_code is None:
            return Answer(None, None, replayed=True)
        return Answer(existing.status_code, json.loads(existing.response_body), replayed=True)
    record_id = IdempotencyRecord.insert(
        scope=scope, key=key, request_sha256=request_sha256, created_at=utcnow()
    ).execute()
    status, body = action()
    if status is not None:
        IdempotencyRecord.update(status_code=status, response_body=json.dumps(body)).where(
            IdempotencyRecord.id == record_id
        ).execute()
    return Answer(status, body, replayed=False)


@transactional
def complete(scope: str, key: str, status: int, body: dict) -> None:
    """Record the answer of a request whose action answered later (status None at first)."""
    IdempotencyRecord.update(status_code=status, response_body=json.dumps(body)).where(
        IdempotencyRecord.scope == scope, IdempotencyRecord.key == key, IdempotencyRecord.status_code.is_null()
    ).execute()


def _maybe_purge() -> None:
    """Delete expired records at most once a minute per application, outside the request's transaction."""
    app = current()
    with app.lock:
        if time.monotonic() - app.idempotency_purged_at < PURGE_EVERY_SECONDS:
            return
        app.idempotency_purged_at = time.monotonic()
    purge_expired()


@transactional
def purge_expired() -> int:
    return IdempotencyRecord.delete().where(IdempotencyRecord.created_at < utcnow() - RETENTION).execute()
