"""Two applications in one process share nothing (docs/architecture.md, "The application object"): each has
its own database, tokens, sealing keys, plugins, listeners, wake-ups, event feed and worker, side by side,
and code reaches the application its thread runs in."""

import threading

import pytest

from sidecar import application, bootstrap, keys, wakeup
from sidecar.api import event_hub
from sidecar.app import create_app
from sidecar.application import Application, current
from sidecar.delegation.coordinator import Coordinator
from sidecar.domain.sealing import generate_key
from sidecar.hookspecs import hookimpl
from sidecar.plugins import build_plugin_manager, plugin_manager
from sidecar.store import db, migrations, runs, tokens
from tests.support.api import as_host, settings_for
from tests.support.waiting import wait_until
from tests.support.workers import worker_in_thread

RUN = {"input": "hello", "provider": "scripted", "script": [{"content": "done"}]}


class StatusRecorder:
    def __init__(self):
        self.seen = []

    @hookimpl
    def nrllm_run_status_changed(self, run_id, new_status):
        self.seen.append((run_id, new_status))


class Side:
    """One application with its Flask app, a host token of its own database, and what its plugin saw."""

    def __init__(self, folder, name: str):
        url = f"sqlite:///{folder / f'{name}.db'}"
        Application().run(_migrate, url)
        self.settings = settings_for(url, folder / name, secret_keys=(generate_key(),))
        self.recorder = StatusRecorder()
        self.flask = create_app(self.settings, plugin_manager=build_plugin_manager(extra_plugins=[self.recorder]))
        self.flask.config["PROPAGATE_EXCEPTIONS"] = False
        self.application: Application = self.flask.extensions["nrllm_application"]
        self.client = self.flask.test_client()
        self.token = self.application.run(tokens.create, f"host-{name}", "host")[0]

    def post_run(self) -> str:
        response = self.client.post("/api/v1/runs", json=RUN, headers=as_host(self.token))
        assert response.status_code == 201, response.json
        return response.json["id"]

    def status(self, run_id: str, token: str | None = None) -> int | str:
        response = self.client.get(f"/api/v1/runs/{run_id}", headers=as_host(token or self.token))
        return response.json["status"] if response.status_code == 200 else response.status_code


def _migrate(url: str) -> None:
    db.bind(url)
    migrations.upgrade()
    db.database.close()


@pytest.fixture
def two(tmp_path):
    first, second = Side(tmp_path, "first"), Side(tmp_path, "second")
    yield first, second
    for side in (first, second):
        side.application.run(db.close_all)


def test_each_application_has_its_own_database_tokens_and_keys(two):
    first, second = two
    run_id = first.post_run()
    assert first.status(run_id) == "queued"
    assert second.status(run_id, first.token) == 401, "the first's token is not in the second's database"
    assert second.status(run_id) == 404, "nor is its run"
    assert first.application.database is not second.application.database
    assert first.application.sealer.fingerprints != second.application.sealer.fingerprints
    assert first.application.run(keys.sealer) is first.application.sealer
    assert first.application.run(plugin_manager) is not second.application.run(plugin_manager)
    assert first.application.run(event_hub.hub) is not second.application.run(event_hub.hub)


def test_workers_side_by_side_each_run_their_own_applications_runs(two):
    first, second = two
    first_run, second_run = first.post_run(), second.post_run()
    worker = first.application.run(worker_in_thread, first.settings)
    try:
        assert wait_until(lambda: first.status(first_run) == "completed", what="the first's run completed")
        assert second.status(second_run) == "queued", "the first's worker never saw the second's run"
        # Each application's status hook heard of its own run only (the second's: that it was queued).
        assert (first_run, "completed") in first.recorder.seen
        assert {run for run, _ in first.recorder.seen} == {first_run}
        assert second.recorder.seen == [(second_run, "queued")]
        # Its loop is woken by the first's queued runs, not the second's.
        assert worker._wake in first.application.woken_by_queued_runs
        assert worker._wake not in second.application.woken_by_queued_runs
    finally:
        worker.stop(grace=10)
    other = second.application.run(worker_in_thread, second.settings)
    try:
        assert wait_until(lambda: second.status(second_run) == "completed", what="the second's run completed")
        assert {run for run, _ in second.recorder.seen} == {second_run}
    finally:
        other.stop(grace=10)


def test_a_thread_runs_in_the_application_that_made_it_whatever_the_default(two):
    first, second = two
    assert current() is second.application, "the application started last is the process's default"
    run_id = first.post_run()
    seen = {}

    def look(where: str):
        found = runs.get_run(run_id)
        seen[where] = found.status if found else None

    started = first.application.run(application.thread, look, args=("made by the first",), name="test-first")
    started.start()
    plain = threading.Thread(target=look, args=("entered none",))  # the default's database has no such run
    plain.start()
    started.join(10)
    plain.join(10)
    assert seen == {"made by the first": "queued", "entered none": None}


def test_waking_one_applications_workers_leaves_the_others_asleep(two):
    first, second = two
    first_woken, second_woken = threading.Event(), threading.Event()
    first.application.run(wakeup.subscribe, first_woken)
    second.application.run(wakeup.subscribe, second_woken)
    first.application.run(wakeup.runs_queued)
    assert first_woken.is_set() and not second_woken.is_set()


def test_a_plugin_registered_before_start_up_is_kept_and_a_later_start_up_starts_afresh(tmp_path):
    """An embedding program registers a plugin of its own, then hands over to the command line (which starts
    the application): the plugin is there. A second start-up builds its plugins afresh."""
    url = f"sqlite:///{tmp_path / 'embedded.db'}"
    Application().run(_migrate, url)
    settings = settings_for(url, tmp_path / "embedded")
    recorder = StatusRecorder()

    def embed():
        plugin_manager().register(recorder, name="registered-before-start-up")
        return bootstrap.start(settings)

    started = Application().run(embed)
    assert started.plugin_manager.get_plugin("registered-before-start-up") is recorder
    again = started.run(bootstrap.start, settings)
    assert again.plugin_manager.get_plugin("registered-before-start-up") is None
    for application_ in (started, again):
        application_.run(db.close_all)


def test_a_coordinators_poll_threads_run_in_the_application_that_started_it(two):
    first, second = two
    coordinator = Coordinator(first.settings)
    first.application.run(coordinator.start)
    try:
        assert coordinator._pool.submit(current).result(10) is first.application
        assert current() is second.application
    finally:
        first.application.run(coordinator.stop)
