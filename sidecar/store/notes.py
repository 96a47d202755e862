"""Notes the built-in `write_note` tool writes: a row and a `note` event, fenced like every segment write."""

from ..domain.clock import utcnow
from ..domain.errors import LeaseLost
from . import events
from .db import transactional
from .leases import Claim, fence
from .models import Note


@transactional
def write(claim: Claim, text: str) -> int:
    """Write a note for the claimed run; LeaseLost (nothing written) when the lease is gone."""
    if events.append(claim.run_id, fence(claim), "note", {"text": text}) is None:
        raise LeaseLost(claim.run_id, claim.epoch)
    return Note.insert(run=claim.run_id, text=text, created_at=utcnow()).execute()


def of_run(run_id: str) -> list[str]:
    return [row.text for row in Note.select(Note.text).where(Note.run == run_id).order_by(Note.id)]
