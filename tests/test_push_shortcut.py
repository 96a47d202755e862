"""An accepted push is answered before Flask (api/push.py, PushShortcut) as the view would answer it; every
push the shortcut does not accept reaches the view, which answers it in the API's error shape, and the push
has changed nothing, a write that failed included."""

import json
import sqlite3

import pytest

from sidecar.store import db as store_db
from sidecar.store import outbound, push_counts
from tests.support.delegation import journalled_send

pytestmark = pytest.mark.usefixtures("delegation_offered")


def notification(task_id: str, state: str = "TASK_STATE_WORKING") -> str:
    return json.dumps({"statusUpdate": {"taskId": task_id, "status": {"state": state}}})


@pytest.fixture
def seen_by_flask(app) -> list[int]:
    """The status of every answer Flask made (its after_request hooks see only those)."""
    statuses: list[int] = []

    @app.after_request
    def _record(response):
        statuses.append(response.status_code)
        return response
    return statuses


def test_an_accepted_push_is_answered_before_flask_as_the_view_answers_it(client, seen_by_flask):
    _, row, token = journalled_send(push=True)
    body = notification(row.remote_task_id)
    shortcut = client.post("/api/v1/push", data=body, headers={"X-A2A-Notification-Token": token})
    assert (shortcut.status_code, seen_by_flask) == (204, [])
    # An Origin sends a push to the view (CORS headers are Flask's to add); this one is not allowed any.
    view = client.post("/api/v1/push", data=body, headers={"X-A2A-Notification-Token": token,
                                                           "Origin": "https://elsewhere.example"})
    assert (view.status_code, seen_by_flask) == (204, [204])
    assert sorted(shortcut.headers.keys()) == sorted(view.headers.keys())
    assert {name: shortcut.headers[name] for name in ("Content-Type", "X-Content-Type-Options", "Cache-Control")} \
        == {name: view.headers[name] for name in ("Content-Type", "X-Content-Type-Options", "Cache-Control")}
    assert shortcut.data == view.data == b""
    assert push_counts.flush() == 2  # both were received
    assert outbound.get(row.id).pushes_seen == 2


def test_a_bearer_token_is_taken_too(client, seen_by_flask):
    _, row, token = journalled_send(push=True)
    answer = client.post("/api/v1/push", data=notification(row.remote_task_id),
                         headers={"Authorization": f"Bearer {token}"})
    assert (answer.status_code, seen_by_flask) == (204, [])
    assert push_counts.flush() == 1


@pytest.mark.parametrize(("change", "status", "code"), [
    ("token", 401, "unauthenticated"),
    ("body", 400, "malformed_request"),
    ("task", 404, "not_found"),
])
def test_a_push_it_does_not_accept_is_answered_by_the_view_and_changes_nothing(client, seen_by_flask, change,
                                                                               status, code):
    _, row, token = journalled_send(push=True)
    body = {"token": notification(row.remote_task_id, "TASK_STATE_COMPLETED"), "body": "{not json",
            "task": notification("task-of-another", "TASK_STATE_COMPLETED")}
    answer = client.post("/api/v1/push", data=body["token" if change == "token" else change],
                         headers={"X-A2A-Notification-Token": token + ("x" if change == "token" else "")})
    assert (answer.status_code, answer.json["code"], seen_by_flask) == (status, code, [status])
    assert answer.headers["X-Request-Id"]
    assert push_counts.flush() == 0
    after = outbound.get(row.id)
    assert (after.pushes_seen, after.push_received_at) == (0, None)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_push_whose_write_fails_is_answered_503_by_the_view_and_counted_once_when_sent_again(
        database_url, client, seen_by_flask):
    _, row, token = journalled_send(push=True)
    store_db.database.close()
    store_db.bind(f"{database_url}?busy_timeout=0.3")  # the same file, writers waiting less long
    holder = sqlite3.connect(database_url.removeprefix("sqlite:///"), isolation_level=None)
    completed = {"data": notification(row.remote_task_id, "TASK_STATE_COMPLETED"),
                 "headers": {"X-A2A-Notification-Token": token}}
    try:
        holder.execute("BEGIN EXCLUSIVE")  # the push's write (a note for the suspension to come) fails
        answer = client.post("/api/v1/push", **completed)
        assert (answer.status_code, answer.json["code"], seen_by_flask) == (503, "database_unavailable", [503])
        assert answer.headers["Retry-After"]
        holder.execute("COMMIT")
        assert outbound.get(row.id).pushes_seen == 0
        answer = client.post("/api/v1/push", **completed)  # the peer sends it again
        assert (answer.status_code, seen_by_flask) == (204, [503])
        after = outbound.get(row.id)
        assert after.pushes_seen == 1 and after.push_received_at is not None
    finally:
        holder.close()
        store_db.database.close()  # the test's own binding: the fixture closes only the one it made
