"""Continuing a run from its stored decision: the first thing a segment does when it was queued by one.

Whoever continues (a worker, or the decide-now request) asks the permission hook again before the
first effect: a decider who lost the right meanwhile has the decision refused, and the run waits again
on the same pause (`decision_refused`). Otherwise the decision is applied under the segment's lease, in
one transaction: the input becomes the `ask_user` call's result, a denial gives every pending call
`denied: <comment>` (or fails the run with on_denial "fail"), an approval lets the loop run the turn.
A segment retried after that finds the decision applied and does not apply it again.
"""

import json
import logging

from ..domain.decisions import DecisionKind, PauseKind, compact_json, denied_text
from ..domain.vocabulary import SegmentOutcome, ToolEffect
from ..permissions import may
from ..store import pauses
from ..store import turns as saved

log = logging.getLogger("nrllm_sidecar.decisions")


def continue_from_decision(segment) -> SegmentOutcome | None:
    """Apply the run's stored decision, if any. Returns the outcome that ends the segment here, or None."""
    run = segment.run  # read after the claim: only the lease's holder changes its continuation from here on
    found = pauses.continuation_of(run)
    if found is None:
        return None
    decision, pause = found
    kind = DecisionKind(decision.decision)
    if not may(decision.decider, decision.workspace, kind.action, run):
        reason = f"{decision.decider} may no longer {kind.action.removeprefix('agent:')} this run"
        log.info("run %s: decision %s refused: %s", run.id, decision.id, reason)
        segment.guarded(pauses.refuse, decision, pause, reason)
        return (SegmentOutcome.AWAITING_INPUT if pause.kind == PauseKind.INPUT
                else SegmentOutcome.AWAITING_APPROVAL)
    if kind is DecisionKind.DENY and segment.spec.get("on_denial") == "fail":
        segment.guarded(pauses.fail_denied, decision)
        return SegmentOutcome.FAILED
    segment.guarded(pauses.apply_decision, decision, _results(run.id, kind, decision, pause))
    return None


def _results(run_id: str, kind: DecisionKind, decision, pause) -> list[dict]:
    """The tool results a decision gives: the input for ask_user, a denial for each pending call."""
    if kind is DecisionKind.APPROVE:
        return []
    answered = saved.load(run_id)[1]
    if kind is DecisionKind.INPUT:
        arguments = {"question": pause.question, "schema": json.loads(pause.input_schema)}
        calls = [{"id": pause.tool_call_id, "name": "ask_user", "arguments": arguments,
                  "effect": ToolEffect.READ_ONLY.value}]
        text = compact_json(json.loads(decision.input))
    else:
        calls = json.loads(pause.pending_calls)
        text = denied_text(decision.comment)
    return [
        {"turn_index": pause.turn_index, "tool_call_id": call["id"], "name": call["name"], "result": text,
         "event": {"turn_index": pause.turn_index, "tool_call_id": call["id"], "name": call["name"],
                   "arguments": call["arguments"], "effect": call["effect"], "result": text}}
        for call in calls if call["id"] not in answered
    ]
