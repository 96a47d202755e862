"""nr_mcp_agent's chat as a consumer of run statuses.

Its chat handles queued, running and the two human waiting states, and takes every other value for
settled ("This run finished outside the chat"). Before 0.16.0 it does not know waiting_for_dependency,
so a run in that status would be shown as finished. Its chat runs carry no origin, so it declares none:
it reads every run.
"""

from sidecar.domain.vocabulary import BASE_STATUSES, RunStatus
from sidecar.hookspecs import hookimpl

HANDLES_DEPENDENCY_FROM = "0.16.0"
# Cited by the gate's reason while an older version is reported: the page that names the version and the
# order of the upgrade.
UPGRADE_NOTE = "docs/upgrading.md"

BEFORE = sorted(s.value for s in BASE_STATUSES)
FROM_0_16 = BEFORE + [RunStatus.WAITING_FOR_DEPENDENCY.value]


@hookimpl
def nrllm_consumers():
    return [
        {
            "name": "nr_mcp_agent",
            "understands": {
                f"<{HANDLES_DEPENDENCY_FROM}": BEFORE,
                f">={HANDLES_DEPENDENCY_FROM}": FROM_0_16,
            },
            "upgrade_note": UPGRADE_NOTE,
        }
    ]
