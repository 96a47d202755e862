"""Version 2: API tokens, idempotency records, and the written-ahead model turns and tool results."""

from peewee import BigAutoField, CharField, DateTimeField, DoubleField, ForeignKeyField, IntegerField, TextField

from .frozen import FrozenModel

NAME = "api tokens, idempotency records, model turns, tool results"


class Run(FrozenModel):
    """Only what the new tables refer to (version 1 created the table)."""

    id = CharField(max_length=36, primary_key=True)

    class Meta:
        table_name = "runs"


class ApiToken(FrozenModel):
    id = CharField(max_length=36, primary_key=True)
    name = CharField(max_length=128, unique=True)
    role = CharField(max_length=16)
    token_sha256 = CharField(max_length=64, unique=True)
    created_at = DateTimeField()
    revoked_at = DateTimeField(null=True)

    class Meta:
        table_name = "api_tokens"


class IdempotencyRecord(FrozenModel):
    id = BigAutoField()
    scope = CharField(max_length=255)
    key = CharField(max_length=255)
    request_sha256 = CharField(max_length=64)
    status_code = IntegerField(null=True)
    response_body = TextField(null=True)
    created_at = DateTimeField(index=True)

    class Meta:
        table_name = "idempotency_records"
        indexes = ((("scope", "key"), True),)


class ModelTurn(FrozenModel):
    id = BigAutoField()
    run = ForeignKeyField(Run, on_delete="CASCADE", column_name="run_id")
    index = IntegerField()
    message = TextField()
    tokens = IntegerField(default=0)
    cost = DoubleField(default=0.0)
    created_at = DateTimeField()

    class Meta:
        table_name = "model_turns"
        indexes = ((("run", "index"), True),)


class ToolResult(FrozenModel):
    id = BigAutoField()
    run = ForeignKeyField(Run, on_delete="CASCADE", column_name="run_id")
    tool_call_id = CharField(max_length=128)
    turn_index = IntegerField()
    name = CharField(max_length=128)
    result = TextField()
    created_at = DateTimeField()

    class Meta:
        table_name = "tool_results"
        indexes = ((("run", "tool_call_id"), True),)


def apply(db) -> None:
    db.create_tables([ApiToken, IdempotencyRecord, ModelTurn, ToolResult], safe=True)
