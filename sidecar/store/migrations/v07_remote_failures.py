"""Version 7: a remote agent's failures in a row; the backoff of polls (dependency waits) and of CancelTask
attempts (the outbound journal)."""

from peewee import CharField, DateTimeField, IntegerField, TextField

from .frozen import FrozenModel, add_missing_columns

NAME = "failing remote agents, backoff of polls and CancelTask attempts"


class RemoteAgent(FrozenModel):
    name = CharField(max_length=64, primary_key=True)
    consecutive_failures = IntegerField(default=0)
    failing_since = DateTimeField(null=True)
    last_error = TextField(null=True)

    class Meta:
        table_name = "remote_agents"


class DependencyWait(FrozenModel):
    id = CharField(max_length=36, primary_key=True)
    failed_polls = IntegerField(default=0)

    class Meta:
        table_name = "dependency_waits"


class Outbound(FrozenModel):
    id = CharField(max_length=36, primary_key=True)
    attempts = IntegerField(default=0)
    next_attempt_at = DateTimeField(null=True)

    class Meta:
        table_name = "outbound"


def apply(db) -> None:
    add_missing_columns(db, RemoteAgent.consecutive_failures, RemoteAgent.failing_since, RemoteAgent.last_error)
    add_missing_columns(db, DependencyWait.failed_polls)
    add_missing_columns(db, Outbound.attempts, Outbound.next_attempt_at)
