"""SQL text for the statements every segment and every API request runs, instead of queries peewee compiles
on every call.

peewee turns a query into SQL each time it executes it: 0.15 to 0.9 ms of CPU for the statements of a
segment (the 34 columns of a run make its SELECT the dearest), where SQLite executes them in about
0.03 ms. A segment runs several, so that compilation was most of what a segment cost and what bounded a
worker's throughput (docs/performance.md, "The run store"); the token lookup and the insert of a run did
the same to every request. The statements here have a fixed shape: their text is joined from column names
once per shape and database kind and kept, not again for every call (in a sampled profile of the worker
that joining was about one sample in twenty), and values pass through each field's own conversion, as
peewee does. They go through `database.execute_kept` (and `defer_kept`): on PostgreSQL each connection
prepares a text once and executes it by name after (store/db.py); the IN lists, a text for every count of
values, do not.
"""

import functools
from typing import NamedTuple

from ..domain.vocabulary import RunStatus
from .db import database, dialect_of, returning_in
from .models import (
    REPORT_STATE_ID,
    ConsumerReportState,
    DependencyWait,
    ModelTurn,
    Outbound,
    RemoteAgent,
    Run,
    RunEvent,
    ToolResult,
)

_RUN_FIELDS = Run._meta.columns  # column name -> field
RUN_COLUMNS = tuple(_RUN_FIELDS)  # every column of a run
_EVENT_COLUMNS = ("run_id", "sequence", "kind", "at", "payload")
_EVENT_AT = RunEvent._meta.columns["at"]
_POLL_AT = DependencyWait._meta.columns["next_poll_at"]
_OUTBOUND_FIELDS = Outbound._meta.columns
_REPORTED_AT = ConsumerReportState._meta.columns["reported_at"]


class Syntax(NamedTuple):
    """How the bound database spells what the texts differ in."""

    quote: str  # '""' or '``'
    param: str  # '?' or '%s'
    dialect: str
    returning: bool  # UPDATE ... RETURNING


def _syntax() -> Syntax:
    return _syntax_of(type(database.obj))


@functools.cache
def _syntax_of(database_class) -> Syntax:
    kind = dialect_of(database_class)
    return Syntax(database_class.quote, database_class.param, kind, returning_in(kind))


def _name(syntax: Syntax, identifier: str) -> str:
    return f"{syntax.quote[0]}{identifier}{syntax.quote[1]}"


def _names(syntax: Syntax, columns) -> str:
    return ", ".join(_name(syntax, column) for column in columns)


def _placeholders(syntax: Syntax, count: int) -> str:
    return ", ".join([syntax.param] * count)


def _conditions(syntax: Syntax, columns, null_columns=()) -> str:
    """`a = ? AND b IS NULL ...`: `columns` equal a parameter each, `null_columns` are NULL."""
    return " AND ".join([*(f"{_name(syntax, c)} = {syntax.param}" for c in columns),
                         *(f"{_name(syntax, c)} IS NULL" for c in null_columns)])


def _split(equal: dict) -> tuple[tuple, tuple]:
    """The columns compared with a value and the columns that must be NULL."""
    return (tuple(c for c, v in equal.items() if v is not None), tuple(c for c, v in equal.items() if v is None))


def _run_values(values: dict) -> list:
    return [_RUN_FIELDS[column].db_value(value) for column, value in values.items()]


@functools.lru_cache(maxsize=1024)
def _select_text(syntax: Syntax, table: str, columns: tuple | None, where: tuple, null: tuple,
                 order_by: str | None = None, for_update: bool = False) -> str:
    selected = "*" if columns is None else _names(syntax, columns)
    sql = f"SELECT {selected} FROM {_name(syntax, table)} WHERE {_conditions(syntax, where, null)}"
    if order_by:
        sql += f" ORDER BY {_name(syntax, order_by)}"
    return sql + " FOR UPDATE" if for_update else sql


@functools.lru_cache(maxsize=1024)
def _update_text(syntax: Syntax, table: str, values: tuple, where: tuple, null: tuple, add: tuple = ()) -> str:
    assignments = [*(f"{_name(syntax, c)} = {syntax.param}" for c in values),
                   *(f"{_name(syntax, c)} = {_name(syntax, c)} + {syntax.param}" for c in add)]
    return f"UPDATE {_name(syntax, table)} SET {', '.join(assignments)} WHERE {_conditions(syntax, where, null)}"


@functools.lru_cache(maxsize=1024)
def _insert_text(syntax: Syntax, table: str, columns: tuple) -> str:
    return (f"INSERT INTO {_name(syntax, table)} ({_names(syntax, columns)})"
            f" VALUES ({_placeholders(syntax, len(columns))})")


@functools.lru_cache(maxsize=64)
def _queued_text(syntax: Syntax, limit: int) -> str:
    sql = (f"SELECT {_name(syntax, 'id')} FROM {_name(syntax, 'runs')} WHERE {_name(syntax, 'status')} = "
           f"{syntax.param} ORDER BY {_name(syntax, 'queued_at')}, {_name(syntax, 'id')} LIMIT {int(limit)}")
    return sql if syntax.dialect == "sqlite" else sql + " FOR UPDATE SKIP LOCKED"


@functools.lru_cache(maxsize=64)
def _claim_queued_text(syntax: Syntax, limit: int, values: tuple, add: tuple) -> str:
    # The runs picked (and on PostgreSQL locked, skipping those another claim holds) once, in a CTE of their
    # own: a subquery in the WHERE might be run again for each row it is compared with.
    assignments = [*(f"{_name(syntax, c)} = {syntax.param}" for c in values),
                   *(f"{_name(syntax, c)} = {_name(syntax, c)} + {syntax.param}" for c in add)]
    return (f"WITH picked AS MATERIALIZED ({_queued_text(syntax, limit)})"
            f" UPDATE {_name(syntax, 'runs')} SET {', '.join(assignments)}"
            f" WHERE {_name(syntax, 'id')} IN (SELECT {_name(syntax, 'id')} FROM picked)"
            f" AND {_name(syntax, 'status')} = {syntax.param} RETURNING {_names(syntax, RUN_COLUMNS)}")


def claim_queued_rows(limit: int, values: dict, add: dict) -> list:
    """Where UPDATE ... RETURNING exists: the oldest queued runs, at most `limit`, updated with `values` and
    `add`'s amounts in one statement, as written (Run instances). Call inside a write transaction."""
    queued = RunStatus.QUEUED.value
    sql = _claim_queued_text(_syntax(), limit, tuple(values), tuple(add))
    params = [queued, *_run_values(values), *add.values(), queued]  # in the text's order: the CTE's comes first
    return [run_from_row(RUN_COLUMNS, row) for row in database.execute_kept(sql, params).fetchall()]


@functools.lru_cache(maxsize=8)
def _queued_run_exists_text(syntax: Syntax) -> str:
    return f"SELECT 1 FROM {_name(syntax, 'runs')} WHERE {_name(syntax, 'status')} = {syntax.param} LIMIT 1"


def queued_run_exists() -> bool:
    """Whether any run is queued: one indexed read, no lock taken."""
    return database.execute_kept(_queued_run_exists_text(_syntax()), (RunStatus.QUEUED.value,)).fetchone() is not None


def _attempts_left(syntax: Syntax) -> str:
    """Journal rows of an outcome and a kind (parameters, in that order) with attempts left (a parameter): the
    rows journal_rows_due() returns once due, and whose earliest attempt earliest_poll_and_attempt() reads."""
    return f"{_conditions(syntax, ('outcome', 'kind'))} AND {_name(syntax, 'attempts')} < {syntax.param}"


@functools.lru_cache(maxsize=8)
def _earliest_poll_and_attempt_text(syntax: Syntax) -> str:
    poll, attempt_at = _name(syntax, "next_poll_at"), _name(syntax, "next_attempt_at")
    earliest_poll = (f"SELECT {poll} FROM {_name(syntax, 'dependency_waits')} WHERE {_name(syntax, 'resolved_at')}"
                     f" IS NULL AND {poll} IS NOT NULL ORDER BY {poll} LIMIT 1")
    # A row never tried has no next attempt's time: it is due since it was journalled.
    earliest_attempt = (f"SELECT MIN(COALESCE({attempt_at}, {_name(syntax, 'created_at')})) FROM"
                        f" {_name(syntax, 'outbound')} WHERE {_attempts_left(syntax)}")
    return f"SELECT ({earliest_poll}), ({earliest_attempt})"


def earliest_poll_and_attempt(outcome: str, kind: str, max_attempts: int) -> tuple:
    """(the earliest next poll of an open wait, the earliest attempt due of a journal row of `kind` with
    `outcome` and attempts left), each None if there is none, in one read of two indexes."""
    text = _earliest_poll_and_attempt_text(_syntax())
    row = database.execute_kept(text, (outcome, kind, int(max_attempts))).fetchone()
    return _POLL_AT.python_value(row[0]), _OUTBOUND_FIELDS["next_attempt_at"].python_value(row[1])


@functools.lru_cache(maxsize=8)
def _journal_rows_due_text(syntax: Syntax, limit: int) -> str:
    attempt_at = _name(syntax, "next_attempt_at")
    return (f"SELECT * FROM {_name(syntax, 'outbound')} WHERE {_attempts_left(syntax)}"
            f" AND ({attempt_at} IS NULL OR {attempt_at} <= {syntax.param})"
            f" ORDER BY {_name(syntax, 'created_at')} LIMIT {int(limit)}")


def journal_rows_due(outcome: str, kind: str, now, max_attempts: int, limit: int) -> list:
    """Journal rows of `kind` with `outcome` that have attempts left and are due at `now` (never tried, or
    their next attempt's time passed), oldest first. Each coordinator asks at every look."""
    params = (outcome, kind, int(max_attempts), _OUTBOUND_FIELDS["next_attempt_at"].db_value(now))
    return _instances(Outbound, database.execute_kept(_journal_rows_due_text(_syntax(), limit), params))


def queued_run_ids(limit: int) -> list[str]:
    """The ids of up to `limit` queued runs, oldest first. On a server database the rows are locked for this
    transaction, and rows another claimer has locked are skipped instead of waited for; SQLite's BEGIN
    IMMEDIATE already makes the transaction the only writer."""
    return [row[0] for row in database.execute_kept(_queued_text(_syntax(), limit), (RunStatus.QUEUED.value,))]


def select_one(model, **equal):
    """The row of `model` whose columns equal `equal` (None: IS NULL), as a model instance, or None."""
    rows = select_many(model, **equal)
    return rows[0] if rows else None


def select_many(model, **equal) -> list:
    """The rows of `model` whose columns equal `equal` (None: IS NULL), as model instances."""
    fields = model._meta.columns
    params = [fields[column].db_value(value) for column, value in equal.items() if value is not None]
    sql = _select_text(_syntax(), model._meta.table_name, None, *_split(equal))
    return _instances(model, database.execute_kept(sql, params))


@functools.lru_cache(maxsize=64)
def _select_all_text(syntax: Syntax, table: str, order_by: str) -> str:
    return f"SELECT * FROM {_name(syntax, table)} ORDER BY {_name(syntax, order_by)}"


def select_all(model, order_by: str) -> list:
    """Every row of `model`, ordered by `order_by`, as model instances (small tables only)."""
    return _instances(model, database.execute_kept(_select_all_text(_syntax(), model._meta.table_name, order_by)))


_WAIT_FIELDS = DependencyWait._meta.columns
_WAIT_FIELD_LIST = tuple(_WAIT_FIELDS.values())
_OUTBOUND_FIELD_LIST = tuple(_OUTBOUND_FIELDS.values())
_AGENT_FIELD_LIST = tuple(RemoteAgent._meta.columns.values())


@functools.lru_cache(maxsize=64)
def _due_waits_text(syntax: Syntax, limit: int) -> str:
    def columns(alias, fields):
        return ", ".join(f"{alias}.{_name(syntax, field.column_name)}" for field in fields)

    def of(alias, column):
        return f"{alias}.{_name(syntax, column)}"

    sql = (f"SELECT {columns('w', _WAIT_FIELD_LIST)}, {of('r', 'deadline_at')},"
           f" {columns('o', _OUTBOUND_FIELD_LIST)}, {columns('a', _AGENT_FIELD_LIST)}"
           f" FROM {_name(syntax, 'dependency_waits')} AS w"
           f" JOIN {_name(syntax, 'remote_agents')} AS a ON {of('w', 'remote_agent')} = {of('a', 'name')}"
           f" JOIN {_name(syntax, 'runs')} AS r ON {of('w', 'run_id')} = {of('r', 'id')}"
           f" LEFT JOIN {_name(syntax, 'outbound')} AS o ON {of('w', 'outbound_id')} = {of('o', 'id')}"
           f" WHERE {of('w', 'resolved_at')} IS NULL AND {of('w', 'next_poll_at')} <= {syntax.param}"
           f" ORDER BY {of('w', 'next_poll_at')}, {of('w', 'id')} LIMIT {int(limit)}")
    return sql + " FOR UPDATE OF w SKIP LOCKED" if syntax.dialect == "postgresql" else sql


def due_waits(now, limit: int) -> list:
    """Up to `limit` open waits due at `now`, earliest first, each with what its poll acts on: `agent`, its
    remote agent (a RemoteAgent), `journal_row`, the send it names (an Outbound, None if there is none), and
    `run_deadline_at`, its run's own deadline; all in the one statement (a tick read the rows and the agents
    with two more). On PostgreSQL the waits' rows are locked for this transaction, and rows another
    coordinator holds are skipped."""
    cursor = database.execute_kept(_due_waits_text(_syntax(), limit), (_POLL_AT.db_value(now),))
    waits, sends = len(_WAIT_FIELD_LIST), len(_OUTBOUND_FIELD_LIST)
    found = []
    for row in cursor.fetchall():
        wait = _from_row(DependencyWait, _WAIT_FIELD_LIST, row[:waits])
        wait.run_deadline_at = _RUN_FIELDS["deadline_at"].python_value(row[waits])
        send = row[waits + 1:waits + 1 + sends]
        wait.journal_row = _from_row(Outbound, _OUTBOUND_FIELD_LIST, send) if send[0] is not None else None
        wait.agent = _from_row(RemoteAgent, _AGENT_FIELD_LIST, row[waits + 1 + sends:])
        found.append(wait)
    return found


@functools.lru_cache(maxsize=8)
def _sends_with_waits_plan(syntax: Syntax, send_columns: tuple, wait_columns: tuple) -> tuple[str, tuple, tuple]:
    """The read's text, and the fields of its send columns and of its wait columns, made once."""
    if wait_columns[0] != "id":
        raise ValueError("the wait's first column must be its id (NULL when there is no wait)")

    def send(column):
        return f"o.{_name(syntax, column)}"

    def wait(column):
        return f"w.{_name(syntax, column)}"

    text = (f"SELECT {', '.join(map(send, send_columns))}, {', '.join(map(wait, wait_columns))}"
            f" FROM {_name(syntax, 'outbound')} AS o LEFT JOIN {_name(syntax, 'dependency_waits')} AS w"
            # The run's id too: the waits' index on it finds the run's few waits (none on outbound_id).
            f" ON {wait('run_id')} = {send('run_id')} AND {wait('outbound_id')} = {send('id')}"
            f" WHERE {send('run_id')} = {syntax.param} AND {send('kind')} = {syntax.param}")
    return (text, tuple(_OUTBOUND_FIELDS[column] for column in send_columns),
            tuple(_WAIT_FIELDS[column] for column in wait_columns))


def sends_with_waits(run_id: str, kind: str, send_columns: tuple[str, ...],
                     wait_columns: tuple[str, ...]) -> list[tuple]:
    """The run's outbound rows of `kind`, each with the wait on it (None while there is none), in one read: of
    each only the columns named (the wait's first must be its `id`); the instances leave the others unset."""
    text, send_fields, wait_fields = _sends_with_waits_plan(_syntax(), send_columns, wait_columns)
    cursor = database.execute_kept(text, (run_id, kind))
    found, split = [], len(send_columns)
    for row in cursor.fetchall():
        wait = None if row[split] is None else _from_row(DependencyWait, wait_fields, row[split:])
        found.append((_from_row(Outbound, send_fields, row[:split]), wait))
    return found


_TURN_COLUMNS = ("index", "message", "tokens", "cost")
_RESULT_COLUMNS = ("tool_call_id", "result")
_TURN_VALUES = tuple(ModelTurn._meta.columns[column].python_value for column in _TURN_COLUMNS)
_RESULT_VALUES = tuple(ToolResult._meta.columns[column].python_value for column in _RESULT_COLUMNS)


@functools.lru_cache(maxsize=8)
def _turns_and_results_text(syntax: Syntax) -> str:
    def nulls(columns):  # the other table's columns, empty in this one's rows
        return ", ".join(["NULL"] * len(columns))

    where = f"WHERE {_name(syntax, 'run_id')} = {syntax.param}"
    return (f"SELECT 0, {_names(syntax, _TURN_COLUMNS)}, {nulls(_RESULT_COLUMNS)} FROM {_name(syntax, 'model_turns')}"
            f" {where} UNION ALL SELECT 1, {nulls(_TURN_COLUMNS)}, {_names(syntax, _RESULT_COLUMNS)}"
            f" FROM {_name(syntax, 'tool_results')} {where} ORDER BY 1, 2")


def turns_and_results(run_id: str) -> tuple[list[tuple], list[tuple]]:
    """The run's model turns (index, message, tokens, cost) in order, and its tool results (call id, result):
    what a resumed segment replays, in one read instead of one per table."""
    turns, results, split = [], [], 1 + len(_TURN_COLUMNS)
    for row in database.execute_kept(_turns_and_results_text(_syntax()), (run_id, run_id)):
        if row[0] == 0:
            turns.append(tuple(convert(v) for convert, v in zip(_TURN_VALUES, row[1:split], strict=True)))
        else:
            results.append(tuple(convert(v) for convert, v in zip(_RESULT_VALUES, row[split:], strict=True)))
    return turns, results


@functools.lru_cache(maxsize=1024)
def _update_in_text(syntax: Syntax, table: str, values: tuple, column: str, count: int) -> str:
    assignments = ", ".join(f"{_name(syntax, c)} = {syntax.param}" for c in values)
    return (f"UPDATE {_name(syntax, table)} SET {assignments}"
            f" WHERE {_name(syntax, column)} IN ({_placeholders(syntax, count)})")


def update_in(model, column: str, keys: list, values: dict) -> int:
    """UPDATE the rows of `model` whose `column` is one of `keys`: set `values` (by column name). Returns how
    many rows matched."""
    fields = model._meta.columns
    sql = _update_in_text(_syntax(), model._meta.table_name, tuple(values), column, len(keys))
    params = [*(fields[c].db_value(v) for c, v in values.items()), *(fields[column].db_value(k) for k in keys)]
    return database.execute_sql(sql, params).rowcount  # not kept prepared: each count of keys is another text


def run_from_row(columns: tuple[str, ...], row: tuple):
    """A run (model instance) from `columns` and their values as the database returned them."""
    return _from_row(Run, [_RUN_FIELDS[column] for column in columns], row)


@functools.lru_cache(maxsize=8)
def _due_since_start_text(syntax: Syntax) -> str:
    return (f"UPDATE {_name(syntax, 'dependency_waits')} SET {_name(syntax, 'next_poll_at')} = {_name(syntax, 'since')}"
            f" WHERE {_name(syntax, 'id')} = {syntax.param} AND {_name(syntax, 'resolved_at')} IS NULL")


def make_due_since_start(wait_id: str) -> bool:
    """UPDATE the open wait `wait_id` so that its next poll is due as of its start (`since`). False when it is
    resolved or gone."""
    return database.execute_kept(_due_since_start_text(_syntax()), (wait_id,)).rowcount == 1


@functools.lru_cache(maxsize=8)
def _due_since_start_notifying_text(syntax: Syntax, counted: bool, channel: str | None) -> str:
    """PostgreSQL: _due_since_start_text's UPDATE, with (`counted`) the push's count on its send, and a
    notification on `channel` (if one) only if the wait moved, in one statement. Each part of a WITH runs once
    and to the end, whether the query reads it or not."""
    pushes_seen = _name(syntax, "pushes_seen")
    count = (f"counted AS (UPDATE {_name(syntax, 'outbound')} SET {pushes_seen} = {pushes_seen} + 1"
             f" WHERE {_name(syntax, 'id')} = {syntax.param}), " if counted else "")
    told = f"pg_notify('{channel}', '')" if channel else "1"
    return f"WITH {count}moved AS ({_due_since_start_text(syntax)} RETURNING 1) SELECT {told} FROM moved"


def make_due_since_start_notifying(wait_id: str, pushed_outbound_id: str | None, channel: str | None) -> bool:
    """PostgreSQL: make_due_since_start(), add_to() of the push on `pushed_outbound_id` (if any) and, if the
    wait moved, NOTIFY `channel` (None: nobody), in one statement: outside a transaction it is one of its own,
    one round trip with no BEGIN or COMMIT."""
    params = (pushed_outbound_id, wait_id) if pushed_outbound_id is not None else (wait_id,)
    sql = _due_since_start_notifying_text(_syntax(), pushed_outbound_id is not None, channel)
    return len(database.execute_kept(sql, params).fetchall()) == 1


def add_to(model, column: str, amount: int, **equal) -> None:
    """UPDATE the rows of `model` whose columns equal `equal` (none is None): `column` += `amount`. A counter
    nobody reads back in the same transaction: deferred (_execute())."""
    fields = model._meta.columns
    sql = _update_text(_syntax(), model._meta.table_name, (), tuple(equal), (), (column,))
    _execute(sql, [int(amount), *(fields[n].db_value(v) for n, v in equal.items())], deferred=True)


def select_rows(model, columns: tuple[str, ...], *, order_by: str | None = None, for_update: bool = False,
                **equal) -> list[tuple]:
    """`columns` of the rows of `model` whose columns equal `equal` (none is None), each value converted by
    its field as peewee would. `for_update`: the rows are locked for this transaction (server databases)."""
    fields = model._meta.columns
    sql = _select_text(_syntax(), model._meta.table_name, tuple(columns), tuple(equal), (), order_by, for_update)
    cursor = database.execute_kept(sql, [fields[name].db_value(value) for name, value in equal.items()])
    converters = [fields[column].python_value for column in columns]
    return [tuple(convert(value) for convert, value in zip(converters, row, strict=True)) for row in cursor]


def select_value(model, column: str, *, for_update: bool = False, **equal):
    """One column of the row of `model` whose columns equal `equal` (none is None); None when there is no such
    row. `for_update`: the row is locked for this transaction (server databases)."""
    rows = select_rows(model, (column,), for_update=for_update, **equal)
    return rows[0][0] if rows else None


def update_where(model, where: dict, values: dict) -> int:
    """UPDATE the rows of `model` whose columns equal `where` (None: IS NULL): set `values` (by column name).
    Returns how many rows matched."""
    return database.execute_kept(*_update(_syntax(), model, where, values)).rowcount


def update_returning_row(model, where: dict, values: dict):
    """update_where() of at most one row, `where` naming its primary key: returns that row as written (a model
    instance), or None when no row matched. One statement where UPDATE ... RETURNING exists; the update and a
    read of the row by its key elsewhere."""
    syntax = _syntax()
    if not syntax.returning:
        key = model._meta.primary_key.column_name
        return select_one(model, **{key: where[key]}) if update_where(model, where, values) == 1 else None
    sql, params = _update(syntax, model, where, values)
    return _instance(model, database.execute_kept(sql + " RETURNING *", params))


def _update(syntax: Syntax, model, where: dict, values: dict) -> tuple[str, list]:
    """The UPDATE of update_where(), and its parameters."""
    fields = model._meta.columns
    sql = _update_text(syntax, model._meta.table_name, tuple(values), *_split(where))
    params = [fields[column].db_value(value) for column, value in values.items()]
    params += [fields[column].db_value(value) for column, value in where.items() if value is not None]
    return sql, params


def _instance(model, cursor):
    """The first row of `cursor` (all of it read) as an instance of `model`, or None."""
    rows = _instances(model, cursor)
    return rows[0] if rows else None


def _instances(model, cursor) -> list:
    """Every row of `cursor` as an instance of `model`."""
    rows = cursor.fetchall()  # all of it: on SQLite an unfinished read would keep its snapshot open
    if not rows:
        return []
    # As peewee's own reading of a row makes it (each value through its field), without its cursor wrapper,
    # which cost as much again as the query for the 34 columns of a run.
    fields = model._meta.columns
    named = [fields[column] for column, *_ in cursor.description]
    return [_from_row(model, named, row) for row in rows]


def _from_row(model, fields, row):
    """An instance of `model` from `row`, the values of `fields` as the database returned them: each through
    its field, as peewee's own reading of a row makes it."""
    instance = model(__no_default__=1)
    for field, value in zip(fields, row, strict=True):
        instance.__data__[field.name] = field.python_value(value)
    return instance


def _execute(sql: str, params, deferred: bool) -> None:
    """A statement whose result nobody reads. `deferred`: on PostgreSQL inside a transaction it is sent with the
    transaction's next statement or its COMMIT (store/db.py, SidecarPostgresqlDatabase), a round trip fewer; a
    failure, such as a duplicate key, is then raised by that later call. So only for a statement no caller
    expects to fail."""
    (database.defer_kept if deferred else database.execute_kept)(sql, params)


def insert_values(model, values: dict, *, deferred: bool = False) -> None:
    """INSERT a row of `model` with only the columns in `values` (by column name): the database gives the rest
    (a generated key). `deferred`: see _execute()."""
    fields = model._meta.columns
    _execute(_insert_text(_syntax(), model._meta.table_name, tuple(values)),
             [fields[column].db_value(value) for column, value in values.items()], deferred)


def insert_row(model, values: dict, *, deferred: bool = False) -> None:
    """INSERT a row of `model` with every column: `values` by field name, the field's default elsewhere (the
    defaults are peewee's, not the table's). For tables whose key is not generated by the database.
    `deferred`: see _execute()."""
    columns, params = [], []
    for field in model._meta.sorted_fields:
        if field.name in values:
            value = values[field.name]
        else:
            value = field.default() if callable(field.default) else field.default
        columns.append(field.column_name)
        params.append(field.db_value(value))
    _execute(_insert_text(_syntax(), model._meta.table_name, tuple(columns)), params, deferred)


def update_run(
    run_id: str,
    *,
    where: dict,
    values: dict,
    add: dict,
    returning: tuple[str, ...],
    with_report_time: bool = False,
) -> tuple | None:
    """UPDATE the run `run_id` if its columns equal `where`: set `values`, and add to each column of `add`
    its amount (counters: the event sequence, the lease epoch, budgets).

    Returns the `returning` columns of the row as written, or None when the row did not match (nothing
    written). One statement where UPDATE ... RETURNING exists; the update and a read of the row elsewhere
    (MariaDB, whose row lock taken by the update makes that read the row as written). Call inside a write
    transaction.

    `with_report_time`: the columns are followed by the time of the host's last consumer report (None before
    the first), as consumers.reported_time() reads it but by the same statement, for the compatibility
    gate's guard of a status this transaction writes (status_guard.check): the guard then needs no read of
    its own.
    """
    syntax = _syntax()
    sql = _update_text(syntax, "runs", tuple(values), ("id", *where), (), tuple(add))
    params = [*_run_values(values), *add.values(), run_id, *_run_values(where)]
    if syntax.returning:
        row = database.execute_kept(_returning_text(syntax, sql, tuple(returning), with_report_time), params).fetchone()
    elif database.execute_kept(sql, params).rowcount != 1:
        return None
    else:
        row = database.execute_kept(_run_row_text(syntax, tuple(returning), with_report_time), (run_id,)).fetchone()
    if row is None or not with_report_time:
        return row
    return (*row[:-1], _REPORTED_AT.python_value(row[-1]))


@functools.lru_cache(maxsize=256)
def _returning_text(syntax: Syntax, sql: str, returning: tuple, with_report_time: bool) -> str:
    return f"{sql} RETURNING {_returned(syntax, returning, with_report_time)}"


@functools.lru_cache(maxsize=64)
def _run_row_text(syntax: Syntax, columns: tuple, with_report_time: bool) -> str:
    return (f"SELECT {_returned(syntax, columns, with_report_time)} FROM {_name(syntax, 'runs')}"
            f" WHERE {_name(syntax, 'id')} = {syntax.param}")


def _returned(syntax: Syntax, columns: tuple, with_report_time: bool) -> str:
    """`columns`, and with `with_report_time` the report's time, read from its one row by a scalar subquery."""
    if not with_report_time:
        return _names(syntax, columns)
    report_time = (f"(SELECT {_name(syntax, 'reported_at')} FROM {_name(syntax, ConsumerReportState._meta.table_name)}"
                   f" WHERE {_name(syntax, 'id')} = {REPORT_STATE_ID})")
    return f"{_names(syntax, columns)}, {report_time}"


# Events one statement inserts at most: a transaction writes a few (a suspension three, a resolution up to four).
EVENTS_PER_INSERT = 50


@functools.lru_cache(maxsize=64)
def _insert_events_text(syntax: Syntax, count: int) -> str:
    row = f"({_placeholders(syntax, len(_EVENT_COLUMNS))})"
    return (f"INSERT INTO {_name(syntax, 'run_events')} ({_names(syntax, _EVENT_COLUMNS)})"
            f" VALUES {', '.join([row] * count)}")


def insert_events(rows: list[tuple]) -> None:
    """INSERT the events, each `(run_id, sequence, kind, at, payload_json)`, in one statement (one per
    EVENTS_PER_INSERT): each statement costs its execution however few rows it carries, on PostgreSQL in the
    server's process too. On PostgreSQL inside a transaction the insert is deferred to the transaction's next
    statement or its COMMIT (_execute()): nothing reads its result."""
    syntax = _syntax()
    for start in range(0, len(rows), EVENTS_PER_INSERT):
        chunk = rows[start:start + EVENTS_PER_INSERT]
        params = [value for run_id, sequence, kind, at, payload in chunk
                  for value in (run_id, sequence, kind, _EVENT_AT.db_value(at), payload)]
        _execute(_insert_events_text(syntax, len(chunk)), params, deferred=True)
