"""The segment executor interface and the fenced handle it works through.

A segment is one stretch of a run between a claim and the next suspension or end. The worker claims,
hands a Segment to the executor, and keeps the lease alive while the executor works. The executor writes
only through the Segment: every write is fenced, so an executor that lost its lease writes nothing.
"""

import json
import logging
import threading
from typing import Protocol

from . import logs, metrics
from .domain.errors import ControlSignal, LeaseLost
from .domain.vocabulary import RunStatus, SegmentOutcome, TerminationReason
from .store import db, leases, runs, turns
from .store.leases import Claim
from .store.models import Run

# A segment is executed by a worker's thread or a decide-now request; its records keep the worker's logger name,
# the one operators filter on.
log = logging.getLogger("nrllm_sidecar.worker")


class Segment:
    def __init__(self, claim: Claim, run: Run):
        self.claim = claim
        self.run = run  # as the claim wrote it: nothing else writes the run while this segment holds it
        self.spec = json.loads(run.spec or "{}")
        # Set once a delegation of this segment may have spent budget (delegation/start.py): the run's
        # counters in `run` are then older than the row's.
        self.delegated = False
        # Set by the heartbeat when a renewal finds the lease gone, or by a stopping worker before its hand-back.
        self.lost = threading.Event()

    @property
    def run_id(self) -> str:
        return self.claim.run_id

    def check(self) -> None:
        """Raise LeaseLost if the heartbeat already knows the lease is gone."""
        if self.lost.is_set():
            raise LeaseLost(self.claim.run_id, self.claim.epoch)

    def guarded(self, write, *args, **kwargs):
        """Call a fenced store write `write(claim, ...)`; a lost lease is remembered and re-raised."""
        self.check()
        try:
            return write(self.claim, *args, **kwargs)
        except LeaseLost:
            self.lost.set()
            raise

    def event(self, kind: str, payload: dict) -> int:
        return self.guarded(leases.append_event, kind, payload)

    def update(self, **values) -> None:
        self.guarded(leases.update_run_fenced, **values)

    def stamp_pending_effect(self, description: str) -> None:
        """Before a non-idempotent write: a run lost from here on is not retried."""
        self.update(pending_effect=description)

    def clear_pending_effect(self) -> None:
        self.update(pending_effect=None)

    def save_turn(self, index: int, message: dict, *, tokens: int, cost: float, event: dict) -> bool:
        """Write a model turn ahead of its tools, with its budget counts and its `llm` event (one transaction).
        Returns whether a cancel is requested, as the run row it wrote says."""
        return self.guarded(turns.save_turn, index, message, tokens, cost, event)

    def save_turn_and_journal(self, record: dict, send: dict):
        """save_turn() of a turn whose lone call delegates, with the journal row of that call's send, in one
        transaction (store/turns.py): the row, or None when a cancel is marked (the turn alone is saved)."""
        return self.guarded(turns.save_turn_and_journal, **record, send=send)

    def complete_with_turn(self, index: int, message: dict, *, tokens: int, cost: float, event: dict,
                           output: str) -> SegmentOutcome:
        """save_turn() of the run's last turn (one that calls no tool) and complete() with `output`, in one
        transaction."""
        self.guarded(turns.save_final_turn, index, message, tokens, cost, event, output)
        return SegmentOutcome.COMPLETED

    def save_tool_result(
        self, turn_index: int, tool_call_id: str, name: str, result: str, *, event: dict,
        clear_pending_effect: bool = False, settle=None,
    ) -> None:
        """Save a tool call's result and its `tool` event; a non-idempotent tool clears its stamp here too, and
        a delegation answered at once settles its send (store/outbound.py, Settlement) in the same write."""
        self.guarded(
            turns.save_tool_result, turn_index, tool_call_id, name, result, event,
            clear_pending_effect=clear_pending_effect, settle=settle,
        )

    def complete(self, output: str) -> SegmentOutcome:
        self.guarded(leases.finish, RunStatus.COMPLETED, output=output, reason=TerminationReason.COMPLETED.value)
        return SegmentOutcome.COMPLETED

    def fail(self, reason: TerminationReason, output: str | None = None) -> SegmentOutcome:
        self.guarded(leases.finish, RunStatus.FAILED, output=output, reason=reason.value)
        return SegmentOutcome.FAILED

    def cancel(self) -> SegmentOutcome:
        self.guarded(leases.finish, RunStatus.CANCELLED, reason=TerminationReason.CANCELLED.value)
        return SegmentOutcome.CANCELLED

    def cancel_requested(self) -> bool:
        """Cooperative cancellation: executors ask at every step boundary."""
        return runs.cancel_requested(self.run_id)

    def sleep(self, seconds: float) -> None:
        """Wait, but stop at once (LeaseLost) when the lease is lost meanwhile."""
        if self.lost.wait(seconds):
            self.check()


class SegmentExecutor(Protocol):
    def execute(self, segment: Segment) -> SegmentOutcome:
        """Run the claimed run until it ends or suspends; every write through `segment`."""
        ...


def execute_segment(executor: SegmentExecutor, segment: Segment) -> SegmentOutcome:
    """Execute one claimed segment (a worker's thread, or a decide-now request's) and say how it ended."""
    with logs.context(run_id=segment.run_id):
        return _execute_logged(executor, segment)


def _execute_logged(executor: SegmentExecutor, segment: Segment) -> SegmentOutcome:
    try:
        return executor.execute(segment)
    except LeaseLost:
        metrics.LEASE_LOSSES.inc()
        return SegmentOutcome.LEASE_LOST
    except (Exception, ControlSignal) as exc:  # a signal its executor let through is a bug like any other
        if db.is_unavailable(exc):
            # Nothing can be written now: the lease lapses and the reaper hands the run on once the database
            # is back. The worker's loop and heartbeat log the outage once; a segment's lost connection alone
            # (one that slept through a restart) is no outage to log.
            log.debug("segment of run %s lost its database connection: %s", segment.run_id, exc)
            return SegmentOutcome.LEASE_LOST
        # A bug in an executor must not leave the run running until the reaper retries the same bug.
        log.exception("segment of run %s raised", segment.run_id)
        try:
            segment.event("error", {"message": "the segment raised an unexpected error"})
            return segment.fail(TerminationReason.NOT_RETRYABLE)
        except LeaseLost:
            return SegmentOutcome.LEASE_LOST
