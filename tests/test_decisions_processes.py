"""Decide-now in a real `nrllm-sidecar serve --no-worker` process that is killed mid-segment: the reaper
requeues the run and a worker process completes it from the stored decision, which is applied once."""

import os
import signal
import threading

import pytest
import requests

from sidecar.store import notes, tokens
from sidecar.store.models import Decision, ModelTurn
from tests.support import SHORT_LEASE
from tests.support.api import as_host
from tests.support.decisions import body, paused_run
from tests.support.runs import event_kinds, event_payloads, run_row
from tests.support.servers import process_tree, start_serve
from tests.support.waiting import wait_until
from tests.support.workers import start_worker_process, stop_process

pytestmark = pytest.mark.slow

# Approve a note, then a tool slow enough to kill the deciding process in the middle of it.
SCRIPT = [
    {"tool_calls": [{"id": "note", "name": "write_note", "arguments": {"text": "hello"}}]},
    {"tool_calls": [{"id": "nap", "name": "sleep", "arguments": {"seconds": 3}}]},
    {"content": "done after {last_tool_result}"},
]


def test_decide_now_killed_mid_segment_is_completed_by_a_worker_once(database_url, tmp_path):
    token = tokens.create("host-kill", "host")[0]
    run_id = paused_run(SCRIPT)
    served = start_serve(database_url, tmp_path / "serve.log", "--no-worker",
                         env={"NRLLM_LEASE_SECONDS": str(SHORT_LEASE)})
    serve, port = served.proc, served.port
    worker = None
    answers = []
    try:
        def decide():
            try:
                answers.append(requests.post(f"http://127.0.0.1:{port}/api/v1/runs/{run_id}/decision",
                                             json=body(run_id, mode="now"), headers=as_host(token), timeout=60))
            except requests.RequestException as exc:
                answers.append(exc)

        deciding = threading.Thread(target=decide)
        deciding.start()
        wait_until(lambda: ModelTurn.select().where(ModelTurn.run == run_id, ModelTurn.index == 1).exists(),
                   timeout=30, what="the decide-now segment to reach the slow tool")
        holder = run_row(run_id).lease_holder
        assert holder.startswith("decide-now:") and notes.of_run(run_id) == ["hello"]
        for pid in process_tree(serve.pid):  # serve and the HTTP worker serving the request: a crash
            os.kill(pid, signal.SIGKILL)
        serve.wait(10)
        deciding.join(30)
        assert isinstance(answers[0], requests.RequestException), "the request died with its process"
        assert run_row(run_id).status == "running", "nobody has taken the run over yet"

        worker = start_worker_process(database_url, lease=SHORT_LEASE, log_path=tmp_path / "worker.log")
        wait_until(lambda: run_row(run_id).status == "completed", timeout=60, what="a worker to complete the run")
    finally:
        stop_process(serve)
        if worker is not None:
            stop_process(worker)
    row = run_row(run_id)
    assert (row.output, row.requeue_count) == ("done after slept 3s", 1)
    assert notes.of_run(run_id) == ["hello"], "the approved note was written once"
    seen = event_kinds(run_id)
    assert (seen.count("decision"), seen.count("resume"), seen.count("note")) == (1, 1, 1)
    assert seen.count("lease_lost") == 1 and event_payloads(run_id, "lease_lost")[0]["holder"] == holder
    assert Decision.get().applied_at is not None
