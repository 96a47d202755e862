"""The sidecar's own consumers of run statuses, declared through the same hook as any plugin's.

Each consumer maps every status it handles to what it does with it; the maps are used by the code and
are also the declaration. A status added to the vocabulary fails tests/test_consumers.py until every
map here says what to do with it.
"""

from . import __version__
from .domain.vocabulary import RunStatus
from .hookspecs import hookimpl

S = RunStatus

# Run views (API run list and detail): how a status is grouped for a person looking at runs.
RUN_VIEW_GROUP = {
    S.QUEUED: "active", S.RUNNING: "active",
    S.WAITING_FOR_INPUT: "needs_decision", S.WAITING_FOR_APPROVAL: "needs_decision",
    S.WAITING_FOR_DEPENDENCY: "waiting",
    S.COMPLETED: "settled", S.FAILED: "settled", S.CANCELLED: "settled",
}

# Inbox: the kind of decision a status asks for; None for statuses no person can decide.
INBOX_KIND = {
    S.QUEUED: None, S.RUNNING: None,
    S.WAITING_FOR_INPUT: "input", S.WAITING_FOR_APPROVAL: "approval",
    S.WAITING_FOR_DEPENDENCY: None,
    S.COMPLETED: None, S.FAILED: None, S.CANCELLED: None,
}

# Command line (`runs list`, `runs show`): the label shown beside a run.
CLI_LABEL = {
    S.QUEUED: "queued", S.RUNNING: "running",
    S.WAITING_FOR_INPUT: "waiting (input)", S.WAITING_FOR_APPROVAL: "waiting (approval)",
    S.WAITING_FOR_DEPENDENCY: "waiting (remote)",
    S.COMPLETED: "completed", S.FAILED: "failed", S.CANCELLED: "cancelled",
}

# Reaper: what it does with a run whose lease expired, by status. Only running rows hold a lease.
REAPER_ACTION = {
    S.QUEUED: "never", S.RUNNING: "reap",
    S.WAITING_FOR_INPUT: "never", S.WAITING_FOR_APPROVAL: "never", S.WAITING_FOR_DEPENDENCY: "never",
    S.COMPLETED: "never", S.FAILED: "never", S.CANCELLED: "never",
}

CORE_CONSUMERS = {
    "sidecar_run_views": RUN_VIEW_GROUP,
    "sidecar_inbox": INBOX_KIND,
    "sidecar_cli": CLI_LABEL,
    "sidecar_reaper": REAPER_ACTION,
}


def core_consumer_versions() -> dict[str, str]:
    """The core consumers are always loaded, in the sidecar's own version."""
    return {name: __version__ for name in CORE_CONSUMERS}


@hookimpl
def nrllm_consumers():
    return [
        {"name": name, "understands": {f">={__version__}": sorted(s.value for s in table)}}
        for name, table in CORE_CONSUMERS.items()
    ]
