"""Every document the code and the docs cite is in the repository, with the section they name; nothing
cites a design document kept elsewhere (tests/support/reference_scan.py says what counts as a reference)."""

import pytest

from tests.support import ROOT
from tests.support.reference_scan import Scan, project_files

OUTSIDE_NAME = "ADR-" + "281"  # the number of the durable-wait decision in a design kept outside this repository
SAMPLES = ROOT / "tests" / "test_references.py"  # this file: its broken references are samples for the scan


def test_every_reference_in_code_and_docs_resolves():
    scan = Scan(ROOT)
    problems = [f"{path.relative_to(ROOT)}: {problem}" for path in project_files(ROOT) if path != SAMPLES
                for problem in scan.problems(path, path.read_text())]
    assert not problems, "references to documents or sections that are not here:\n" + "\n".join(problems)


def test_the_scan_reads_the_docs_and_the_code():
    scanned = {path.relative_to(ROOT).as_posix() for path in project_files(ROOT)}
    assert {"README.md", "docs/http-api.md", "docs/adr/0001-durable-waits.md", "sidecar/api/runs.py",
            "compat/README.md", "pyproject.toml", "Makefile"} <= scanned
    assert not any(name.startswith(".venv/") for name in scanned)


def test_no_file_names_the_outside_design_record():
    naming = [path.relative_to(ROOT).as_posix() for path in project_files(ROOT)
              if OUTSIDE_NAME in path.read_text() and path != SAMPLES]
    assert not naming


@pytest.fixture
def repository(tmp_path):
    """A small repository: two pages, a decision record, a module."""
    (tmp_path / "docs" / "adr").mkdir(parents=True)
    (tmp_path / "docs" / "http-api.md").write_text(
        "# The API\n\n## Errors\n\n## Remote agents (operator)\n\n```\n# not a heading\n```\n")
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\n## 1. A token\n\n## Runs, lists and events\n")
    (tmp_path / "docs" / "adr" / "0001-durable-waits.md").write_text("# 0001\n\n## Decision\n")
    (tmp_path / "sidecar").mkdir()
    (tmp_path / "sidecar" / "runs.py").write_text("")
    return tmp_path


def _problems(root, relative_path, text):
    path = root / relative_path
    path.parent.mkdir(parents=True, exist_ok=True)
    return Scan(root).problems(path, text)


@pytest.mark.parametrize("relative_path, text", [
    ("docs/guide.md", "See [the API](http-api.md) and [errors](http-api.md#errors)."),
    ("docs/guide.md", "[Runs](#runs-lists-and-events), [step 1](guide.md#1-a-token), [up](../docs/guide.md)."),
    ("docs/guide.md", 'The errors (http-api.md, "Errors") and agents (http-api.md, "Remote agents").'),
    ("docs/guide.md", "Step one is docs/guide.md §1; the record is ADR 1, and adr/0001-durable-waits.md."),
    ("docs/guide.md", "Every page in docs/*.md, and https://example.org/project/blob/main/NOTES.md."),
    ("docs/guide.md", "```\n$ ls docs/\n```\nThe examples live in docs/examples/{name}/."),
    ("docs/adr/0002-x.md", "As (0001) decided; the layout of docs/http-api.md."),
    ("sidecar/api.py", '"""The runs API (docs/http-api.md, "Errors"); sidecar/runs.py."""\nPAGE = "nothing.md"\n'),
    ("sidecar/api.py", 'x = 1  # the answers of docs/http-api.md, "Remote agents (operator)"\n'),
    ("sidecar/api.py", 'PAGE = """<link rel="stylesheet" href="docs/assets/ui.css">"""\n'),
])
def test_the_scan_accepts_references_that_resolve(repository, relative_path, text):
    assert _problems(repository, relative_path, text) == []


@pytest.mark.parametrize("relative_path, text, problem", [
    ("docs/guide.md", "See [the API](api.md).", "api.md: no such file"),
    ("docs/guide.md", "See [errors](http-api.md#failures).", "no heading with the anchor #failures"),
    ("docs/guide.md", "Jump to [it](#nowhere).", "no heading with the anchor #nowhere"),
    ("docs/guide.md", 'See http-api.md, "Failures".', '"Failures": no such section'),
    ("docs/guide.md", 'See [http-api.md](http-api.md) ("Errors", "Streams").', '"Streams": no such section'),
    ("docs/guide.md", 'See http-api.md, "Remote".', '"Remote": no such section'),
    ("docs/guide.md", "As http-api.md §4.2 says.", "a section sign"),
    ("docs/guide.md", "As § 4.2 says.", "a section sign"),
    ("docs/guide.md", "The rule of " + OUTSIDE_NAME + ".", "decision record 281"),
    ("docs/guide.md", "As ADR 7 says.", "decision record 7"),
    ("docs/guide.md", "The design is in [design](../../shared/design.md).", "outside the repository"),
    ("docs/guide.md", "The design is ../../shared/design.md.", "outside the repository"),
    ("docs/guide.md", "The CHANGELOG.md says.", "CHANGELOG.md: no such file"),
    ("docs/adr/0002-x.md", "As (0009) decided.", "decision record 0009"),
    ("sidecar/api.py", '"""The runs API (http-api.md, "Runs")."""\n', "http-api.md: no such file"),
    ("sidecar/api.py", 'x = 1  # see docs/http-api.md, "Runs"\n', '"Runs": no such section'),
    ("sidecar/api.py", 'MESSAGE = "see docs/upgrade.md for the order"\n', "docs/upgrade.md: no such file"),
    ("sidecar/api.py", '"""Claims (sidecar/claims.py)."""\n', "sidecar/claims.py: no such file"),
])
def test_the_scan_reports_references_that_do_not_resolve(repository, relative_path, text, problem):
    found = _problems(repository, relative_path, text)
    assert any(problem in line for line in found), found
