"""Grants: the rights an actor holds per workspace (`agent:approve`, `agent:input`), replaced whole."""

from ..domain.clock import utcnow
from .db import transactional
from .models import Grant

GRANTS = ("agent:approve", "agent:input")


def of(actor: str, workspace: str) -> list[str]:
    query = Grant.select(Grant.permission).where(Grant.actor == actor, Grant.workspace == workspace)
    return sorted(row.permission for row in query)


def by_workspace(actor: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for row in Grant.select().where(Grant.actor == actor).order_by(Grant.workspace, Grant.permission):
        found.setdefault(row.workspace, []).append(row.permission)
    return found


@transactional
def replace(actor: str, workspace: str, grants: list[str]) -> list[str]:
    """Set the actor's grants in the workspace to exactly `grants`; returns them sorted."""
    unknown = sorted(set(grants) - set(GRANTS))
    if unknown:
        raise ValueError(f"unknown grants {unknown}; known: {', '.join(GRANTS)}")
    Grant.delete().where(Grant.actor == actor, Grant.workspace == workspace).execute()
    now = utcnow()
    wanted = sorted(set(grants))
    if wanted:
        Grant.insert_many([
            {"actor": actor, "workspace": workspace, "permission": g, "created_at": now} for g in wanted
        ]).execute()
    return wanted


def holds(actor: str, workspace: str, permission: str) -> bool:
    return Grant.select().where(
        Grant.actor == actor, Grant.workspace == workspace, Grant.permission == permission).exists()


def workspaces_of(actor: str) -> list[str]:
    """The workspaces in which the actor holds any grant."""
    return sorted({row.workspace for row in Grant.select(Grant.workspace).where(Grant.actor == actor)})
