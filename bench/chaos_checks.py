"""The checks after a chaos schedule (see chaos.py): what the database, the peer's record and the tally file say.

Each returns problems as text, prefixed with the check's name; an empty list is a pass.
"""

import collections
import json
from datetime import datetime

from sidecar.store.models import Outbound, Run, RunEvent, ToolResult

TERMINAL = ("completed", "failed", "cancelled")
SENDS = ("SendMessage", "message/send")
FINISHED = ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_REJECTED", "TASK_STATE_CANCELED")
MOST = 5  # problems shown per check


def check_schedule(plans: dict, chaos, settled: float) -> list[str]:
    from chaos import SEEN_WITHIN

    ids = list(plans)
    rows = {row.id: row for row in Run.select().where(Run.id.in_(ids))}
    peer = chaos.peer.entries()
    problems = []
    problems += terminal(ids, rows, settled)
    problems += message_ids(peer, ids)
    problems += effects(plans, rows, chaos.directory / "tally.jsonl")
    problems += events(rows)
    problems += timeouts(ids, peer, chaos.fault_windows, SEEN_WITHIN, chaos.peer.kills)
    problems += answers(plans, rows)
    return problems


def _shown(check: str, found: list[str]) -> list[str]:
    more = [f"{check}: ... and {len(found) - MOST} more"] if len(found) > MOST else []
    return [f"{check}: {problem}" for problem in found[:MOST]] + more


def terminal(ids: list[str], rows: dict, settled: float) -> list[str]:
    found = [f"run {run_id} is lost (not in the database)" for run_id in ids if run_id not in rows]
    stuck = [row for row in rows.values() if row.status not in TERMINAL]
    found += [f"run {row.id} is still {row.status} {settled:.0f} s after the last fault (requeued "
              f"{row.requeue_count} times, waiting on {row.waiting_on}, events: {_kinds(row.id)})" for row in stuck]
    return _shown("terminal", found)


def _kinds(run_id: str) -> str:
    kinds = [e.kind for e in RunEvent.select(RunEvent.kind).where(RunEvent.run == run_id).order_by(RunEvent.sequence)]
    return ",".join(kinds[-12:])


def message_ids(peer: list[dict], ids: list[str]) -> list[str]:
    received = collections.Counter(e["message_id"] for e in peer if e.get("method") in SENDS and e.get("message_id"))
    found = [f"message id {mid} reached the peer {n} times" for mid, n in received.items() if n > 1]
    journalled = {row.message_id for row in Outbound.select(Outbound.message_id).where(Outbound.run.in_(ids))}
    found += [f"message id {mid} reached the peer but is not in the journal" for mid in received
              if mid not in journalled]
    return _shown("message ids", found)


def effects(plans: dict, rows: dict, tally_path) -> list[str]:
    from chaos import tally_labels

    lines = tally_path.read_text().splitlines() if tally_path.exists() else []
    counts = collections.Counter((entry["run"], entry["label"]) for entry in map(json.loads, lines))
    found = [f"tally {label!r} of run {run_id} ran {n} times" for (run_id, label), n in counts.items() if n > 1]
    for run_id, plan in plans.items():
        if run_id in rows and rows[run_id].status == "completed":
            found += [f"tally {label!r} of completed run {run_id} never ran" for label in tally_labels(plan)
                      if counts[(run_id, label)] == 0]
    return _shown("effects", found)


def events(rows: dict) -> list[str]:
    sequences = collections.defaultdict(list)
    for run_id, sequence in (RunEvent.select(RunEvent.run, RunEvent.sequence).where(RunEvent.run.in_(list(rows)))
                             .order_by(RunEvent.run, RunEvent.sequence).tuples()):
        sequences[run_id].append(sequence)
    found = []
    for run_id, row in rows.items():
        seen = sequences[run_id]
        if seen != list(range(1, len(seen) + 1)) or len(seen) != row.last_event_sequence:
            found.append(f"run {run_id} has event sequences {_ranges(seen)} (last_event_sequence "
                         f"{row.last_event_sequence})")
    return _shown("events", found)


def _ranges(numbers: list[int]) -> str:
    if len(numbers) <= 8:
        return str(numbers)
    return f"[{numbers[0]}..{numbers[-1]}] ({len(numbers)} of them)"


def _epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def longest_quiet(start: float, end: float, windows: list[tuple[float, float]]) -> float:
    """The longest stretch of [start, end] that no fault window covers."""
    longest, at = 0.0, start
    for opened, closed in sorted(windows):
        if opened > at:
            longest = max(longest, min(opened, end) - at)
        at = max(at, closed)
        if at >= end:
            return longest
    return max(longest, end - at)


def findable_for(finished: float, deadline: float, windows: list[tuple[float, float]],
                 peer_kills: list[float]) -> float:
    """The longest stretch without a fault in which the sidecar could have found a task that finished at
    `finished`: until the deadline, or until the next peer restart, which forgets it."""
    forgotten = min((kill for kill in peer_kills if kill > finished), default=deadline)
    return longest_quiet(finished, min(deadline, forgotten), windows)


def timeouts(ids: list[str], peer: list[dict], windows: list[tuple[float, float]], seen_within: float,
             peer_kills: list[float] = ()) -> list[str]:
    """A delegation resolved `timeout` though its task had finished on the peer while the faults left the
    sidecar `seen_within` seconds, before the deadline, to find out. A peer restart forgets every task: a
    task that finished before one could be found only until then (the peer never answers for it again)."""
    finished = collections.defaultdict(list)  # context id -> when a task of it finished
    for entry in peer:
        if entry.get("state") in FINISHED:
            finished[entry["context"]].append(entry["at"])
    contexts = collections.defaultdict(list)
    for run_id, context in (Outbound.select(Outbound.run, Outbound.context_id)
                            .where(Outbound.run.in_(ids), Outbound.kind == "send").tuples()):
        contexts[run_id].append(context)
    waited_with = {}  # run -> the send's outcome it last suspended with (the journal row may move on later)
    for run_id, payload in (RunEvent.select(RunEvent.run, RunEvent.payload)
                            .where(RunEvent.run.in_(ids), RunEvent.kind == "pause").order_by(RunEvent.sequence)
                            .tuples()):
        waited_with[run_id] = json.loads(payload).get("outcome")
    found = []
    prefix = "timeout: no answer from the remote agent by the deadline "
    for run_id, result in (ToolResult.select(ToolResult.run, ToolResult.result)
                           .where(ToolResult.run.in_(ids), ToolResult.name == "delegate_to_agent").tuples()):
        if not result.startswith(prefix):
            continue
        deadline = _epoch(result.removeprefix(prefix))
        for context in contexts[run_id]:
            for at in finished[context]:
                quiet = findable_for(at, deadline, windows, peer_kills)
                if at < deadline and quiet >= seen_within:
                    found.append(f"run {run_id} resolved timeout at {result.removeprefix(prefix)} though its remote "
                                 f"task finished {deadline - at:.1f} s before (with {quiet:.1f} s without a fault; "
                                 f"it waited with the send's outcome {waited_with.get(run_id)})")
    return _shown("timeouts", found)


def answers(plans: dict, rows: dict) -> list[str]:
    found = []
    for run_id, plan in plans.items():
        row = rows.get(run_id)
        if row is None or row.status != "completed":
            continue
        if not plan.delegates:
            right = row.output == "done"
        else:
            said = (row.output or "").removeprefix("Remote said: ")
            right = said == plan.answer or said.startswith(("error: ", "timeout: "))
        if not right:
            found.append(f"run {run_id} completed with {row.output!r} (asked for {plan.answer!r})")
    return _shown("answers", found)
