"""Finds the references to documents in the project's code and docs and says which do not resolve.

A reference is a markdown link, a path under one of the repository's top-level directories (`docs/...`,
`sidecar/...`), a name ending in `.md`, a section named after a document (`docs/http-api.md, "Errors"`,
`docs/architecture.md ("Layers", "Checkpoints")`, `docs/host-guide.md §1`), or a decision record number
(`ADR 1`, and a record's number in parentheses inside docs/adr/). It resolves when the file exists inside
the repository, relative to the citing file or to the root, and each named section is a heading of it.
In Python only comments, docstrings and strings with spaces in them are read: a string without spaces is
a name the code uses (a file it opens), not prose.
"""

import io
import re
import tokenize
from pathlib import Path

TOP_LEVEL = ("docs", "sidecar", "tests", "bench", "compat", "plugins")
SUFFIXES = {".py", ".md", ".toml", ".txt", ".html", ".php", ".service", ".cfg", ".ini", ".json"}
NAMES = {"Makefile", "environment"}
SKIPPED_DIRS = {".venv", ".git", "__pycache__", ".pytest_cache", ".ruff_cache", "build", "dist", "node_modules"}
GENERATED = {"docs/public-surface.json"}

_PATH = r"[\w.-]+(?:/[\w.-]+)*"
MARKDOWN_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
DOCUMENT = re.compile(rf"(?<![\w/.:-])((?:\.\./)*{_PATH}\.md)(?![\w-])")
REPO_PATH = re.compile(rf"(?<![\w/.:-])((?:{'|'.join(TOP_LEVEL)})/(?:{_PATH})?)")
PARENT_PATH = re.compile(rf"(?<![\w/.:-])((?:\.\./)+{_PATH})")
# A document reference followed by the names of its sections: after a comma or in parentheses, quoted,
# separated by commas or "and"; the reference may be a markdown link.
SECTIONS = re.compile(
    rf"((?:\.\./)*{_PATH}\.md)(?:\]\([^)\s]*\))?\s*(?:,\s*|\(\s*)"
    r"(\"[^\"]+\"(?:\s*(?:,|and)\s*\"[^\"]+\")*)")
SECTION_SIGN = re.compile(rf"((?:\.\./)*{_PATH}\.md)?[\s,]*§\s*([\w.]*)")
ADR_NUMBER = re.compile(r"\bADR[- ]?(\d+)\b")
RECORD_NUMBER = re.compile(r"\((\d{4})\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def project_files(root: Path) -> list[Path]:
    found = []
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if any(p in SKIPPED_DIRS or p.endswith(".egg-info") for p in parts) or not path.is_file():
            continue
        if path.relative_to(root).as_posix() in GENERATED:
            continue
        if path.suffix in SUFFIXES or path.name in NAMES:
            found.append(path)
    return found


def prose_of(path: Path, text: str) -> list[str]:
    """The parts of a file that may cite documents."""
    if path.suffix != ".py":
        return [text]
    chunks, comments = [], []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            comments.append(token.string.lstrip("#").strip())
            continue
        if token.type not in (tokenize.NL, tokenize.NEWLINE) and comments:
            chunks.append(" ".join(comments))
            comments = []
        if token.type == tokenize.STRING and re.search(r"\s", token.string):
            chunks.append(token.string)
    if comments:
        chunks.append(" ".join(comments))
    return chunks


def _normalise(heading: str) -> str:
    return " ".join(heading.replace("`", "").replace("*", "").split()).casefold()


def headings_of(document: Path) -> list[str]:
    found, fenced = [], False
    for line in document.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line)):
            found.append(_normalise(match.group(1)))
    return found


def anchor_of(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")


def has_section(document: Path, name: str) -> bool:
    """A section is named by its heading, or by its heading's start before a parenthesis ("Remote agents,
    the outbound journal and push" for "... and push (operator)"), or for a numbered heading its number."""
    wanted = _normalise(name)
    return any(h == wanted or h.startswith(wanted + " (") or (wanted[:1].isdigit() and h.startswith(wanted + "."))
               for h in headings_of(document))


class Scan:
    def __init__(self, root: Path):
        self.root = root.resolve()

    def resolve(self, citing: Path, reference: str) -> Path | None:
        """The file or directory inside the repository the reference names, or None."""
        for base in (citing.parent, self.root):
            candidate = (base / reference).resolve()
            if candidate.is_relative_to(self.root) and candidate.exists():
                return candidate
        return None

    def outside(self, citing: Path, reference: str) -> bool:
        return not (citing.parent / reference).resolve().is_relative_to(self.root)

    def problems(self, citing: Path, text: str) -> list[str]:
        found = []
        for chunk in prose_of(citing, text):
            found += self._links(citing, chunk) + self._paths(citing, chunk) + self._sections(citing, chunk)
            found += self._numbers(citing, chunk)
        return found

    def _missing(self, citing: Path, reference: str) -> str | None:
        if "://" in reference or reference.startswith("mailto:"):
            return None
        if self.outside(citing, reference):
            return f"{reference}: outside the repository"
        if self.resolve(citing, reference) is None:
            return f"{reference}: no such file in the repository"
        return None

    def _links(self, citing: Path, chunk: str) -> list[str]:
        found = []
        for target in MARKDOWN_LINK.findall(chunk):
            if re.match(r"\w+:", target):
                continue
            reference, _, anchor = target.partition("#")
            if reference and (problem := self._missing(citing, reference)):
                found.append(problem)
                continue
            document = self.resolve(citing, reference) if reference else citing
            if anchor and anchor not in {anchor_of(h) for h in headings_of(document)}:
                found.append(f"{target}: no heading with the anchor #{anchor}")
        return found

    def _paths(self, citing: Path, chunk: str) -> list[str]:
        found = []
        for pattern in (DOCUMENT, REPO_PATH, PARENT_PATH):
            for match in pattern.finditer(chunk):
                reference = match.group(1).rstrip(".-")
                if chunk[match.end():].lstrip("/")[:1] in ("*", "{", "<"):
                    continue  # a pattern (tests/test_*.py, docs/examples/{name}), not a file
                if re.search(r"\b(?:href|src)=\"$", chunk[:match.start()]):
                    continue  # an HTML attribute: an address relative to the page that serves it
                if problem := self._missing(citing, reference):
                    found.append(problem)
        return found

    def _sections(self, citing: Path, chunk: str) -> list[str]:
        found = []
        for match in SECTIONS.finditer(chunk):
            document = self.resolve(citing, match.group(1))
            if document is None or not document.is_file():
                continue  # reported as a missing file already
            for name in re.findall(r"\"([^\"]+)\"", match.group(2)):
                if not has_section(document, name):
                    found.append(f'{match.group(1)}, "{" ".join(name.split())}": no such section')
        for match in SECTION_SIGN.finditer(chunk):
            document = match.group(1) and self.resolve(citing, match.group(1))
            if not document or not match.group(2) or not has_section(document, match.group(2).rstrip(".")):
                found.append(f"{match.group(0).strip()}: a section sign that names no section of a document here")
        return found

    def _numbers(self, citing: Path, chunk: str) -> list[str]:
        numbers = ADR_NUMBER.findall(chunk)
        if citing.parent == self.root / "docs" / "adr":
            numbers += RECORD_NUMBER.findall(chunk)
        records = self.root / "docs" / "adr"
        return [f"decision record {number}: not in docs/adr/" for number in numbers
                if not list(records.glob(f"{int(number):04d}-*.md"))]
