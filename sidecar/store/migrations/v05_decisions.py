"""Version 5: pauses for a person, decisions, grants and notes; a run's continuation (the stored decision
it continues from)."""

from peewee import BigAutoField, CharField, DateTimeField, ForeignKeyField, IntegerField, TextField

from .frozen import FrozenModel, add_missing_columns

NAME = "person pauses, decisions, grants, notes"


class Run(FrozenModel):
    """The column this version adds to runs (and the key the new tables refer to)."""

    id = CharField(max_length=36, primary_key=True)
    continuation = CharField(max_length=36, null=True)

    class Meta:
        table_name = "runs"


class PersonPause(FrozenModel):
    id = CharField(max_length=36, primary_key=True)
    run = ForeignKeyField(Run, on_delete="CASCADE", column_name="run_id")
    generation = IntegerField()
    kind = CharField(max_length=16)
    turn_index = IntegerField()
    tool_call_id = CharField(max_length=128, null=True)
    question = TextField(null=True)
    input_schema = TextField(null=True)
    turn_digest = CharField(max_length=64, null=True)
    pending_calls = TextField(null=True)
    since = DateTimeField()
    decided_at = DateTimeField(null=True)
    resolution = CharField(max_length=16, null=True)
    decision_id = CharField(max_length=36, null=True)

    class Meta:
        table_name = "person_pauses"
        indexes = ((("run", "turn_index"), False),)


class Decision(FrozenModel):
    id = CharField(max_length=36, primary_key=True)
    run = ForeignKeyField(Run, on_delete="CASCADE", column_name="run_id")
    pause = ForeignKeyField(PersonPause, on_delete="CASCADE", column_name="pause_id")
    generation = IntegerField()
    decision = CharField(max_length=16)
    input = TextField(null=True)
    turn_digest = CharField(max_length=64, null=True)
    comment = TextField(null=True)
    decider = CharField(max_length=255)
    workspace = CharField(max_length=64)
    mode = CharField(max_length=8)
    stored_at = DateTimeField()
    applied_at = DateTimeField(null=True)
    refused_at = DateTimeField(null=True)
    refusal = TextField(null=True)

    class Meta:
        table_name = "decisions"


class Grant(FrozenModel):
    id = BigAutoField()
    actor = CharField(max_length=255)
    workspace = CharField(max_length=64)
    permission = CharField(max_length=32)
    created_at = DateTimeField()

    class Meta:
        table_name = "grants"
        indexes = ((("actor", "workspace", "permission"), True),)


class Note(FrozenModel):
    id = BigAutoField()
    run = ForeignKeyField(Run, on_delete="CASCADE", column_name="run_id")
    text = TextField()
    created_at = DateTimeField()

    class Meta:
        table_name = "notes"


def apply(db) -> None:
    add_missing_columns(db, Run.continuation)
    db.create_tables([PersonPause, Decision, Grant, Note], safe=True)
