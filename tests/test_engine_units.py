"""The engine's pure parts, without a database: budgets, turns, script and completion parsing, tools."""

from datetime import datetime, timedelta

import pytest

from sidecar.config import Settings
from sidecar.domain.budget import Budget
from sidecar.domain.vocabulary import TerminationReason
from sidecar.engine.openai import parse_completion
from sidecar.engine.providers import ProviderError, ScriptedProvider, TurnRequest, script_problems
from sidecar.engine.tools import EchoTool, SleepTool
from sidecar.engine.turns import Conversation, ToolCall, Turn, assign_call_ids

NOW = datetime(2030, 1, 1, 12, 0, 0)


def test_budget_stops_in_order_deadline_tokens_cost_iterations():
    assert Budget().stop(NOW, asking_model=True) is None
    past = Budget(deadline_at=NOW - timedelta(seconds=1), max_tokens=1, tokens_used=5)
    assert past.stop(NOW, asking_model=False).reason is TerminationReason.DEADLINE_EXCEEDED
    assert Budget(max_tokens=10, tokens_used=10).stop(NOW, asking_model=False).reason is \
        TerminationReason.BUDGET_EXHAUSTED
    assert Budget(max_cost=1.0, cost_used=1.5).stop(NOW, asking_model=False).message == "cost 1.5 of 1 used"
    full = Budget(max_iterations=2, iterations_used=2)
    assert full.stop(NOW, asking_model=False) is None  # the last allowed turn's tools still run
    assert full.stop(NOW, asking_model=True).reason is TerminationReason.MAX_ITERATIONS


def test_spending_a_turn_counts_one_iteration_and_its_tokens_and_cost():
    spent = Budget(max_tokens=100).spend(30, 0.25).spend(5, 0.0)
    assert (spent.iterations_used, spent.tokens_used, spent.cost_used) == (2, 35, 0.25)
    assert Budget(deadline_at=NOW + timedelta(seconds=3)).seconds_left(NOW) == 3


def test_call_ids_are_made_unique_and_kept_when_they_already_are():
    calls = (ToolCall("a", "echo"), ToolCall("a", "echo"), ToolCall("", "echo"), ToolCall("x" * 129, "e"))
    turn = Turn(tool_calls=calls)
    ids = [c.id for c in assign_call_ids(turn, {"b"}, 3).tool_calls]
    assert ids == ["a", "call_3_1", "call_3_2", "call_3_3"]
    clash = assign_call_ids(Turn(tool_calls=(ToolCall("call_0_0", "e"),)), {"call_0_0"}, 0)
    assert clash.tool_calls[0].id == "call_0_0_1"


def test_a_turn_survives_its_saved_form():
    turn = Turn(content=None, tool_calls=(ToolCall("c", "echo", {"text": "t"}),), tokens=3)
    assert turn.message() == {"tool_calls": [{"id": "c", "name": "echo", "arguments": {"text": "t"}}]}
    assert Turn.from_message(turn.message(), 3) == turn
    assert Turn(content="done").message() == {"content": "done"}


def _ask(script, conversation=None):
    conversation = conversation or Conversation("hi")
    return ScriptedProvider().next_turn(TurnRequest("run", {"script": script}, conversation, ()))


def test_the_scripted_provider_substitutes_the_last_tool_result_in_call_order():
    conversation = Conversation("hi")
    first, second = ToolCall("1", "echo", {"text": "a"}), ToolCall("2", "echo", {"text": "b"})
    conversation.add_turn(Turn(tool_calls=(first, second)))
    conversation.add_result(first, "a")
    conversation.add_result(second, "b")
    turn = _ask([{"tool_calls": [{"name": "echo"}]}, {"content": "{last_tool_result}/{last_tool_result} {x}"}],
                conversation)
    assert turn.content == "b/b {x}" and turn.is_final


@pytest.mark.parametrize("script, message", [
    ([], "the script ran out after 0 turns without a final turn"),
    ("nope", "the run's script is not a list of turns"),
    ([{}], "script turn 1 has neither tool_calls nor content"),
    ([{"tool_calls": []}], "script turn 1: tool_calls must be a non-empty list"),
    ([{"tool_calls": [{"id": "x"}]}], "script turn 1: tool call 1 has no name"),
    ([{"content": 5}], "script turn 1: content must be a string"),
    ([{"content": "x", "tokens": -1}], "script turn 1: tokens must be a non-negative number, not -1"),
])
def test_a_bad_script_is_a_provider_error_that_says_why(script, message):
    with pytest.raises(ProviderError, match="^" + message.replace("(", r"\(") + "$"):
        _ask(script)


def test_script_problems_lists_every_bad_turn_for_callers_that_check_early():
    assert script_problems([{"content": "ok"}, {"tool_calls": [{"name": "echo"}]}]) == []
    assert script_problems([{}, {"content": "ok"}, 3]) == [
        "script turn 1 has neither tool_calls nor content", "script turn 3 is not an object"]


def test_a_completion_with_tool_calls_and_usage():
    turn = parse_completion({"choices": [{"message": {"content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": '{"text": "x"}'}},
        {"id": "c2", "type": "function", "function": {"name": "sleep", "arguments": ""}},
    ]}}], "usage": {"total_tokens": 12}})
    calls = [(c.id, c.name, c.arguments) for c in turn.tool_calls]
    assert calls == [("c1", "echo", {"text": "x"}), ("c2", "sleep", {})]
    assert (turn.tokens, turn.cost, turn.is_final) == (12, 0.0, False)


@pytest.mark.parametrize("data, message", [
    ([], "the answer is not a JSON object"),
    ({"choices": []}, "the answer has no choices"),
    ({"choices": [{}]}, "the answer's first choice has no message"),
    ({"error": {"message": "quota"}}, "the server reported an error: quota"),
    ({"choices": [{"message": {"tool_calls": [{"id": "x"}]}}]}, "the answer has a tool call without a function name"),
])
def test_an_unusable_completion_is_a_provider_error(data, message):
    with pytest.raises(ProviderError, match=message):
        parse_completion(data)


def test_tool_arguments_are_checked_against_the_schema():
    assert EchoTool().argument_problem({"text": "x"}) is None
    assert SleepTool().argument_problem({"seconds": True}) == (
        "invalid arguments for sleep: seconds: True is not of type 'number'")
    assert SleepTool().argument_problem({"seconds": 1, "extra": 1}).startswith("invalid arguments for sleep: ")
    assert SleepTool().argument_problem([1]) == "the arguments of sleep are not a JSON object"


def test_provider_settings_come_from_the_environment_and_stay_shorter_than_the_lease():
    settings = Settings.from_env({
        "NRLLM_OPENAI_BASE_URL": "http://llm.internal:8000/v1/", "NRLLM_OPENAI_API_KEY": "sk-secret",
        "NRLLM_OPENAI_MODEL": "m", "NRLLM_OPENAI_TIMEOUT": "45", "NRLLM_LEASE_SECONDS": "30",
    })
    assert (settings.openai_base_url, settings.openai_model, settings.default_provider) == (
        "http://llm.internal:8000/v1", "m", "scripted")
    assert settings.provider_timeout == 27.0
    assert settings.openai_api_key == "sk-secret" and "sk-secret" not in repr(settings)
    assert Settings.from_env({"NRLLM_DEFAULT_PROVIDER": "openai"}).default_provider == "openai"
