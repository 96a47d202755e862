"""Version 1: the runs, their events and the workers' heartbeats."""

from peewee import (
    BigAutoField,
    BigIntegerField,
    CharField,
    DateTimeField,
    DoubleField,
    ForeignKeyField,
    IntegerField,
    TextField,
)

from .frozen import FrozenModel

NAME = "runs, run events, worker heartbeats"


class Run(FrozenModel):
    id = CharField(max_length=36, primary_key=True)
    owner = CharField(max_length=255)
    workspace = CharField(max_length=64, default="0")
    origin = CharField(max_length=255, null=True)
    input = TextField()
    spec = TextField(default="{}")
    output = TextField(null=True)
    status = CharField(max_length=32)
    termination_reason = CharField(max_length=32, null=True)
    lease_holder = CharField(max_length=128, null=True)
    lease_expires_at = DateTimeField(null=True)
    lease_epoch = BigIntegerField(default=0)
    requeue_count = IntegerField(default=0)
    pending_effect = TextField(null=True)
    cancel_requested_at = DateTimeField(null=True)
    deadline_at = DateTimeField(null=True)
    max_delegations = IntegerField(null=True)
    delegations_used = IntegerField(default=0)
    max_bytes = BigIntegerField(null=True)
    bytes_used = BigIntegerField(default=0)
    max_tokens = BigIntegerField(null=True)
    tokens_used = BigIntegerField(default=0)
    max_cost = DoubleField(null=True)
    cost_used = DoubleField(default=0.0)
    max_iterations = IntegerField(null=True)
    iterations_used = IntegerField(default=0)
    last_event_sequence = IntegerField(default=0)
    created_at = DateTimeField()
    updated_at = DateTimeField()
    queued_at = DateTimeField(null=True)
    finished_at = DateTimeField(null=True)

    class Meta:
        table_name = "runs"
        indexes = (
            (("status", "queued_at"), False),
            (("status", "lease_expires_at"), False),
            (("owner", "created_at"), False),
        )


class RunEvent(FrozenModel):
    id = BigAutoField()
    run = ForeignKeyField(Run, on_delete="CASCADE", column_name="run_id")
    sequence = IntegerField()
    kind = CharField(max_length=32)
    at = DateTimeField()
    payload = TextField(default="{}")

    class Meta:
        table_name = "run_events"
        indexes = ((("run", "sequence"), True),)


class WorkerHeartbeat(FrozenModel):
    id = CharField(max_length=128, primary_key=True)
    host = CharField(max_length=255)
    pid = IntegerField()
    concurrency = IntegerField()
    started_at = DateTimeField()
    seen_at = DateTimeField(index=True)

    class Meta:
        table_name = "worker_heartbeats"


def apply(db) -> None:
    db.create_tables([Run, RunEvent, WorkerHeartbeat], safe=True)
