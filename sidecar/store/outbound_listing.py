"""Reading the outbound journal for operators (GET /api/v1/outbound). Writing it is store/outbound.py's."""

from .models import Outbound


def list_outbound(*, outcome: str | None = None, run_id: str | None = None, kind: str | None = None,
                  limit: int = 100) -> list[Outbound]:
    """Journal rows, newest first, filtered by whichever of outcome, run and kind are given."""
    query = Outbound.select()
    if outcome is not None:
        query = query.where(Outbound.outcome == outcome)
    if run_id is not None:
        query = query.where(Outbound.run == run_id)
    if kind is not None:
        query = query.where(Outbound.kind == kind)
    return list(query.order_by(Outbound.created_at.desc(), Outbound.id.desc()).limit(limit))
