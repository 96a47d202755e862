"""What the store knows about sealed values: which checkpoints no configured key can open."""

from collections.abc import Iterable

from .models import DependencyWait


def unsealable_checkpoints(fingerprints: Iterable[str]) -> int:
    """Unresolved waits whose checkpoint was sealed under a key that is not among `fingerprints`.

    Computed from the stored fingerprints rather than the `unsealable` flag, so health is right from the
    moment a key is removed, before any coordinator has tried to open anything.
    """
    known = list(fingerprints)
    query = DependencyWait.select().where(DependencyWait.resolved_at.is_null())
    if known:
        query = query.where(DependencyWait.key_fingerprint.not_in(known))
    return query.count()
