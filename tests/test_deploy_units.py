"""The systemd units of docs/deploy.md (docs/examples/systemd/) pass `systemd-analyze verify` with their
paths pointed at this checkout, and start the commands that exist. Skipped where systemd-analyze is missing,
except under CI=true."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.databases import IN_CI

UNITS = ROOT / "docs" / "examples" / "systemd"
VENV = Path(sys.executable).parent.parent


def _installed_copies(tmp_path: Path) -> list[Path]:
    """The units as an operator installs them, with this checkout's paths instead of /srv/nrllm-sidecar."""
    (tmp_path / "instance").mkdir()
    shutil.copy(UNITS / "environment", tmp_path / "environment")
    copies = []
    for unit in sorted(UNITS.glob("*.service")):
        text = (unit.read_text().replace("/srv/nrllm-sidecar/.venv", str(VENV))
                .replace("/srv/nrllm-sidecar", str(tmp_path))
                .replace("/etc/nrllm-sidecar/environment", str(tmp_path / "environment")))
        copy = tmp_path / unit.name
        copy.write_text(text)
        copies.append(copy)
    return copies


def test_the_systemd_units_verify(tmp_path):
    if shutil.which("systemd-analyze") is None:
        if IN_CI:
            pytest.fail("systemd-analyze is missing, but CI=true requires the unit check")
        pytest.skip("systemd-analyze is not installed; the unit files are not checked")
    copies = _installed_copies(tmp_path)
    assert {c.name for c in copies} == {"nrllm-sidecar-api.service", "nrllm-sidecar-worker.service"}
    checked = subprocess.run(["systemd-analyze", "verify", *map(str, copies)], capture_output=True, text=True,
                             timeout=60)
    assert checked.returncode == 0, checked.stderr
    assert checked.stderr.strip() == "", checked.stderr  # not even a warning


def test_the_units_run_commands_the_sidecar_has(tmp_path):
    """Every ExecStart/ExecStartPre names a real command of the CLI (its --help answers)."""
    for copy in _installed_copies(tmp_path):
        for line in copy.read_text().splitlines():
            if line.startswith(("ExecStart=", "ExecStartPre=")):
                argv = line.partition("=")[2].split()
                assert Path(argv[0]) == VENV / "bin" / "nrllm-sidecar"
                command = [a for a in argv[1:] if not a.startswith("-")][:2]
                words = command[:2] if command[:1] == ["db"] else command[:1]
                answer = subprocess.run([argv[0], *words, "--help"], capture_output=True, text=True, timeout=60)
                assert answer.returncode == 0, (line, answer.stderr)
                for option in (a for a in argv[1:] if a.startswith("--")):
                    assert option in answer.stdout, (line, option)
