"""Server-sent events over a real HTTP server on 127.0.0.1, with a worker executing the run meanwhile."""

from prometheus_client import REGISTRY

from sidecar.api import event_hub, streaming
from sidecar.domain.lease import LeasePolicy
from sidecar.store import leases, runs
from sidecar.store.events import list_events
from sidecar.store.models import Run
from sidecar.testing import StepExecutor
from tests.support.api import ACTOR, as_host
from tests.support.runs import run_row, sequences, steps_input
from tests.support.streams import EventStream
from tests.support.waiting import wait_until


def follow(base_url: str, run_id: str, headers: dict) -> EventStream:
    """The event stream of a run, checked to be one."""
    stream = EventStream(base_url, "GET", f"/api/v1/runs/{run_id}/events", headers)
    assert stream.status == 200, stream.response.read()
    assert stream.content_type.startswith("text/event-stream")
    return stream


def _streams_served() -> float:
    return REGISTRY.get_sample_value("nrllm_event_streams")


def _create(steps, output="done") -> str:
    return runs.create_run(ACTOR, steps_input(*steps, output=output))


def test_sse_a_client_reading_a_running_run_sees_every_event_once_in_order(live_server, host_token, start_worker):
    start_worker(StepExecutor(), coordinators=0)
    run_id = _create([{"sleep": 0.03, "event": f"step {i}"} for i in range(25)])
    wait_until(lambda: run_row(run_id).status == "running", what="the worker to start the run")
    stream = follow(live_server, run_id, as_host(host_token))
    messages = list(stream)  # until the server ends the stream
    *events, last = messages
    assert last[1] == "run" and last[2]["status"] == "completed" and last[2]["output"] == "done"
    assert all(kind == "run_event" for _, kind, _ in events)
    assert [int(id_) for id_, _, _ in events] == [e["sequence"] for _, _, e in events]
    assert [e["sequence"] for _, _, e in events] == sequences(run_id), "every event once, in order, no gap"
    assert [e["payload"].get("name") for _, _, e in events if e["kind"] == "step"] == [
        f"step {i}" for i in range(25)]


def test_sse_a_client_that_disconnects_does_not_disturb_the_run(live_server, host_token, start_worker):
    start_worker(StepExecutor(), coordinators=0)
    run_id = _create([{"sleep": 0.05, "event": f"step {i}"} for i in range(30)])
    stream = follow(live_server, run_id, as_host(host_token))
    seen = []
    for message in stream:
        seen.append(message)
        if len(seen) == 4:
            break
    stream.close()
    assert run_row(run_id).status in ("queued", "running"), "the client left before the run ended"
    # The server notices at its next write and stops that stream (and only that stream).
    wait_until(lambda: _streams_served() == 0, timeout=10, what="the server to drop the stream")
    wait_until(lambda: run_row(run_id).status not in ("queued", "running"), what="the run to end")
    row = run_row(run_id)
    assert (row.status, row.output, row.termination_reason) == ("completed", "done", "completed")
    kinds = [e["kind"] for e in list_events(run_id)]
    assert kinds.count("step") == 30 and "lease_lost" not in kinds and "error" not in kinds
    assert sequences(run_id) == list(range(1, len(kinds) + 1))
    # The server still answers, and a new stream of the ended run replays it whole.
    again = list(follow(live_server, run_id, as_host(host_token)))
    assert len(again) == len(kinds) + 1 and again[-1][1] == "run"


def test_sse_resumes_after_last_event_id_and_ends_at_a_waiting_run(live_server, host_token):
    run_id = runs.create_run(ACTOR, "waits")
    leases.claim_queued("holder-1", 1, LeasePolicy(30))
    Run.update(status="waiting_for_approval", lease_holder=None).where(Run.id == run_id).execute()
    headers = {**as_host(host_token), "Last-Event-ID": "1"}
    messages = list(follow(live_server, run_id, headers))
    assert [(id_, kind) for id_, kind, _ in messages] == [("2", "run_event"), (None, "run")]
    assert messages[-1][2]["waiting"] == {"kind": "approval"}


def test_events_answer_json_unless_the_client_asks_for_a_stream(client, host_token):
    run_id = runs.create_run(ACTOR, "plain")
    response = client.get(f"/api/v1/runs/{run_id}/events", headers={**as_host(host_token), "Accept": "*/*"})
    assert response.mimetype == "application/json" and len(response.json["items"]) == 1


def test_an_idle_stream_sends_keep_alives_and_wakes_when_its_run_moves(database_url):
    run_id = runs.create_run(ACTOR, "stays queued")
    messages = streaming.run_events(run_id, 0, keepalive=0.3)
    try:
        assert next(messages).startswith("retry: ")
        assert "event: run_event" in next(messages)
        assert next(messages) == ": keep-alive\n\n", "nothing moved: a keep-alive after the quiet time"
        # Written by another connection of this process: the process's feed, its poll, wakes it.
        runs.request_cancel(run_id, by="test")
        rest = list(messages)
        assert "event: run\n" in rest[-1] and '"status": "cancelled"' in rest[-1]
    finally:
        messages.close()
    assert event_hub.hub().watched() == 0, "the stream's watch went with it"
