"""Key rotation: every sealed value the sidecar will still open, re-sealed under the newest key.

What is sealed: the checkpoint of every unresolved dependency wait (resolved ones are never opened
again), and every remote agent's auth value (`<fingerprint>:<token>`). A value already under the newest
key is left as it is, so a rotation that was interrupted, or is run twice, does no work twice.

Each row is written with a guarded UPDATE: only while it still holds the token that was read (and, for a
wait, is still unresolved). A resolution, a cancel or an operator's update that lands between the read and
the write is never overwritten: the row is read again and, if it still needs it, re-sealed again.

A value that cannot be opened is reported and left alone: sealed under a key that is not configured (put
it back in NRLLM_SECRET_KEYS, after the newest, and rotate again), or tampered (it fails authentication
under its own key; the coordinator fails such a run as `checkpoint_invalid`).
"""

from dataclasses import dataclass, field

from .. import keys
from ..domain.sealing import CheckpointTampered, KeyNotConfigured, Sealer
from .db import transactional
from .models import DependencyWait, RemoteAgent

BATCH = 500
ATTEMPTS = 5  # a row that changes under us this often is left for the next rotation (and reported)


@dataclass
class Counts:
    resealed: int = 0
    current: int = 0  # already under the newest key
    gone: int = 0  # resolved or deleted while the rotation ran: nothing left to re-seal


@dataclass
class Rotation:
    newest: str  # the newest key's fingerprint
    checkpoints: Counts = field(default_factory=Counts)
    agent_secrets: Counts = field(default_factory=Counts)
    left_alone: list[str] = field(default_factory=list)  # one line per value not re-sealed, and why

    @property
    def complete(self) -> bool:
        """Every value the sidecar still needs is under the newest key: older keys may be removed."""
        return not self.left_alone


def _problem(exc: Exception) -> str:
    if isinstance(exc, KeyNotConfigured):
        return f"{exc}; left alone"
    return f"{exc}; left alone (tampered)"


# --- checkpoints ---------------------------------------------------------------------------------------


@transactional
def _write_checkpoint(wait_id: str, old: tuple[str, str], new: tuple[str, str]) -> bool:
    return DependencyWait.update(checkpoint=new[0], key_fingerprint=new[1], unsealable=0).where(
        DependencyWait.id == wait_id, DependencyWait.resolved_at.is_null(),
        DependencyWait.checkpoint == old[0], DependencyWait.key_fingerprint == old[1],
    ).execute() == 1


def _reseal_checkpoint(sealer: Sealer, wait: DependencyWait | None, report: Rotation) -> None:
    wait_id = wait.id
    for _ in range(ATTEMPTS):
        if wait is None or wait.resolved_at is not None:
            report.checkpoints.gone += 1
            return
        if wait.key_fingerprint == sealer.newest_fingerprint:
            report.checkpoints.current += 1
            return
        try:
            new = sealer.reseal(wait.checkpoint, wait.key_fingerprint)
        except (KeyNotConfigured, CheckpointTampered) as exc:
            report.left_alone.append(f"checkpoint of wait {wait.id} (run {wait.run_id}): {_problem(exc)}")
            return
        if _write_checkpoint(wait.id, (wait.checkpoint, wait.key_fingerprint), new):
            report.checkpoints.resealed += 1
            return
        wait = DependencyWait.get_or_none(DependencyWait.id == wait_id)  # changed meanwhile: look again
    report.left_alone.append(f"checkpoint of wait {wait_id}: changed {ATTEMPTS} times while re-sealing it")


def _rotate_checkpoints(sealer: Sealer, report: Rotation, batch: int) -> None:
    open_waits = DependencyWait.resolved_at.is_null()
    report.checkpoints.current += DependencyWait.select().where(
        open_waits, DependencyWait.key_fingerprint == sealer.newest_fingerprint).count()
    after = ""
    while True:
        # Keyset pages by id: a value left alone is stepped over, never read again in this rotation.
        page = list(DependencyWait.select(DependencyWait.id, DependencyWait.run, DependencyWait.checkpoint,
                                          DependencyWait.key_fingerprint, DependencyWait.resolved_at)
                    .where(open_waits, DependencyWait.key_fingerprint != sealer.newest_fingerprint,
                           DependencyWait.id > after)
                    .order_by(DependencyWait.id).limit(batch))
        for wait in page:
            _reseal_checkpoint(sealer, wait, report)
        if len(page) < batch:
            return
        after = page[-1].id


# --- remote agents' auth values ------------------------------------------------------------------------


@transactional
def _write_secret(name: str, old: str, new: str) -> bool:
    return RemoteAgent.update(auth_value_sealed=new).where(
        RemoteAgent.name == name, RemoteAgent.auth_value_sealed == old).execute() == 1


def _reseal_secret(sealer: Sealer, name: str, report: Rotation) -> None:
    for _ in range(ATTEMPTS):
        sealed = RemoteAgent.select(RemoteAgent.auth_value_sealed).where(RemoteAgent.name == name).scalar()
        if sealed is None:  # deleted, or its auth removed, meanwhile
            report.agent_secrets.gone += 1
            return
        fingerprint, _, token = sealed.partition(":")
        if fingerprint == sealer.newest_fingerprint:
            report.agent_secrets.current += 1
            return
        try:
            new_token, new_fingerprint = sealer.reseal(token, fingerprint)
        except (KeyNotConfigured, CheckpointTampered) as exc:
            report.left_alone.append(f"auth value of remote agent {name!r}: {_problem(exc)}")
            return
        if _write_secret(name, sealed, f"{new_fingerprint}:{new_token}"):
            report.agent_secrets.resealed += 1
            return
    report.left_alone.append(f"auth value of remote agent {name!r}: changed {ATTEMPTS} times while re-sealing it")


def _rotate_agent_secrets(sealer: Sealer, report: Rotation) -> None:
    names = RemoteAgent.select(RemoteAgent.name).where(RemoteAgent.auth_value_sealed.is_null(False))
    for name in [row.name for row in names.order_by(RemoteAgent.name)]:
        _reseal_secret(sealer, name, report)


def rotate(sealer: Sealer | None = None, *, batch: int = BATCH) -> Rotation:
    """Re-seal what needs it under the newest key of `sealer` (the process's by default)."""
    sealer = sealer or keys.sealer()
    report = Rotation(newest=sealer.newest_fingerprint)
    _rotate_checkpoints(sealer, report, batch)
    _rotate_agent_secrets(sealer, report)
    return report
