"""Pushes that change nothing are counted on their send (`outbound.pushes_seen`) by writing the counts of many
together, a moment later (store/push_counts.py): in the same process, after a failed write, and when the
HTTP worker that received them stops."""

import json
import sqlite3
import urllib.request

import pytest

from sidecar.delegation import push
from sidecar.store import db as store_db
from sidecar.store import outbound, push_counts
from tests.support.delegation import journalled_send
from tests.support.servers import start_serve
from tests.support.waiting import wait_until

pytestmark = pytest.mark.usefixtures("every_status_writable")


def working(task_id: str) -> dict:
    return {"statusUpdate": {"taskId": task_id, "status": {"state": "TASK_STATE_WORKING"}}}


def pushes_seen(*rows) -> list[int]:
    return [outbound.get(row.id).pushes_seen for row in rows]


def test_counts_wait_for_one_write_of_them_all(database_url, monkeypatch):
    monkeypatch.setattr(push_counts, "FLUSH_SECONDS", 600.0)  # no timer writes them during this test
    sends = [journalled_send(push=True) for _ in range(2)]
    for (_, row, token), times in zip(sends, (3, 2), strict=True):
        for _ in range(times):
            assert push.receive(push.authenticate(token), working(row.remote_task_id)) is False
    rows = [row for _, row, _ in sends]
    assert pushes_seen(*rows) == [0, 0]
    assert push_counts.flush() == 5
    assert pushes_seen(*rows) == [3, 2]
    assert push_counts.flush() == 0  # nothing counted twice


def test_counts_are_written_within_a_second_without_being_asked(database_url):
    _, row, token = journalled_send(push=True)
    for _ in range(4):
        push.receive(push.authenticate(token), working(row.remote_task_id))
    wait_until(lambda: pushes_seen(row) == [4], timeout=10, what="the timer to write the counts")
    assert push_counts.flush() == 0


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_count_that_could_not_be_written_is_written_by_the_next_flush(database_url, monkeypatch):
    monkeypatch.setattr(push_counts, "FLUSH_SECONDS", 600.0)
    store_db.database.close()
    store_db.bind(f"{database_url}?busy_timeout=0.3")  # the same file, writers waiting less long
    _, row, token = journalled_send(push=True)
    push.receive(push.authenticate(token), working(row.remote_task_id))
    holder = sqlite3.connect(database_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # the write waits past its busy timeout and fails
        assert push_counts.flush() == 0
        holder.execute("COMMIT")
        assert pushes_seen(row) == [0]
        assert push_counts.flush() == 1
        assert pushes_seen(row) == [1]
    finally:
        holder.close()
        store_db.database.close()  # the test's own binding: the fixture closes only the one it made


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_stopping_http_worker_writes_the_counts_it_has_not_written(database_url, tmp_path):
    _, row, token = journalled_send(push=True)
    served = start_serve(database_url, tmp_path / "serve.log", "--no-worker")
    try:
        for _ in range(3):
            request = urllib.request.Request(
                f"{served.base_url}/api/v1/push", method="POST", data=json.dumps(working(row.remote_task_id)).encode(),
                headers={"X-A2A-Notification-Token": token, "Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.status == 204
    finally:
        assert served.stop() == 0, served.log()[-3000:]
    assert pushes_seen(row) == [3], served.log()[-3000:]
