"""The turn whose lone call delegates and that call's journal row are written in one transaction
(store/turns.py, save_turn_and_journal), with a real a2a-sdk peer: both or neither; a cancel marked before
that write journals and sends nothing; a gate closed since the offer leaves the turn saved on its own and
gives the call the gate's reason. And what a whole delegation cycle writes, counted on SQLite."""

from dataclasses import replace

import pytest

from sidecar.domain.vocabulary import SegmentOutcome
from sidecar.engine import AgentLoop
from sidecar.engine.providers import ScriptedProvider
from sidecar.engine.registry import build_registry
from sidecar.store import consumers, events, outbound, turns
from sidecar.store.models import ModelTurn, Outbound
from tests.support.delegation import ON_A2A_DATABASES, delegating_run, register
from tests.support.engine import Crash, request_cancel, requeue_as_the_reaper_would
from tests.support.runs import event_kinds, event_payloads, run_row, tool_results
from tests.support.segments import drive_segment

pytestmark = ON_A2A_DATABASES


def _saved_turns(run_id: str) -> list[int]:
    return [t.index for t in ModelTurn.select().where(ModelTurn.run == run_id).order_by(ModelTurn.index)]


def test_the_turn_and_its_journal_row_are_committed_together_or_not_at_all(settings, peers, monkeypatch):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=60)
    run_id = delegating_run("research", "work:30:the answer")

    def dies_journalling(claim, **send):
        raise Crash("died inside the transaction that saves the turn and journals its send")

    monkeypatch.setattr(outbound, "journal_first_send", dies_journalling)
    with pytest.raises(Crash):
        drive_segment(run_id, settings=settings)
    # Undone together: no turn, no count, no llm event, no journal row, nothing sent.
    assert _saved_turns(run_id) == []
    assert run_row(run_id).iterations_used == 0 and "llm" not in event_kinds(run_id)
    assert Outbound.select().count() == 0 and peer.calls["SendMessage"] == 0

    monkeypatch.undo()
    requeue_as_the_reaper_would(run_id)
    assert drive_segment(run_id, settings=settings) is SegmentOutcome.AWAITING_DEPENDENCY
    assert _saved_turns(run_id) == [0]
    (sent,) = Outbound.select()
    assert (sent.outcome, peer.calls["SendMessage"]) == ("accepted", 1)
    kinds = event_kinds(run_id)
    assert kinds.index("llm") + 1 == kinds.index("outbound"), "the turn's event, then its journal row's"
    row = run_row(run_id)
    assert (row.status, row.iterations_used, row.delegations_used) == ("waiting_for_dependency", 1, 1)
    # One UPDATE took both events' sequences: still gap-free, and the run's counter is the last one.
    assert [e["sequence"] for e in events.list_events(run_id)] == list(range(1, row.last_event_sequence + 1))


def test_a_cancel_marked_while_the_model_answers_saves_the_turn_and_sends_nothing(settings, peers):
    class CancellingProvider:
        name = "scripted"

        def next_turn(self, request):
            request_cancel(request.run_id)  # the host cancels while the model is answering
            return ScriptedProvider().next_turn(request)

    peer = peers.start(card="1.0")
    register("research", peer.url, poll=60)
    run_id = delegating_run("research", "work:30:never asked")
    base = build_registry(settings)
    loop = AgentLoop(replace(base, providers={**base.providers, "scripted": CancellingProvider()}))
    assert drive_segment(run_id, loop=loop) is SegmentOutcome.CANCELLED
    row = run_row(run_id)
    assert (row.status, row.iterations_used, row.delegations_used) == ("cancelled", 1, 0)
    assert _saved_turns(run_id) == [0]  # written ahead, as before every stop
    assert Outbound.select().count() == 0 and peer.calls["SendMessage"] == 0
    assert tool_results(run_id) == []


# The report changed by this process, or by another one: then this process does not know of the change, and its
# offer may go by the gate it found current a moment ago (compat/service.py), but the guard may not.
REPORTERS = {"this process": consumers.replace_report, "another process": consumers.replace_report.__wrapped__}


@pytest.mark.parametrize("reporter", REPORTERS)
def test_a_gate_closed_since_the_offer_saves_the_turn_alone_and_gives_the_call_the_reason(
        settings, peers, monkeypatch, reporter):
    peer = peers.start(card="1.0")
    register("research", peer.url, poll=60)
    run_id = delegating_run("research", "work:30:never asked")
    original = turns.save_turn_and_journal

    def host_reports_an_old_consumer_first(claim, *args, **kwargs):
        REPORTERS[reporter]([{"name": "nr_mcp_agent", "version": "0.15.1"}])
        return original(claim, *args, **kwargs)

    monkeypatch.setattr(turns, "save_turn_and_journal", host_reports_an_old_consumer_first)
    assert drive_segment(run_id, settings=settings) is SegmentOutcome.COMPLETED
    row = run_row(run_id)
    assert row.output.startswith("Remote said: error: delegation is not offered to this run: nr_mcp_agent 0.15.1")
    assert (row.iterations_used, row.delegations_used) == (2, 0)
    assert _saved_turns(run_id) == [0, 1]
    assert Outbound.select().count() == 0 and peer.calls["SendMessage"] == 0
    assert "waiting_for_dependency" not in [e["to"] for e in event_payloads(run_id, "status")]

