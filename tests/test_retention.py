"""Retention: `runs purge` and the daily purge delete finished runs with every row of theirs, and nothing else.

On each database: terminal runs only, never a run whose journal still has an open outcome, in batches,
a dry run that deletes nothing, the command's output, two purgers racing, and a worker's purge timer.
"""

import threading
import uuid
from datetime import timedelta

import pytest

from sidecar.config import Settings
from sidecar.domain.clock import utcnow
from sidecar.domain.retention import parse_cutoff, parse_duration
from sidecar.purger import RetentionPurger
from sidecar.store import retention, runs
from sidecar.store.models import (
    Decision,
    DependencyWait,
    ModelTurn,
    Note,
    Outbound,
    PersonPause,
    Run,
    RunEvent,
    ToolResult,
)
from sidecar.testing import StepExecutor
from tests.support.api import settings_for
from tests.support.commands import cli_in_process
from tests.support.waiting import wait_until

OLD = timedelta(days=40)
CUTOFF_AGE = timedelta(days=30)
TABLES = (RunEvent, ModelTurn, ToolResult, Decision, PersonPause, DependencyWait, Outbound, Note)


def _run(status: str, *, age: timedelta = OLD, journal: str = "accepted") -> str:
    """A run in `status` that finished (or last changed) `age` ago, with a row in every table of a run; its
    journal's send row has the outcome `journal`."""
    run_id = runs.create_run("be_user:1", f"a {status} run")
    at = utcnow() - age
    Run.update(status=status, finished_at=at, updated_at=at).where(Run.id == run_id).execute()
    RunEvent.create(run=run_id, sequence=99, kind="status", at=at, payload="{}")
    ModelTurn.create(run=run_id, index=0, message="{}", created_at=at)
    ToolResult.create(run=run_id, tool_call_id="call_1", turn_index=0, name="echo", result="x", created_at=at)
    pause = PersonPause.create(id=str(uuid.uuid4()), run=run_id, generation=1, kind="approval", turn_index=0,
                               since=at)
    Decision.create(id=str(uuid.uuid4()), run=run_id, pause=pause.id, generation=1, decision="approve",
                    decider="be_user:1", workspace="0", mode="store", stored_at=at)
    outbound_id = str(uuid.uuid4())
    Outbound.create(id=outbound_id, kind="send", owner="be_user:1", run=run_id, remote_agent="peer",
                    message_id=str(uuid.uuid4()), request_body="{}", request_sha256="0" * 64, outcome=journal,
                    created_at=at)
    DependencyWait.create(id=str(uuid.uuid4()), run=run_id, generation=2, tool_call_id="call_2", remote_agent="peer",
                          outbound_id=outbound_id, checkpoint="sealed", key_fingerprint="k", since=at,
                          deadline_at=at, resolved_at=at, resolution="result")
    Note.create(run=run_id, text="note", created_at=at)
    return run_id


def _rows_of(run_id: str) -> dict[str, int]:
    counts = {model._meta.table_name: model.select().where(model.run == run_id).count() for model in TABLES}
    counts["runs"] = Run.select().where(Run.id == run_id).count()
    return counts


def _all_rows(run_ids) -> dict[str, int]:
    total: dict[str, int] = {}
    for run_id in run_ids:
        for table, count in _rows_of(run_id).items():
            total[table] = total.get(table, 0) + count
    return total


@pytest.fixture
def mixed_runs(database_url):
    """Runs that must go and runs that must stay, by name."""
    going = [_run("completed"), _run("failed"), _run("cancelled")]
    staying = {
        "recent": _run("completed", age=timedelta(days=1)),
        "queued": _run("queued"), "running": _run("running"),
        "waiting_for_approval": _run("waiting_for_approval"), "waiting_for_input": _run("waiting_for_input"),
        "waiting_for_dependency": _run("waiting_for_dependency"),
    }
    open_journal = {"pending": _run("cancelled", journal="pending"),
                    "outcome_unknown": _run("failed", journal="outcome_unknown")}
    return going, staying, open_journal


def test_purge_deletes_finished_runs_with_every_row_of_theirs_and_nothing_else(mixed_runs):
    going, staying, open_journal = mixed_runs
    kept = [*staying.values(), *open_journal.values()]
    expected = _all_rows(going)
    kept_rows = {run_id: _rows_of(run_id) for run_id in kept}
    assert all(count > 0 for count in expected.values()), "every table of a run holds rows of the runs that go"

    report = retention.purge(utcnow() - CUTOFF_AGE)

    assert report.deleted == expected and report.runs == 3
    assert report.skipped == 2, "the runs with a pending or unknown journal row are counted as skipped"
    assert _all_rows(going) == dict.fromkeys(expected, 0)
    assert {run_id: _rows_of(run_id) for run_id in kept} == kept_rows, "nothing of another run was touched"
    assert retention.purge(utcnow() - CUTOFF_AGE).runs == 0, "a second pass finds nothing more"


def test_a_dry_run_counts_what_would_go_and_deletes_nothing(mixed_runs):
    going, staying, open_journal = mixed_runs
    before = _all_rows([*going, *staying.values(), *open_journal.values()])
    report = retention.purge(utcnow() - CUTOFF_AGE, dry_run=True)
    assert report.deleted == _all_rows(going) and report.skipped == 2
    assert _all_rows([*going, *staying.values(), *open_journal.values()]) == before


def test_purge_works_in_batches_and_looks_at_a_skipped_run_once(database_url, monkeypatch):
    going = [_run("completed") for _ in range(7)]
    skipped = _run("completed", journal="pending")
    batches = []
    real_batch = retention._purge_batch
    monkeypatch.setattr(retention, "_purge_batch", lambda ids: batches.append(len(ids)) or real_batch(ids))
    report = retention.purge(utcnow() - CUTOFF_AGE, batch=3)
    assert batches == [3, 3, 2], "8 candidates in transactions of at most 3 runs"
    assert (report.runs, report.skipped) == (7, 1)
    assert _all_rows(going)["runs"] == 0 and _rows_of(skipped)["runs"] == 1


def test_two_purgers_racing_over_the_same_runs_delete_each_row_once_without_errors(database_url):
    going = [_run(status) for status in ("completed", "failed", "cancelled") for _ in range(12)]
    expected = _all_rows(going)
    start, reports, errors = threading.Barrier(2), [], []

    def purger():
        try:
            start.wait(30)
            reports.append(retention.purge(utcnow() - CUTOFF_AGE, batch=5))
        except Exception as exc:  # the test fails below with what happened
            errors.append(exc)

    threads = [threading.Thread(target=purger) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == [] and len(reports) == 2
    summed = {table: reports[0].deleted[table] + reports[1].deleted[table] for table in expected}
    assert summed == expected, "between them the two purgers deleted every row exactly once"
    assert _all_rows(going) == dict.fromkeys(expected, 0)


def test_runs_purge_command_prints_counts_per_table_and_refuses_a_bad_age(database_url):
    going = _run("completed")
    kept = _run("completed", journal="pending")
    dry = cli_in_process(database_url, "runs", "purge", "--finished-before", "30d", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "run_events\t2" in dry.stdout and "runs\t1" in dry.stdout and "skipped_runs\t1" in dry.stdout
    assert "would delete 1" in dry.stderr and _rows_of(going)["runs"] == 1
    done = cli_in_process(database_url, "runs", "purge", "--finished-before", "30d")
    assert done.exit_code == 0, done.output
    lines = dict(line.split("\t") for line in done.stdout.splitlines())
    assert lines == {"run_events": "2", "model_turns": "1", "tool_results": "1", "decisions": "1",
                     "person_pauses": "1", "dependency_waits": "1", "outbound": "1", "notes": "1", "runs": "1",
                     "skipped_runs": "1"}
    assert _rows_of(going)["runs"] == 0 and _rows_of(kept)["runs"] == 1
    by_date = cli_in_process(database_url, "runs", "purge", "--finished-before", "2000-01-01")
    assert by_date.exit_code == 0 and "runs\t0" in by_date.stdout
    bad = cli_in_process(database_url, "runs", "purge", "--finished-before", "a month")
    assert bad.exit_code == 2 and "neither a duration" in bad.output


def test_a_worker_with_a_retention_purges_on_its_timer(start_worker):
    going, recent = _run("completed"), _run("completed", age=timedelta(days=1))
    purger = RetentionPurger(CUTOFF_AGE, first_delay=0.05, interval=0.2)
    start_worker(StepExecutor(), coordinators=0, companions=(purger,))
    wait_until(lambda: purger.passes >= 2, what="two purge passes")
    assert _rows_of(going)["runs"] == 0 and _rows_of(recent)["runs"] == 1


def test_the_worker_command_adds_the_purge_timer_only_with_a_retention(sqlite_url, tmp_path):
    from sidecar import bootstrap
    from sidecar.cli.processes import DEFAULT_EXECUTOR, _make_worker

    def companions(**values):
        settings = settings_for(sqlite_url, tmp_path, **values)
        bootstrap.start(settings, bind_database=False)  # as the command does before it makes its worker
        worker = _make_worker(settings, 1, 1.0, DEFAULT_EXECUTOR)
        return [type(companion).__name__ for companion in worker.companions]

    assert companions() == ["Doorbell", "Coordinator"]
    assert companions(retention=timedelta(days=30)) == ["Doorbell", "Coordinator", "RetentionPurger"]


def test_durations_and_cutoffs_parse_and_a_bad_retention_stops_start_up(tmp_path):
    now = utcnow()
    assert parse_duration("30d") == timedelta(days=30) and parse_duration("90m") == timedelta(minutes=90)
    assert parse_cutoff("12h", now) == now - timedelta(hours=12)
    assert parse_cutoff("2026-01-02T03:04:05+01:00", now).isoformat() == "2026-01-02T02:04:05"
    for bad in ("0d", "30", "1w", "-1d", ""):
        with pytest.raises(ValueError):
            parse_duration(bad)
    env = {"NRLLM_INSTANCE_PATH": str(tmp_path)}
    assert Settings.from_env(env).retention is None, "unset: finished runs are kept forever"
    assert Settings.from_env({**env, "NRLLM_RETENTION": "30d"}).retention == timedelta(days=30)
    with pytest.raises(SystemExit, match="NRLLM_RETENTION"):
        Settings.from_env({**env, "NRLLM_RETENTION": "a month"})
