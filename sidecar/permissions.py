"""Who may do what to a run, asked through the permission hook (the first plugin that answers decides).

The core's default, registered like any plugin: a run's owner may decide its own run's pauses, and so
may an actor holding the grant for the action in the run's workspace (PUT /api/v1/actors/{actor}/grants).
Anything no plugin allows is refused.
"""

from .hookspecs import hookimpl
from .plugin_api import RunView
from .plugins import plugin_context, plugin_manager
from .store import grants

DECIDE_ACTIONS = ("agent:approve", "agent:input")


def may(actor: str | None, workspace: str, action: str, run) -> bool:
    """run: the store's row; the hook gets its RunView."""
    if not actor:
        return False
    answer = plugin_manager().hook.nrllm_permission_check(
        actor=actor, workspace=workspace, action=action, run=None if run is None else RunView.of(run),
        context=plugin_context())
    return bool(answer)


@hookimpl(trylast=True)
def nrllm_permission_check(actor, workspace, action, run):
    if action in DECIDE_ACTIONS and run is not None and (
            run.owner == actor or grants.holds(actor, run.workspace, action)):
        return True
    return None


def may_decide(actor: str | None, workspace: str, run) -> bool:
    """May the actor decide any kind of pause of this run (what a host's actor may see of others' runs)."""
    return any(may(actor, workspace, action, run) for action in DECIDE_ACTIONS)
