"""The tables. Times are naive UTC datetimes; JSON is stored as text so every database reads it alike."""

from peewee import (
    BigAutoField,
    BigIntegerField,
    CharField,
    DateTimeField,
    DoubleField,
    ForeignKeyField,
    IntegerField,
    Model,
    TextField,
)

from .db import database


class BaseModel(Model):
    class Meta:
        database = database
        legacy_table_names = False


class Run(BaseModel):
    id = CharField(max_length=36, primary_key=True)
    owner = CharField(max_length=255)
    workspace = CharField(max_length=64, default="0")
    origin = CharField(max_length=255, null=True)
    input = TextField()
    # How to run it (provider, model, script, tools, on_denial) as JSON: fixed at creation.
    spec = TextField(default="{}")
    output = TextField(null=True)
    status = CharField(max_length=32)
    termination_reason = CharField(max_length=32, null=True)

    lease_holder = CharField(max_length=128, null=True)
    lease_expires_at = DateTimeField(null=True)
    # The fencing token: grows on every claim and on every revocation, never goes back.
    lease_epoch = BigIntegerField(default=0)
    requeue_count = IntegerField(default=0)
    # Set while a non-idempotent write is in flight: a run lost then must not be retried.
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

    # Pauses of any kind so far (the generation of the current one), and the pause the run waits on.
    pause_generation = IntegerField(default=0)
    waiting_on = CharField(max_length=36, null=True)
    # A stored decision not yet applied: the queued run continues from it (the continuation reference of
    # docs/adr/0001-durable-waits.md).
    continuation = CharField(max_length=36, null=True)

    # The sequence of the run's last event; bumped in the transaction that inserts the next one.
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
            # The runs list, newest first, whole or by status or origin (the console's runs page: migration 9).
            (("created_at", "id"), False),
            (("status", "created_at", "id"), False),
            (("origin", "created_at", "id"), False),
        )


class RunEvent(BaseModel):
    id = BigAutoField()
    # No index of its own: (run, sequence) begins with it (migration 11).
    run = ForeignKeyField(Run, backref="events", on_delete="CASCADE", column_name="run_id", index=False)
    sequence = IntegerField()
    kind = CharField(max_length=32)
    at = DateTimeField()
    payload = TextField(default="{}")

    class Meta:
        table_name = "run_events"
        indexes = ((("run", "sequence"), True),)


class WorkerHeartbeat(BaseModel):
    id = CharField(max_length=128, primary_key=True)
    host = CharField(max_length=255)
    pid = IntegerField()
    concurrency = IntegerField()
    started_at = DateTimeField()
    seen_at = DateTimeField(index=True)

    class Meta:
        table_name = "worker_heartbeats"


class SchemaMigration(BaseModel):
    version = IntegerField(primary_key=True)
    name = CharField(max_length=128)
    applied_at = DateTimeField()

    class Meta:
        table_name = "schema_migrations"


class ApiToken(BaseModel):
    """A bearer token; only its SHA-256 is stored."""

    id = CharField(max_length=36, primary_key=True)
    name = CharField(max_length=128, unique=True)
    role = CharField(max_length=16)  # host | operator
    token_sha256 = CharField(max_length=64, unique=True)
    created_at = DateTimeField()
    revoked_at = DateTimeField(null=True)

    class Meta:
        table_name = "api_tokens"


class IdempotencyRecord(BaseModel):
    """The first answer to a request with an Idempotency-Key, replayed for the same key and body.

    The unique (scope, key) makes the first insert win (the scout pattern: insert, catch IntegrityError).
    """

    id = BigAutoField()
    scope = CharField(max_length=255)  # token and actor the key belongs to
    key = CharField(max_length=255)
    request_sha256 = CharField(max_length=64)
    status_code = IntegerField(null=True)  # null while the first request is still being answered
    response_body = TextField(null=True)
    created_at = DateTimeField(index=True)

    class Meta:
        table_name = "idempotency_records"
        indexes = ((("scope", "key"), True),)


class ModelTurn(BaseModel):
    """A model turn, written ahead: saved before any of its tools runs, replayed by a retried segment."""

    id = BigAutoField()
    run = ForeignKeyField(Run, on_delete="CASCADE", column_name="run_id", index=False)  # (run, index) serves
    index = IntegerField()  # 0, 1, ... in the run's order
    message = TextField()  # JSON: {"content": ...} or {"tool_calls": [...]}
    tokens = IntegerField(default=0)
    cost = DoubleField(default=0.0)
    created_at = DateTimeField()

    class Meta:
        table_name = "model_turns"
        indexes = ((("run", "index"), True),)


class ToolResult(BaseModel):
    """The result a tool call gave, kept so a retried segment answers the call without running it again."""

    id = BigAutoField()
    run = ForeignKeyField(Run, on_delete="CASCADE", column_name="run_id", index=False)  # (run, tool_call_id)
    tool_call_id = CharField(max_length=128)
    turn_index = IntegerField()
    name = CharField(max_length=128)
    result = TextField()
    created_at = DateTimeField()

    class Meta:
        table_name = "tool_results"
        indexes = ((("run", "tool_call_id"), True),)


class ReportedConsumerRow(BaseModel):
    """One consumer the host reported as loaded (PUT /api/v1/consumers)."""

    name = CharField(max_length=128, primary_key=True)
    version = CharField(max_length=64)
    understands = TextField(null=True)  # JSON list, for consumers no plugin declares
    reported_at = DateTimeField()

    class Meta:
        table_name = "reported_consumers"


REPORT_STATE_ID = 1  # the id of ConsumerReportState's one row


class ConsumerReportState(BaseModel):
    """One row once the host reported anything: until then the compatibility gate stays closed."""

    id = IntegerField(primary_key=True)
    reported_at = DateTimeField()

    class Meta:
        table_name = "consumer_report_state"


class RemoteAgent(BaseModel):
    """A remote A2A agent an operator registered. The auth value is a secret: stored sealed, never returned."""

    name = CharField(max_length=64, primary_key=True)
    url = TextField()
    poll_interval_seconds = DoubleField()
    deadline_seconds = DoubleField()
    push = IntegerField(default=0)  # 0/1: register push configs when the card supports them
    auth_header = CharField(max_length=128, null=True)
    auth_value_sealed = TextField(null=True)
    # From the agent card, read on first use and refreshed when it fails: JSON of AgentEndpoint fields.
    endpoint = TextField(null=True)
    created_at = DateTimeField()
    updated_at = DateTimeField()
    # Calls of the coordinators (polls, reconciliations, CancelTask) that failed in a row, since when, and
    # the last error without its URLs: written by the worker, read by health and metrics in any process.
    consecutive_failures = IntegerField(default=0)
    failing_since = DateTimeField(null=True)
    last_error = TextField(null=True)

    class Meta:
        table_name = "remote_agents"


class Outbound(BaseModel):
    """The outbound journal: a row is committed before its request leaves (docs/adr/0004-journal-before-send.md)."""

    id = CharField(max_length=36, primary_key=True)
    kind = CharField(max_length=16)  # send | cancel
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
    # A push for this send that came before the run's suspension was committed (peers push as soon as the
    # task starts): the suspension then makes its wait due at once instead of losing the push.
    push_received_at = DateTimeField(null=True)
    # Cancel rows: attempts that got no answer, and when the next one is due (the backoff's).
    attempts = IntegerField(default=0)
    next_attempt_at = DateTimeField(null=True)
    # The SHA-256 of the push token the send carries (its body keeps the token masked): a push that comes
    # before the suspension is matched to the send by it.
    push_token_sha256 = CharField(max_length=64, null=True)
    # Authenticated pushes that named this send's task (or came before its task was known).
    pushes_seen = IntegerField(default=0)

    class Meta:
        table_name = "outbound"


class DependencyWait(BaseModel):
    """A run's wait for a remote task: the sealed checkpoint and the coordinator's polling state.

    Resolved exactly once: resolution is a guarded UPDATE on resolved_at IS NULL, in the transaction that
    stores the tool result and queues the run.
    """

    id = CharField(max_length=36, primary_key=True)  # the pause id
    run = ForeignKeyField(Run, on_delete="CASCADE", column_name="run_id")
    generation = IntegerField()
    tool_call_id = CharField(max_length=128)
    remote_agent = CharField(max_length=64)
    outbound_id = CharField(max_length=36)
    checkpoint = TextField()  # sealed
    key_fingerprint = CharField(max_length=32)
    since = DateTimeField()
    deadline_at = DateTimeField()  # the delegation's own deadline
    next_poll_at = DateTimeField(null=True)  # null: nothing to poll (outcome unknown)
    push_token_sha256 = CharField(max_length=64, null=True)
    unsealable = IntegerField(default=0)  # 1 while its key is not configured (health reports it)
    failed_polls = IntegerField(default=0)  # polls or reconciliations that failed in a row: the backoff's count
    resolved_at = DateTimeField(null=True)
    resolution = CharField(max_length=32, null=True)  # result | timeout | cancelled | checkpoint_invalid

    class Meta:
        table_name = "dependency_waits"
        indexes = ((("resolved_at", "next_poll_at"), False),)


class PersonPause(BaseModel):
    """A run's pause for a person: input for an `ask_user` call, or approval of one model turn's calls.

    Claimed once: a decision or a cancel sets decided_at with a guarded UPDATE (decided_at IS NULL), in the
    transaction that moves the run on. A decision refused when the run continues (the decider lost the
    right) opens the same pause again.
    """

    id = CharField(max_length=36, primary_key=True)  # the pause id
    run = ForeignKeyField(Run, on_delete="CASCADE", column_name="run_id", index=False)  # (run, turn_index)
    generation = IntegerField()
    kind = CharField(max_length=16)  # input | approval
    turn_index = IntegerField()
    tool_call_id = CharField(max_length=128, null=True)  # input: the ask_user call the input answers
    question = TextField(null=True)
    input_schema = TextField(null=True)  # JSON
    turn_digest = CharField(max_length=64, null=True)  # approval
    pending_calls = TextField(null=True)  # approval: JSON [{"id", "name", "arguments", "effect"}] as shown
    since = DateTimeField()
    decided_at = DateTimeField(null=True)
    resolution = CharField(max_length=16, null=True)  # decided | cancelled
    decision_id = CharField(max_length=36, null=True)

    class Meta:
        table_name = "person_pauses"
        indexes = ((("run", "turn_index"), False),)


class Decision(BaseModel):
    """A decision that won its pause: stored first, applied by whoever continues the run (its receipt)."""

    id = CharField(max_length=36, primary_key=True)  # the receipt id
    run = ForeignKeyField(Run, on_delete="CASCADE", column_name="run_id")
    pause = ForeignKeyField(PersonPause, on_delete="CASCADE", column_name="pause_id")
    generation = IntegerField()
    decision = CharField(max_length=16)  # approve | deny | input
    input = TextField(null=True)  # JSON, as submitted
    turn_digest = CharField(max_length=64, null=True)
    comment = TextField(null=True)
    decider = CharField(max_length=255)
    workspace = CharField(max_length=64)  # the workspace the decider acted in
    mode = CharField(max_length=8)  # now | store
    stored_at = DateTimeField()
    applied_at = DateTimeField(null=True)
    refused_at = DateTimeField(null=True)  # the decider had lost the right when the run continued
    refusal = TextField(null=True)

    class Meta:
        table_name = "decisions"


class Grant(BaseModel):
    """A right an actor holds in a workspace (agent:approve, agent:input), read by the default permission rule."""

    id = BigAutoField()
    actor = CharField(max_length=255)
    workspace = CharField(max_length=64)
    permission = CharField(max_length=32)  # "grant" is a reserved word in SQL
    created_at = DateTimeField()

    class Meta:
        table_name = "grants"
        indexes = ((("actor", "workspace", "permission"), True),)


class Note(BaseModel):
    """What the built-in `write_note` tool writes: a real effect, counted to prove it happens once."""

    id = BigAutoField()
    run = ForeignKeyField(Run, on_delete="CASCADE", column_name="run_id")
    text = TextField()
    created_at = DateTimeField()

    class Meta:
        table_name = "notes"
