"""The committed public surface (docs/public-surface.json) is what the code has: hooks, commands, HTTP paths,
tools and vocabularies. docs/stability.md says what counts as additive."""

import difflib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SURFACE_FILE = ROOT / "docs" / "public-surface.json"
MESSAGE = (
    "the public surface changed; if intended, run `python -m sidecar.surface --write` and say in "
    "CHANGELOG.md whether it is additive (docs/stability.md)"
)


def test_the_committed_public_surface_matches_the_code():
    # A process of its own: generating binds a database and installs plugins process-wide.
    generated = subprocess.run(
        [sys.executable, "-m", "sidecar.surface"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert generated.returncode == 0, f"python -m sidecar.surface failed:\n{generated.stderr}"
    committed = SURFACE_FILE.read_text() if SURFACE_FILE.exists() else ""
    if generated.stdout != committed:
        diff = "".join(difflib.unified_diff(
            committed.splitlines(keepends=True), generated.stdout.splitlines(keepends=True),
            fromfile="docs/public-surface.json (committed)", tofile="generated from the code",
        ))
        pytest.fail(f"{MESSAGE}\n\n{diff}", pytrace=False)
