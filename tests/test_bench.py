"""The benchmarks work: `bench/run_all.py --quick` runs every one of them small, and they print figures.

The floors are checked by the full runs (docs/performance.md), not here: a few seconds of samples on a
shared CI machine are too noisy to judge.
"""

import re
import subprocess
import sys

import psycopg2
import pytest

from tests.support import ROOT
from tests.support.databases import IN_CI, PG_ADMIN

# A row of bench_store's table: database, threads, commits/s, claims/s, segments/s. Other benchmarks
# print tables of the same shape, hence the sections of run_all's output.
STORE_ROW = re.compile(r"^(sqlite|postgresql)\s+([124])\s+(\d+)\s+(\d+)\s+(\d+)\s", re.MULTILINE)
# bench_waiting's and bench_push's rows: a database, then its figures (decimals).
FIGURES_ROW = r"^(sqlite|postgresql)((?:\s+[+-]?\d+(?:\.\d+)?){%d})\s"
# bench_serving's rows: a database, a phase, its rate, requests and errors.
SERVING_ROW = re.compile(r"^(sqlite|postgresql)\s+(create|read|health)\s+\d+\s+(\d+)\s+(\d+)\s", re.MULTILINE)
# bench_cycle's rows: a database, an agent, runs in flight, runs, commits/s, cycles/s, p50, p99, then the CPU.
CYCLE_ROW = re.compile(r"^(sqlite|postgresql)\s+(fast|sdk|sdk push)\s+\d+\s+(\d+)\s+\d+\s+(\d+\.\d)\s+\d+\s+\d+\s",
                       re.MULTILINE)


def _section(output: str, name: str) -> str:
    """The part of run_all's output that benchmark `name` printed."""
    found = re.search(rf"^== {re.escape(name)}.*?^== {re.escape(name)}: exit", output, re.MULTILINE | re.DOTALL)
    assert found, output
    return found.group()


def _require_postgres() -> None:
    try:
        psycopg2.connect(PG_ADMIN, connect_timeout=3).close()
    except Exception as exc:
        message = f"postgresql is not reachable ({exc}); the benchmarks need it"
        if IN_CI:
            pytest.fail(f"{message}, and CI=true requires them", pytrace=False)
        pytest.skip(message)


@pytest.mark.slow
@pytest.mark.timeout(600)  # every benchmark, one after the other, each starting real processes
def test_every_benchmark_runs_quick_and_prints_its_figures():
    _require_postgres()
    result = subprocess.run(
        [sys.executable, "bench/run_all.py", "--quick"], cwd=ROOT, capture_output=True, text=True, timeout=560
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    store_rows = STORE_ROW.findall(_section(result.stdout, "bench_store.py"))
    rows = {(dialect, int(threads)): figures for dialect, threads, *figures in store_rows}
    assert set(rows) == {(d, t) for d in ("sqlite", "postgresql") for t in (1, 2, 4)}, output
    assert all(int(figure) > 0 for figures in rows.values() for figure in figures), output
    for name, columns in (("bench_waiting.py", 9), ("bench_push.py", 4)):
        rows = dict(re.findall(FIGURES_ROW % columns, _section(result.stdout, name), re.MULTILINE))
        assert set(rows) == {"sqlite", "postgresql"}, output
    cycle = CYCLE_ROW.findall(_section(result.stdout, "bench_cycle.py"))
    assert {(d, agent) for d, agent, _, _ in cycle} == {
        (d, agent) for d in ("sqlite", "postgresql") for agent in ("fast", "sdk", "sdk push")}, output
    assert all(int(count) > 0 and float(rate) > 0 for _, _, count, rate in cycle), output
    serving = SERVING_ROW.findall(_section(result.stdout, "bench_serving.py"))
    assert {(d, phase) for d, phase, _, _ in serving} == {
        (d, phase) for d in ("sqlite", "postgresql") for phase in ("create", "read", "health")}, output
    assert all(int(requests) > 0 and int(errors) == 0 for _, _, requests, errors in serving), output
    lock = re.findall(r"^(sqlite-handler|store) +(\d+) ", _section(result.stdout, "bench_sqlite_lock.py"), re.MULTILINE)
    assert lock == [("sqlite-handler", "450"), ("store", "450")], output


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_cycle_benchmark_shows_where_a_runs_time_went():
    result = subprocess.run(
        [sys.executable, "bench/bench_cycle.py", "--quick", "--databases", "sqlite", "--agents", "fast", "--stages"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # Every step of the cycle, each over the row's 20 runs, the wait's resolution among them.
    steps = dict(re.findall(r"^  (\S+ -> \S+) +(\d+)  mean", result.stdout, re.MULTILINE))
    for step in ("queued -> running", "waiting_for_dependency -> resolved", "resolved -> resume", "llm -> completed"):
        assert steps.get(step) == "20", output
