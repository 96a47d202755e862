"""Claims, fenced writes, heartbeats and the reaper: every write a segment makes.

A claim is one conditional UPDATE that moves a run to `running` and gives it a holder, an expiry and a
new lease epoch. Every later write of that segment carries `WHERE id=? AND lease_epoch=? AND
status='running'`: zero rows means the lease is lost, and LeaseLost is raised before anything else is
written. No transaction here is held across network I/O: callers do I/O between these calls.
"""

from dataclasses import dataclass

from .. import wakeup
from ..domain.clock import utcnow
from ..domain.errors import LeaseLost
from ..domain.lease import ClaimBatch, LeasePolicy, hand_back_verdict, reap_verdict
from ..domain.vocabulary import RunStatus
from . import events, statements, status_guard
from .db import dialect, supports_returning, transactional
from .models import Run

RUNNING = RunStatus.RUNNING.value
QUEUED = RunStatus.QUEUED.value


@dataclass(frozen=True)
class Claim:
    """A held lease: the fencing token every write of the segment carries."""

    run_id: str
    epoch: int
    holder: str


def worth_claiming() -> bool:
    """Whether a claim could find a run now. On SQLite a claim is a write transaction that holds the one
    writer's lock, and a wake-up that rings every worker process finds the run gone in all but one of them:
    a read without a lock answers first. On a server database a claim that finds nothing locks nothing and
    costs a round trip like that read would, which a claim that finds a run (the usual case under load)
    would pay on top: True without asking."""
    return dialect() != "sqlite" or statements.queued_run_exists()


@transactional
def claim_queued(holder: str, limit: int, lease: LeasePolicy) -> ClaimBatch:
    """Claim up to `limit` queued runs, oldest first. Each run is claimed by exactly one holder."""
    if limit <= 0:
        return ClaimBatch()
    now = utcnow()
    claims = ClaimBatch()
    values = {"status": RUNNING, "lease_holder": holder, "lease_expires_at": lease.expiry(now), "queued_at": None,
              "updated_at": now}
    add = {"lease_epoch": 1, "last_event_sequence": 1}
    if supports_returning():
        # One statement picks and claims the runs and returns their rows as written: the segments' runs,
        # without a read of their own after the commit.
        rows = statements.claim_queued_rows(limit, values, add)
        claims.rows.update((run.id, run) for run in rows)
        claimed = [(run.id, run.lease_epoch, run.last_event_sequence) for run in rows]
    else:
        claimed = []
        for run_id in statements.queued_run_ids(limit):
            written = statements.update_run(run_id, where={"status": QUEUED}, values=values, add=add,
                                            returning=("lease_epoch", "last_event_sequence"))
            if written is None:
                claims.conflicts += 1
                continue
            claimed.append((run_id, *written))
    events.record_many([(run_id, sequence, "status", {"from": QUEUED, "to": RUNNING})
                        for run_id, _, sequence in claimed])
    claims.extend(Claim(run_id, epoch, holder) for run_id, epoch, _ in claimed)
    return claims


def fence(claim: Claim) -> list:
    return [Run.id == claim.run_id, Run.lease_epoch == claim.epoch, Run.status == RUNNING]


def fenced_update(claim: Claim, **values) -> None:
    written = Run.update(**values, updated_at=utcnow()).where(*fence(claim)).execute()
    if written != 1:
        raise LeaseLost(claim.run_id, claim.epoch)


def fenced_update_with_event(claim: Claim, kind: str, payload: dict, *, add: dict | None = None, **values) -> int:
    """fenced_update() and the event that describes it: one UPDATE of the run row (which also takes the event's
    sequence and adds `add`'s amounts to its counters) and the event's INSERT. Returns the event's sequence."""
    (sequence,) = fenced_update_returning(claim, kind, payload, (), add=add, **values)
    return sequence


def fenced_update_returning(claim: Claim, kind: str, payload: dict, columns: tuple[str, ...], *,
                            add: dict | None = None, **values) -> tuple:
    """fenced_update_with_event(), which also reads `columns` of the run row as written (in the same statement
    where UPDATE ... RETURNING exists): the event's sequence, then their values as the database returned them."""
    return fenced_update_with_events(claim, [(kind, payload)], columns, add=add, **values)


def fenced_update_with_events(claim: Claim, described_by: list[tuple[str, dict]], columns: tuple[str, ...] = (),
                              *, add: dict | None = None, with_report_time: bool = False, **values) -> tuple:
    """fenced_update_returning() for a write that several events describe, (kind, payload) in their order: the one
    UPDATE takes all their sequences, so one statement less for each event after the first. Returns the last
    event's sequence, then `columns`, then with `with_report_time` the consumer report's time
    (statements.update_run)."""
    written = statements.update_run(
        claim.run_id,
        where={"lease_epoch": claim.epoch, "status": RUNNING},
        values={**values, "updated_at": utcnow()},
        add={**(add or {}), "last_event_sequence": len(described_by)},
        returning=("last_event_sequence", *columns),
        with_report_time=with_report_time,
    )
    if written is None:
        raise LeaseLost(claim.run_id, claim.epoch)
    events.record_many(events.numbered(claim.run_id, written[0], described_by))
    return written


@transactional
def append_event(claim: Claim, kind: str, payload: dict) -> int:
    return fenced_update_with_event(claim, kind, payload)


@transactional
def update_run_fenced(claim: Claim, **values) -> None:
    """Write columns of the claimed run (budget counters, pending effect, ...) under the fence."""
    fenced_update(claim, **values)


def renew(claim: Claim, lease: LeasePolicy) -> bool:
    """Heartbeat: push the expiry forward. False when the lease is lost (the segment must stop)."""
    now = utcnow()
    renewed = (
        Run.update(lease_expires_at=lease.expiry(now), updated_at=now).where(*fence(claim)).execute()
    )
    return renewed == 1


@transactional
def finish(claim: Claim, status: RunStatus, *, output: str | None = None, reason: str | None = None) -> None:
    """End the run (terminal status) under the fence."""
    write_finish(claim, status, output=output, reason=reason)


def write_finish(claim: Claim, status: RunStatus, *, output: str | None = None, reason: str | None = None,
                 events_before: tuple = (), add: dict | None = None) -> None:
    """finish(), inside the caller's transaction. The write the segment ends with may ride on the same UPDATE
    (turns.save_final_turn: the final turn): its events, (kind, payload), come before the status's, and
    `add`'s amounts are added to the run's counters."""
    if not status.is_terminal:
        raise ValueError(f"finish() takes a terminal status, not {status}")
    fenced_update_with_events(
        claim,
        [*events_before, ("status", {"from": RUNNING, "to": status.value})],
        add=add,
        status=status.value,
        output=output,
        termination_reason=reason,
        lease_holder=None,
        lease_expires_at=None,
        pending_effect=None,
        finished_at=utcnow(),
    )


@transactional
def suspend_run(claim: Claim, status: RunStatus, **values) -> None:
    """End the segment in a waiting status: the lease is released and nobody holds the run.

    A status outside the base vocabulary is written only if the compatibility gate allows it for the
    run's origin, checked in this same transaction (StatusNotWritable otherwise, nothing written).
    """
    if not status.is_waiting:
        raise ValueError(f"suspend_run() takes a waiting status, not {status}")
    origin = Run.select(Run.origin).where(Run.id == claim.run_id).scalar()
    status_guard.check(status.value, origin)
    _status_event_or_lost(claim, status.value)
    fenced_update(claim, status=status.value, lease_holder=None, lease_expires_at=None, **values)


def _status_event_or_lost(claim: Claim, new: str) -> None:
    if events.append(claim.run_id, fence(claim), "status", {"from": RUNNING, "to": new}) is None:
        raise LeaseLost(claim.run_id, claim.epoch)


@transactional
def _hand_back(claim: Claim, grace_seconds: float) -> str:
    # The `handed_back` event comes first: its fenced UPDATE locks the run row, so the pending effect read next
    # is the one a write of the holder committed last (none can commit in between), and the verdict holds.
    said = {"holder": claim.holder, "epoch": claim.epoch, "grace_seconds": grace_seconds}
    if events.append(claim.run_id, fence(claim), "handed_back", said) is None:
        raise LeaseLost(claim.run_id, claim.epoch)
    pending_effect = Run.select(Run.pending_effect).where(Run.id == claim.run_id).scalar()
    verdict = hand_back_verdict(pending_effect)
    if verdict.requeue:
        _status_event_or_lost(claim, QUEUED)
        events.append(claim.run_id, fence(claim), "requeued", {"reason": "released", "holder": claim.holder})
        values = dict(status=QUEUED, queued_at=utcnow())
        action = "requeued"
    else:
        _status_event_or_lost(claim, RunStatus.FAILED.value)
        values = dict(status=RunStatus.FAILED.value, termination_reason=verdict.termination_reason,
                      finished_at=utcnow())
        action = verdict.termination_reason
    fenced_update(claim, **values, lease_holder=None, lease_expires_at=None, lease_epoch=Run.lease_epoch + 1)
    return action


def hand_back(claim: Claim, grace_seconds: float) -> str:
    """A stopping worker gives a run it still holds back, at once: queued again for any worker (costing no
    requeue), or failed `not_retryable` when a non-idempotent write is in flight, exactly as the reaper would.
    The epoch moves on, so every later write of the old holder is fenced out. Returns the action (`requeued`
    or the termination reason); LeaseLost when the run is no longer held by `claim` (it finished meanwhile)."""
    action = _hand_back(claim, grace_seconds)
    if action == "requeued":
        wakeup.runs_queued()
    return action


@dataclass(frozen=True)
class Reaped:
    run_id: str
    holder: str | None
    action: str  # "requeued" or the termination reason


@transactional
def _reap_one(run_id: str, now) -> Reaped | None:
    row = Run.get_or_none(Run.id == run_id)
    if row is None or row.status != RUNNING or row.lease_expires_at is None or row.lease_expires_at >= now:
        return None
    guard = [
        Run.id == run_id,
        Run.status == RUNNING,
        Run.lease_epoch == row.lease_epoch,
        Run.lease_expires_at < now,
    ]
    verdict = reap_verdict(row.requeue_count, row.pending_effect)
    if events.append(run_id, guard, "lease_lost", {"holder": row.lease_holder, "epoch": row.lease_epoch}) is None:
        return None  # renewed or taken since we read it
    if verdict.requeue:
        events.append(run_id, guard, "status", {"from": RUNNING, "to": QUEUED})
        events.append(run_id, guard, "requeued", {"reason": "lease_expired", "requeue": row.requeue_count + 1})
        values = dict(status=QUEUED, requeue_count=Run.requeue_count + 1, queued_at=now)
        action = "requeued"
    else:
        events.append(run_id, guard, "status", {"from": RUNNING, "to": RunStatus.FAILED.value})
        values = dict(status=RunStatus.FAILED.value, termination_reason=verdict.termination_reason, finished_at=now)
        action = verdict.termination_reason
    written = (
        Run.update(
            **values,
            lease_holder=None,
            lease_expires_at=None,
            lease_epoch=Run.lease_epoch + 1,
            updated_at=now,
        )
        .where(*guard)
        .execute()
    )
    assert written == 1, "the guard held for the events in this transaction, so it holds here"
    return Reaped(run_id, row.lease_holder, action)


def reap(limit: int = 50) -> list[Reaped]:
    """Act on `running` rows whose lease expired, and on nothing else (never a waiting run)."""
    now = utcnow()
    # The ids are read completely before any write (see waits.claim_due for why).
    expired = [
        row.id for row in Run.select(Run.id)
        .where(Run.status == RUNNING, Run.lease_expires_at < now)
        .order_by(Run.lease_expires_at)
        .limit(limit)
    ]
    reaped = [r for r in (_reap_one(run_id, now) for run_id in expired) if r is not None]
    if any(r.action == "requeued" for r in reaped):
        wakeup.runs_queued()
    return reaped
