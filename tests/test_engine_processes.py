"""The agent loop in real worker processes: a worker killed between a saved model turn and its tool's
result, and the agent loop as the worker's default executor."""

import os
import signal

import pytest

from sidecar.store import runs
from sidecar.store.models import ModelTurn, ToolResult
from tests.support import SHORT_LEASE
from tests.support.engine import CallLog
from tests.support.runs import event_kinds, run_row
from tests.support.waiting import wait_until
from tests.support.workers import start_worker_process, stop_process

pytestmark = pytest.mark.slow


def test_a_worker_killed_after_a_saved_turn_is_taken_over_without_asking_the_model_again(
        database_url, tmp_path, monkeypatch):
    call_log = tmp_path / "calls.log"
    monkeypatch.setenv("NRLLM_TEST_CALL_LOG", str(call_log))
    counting = ("--executor", "tests.support.engine:CountingAgentLoop")
    run_id = runs.create_run("be_user:7", "nap, then report", spec={"provider": "scripted", "script": [
        {"tool_calls": [{"id": "call_1", "name": "sleep", "arguments": {"seconds": 2}}]},
        {"content": "done: {last_tool_result}"},
    ]})
    a = start_worker_process(database_url, *counting, lease=SHORT_LEASE, log_path=tmp_path / "a.log")
    b = None
    try:
        wait_until(lambda: ModelTurn.select().where(ModelTurn.run == run_id).exists(), timeout=30,
                   what="worker A to save the tool turn")
        wait_until(lambda: "start sleep" in CallLog.read(call_log), what="worker A to start the tool")
        os.kill(a.pid, signal.SIGKILL)
        a.wait(10)
        assert ToolResult.select().where(ToolResult.run == run_id).count() == 0, "the tool finished before the kill"

        b = start_worker_process(database_url, *counting, lease=SHORT_LEASE, log_path=tmp_path / "b.log")
        wait_until(lambda: run_row(run_id).status == "completed", timeout=60, what="worker B to complete the run")
    finally:
        for proc in (a, b):
            if proc is not None:
                stop_process(proc)

    row = run_row(run_id)
    assert (row.output, row.requeue_count, row.iterations_used) == ("done: slept 2s", 1, 2)
    calls = CallLog.read(call_log)
    # Turn 0 was asked for once (by A); B replayed it and asked only for turn 1.
    assert [line for line in calls if line.startswith("provider")] == [f"provider {run_id} 0", f"provider {run_id} 1"]
    assert calls.count("start sleep") == 2 and calls.count("end sleep") == 1  # A's sleep died with A
    assert ModelTurn.select().where(ModelTurn.run == run_id).count() == 2
    assert ToolResult.select().where(ToolResult.run == run_id).count() == 1
    kinds = event_kinds(run_id)
    assert (kinds.count("llm"), kinds.count("tool"), kinds.count("requeued")) == (2, 1, 1)


def test_the_agent_loop_is_the_workers_default_executor(database_url, tmp_path):
    run_id = runs.create_run("be_user:7", "hi", spec={"script": [
        {"tool_calls": [{"id": "c", "name": "echo", "arguments": {"text": "echoed"}}]},
        {"content": "{last_tool_result}"},
    ]})
    worker = start_worker_process(database_url, log_path=tmp_path / "w.log")
    try:
        wait_until(lambda: run_row(run_id).status == "completed", timeout=30, what="the run to complete")
    finally:
        stop_process(worker)
    assert run_row(run_id).output == "echoed"
