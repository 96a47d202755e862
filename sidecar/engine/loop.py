"""The agent loop as a segment executor: model turn, tool calls, their results, the next turn.

Turns are written ahead. A turn is saved (with its budget counts and its `llm` event) before any of its
tools runs, and each result is saved (with its `tool` event) before the next step. A segment begins by
rebuilding the conversation from what was saved, so a retried segment never asks the model again for a
turn it has, and never runs a tool again whose result it has; it goes on where the lost one stopped.

Every step boundary (before each tool call and each model call) looks for a cancel request and checks
the budget. Every write goes through the Segment, so a segment that lost its lease writes nothing more.
"""

import logging

from nrllm_sidecar_compat.service import delegation_refusal

from ..application import current
from ..config import Settings
from ..decisions.continuation import continue_from_decision
from ..domain.budget import Budget, Stop
from ..domain.clock import utcnow
from ..domain.errors import CancelRequested, Interrupted, Suspended
from ..domain.vocabulary import SegmentOutcome, TerminationReason, ToolEffect
from ..segment import Segment
from ..store import pauses, runs
from ..store import turns as saved
from . import pausing
from .providers import ModelProvider, ProviderError, TurnRequest
from .registry import Registry, build_registry
from .tools import DelegationCall, ToolContext, ToolError, UnsavedTurn, error_text
from .turns import Conversation, ToolCall, Turn, assign_call_ids

log = logging.getLogger("nrllm_sidecar.engine")

CANCEL_REQUESTED = Stop(TerminationReason.CANCELLED, "cancel requested")


class AgentLoop:
    """The default segment executor. Shared by the worker's threads: it keeps no per-run state."""

    def __init__(self, registry: Registry | None = None):
        # Without one (`worker --executor module:Class` makes it with no arguments): the registry of the
        # application's settings, read once at start-up.
        self.registry = registry if registry is not None else build_registry(_started_settings())

    def execute(self, segment: Segment) -> SegmentOutcome:
        return _RunSegment(self.registry, segment).execute()


def _started_settings() -> Settings:
    settings = current().settings
    if settings is None:
        raise RuntimeError("AgentLoop() without a registry needs a started application (bootstrap.start)")
    return settings


def _budget_of(run) -> Budget:
    return Budget(
        deadline_at=run.deadline_at,
        max_tokens=run.max_tokens,
        tokens_used=run.tokens_used,
        max_cost=run.max_cost,
        cost_used=run.cost_used,
        max_iterations=run.max_iterations,
        iterations_used=run.iterations_used,
    )


class _RunSegment:
    """One segment of one run: the state the loop keeps while it drives that run."""

    def __init__(self, registry: Registry, segment: Segment):
        self.registry = registry
        self.segment = segment
        self.spec = segment.spec
        self.provider_name = self.spec.get("provider") or registry.default_provider
        self.offered = registry.offered(self.spec.get("tools"))
        self.withheld = self._withhold_delegation()
        self.budget = _budget_of(segment.run)
        self.conversation = Conversation(segment.run.input)
        self.approved: set[int] = set()  # turns a person approved (read once per turn)
        # The cancel mark as the run row last read says, until a step boundary takes it (_cancel_requested).
        self.cancel_mark: bool | None = segment.run.cancel_requested_at is not None
        self.replayed_turns = 0  # turns saved by earlier segments: those at this index and after are this one's
        self.held: UnsavedTurn | None = None  # the last turn, counted but not yet saved (_hold)
        self.tool_context = ToolContext(segment, lambda: self._boundary(asking_model=False))

    def execute(self) -> SegmentOutcome:
        try:
            provider = self.registry.providers.get(self.provider_name)
            if provider is None:
                raise ProviderError(f"unknown provider {self.provider_name!r}")
            # A run queued by a decision applies it first (or waits again if the decider lost the right).
            if (ended := continue_from_decision(self.segment)) is not None:
                return ended
            self._replay()
            return self._drive(provider)
        except Interrupted as interrupted:
            return self._stop(interrupted.stop)
        except CancelRequested:
            return self._stop(CANCEL_REQUESTED)  # came while pausing for a person: the pause was not written
        except Suspended as suspended:
            # A cancel that came while a remote agent's wait was committed (the send is journalled and
            # recorded, so that transaction stands): the now waiting run is cancelled, with its CancelTask.
            if suspended.cancel_marked and runs.cancel_requested_meanwhile(self.segment.run_id):
                return SegmentOutcome.CANCELLED
            return suspended.outcome
        except ProviderError as exc:
            return self._provider_failed(exc)

    def _replay(self) -> None:
        if not self.segment.run.iterations_used:
            return  # no turn saved yet: a turn is saved with its count (and a result only after its turn)
        turns, results = saved.load(self.segment.run_id)
        self.replayed_turns = len(turns)
        for row in turns:
            turn = Turn.from_message(row["message"], row["tokens"], row["cost"])
            self.conversation.add_turn(turn)
            for call in turn.tool_calls:
                if call.id in results:
                    self.conversation.add_result(call, results[call.id])
        if turns:
            log.debug("run %s: replayed %d saved turns and %d results", self.segment.run_id, len(turns), len(results))

    def _drive(self, provider: ModelProvider) -> SegmentOutcome:
        while True:
            last = self.conversation.last_turn
            if last is not None and last.is_final:
                # Also the retry of a segment lost between saving its final turn and completing.
                return self.segment.complete(last.content or "")
            for call in self.conversation.unanswered():
                self._boundary(asking_model=False)
                self._approve_turn()
                self._run_tool(call)
            self._boundary(asking_model=True)
            turn = self._ask(provider)
            if turn.is_final:
                return self._save_final(turn)
            if self._journals_with_turn(turn):
                self._hold(turn)
            else:
                self._save(turn)

    def _withhold_delegation(self) -> dict[str, str]:
        """Take delegation tools out of the offer while the gate refuses waiting_for_dependency; name -> why."""
        delegating = [name for name, tool in self.offered.items() if tool.delegation]
        reason = delegation_refusal(self.segment.run.origin) if delegating else None
        if reason is None:
            return {}
        for name in delegating:
            del self.offered[name]
        return {name: reason for name in delegating}

    def _boundary(self, *, asking_model: bool) -> None:
        """Raise Interrupted when the run must stop before its next step."""
        if self._cancel_requested():
            raise Interrupted(CANCEL_REQUESTED)
        stop = self.budget.stop(utcnow(), asking_model=asking_model)
        if stop is not None:
            raise Interrupted(stop)

    # -- model turns ---------------------------------------------------------------------------

    def _ask(self, provider: ModelProvider) -> Turn:
        request = TurnRequest(
            run_id=self.segment.run_id,
            spec=self.spec,
            conversation=self.conversation,
            tools=tuple(tool.spec for tool in self.offered.values()),
            seconds_left=self.budget.seconds_left(utcnow()),
        )
        try:
            turn = provider.next_turn(request)
        except ProviderError:
            raise
        except Exception as exc:
            # A provider (a plugin's, say) with a bug fails the run as a provider failure that says so.
            log.exception("provider %s raised on run %s", self.provider_name, self.segment.run_id)
            raise ProviderError(f"the provider raised {type(exc).__name__}: {exc}") from exc
        return assign_call_ids(turn, self.conversation.call_ids, len(self.conversation.turns))

    def _cancel_requested(self) -> bool:
        """The run's cancel mark. Right after a read of the run row (the claim's, a saved turn's update) the mark
        that read returned is as fresh as another read would be: the first boundary after it takes that one."""
        known, self.cancel_mark = self.cancel_mark, None
        return known if known is not None else self.segment.cancel_requested()

    def _save(self, turn: Turn) -> None:
        self.cancel_mark = self.segment.save_turn(**self._turn_record(turn))
        self.conversation.add_turn(turn)
        self.budget = self.budget.spend(turn.tokens, turn.cost)

    def _journals_with_turn(self, turn: Turn) -> bool:
        """Whether the turn is a lone call of a tool that saves the turn with its journal row (a delegation run
        at once: no approval to wait for)."""
        if len(turn.tool_calls) != 1:
            return False
        tool = self.offered.get(turn.tool_calls[0].name)
        return (tool is not None and tool.delegation and tool.journals_with_turn
                and not pausing.needs_approval(list(turn.tool_calls), self.offered))

    def _hold(self, turn: Turn) -> None:
        """_save() for a turn the delegation tool saves with its journal row (UnsavedTurn): counted here, written
        there. The run row written with it says whether a cancel is requested, so the step boundary before
        the call reads no mark of its own."""
        self.held = UnsavedTurn(self.segment, self._turn_record(turn))
        self.cancel_mark = False
        self.conversation.add_turn(turn)
        self.budget = self.budget.spend(turn.tokens, turn.cost)

    def _save_held(self) -> None:
        """Save the held turn on its own if the tool did not save it; stop if a cancel was marked meanwhile."""
        held, self.held = self.held, None
        if held is not None:
            held.save()
            if held.cancel_marked:
                raise Interrupted(CANCEL_REQUESTED)

    def _save_final(self, turn: Turn) -> SegmentOutcome:
        """A turn that calls no tool ends the run: saved with the run's completion, one write instead of two."""
        return self.segment.complete_with_turn(**self._turn_record(turn), output=turn.content or "")

    def _turn_record(self, turn: Turn) -> dict:
        index = len(self.conversation.turns)
        event = {
            "index": index,
            "provider": self.provider_name,
            "content": turn.content,
            "tool_calls": [call.to_dict() for call in turn.tool_calls],
            "tokens": turn.tokens,
            "cost": turn.cost,
        }
        return {"index": index, "message": turn.message(), "tokens": turn.tokens, "cost": turn.cost, "event": event}

    # -- tool calls ----------------------------------------------------------------------------

    def _run_tool(self, call: ToolCall) -> None:
        tool = self.offered.get(call.name)
        effect = tool.effect if tool is not None else None
        in_flight = False
        settle = None
        if call.name in self.withheld:
            result = error_text(f"tool {call.name!r} is not offered to this run: {self.withheld[call.name]}")
            # An earlier attempt of this call, made while the tool was offered, may have sent already.
            settle = self._give_up_journalled(call)
        elif tool is None and call.name in self.registry.tools:
            result = error_text(f"tool {call.name!r} is not offered to this run (offered: {self._offered_names()})")
        elif tool is None:
            result = error_text(f"unknown tool {call.name!r} (offered: {self._offered_names()})")
        elif problem := tool.argument_problem(call.arguments):
            result = error_text(problem)
        elif lone_problem := self._not_alone(tool):
            result = error_text(lone_problem)
        elif tool.pauses_for_input:
            raise Suspended(pausing.pause_for_input(self.segment, len(self.conversation.turns) - 1, call, tool))
        elif tool.delegation:
            started = tool.delegate(self._delegation_call(call))
            if started.suspended:
                raise Suspended(cancel_marked=started.cancel_marked)
            result, settle = started.result, started.settle
        else:
            if effect is ToolEffect.NON_IDEMPOTENT_WRITE:
                # From here until its result is saved, a lost run is not retried (the reaper fails it).
                self.segment.stamp_pending_effect(f"{call.name} (tool call {call.id})")
                in_flight = True
            result = self._call(tool, call)
        self._save_held()
        event = {
            "turn_index": len(self.conversation.turns) - 1,
            "tool_call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
            "effect": effect.value if effect is not None else None,
            "result": result,
        }
        self.segment.save_tool_result(
            len(self.conversation.turns) - 1, call.id, call.name, result, event=event, clear_pending_effect=in_flight,
            settle=settle,
        )
        self.conversation.add_result(call, result)

    def _approve_turn(self) -> None:
        """Approval is per turn: before the first of its calls runs, a turn calling a tool that needs it
        pauses until a person approved it (or denied it: then every call already has its result)."""
        index = len(self.conversation.turns) - 1
        pending = self.conversation.unanswered()
        if index in self.approved or self._not_alone(None) or not pausing.needs_approval(pending, self.offered):
            return
        if not pauses.turn_approved(self.segment.run_id, index):
            raise Suspended(pausing.pause_for_approval(self.segment, index, pending, self.offered))
        self.approved.add(index)

    def _not_alone(self, tool) -> str | None:
        """At most one dependency per segment: a turn that delegates beside other calls runs none of them."""
        calls = self.conversation.last_turn.tool_calls
        delegates = [c for c in calls if getattr(self.registry.tools.get(c.name), "delegation", False)]
        if delegates and len(calls) > 1:
            return (f"{delegates[0].name} must be the only tool call of its turn; this turn has {len(calls)} calls, "
                    "so none of them ran")
        return None

    def _give_up_journalled(self, call: ToolCall):
        return self.registry.tools[call.name].give_up(self._delegation_call(call))

    def _delegation_call(self, call: ToolCall) -> DelegationCall:
        messages = [dict(m, tool_calls=[c.to_dict() for c in m["tool_calls"]]) if m.get("tool_calls") else m
                    for m in self.conversation.messages]
        index = len(self.conversation.turns) - 1
        return DelegationCall(self.segment, call.id, index, call.arguments, messages,
                              first_attempt=index >= self.replayed_turns, unsaved_turn=self.held)

    def _call(self, tool, call: ToolCall) -> str:
        try:
            result = tool.run(call.arguments, self.tool_context)
        except ToolError as exc:
            return error_text(str(exc))
        except Exception as exc:  # the control signals (domain/errors.py) are no Exception: they pass
            # A broken tool is reported to the model, which may route around it; the run goes on.
            log.exception("tool %s of run %s raised", call.name, self.segment.run_id)
            return error_text(f"{call.name} failed: {type(exc).__name__}")
        if not isinstance(result, str):
            return error_text(f"{call.name} returned no text")
        return result

    def _offered_names(self) -> str:
        return ", ".join(self.offered) or "none"

    # -- endings -------------------------------------------------------------------------------

    def _stop(self, stop: Stop) -> SegmentOutcome:
        if self.held is not None:  # stopped at the boundary before its call: saved, as any turn before a stop
            try:
                self._save_held()
            except Interrupted as cancelled:
                stop = cancelled.stop
        if stop.reason is TerminationReason.CANCELLED:
            return self.segment.cancel()
        self.segment.event("budget", {"reason": stop.reason.value, "message": stop.message})
        return self.segment.fail(stop.reason)

    def _provider_failed(self, exc: ProviderError) -> SegmentOutcome:
        # A call cut short by the run's deadline is the deadline's failure, not the provider's.
        stop = self.budget.stop(utcnow(), asking_model=False)
        if stop is not None and stop.reason is TerminationReason.DEADLINE_EXCEEDED:
            return self._stop(stop)
        message = f"provider {self.provider_name} failed: {exc}"
        log.warning("run %s: %s", self.segment.run_id, message)
        self.segment.event("error", {"message": message, "provider": self.provider_name})
        return self.segment.fail(TerminationReason.PROVIDER_FAILED)
