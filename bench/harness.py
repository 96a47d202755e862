"""What every benchmark here shares: its command line, its checks, how an unreachable server or a failed check
is reported, the verdict beside a floor, and the exit status (1 on any problem)."""

import argparse
import contextlib
import os

from scratch_databases import Unreachable

IN_CI = os.environ.get("CI", "").lower() == "true"
DIALECTS = ("sqlite", "postgresql", "mysql")


class CheckFailed(Exception):
    """The sidecar did something wrong under load (a run claimed twice, a run not completed): no figure of
    that measurement means anything."""


def check(condition: bool, what: str) -> None:
    if not condition:
        raise CheckFailed(what)


def _databases(text: str) -> list[str]:
    dialects = text.split(",")
    if unknown := sorted(set(dialects) - set(DIALECTS)):
        raise argparse.ArgumentTypeError(f"unknown databases: {', '.join(unknown)} (known: {', '.join(DIALECTS)})")
    return dialects


def arguments(doc: str, *, quick_help: str, databases: str = "sqlite,postgresql") -> argparse.ArgumentParser:
    """The options every benchmark takes: --quick and --databases (a list once parsed)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument(
        "--databases", default=databases, type=_databases, help=f"comma-separated: {','.join(DIALECTS)}"
    )
    return parser


@contextlib.contextmanager
def measuring(dialect: str, quick: bool, problems: list[str]):
    """Measure one database: a server that cannot be reached or a failed check becomes a problem, and the
    next database is measured. Like the tests, a missing server is only skipped in a workstation's quick run;
    never in CI, and never in a full run, whose point is to compare this database with its floor."""
    try:
        yield
    except Unreachable as exc:
        if quick and not IN_CI:
            print(f"SKIPPED {exc}", flush=True)
        else:
            problems.append(str(exc))
    except CheckFailed as exc:
        problems.append(f"{dialect}: check failed: {exc}")


def close_connections(bound) -> None:
    """Close the benchmark's connections to a database it is done with, or done with for now."""
    bound.close()
    if hasattr(bound, "close_all"):
        bound.close_all()  # a pool keeps the connections of ended threads checked out


def verdict(floor, met: bool, quick: bool) -> str:
    """The last column of a row: its floor, and whether it was met (a quick run's samples are too small)."""
    if floor is None:
        return "-"
    if quick:
        return f"{floor} (not checked in a quick run)"
    return f"{floor} {'ok' if met else 'MISSED'}"


def conclude(problems: list[str], ok: str = "OK", most: int = 50) -> int:
    """Print the problems (or `ok`) and return the exit status."""
    for problem in problems[:most]:
        print(f"FAIL {problem}")
    if len(problems) > most:
        print(f"FAIL ... and {len(problems) - most} more")
    if not problems:
        print(ok)
    return 1 if problems else 0
