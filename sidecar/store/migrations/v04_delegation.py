"""Version 4: remote agents, the outbound journal and dependency waits; a run's pause generation and the
pause it waits on."""

from peewee import CharField, DateTimeField, DoubleField, ForeignKeyField, IntegerField, TextField

from .frozen import FrozenModel, add_missing_columns

NAME = "remote agents, the outbound journal, dependency waits"


class Run(FrozenModel):
    """The columns this version adds to runs (and the key the new tables refer to)."""

    id = CharField(max_length=36, primary_key=True)
    pause_generation = IntegerField(default=0)
    waiting_on = CharField(max_length=36, null=True)

    class Meta:
        table_name = "runs"


class RemoteAgent(FrozenModel):
    name = CharField(max_length=64, primary_key=True)
    url = TextField()
    poll_interval_seconds = DoubleField()
    deadline_seconds = DoubleField()
    push = IntegerField(default=0)
    auth_header = CharField(max_length=128, null=True)
    auth_value_sealed = TextField(null=True)
    endpoint = TextField(null=True)
    created_at = DateTimeField()
    updated_at = DateTimeField()

    class Meta:
        table_name = "remote_agents"


class Outbound(FrozenModel):
    id = CharField(max_length=36, primary_key=True)
    kind = CharField(max_length=16)
    owner = CharField(max_length=255)
    run = ForeignKeyField(Run, on_delete="CASCADE", column_name="run_id")
    remote_agent = CharField(max_length=64)
    message_id = CharField(max_length=128, unique=True)
    tool_call_id = CharField(max_length=128, null=True)
    context_id = CharField(max_length=128, null=True)
    request_body = TextField()
    request_sha256 = CharField(max_length=64)
    outcome = CharField(max_length=32, index=True)
    remote_task_id = CharField(max_length=255, null=True)
    error = TextField(null=True)
    resend_of = CharField(max_length=36, null=True)
    resend_count = IntegerField(default=0)
    created_at = DateTimeField()
    sent_at = DateTimeField(null=True)

    class Meta:
        table_name = "outbound"


class DependencyWait(FrozenModel):
    id = CharField(max_length=36, primary_key=True)
    run = ForeignKeyField(Run, on_delete="CASCADE", column_name="run_id")
    generation = IntegerField()
    tool_call_id = CharField(max_length=128)
    remote_agent = CharField(max_length=64)
    outbound_id = CharField(max_length=36)
    checkpoint = TextField()
    key_fingerprint = CharField(max_length=32)
    since = DateTimeField()
    deadline_at = DateTimeField()
    next_poll_at = DateTimeField(null=True)
    push_token_sha256 = CharField(max_length=64, null=True)
    unsealable = IntegerField(default=0)
    resolved_at = DateTimeField(null=True)
    resolution = CharField(max_length=32, null=True)

    class Meta:
        table_name = "dependency_waits"
        indexes = ((("resolved_at", "next_poll_at"), False),)


def apply(db) -> None:
    add_missing_columns(db, Run.pause_generation, Run.waiting_on)
    db.create_tables([RemoteAgent, Outbound, DependencyWait], safe=True)
