"""Pure parts of delegation: both dialects' tasks as TaskViews, and the tool result texts."""

import pytest

from sidecar.delegation.a2a import normalise_state, task_view
from sidecar.delegation.results import lost_task_text, result_text
from sidecar.delegation.types import ALL_STATES, TaskView


@pytest.mark.parametrize(("raw", "state"), [
    ("TASK_STATE_SUBMITTED", "submitted"), ("TASK_STATE_WORKING", "working"), ("TASK_STATE_COMPLETED", "completed"),
    ("TASK_STATE_FAILED", "failed"), ("TASK_STATE_CANCELED", "canceled"), ("TASK_STATE_REJECTED", "rejected"),
    ("TASK_STATE_INPUT_REQUIRED", "input-required"), ("TASK_STATE_AUTH_REQUIRED", "auth-required"),
    ("TASK_STATE_UNSPECIFIED", "unknown"), ("completed", "completed"), ("input-required", "input-required"),
    ("auth-required", "auth-required"), ("canceled", "canceled"), ("cancelled", "canceled"), ("unknown", "unknown"),
    ("sleeping", "unknown"), (None, "unknown"),
])
def test_states_of_both_dialects(raw, state):
    assert normalise_state(raw) == state
    assert state in ALL_STATES


def test_a_1_0_task():
    task = task_view({
        "id": "t1", "contextId": "c1",
        "status": {"state": "TASK_STATE_COMPLETED", "message": {"role": "ROLE_AGENT", "parts": [{"text": "done"}]}},
        "artifacts": [{"artifactId": "a", "parts": [{"text": "one"}, {"data": {"x": 1}}, {"text": "two"}]},
                      {"artifactId": "b", "parts": [{"url": "https://x"}, {"text": "three"}]}],
        "history": [{"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "go"}]},
                    {"role": "ROLE_AGENT", "messageId": "a1", "parts": []}],
    })
    assert task == TaskView(id="t1", context_id="c1", state="completed", text="one\ntwo\nthree", status_text="done",
                            message_ids=("m1",))
    assert task.finished


def test_a_0_3_task_falls_back_to_the_status_message():
    question = {"kind": "message", "role": "agent",
                "parts": [{"kind": "text", "text": "which"}, {"kind": "text", "text": "year?"}]}
    task = task_view({"kind": "task", "id": "t2", "contextId": "c2",
                      "status": {"state": "input-required", "message": question},
                      "history": [{"kind": "message", "role": "user", "messageId": "m2", "parts": []}]})
    assert (task.state, task.text, task.status_text) == ("input-required", "which\nyear?", "which\nyear?")
    assert task.message_ids == ("m2",)


@pytest.mark.parametrize("bad", [None, [], {"id": "t"}, {"status": {}}, {"id": 5, "status": {}}])
def test_what_is_not_a_task(bad):
    with pytest.raises(ValueError):
        task_view(bad)


def view(state, text="", status_text="", task_id="t-7"):
    return TaskView(id=task_id, context_id="c", state=state, text=text or status_text, status_text=status_text)


@pytest.mark.parametrize(("task", "expected"), [
    (view("completed", text="the answer"), "the answer"),
    (view("completed"), ""),
    (view("failed", status_text="disk full"), "error: remote task failed: disk full"),
    (view("failed"), "error: remote task failed: no reason given"),
    (view("rejected", status_text="not mine"), "error: remote task rejected: not mine"),
    (view("canceled"), "error: remote task was canceled"),
    (view("canceled", status_text="operator"), "error: remote task was canceled: operator"),
    (view("input-required", status_text="which year?"), "input-required: which year? task_id=t-7"),
    (view("auth-required", status_text="log in"), "auth-required: log in task_id=t-7"),
    (view("input-required"), "input-required: task_id=t-7"),
    (view("submitted"), None), (view("working"), None), (view("unknown"), None),
])
def test_result_texts(task, expected):
    assert result_text(task) == expected


def test_an_interrupted_task_asks_with_its_status_message_not_its_partial_artifacts():
    task = TaskView(id="t", context_id=None, state="input-required", text="partial", status_text="more details?")
    assert result_text(task) == "input-required: more details? task_id=t"


def test_lost_task():
    assert lost_task_text("t-1") == "error: the remote agent no longer knows task t-1"
