"""The chaos suite (bench/chaos.py) in short: a few small seeded schedules of faults over real worker
processes, a real A2A peer and a private PostgreSQL cluster, and its checks (every run terminal, no message
id twice at the peer, no tool effect twice, gap-free events, no timeout for a task that had finished, no
worker dying by itself).

The fault kinds of this short run are the ones the sidecar survives today: SIGKILL of workers at random
moments and right after a delegation's journal commit, and a remote agent that answers 500, closes
connections, answers something that is not JSON, or restarts without its tasks. Not yet in it: `term` (a
stop's grace that runs out hands a run back while its tool still runs), `db` (workers must reconnect after a
database restart), `kill-send`, `peer-hang` and `peer-lose` (an unknown outcome must be asked about again);
docs/reliability.md ("Chaos suite") has the full run and its figures.
"""

import subprocess
import sys

import pytest

from tests.conftest import IN_CI
from tests.helpers import ROOT

SHORT_RUN_FAULTS = "kill,kill-journal,peer-500,peer-close,peer-json,peer-restart"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_short_seeded_chaos_run_passes_every_check():
    command = [sys.executable, "bench/chaos.py", "--quick", "--seed", "2", "--schedules", "4", "--lease", "4",
               "--databases", "sqlite,postgresql", "--faults", SHORT_RUN_FAULTS]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=230)
    output = result.stdout + result.stderr[-3000:]
    if "SKIPPED postgresql" in result.stdout and not IN_CI:
        pytest.skip(result.stdout.partition("SKIPPED ")[2].splitlines()[0])
    assert result.returncode == 0, output
    assert "schedules run: 4 (sqlite 2, postgresql 2)" in result.stdout, output
    assert "checks failed: 0 in 0 schedules" in result.stdout, output
    injected = result.stdout.partition("faults injected: ")[2].splitlines()[0]
    assert {entry.rpartition(" ")[0] for entry in injected.split(", ")} >= set(SHORT_RUN_FAULTS.split(",")), output
