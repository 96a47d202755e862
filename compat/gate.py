"""The gate itself, pure: from what consumers declare and what the host reported, what may be written.

Inputs are consumer declarations (from plugins, through the consumer hook) and the host's report of the
consumers it has loaded (name, version, and for consumers no plugin declares, what they understand). The
gate answers per status and origin whether a run may be written in that status, and whether delegation
tools may be offered. It knows nothing about HTTP or the database.
"""

from dataclasses import dataclass, field
from datetime import datetime

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from sidecar.domain.vocabulary import BASE_STATUSES, RunStatus

DELEGATION_STATUS = RunStatus.WAITING_FOR_DEPENDENCY
UPGRADING_DOC = "docs/upgrading.md"
NO_REPORT_REASON = "no consumer report yet: the host has not reported which consumers it has loaded"


@dataclass(frozen=True)
class StatusRange:
    """From a consumer declaration: in versions matching `versions`, the consumer reads `statuses`."""

    versions: SpecifierSet
    statuses: frozenset[str]

    @property
    def lowest_version(self) -> str | None:
        """The lowest version the range admits by a lower bound (>=, ==, ~=), for "works from"."""
        bounds = [Version(s.version) for s in self.versions if s.operator in (">=", "==", "~=", "===")]
        return str(min(bounds)) if bounds else None


@dataclass(frozen=True)
class Declaration:
    """What a plugin declares about a consumer."""

    name: str
    ranges: tuple[StatusRange, ...]
    origins: frozenset[str] = frozenset()  # empty: the consumer reads every run
    declared_by: str = ""
    upgrade_note: str | None = None  # where the consumer's own upgrade note is; the gate's reason cites it

    @classmethod
    def build(cls, name: str, understands: dict[str, list[str]], origins=(), declared_by: str = "",
              upgrade_note: str | None = None) -> "Declaration":
        """`understands` maps a PEP 440 specifier (">=0.16.0", "<0.16.0") to the statuses read there."""
        ranges = []
        for spec, statuses in understands.items():
            try:
                versions = SpecifierSet(spec)
            except InvalidSpecifier as exc:
                raise ValueError(f"consumer {name}: {spec!r} is not a version range") from exc
            unknown = set(statuses) - {s.value for s in RunStatus}
            if unknown:
                raise ValueError(f"consumer {name}: unknown statuses {sorted(unknown)}")
            ranges.append(StatusRange(versions, frozenset(statuses)))
        if upgrade_note is not None and (not isinstance(upgrade_note, str) or not upgrade_note.strip()):
            raise ValueError(f"consumer {name}: upgrade_note must be a non-empty string")
        return cls(name, tuple(ranges), frozenset(origins), declared_by, upgrade_note)

    def statuses_for(self, version: str) -> frozenset[str]:
        parsed = parse_version(version)
        if parsed is None:
            return _BASE
        for status_range in self.ranges:
            if status_range.versions.contains(parsed, prereleases=True):
                return status_range.statuses
        return _BASE

    def understands_from(self, status: str) -> str | None:
        candidates = [r.lowest_version for r in self.ranges if status in r.statuses and r.lowest_version]
        return min(candidates, key=Version) if candidates else None


@dataclass(frozen=True)
class ReportedConsumer:
    name: str
    version: str
    understands: frozenset[str] | None = None  # only for consumers no plugin declares


@dataclass(frozen=True)
class LoadedConsumer:
    """A reported consumer, resolved against the declarations."""

    name: str
    version: str
    understands: frozenset[str]
    declared_by: str
    origins: frozenset[str]
    declaration: Declaration | None

    @property
    def version_known(self) -> bool:
        return parse_version(self.version) is not None


@dataclass(frozen=True)
class Blocker:
    consumer: str
    version: str
    understands_from: str | None
    origins: frozenset[str]
    version_known: bool
    upgrade_note: str | None = None

    def as_dict(self) -> dict:
        return {"consumer": self.consumer, "version": self.version, "understands_from": self.understands_from}


_BASE = frozenset(s.value for s in BASE_STATUSES)


def parse_version(version: str) -> Version | None:
    try:
        return Version(version)
    except InvalidVersion:
        return None


@dataclass
class Gate:
    declarations: dict[str, Declaration]
    report: list[ReportedConsumer] | None  # None: the host never reported
    reported_at: datetime | None = None
    consumers: list[LoadedConsumer] = field(init=False)

    def __post_init__(self):
        self.consumers = [self._resolve(c) for c in (self.report or [])]

    def _resolve(self, reported: ReportedConsumer) -> LoadedConsumer:
        declaration = self.declarations.get(reported.name)
        if declaration is not None:  # a plugin's declaration wins over the host's `understands`
            return LoadedConsumer(reported.name, reported.version, declaration.statuses_for(reported.version),
                                  f"plugin {declaration.declared_by or declaration.name}", declaration.origins,
                                  declaration)
        if reported.understands is not None and parse_version(reported.version) is not None:
            return LoadedConsumer(reported.name, reported.version, frozenset(reported.understands),
                                  "host report", frozenset(), None)
        # Undeclared, or of an unknown version (not PEP 440): only the base vocabulary, whatever it says.
        return LoadedConsumer(reported.name, reported.version, _BASE, "base vocabulary (undeclared)",
                              frozenset(), None)

    @property
    def reported(self) -> bool:
        return self.report is not None

    def blockers(self, status: str) -> list[Blocker]:
        return [
            Blocker(c.name, c.version, c.declaration.understands_from(status) if c.declaration else None,
                    c.origins, c.version_known, c.declaration.upgrade_note if c.declaration else None)
            for c in self.consumers
            if status not in c.understands
        ]

    def may_write(self, status: str, origin: str | None = None) -> bool:
        """May a run with this origin be written in this status?"""
        if status in _BASE:
            return True
        if not self.reported:
            return False
        return not any(not b.origins or origin in b.origins for b in self.blockers(status))

    def refusal(self, status: str, origin: str | None = None) -> str | None:
        """Why a run with this origin may not be written in this status; None when it may."""
        if self.may_write(status, origin):
            return None
        if not self.reported:
            return NO_REPORT_REASON
        relevant = [b for b in self.blockers(status) if not b.origins or origin in b.origins]
        return "; ".join(_explain(b, status) for b in relevant)

    def blocked_origins(self, status: str) -> list[str]:
        """Origins gated by origin-scoped consumers while runs without those origins may be written."""
        if not self.may_write(status, None):
            return []
        return sorted({o for b in self.blockers(status) for o in b.origins})

    def report_dict(self, runs_in_unreadable_status: int = 0) -> dict:
        statuses = {}
        for status in sorted(s.value for s in RunStatus if s.value not in _BASE):
            statuses[status] = {
                "writable": self.may_write(status),
                "blocked_by": [b.as_dict() for b in self.blockers(status) if not b.origins],
            }
        return {
            "reported_at": self.reported_at,
            "statuses": statuses,
            "delegation": {
                "offered": self.may_write(DELEGATION_STATUS),
                "blocked_origins": self.blocked_origins(DELEGATION_STATUS),
                "reason": self.refusal(DELEGATION_STATUS),
            },
            "consumers": [
                {"name": c.name, "version": c.version, "understands": sorted(c.understands, key=_status_order),
                 "declared_by": c.declared_by}
                for c in self.consumers
            ],
            "runs_in_unreadable_status": runs_in_unreadable_status,
        }


def _status_order(status: str) -> int:
    return [s.value for s in RunStatus].index(status)


def _explain(blocker: Blocker, status: str) -> str:
    if not blocker.version_known:
        return (f"{blocker.consumer} {blocker.version} is loaded and its version is unknown (not PEP 440), so it "
                f"is taken to read only the base vocabulary, without {status} (see {UPGRADING_DOC})")
    text = f"{blocker.consumer} {blocker.version} is loaded and does not handle {status}"
    if blocker.understands_from:
        text += f"; it does from {blocker.understands_from}"
    # The consumer's own note says how to upgrade it; the sidecar's page covers the consumers it knows.
    return f"{text} (see {blocker.upgrade_note or UPGRADING_DOC})"
