"""Remote agents an operator registered (docs/http-api.md, "Remote agents, the outbound journal and push").

The auth value is a secret: it is stored sealed (as `<key fingerprint>:<Fernet token>`, so the column
names the key it needs, as a checkpoint does) and only `auth_of` opens it, for the code that calls the
agent. Nothing here logs a value.
"""

from dataclasses import dataclass, field

from peewee import IntegrityError, fn

from .. import keys
from ..domain.backoff import without_urls
from ..domain.clock import utcnow
from ..domain.errors import AgentInUse, NameTaken, NoStoredSecret, NotFound
from . import statements
from .db import dialect, transactional
from .models import DependencyWait, RemoteAgent

KEEP = object()  # update_agent(auth_value=KEEP): the stored secret stays


@dataclass(frozen=True)
class AgentFields:
    url: str
    poll_interval_seconds: float
    deadline_seconds: float
    push: bool = False
    auth_header: str | None = None
    auth_value: object = field(default=None, repr=False)  # str, None (no auth) or KEEP; a secret: never printed


def _seal_secret(value: str) -> str:
    token, fingerprint = keys.sealer().seal({"value": value})
    return f"{fingerprint}:{token}"


def _apply(row: RemoteAgent, fields: AgentFields) -> None:
    row.url = fields.url
    row.poll_interval_seconds = fields.poll_interval_seconds
    row.deadline_seconds = fields.deadline_seconds
    row.push = 1 if fields.push else 0
    if fields.auth_header is None:
        row.auth_header, row.auth_value_sealed = None, None
        return
    if fields.auth_value is KEEP:
        if row.auth_value_sealed is None:
            raise NoStoredSecret("no auth value is stored to keep: send auth.value")
    else:
        row.auth_value_sealed = _seal_secret(fields.auth_value)
    row.auth_header = fields.auth_header


def create_agent(name: str, fields: AgentFields) -> RemoteAgent:
    """Register an agent; NameTaken when the name is in use (the unique key decides, not a prior read)."""
    now = utcnow()
    row = RemoteAgent(name=name, created_at=now, updated_at=now)
    _apply(row, fields)
    try:
        _insert(row)
    except IntegrityError:
        raise NameTaken(f"a remote agent named {name!r} is already registered") from None
    return row


@transactional
def _insert(row: RemoteAgent) -> None:
    row.save(force_insert=True)


@transactional
def update_agent(name: str, fields: AgentFields) -> RemoteAgent:
    """Replace an agent's settings. The cached endpoint is dropped: it was read for the old settings."""
    row = RemoteAgent.get_or_none(RemoteAgent.name == name)
    if row is None:
        raise NotFound(f"no remote agent {name!r}")
    _apply(row, fields)
    row.endpoint = None
    row.updated_at = utcnow()
    row.save()
    return row


def waiting_count(name: str) -> int:
    """Runs waiting on this agent: unresolved dependency waits."""
    return (DependencyWait.select()
            .where(DependencyWait.remote_agent == name, DependencyWait.resolved_at.is_null())
            .count())


@transactional
def delete_agent(name: str) -> None:
    """Remove an agent; AgentInUse while runs wait on it, NotFound when there is none.

    The agent's row is locked first, so a delegation that checks the agent in its own transaction (the
    journal's commit) is ordered before or after this delete, never between the check and the delete.
    """
    query = RemoteAgent.select().where(RemoteAgent.name == name)
    if dialect() != "sqlite":  # SQLite: the write transaction already holds the whole file
        query = query.for_update()
    if query.first() is None:
        raise NotFound(f"no remote agent {name!r}")
    if waiting := waiting_count(name):
        raise AgentInUse(f"{waiting} run(s) wait on remote agent {name!r}; cancel them or let them finish first")
    RemoteAgent.delete().where(RemoteAgent.name == name).execute()


def list_agents() -> list[RemoteAgent]:
    return statements.select_all(RemoteAgent, "name")  # every coordinator tick reads them


def get_agent(name: str) -> RemoteAgent | None:
    return statements.select_one(RemoteAgent, name=name)  # every delegation reads it


def auth_of(agent: RemoteAgent) -> tuple[str, str] | None:
    """(header, value) to send to the agent, unsealed; None without auth.

    Raises KeyNotConfigured when the key that sealed the value was removed, CheckpointTampered when the
    stored value was altered (sidecar.domain.sealing).
    """
    if agent.auth_header is None or agent.auth_value_sealed is None:
        return None
    fingerprint, _, token = agent.auth_value_sealed.partition(":")
    return agent.auth_header, keys.sealer().unseal(token, fingerprint)["value"]


def save_endpoint(name: str, endpoint_json: str, *, for_url: str | None = None) -> bool:
    """Cache what the agent card said (JSON text of AgentEndpoint's fields, without the auth value).

    With `for_url`, only while the agent still has that URL: a card read before an operator changed the
    URL must not be cached for the new one. False when nothing was saved.
    """
    query = RemoteAgent.update(endpoint=endpoint_json).where(RemoteAgent.name == name)
    if for_url is not None:
        query = query.where(RemoteAgent.url == for_url)
    return _execute(query) == 1


@transactional
def _execute(query) -> int:
    return query.execute()


@transactional
def record_failure(name: str, error: str) -> int:
    """One more call of the agent failed (a poll, a reconciliation, a CancelTask); returns how many failed
    in a row now. Exactly one caller sees 1 (the update is atomic), so the start of a run of failures is
    logged once. The error is kept without its URLs: health shows it without authentication."""
    RemoteAgent.update(
        consecutive_failures=RemoteAgent.consecutive_failures + 1,
        failing_since=fn.COALESCE(RemoteAgent.failing_since, utcnow()),
        last_error=without_urls(error),
    ).where(RemoteAgent.name == name).execute()
    return RemoteAgent.select(RemoteAgent.consecutive_failures).where(RemoteAgent.name == name).scalar() or 0


@transactional
def record_success(name: str) -> int:
    """A call of the agent was answered: its run of failures ends. Returns how many had failed in a row
    (0 when it was not failing); of callers racing, one sees the count (the row is read locked)."""
    query = RemoteAgent.select(RemoteAgent.consecutive_failures).where(RemoteAgent.name == name)
    if dialect() != "sqlite":  # SQLite: the write transaction already holds the whole file
        query = query.for_update()
    failed = query.scalar() or 0
    if failed:
        RemoteAgent.update(consecutive_failures=0, failing_since=None, last_error=None).where(
            RemoteAgent.name == name).execute()
    return failed


def failing_agents() -> list[RemoteAgent]:
    """Agents whose last call failed, by name (health lists them)."""
    return list(RemoteAgent.select(RemoteAgent.name, RemoteAgent.consecutive_failures, RemoteAgent.failing_since,
                                   RemoteAgent.last_error)
                .where(RemoteAgent.consecutive_failures > 0).order_by(RemoteAgent.name))


def failure_counts() -> dict[str, int]:
    """Every agent's consecutive failures (0 for those that answer): the metrics gauge."""
    return dict(RemoteAgent.select(RemoteAgent.name, RemoteAgent.consecutive_failures).tuples())
