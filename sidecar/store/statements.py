"""SQL text for the statements every segment and every API request runs, instead of queries peewee compiles
on every call.

peewee turns a query into SQL each time it executes it: 0.15 to 0.9 ms of CPU for the statements of a
segment (the 34 columns of a run make its SELECT the dearest), where SQLite executes them in about
0.03 ms. A segment runs several, so that compilation was most of what a segment cost and what bounded a
worker's throughput (docs/performance.md, "The run store"); the token lookup and the insert of a run did
the same to every request. The statements here have a fixed shape; their text is joined from column
names, and values pass through each field's own conversion, as peewee does.
"""

from ..domain.vocabulary import RunStatus
from .db import database, dialect, supports_returning
from .models import Run, RunEvent

_RUN_FIELDS = Run._meta.columns  # column name -> field
RUN_COLUMNS = tuple(_RUN_FIELDS)  # every column of a run
_EVENT_COLUMNS = ("run_id", "sequence", "kind", "at", "payload")


def _name(identifier: str) -> str:
    opening, closing = database.quote  # '""' or '``'
    return f"{opening}{identifier}{closing}"


def _placeholders(count: int) -> str:
    return ", ".join([database.param] * count)


def _run_values(values: dict) -> list:
    return [_RUN_FIELDS[column].db_value(value) for column, value in values.items()]


def queued_run_ids(limit: int) -> list[str]:
    """The ids of up to `limit` queued runs, oldest first. On a server database the rows are locked for this
    transaction, and rows another claimer has locked are skipped instead of waited for; SQLite's BEGIN
    IMMEDIATE already makes the transaction the only writer."""
    param = database.param
    sql = (
        f"SELECT {_name('id')} FROM {_name('runs')} WHERE {_name('status')} = {param}"
        f" ORDER BY {_name('queued_at')}, {_name('id')} LIMIT {int(limit)}"
    )
    if dialect() != "sqlite":
        sql += " FOR UPDATE SKIP LOCKED"
    return [row[0] for row in database.execute_sql(sql, (RunStatus.QUEUED.value,))]


def select_one(model, **equal):
    """The row of `model` whose columns equal `equal` (None: IS NULL), as a model instance, or None."""
    rows = select_many(model, **equal)
    return rows[0] if rows else None


def select_many(model, **equal) -> list:
    """The rows of `model` whose columns equal `equal` (None: IS NULL), as model instances."""
    fields = model._meta.columns
    conditions = [f"{_name(column)} IS NULL" if value is None else f"{_name(column)} = {database.param}"
                  for column, value in equal.items()]
    params = [fields[column].db_value(value) for column, value in equal.items() if value is not None]
    sql = f"SELECT * FROM {_name(model._meta.table_name)} WHERE {' AND '.join(conditions)}"
    return _instances(model, database.execute_sql(sql, params))


def run_from_row(columns: tuple[str, ...], row: tuple):
    """A run (model instance) from `columns` and their values as the database returned them."""
    instance = Run(__no_default__=1)
    for column, value in zip(columns, row, strict=True):
        field = _RUN_FIELDS[column]
        instance.__data__[field.name] = field.python_value(value)
    return instance


def add_to(model, column: str, amount: int, **equal) -> int:
    """UPDATE the rows of `model` whose columns equal `equal` (none is None): `column` += `amount`. Returns how
    many rows matched."""
    fields = model._meta.columns
    conditions = " AND ".join(f"{_name(name)} = {database.param}" for name in equal)
    sql = (f"UPDATE {_name(model._meta.table_name)} SET {_name(column)} = {_name(column)} + {int(amount)}"
           f" WHERE {conditions}")
    return database.execute_sql(sql, [fields[name].db_value(value) for name, value in equal.items()]).rowcount


def select_rows(model, columns: tuple[str, ...], *, order_by: str | None = None, for_update: bool = False,
                **equal) -> list[tuple]:
    """`columns` of the rows of `model` whose columns equal `equal` (none is None), each value converted by
    its field as peewee would. `for_update`: the rows are locked for this transaction (server databases)."""
    fields = model._meta.columns
    conditions = " AND ".join(f"{_name(name)} = {database.param}" for name in equal)
    selected = ", ".join(_name(column) for column in columns)
    sql = f"SELECT {selected} FROM {_name(model._meta.table_name)} WHERE {conditions}"
    if order_by:
        sql += f" ORDER BY {_name(order_by)}"
    if for_update:
        sql += " FOR UPDATE"
    cursor = database.execute_sql(sql, [fields[name].db_value(value) for name, value in equal.items()])
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
    return database.execute_sql(*_update(model, where, values)).rowcount


def update_returning_row(model, where: dict, values: dict):
    """update_where() of at most one row, `where` naming its primary key: returns that row as written (a model
    instance), or None when no row matched. One statement where UPDATE ... RETURNING exists; the update and a
    read of the row by its key elsewhere."""
    if not supports_returning():
        key = model._meta.primary_key.column_name
        return select_one(model, **{key: where[key]}) if update_where(model, where, values) == 1 else None
    sql, params = _update(model, where, values)
    return _instance(model, database.execute_sql(sql + " RETURNING *", params))


def _update(model, where: dict, values: dict) -> tuple[str, list]:
    """The UPDATE of update_where(), and its parameters."""
    fields = model._meta.columns
    param = database.param
    conditions = [f"{_name(column)} IS NULL" if value is None else f"{_name(column)} = {param}"
                  for column, value in where.items()]
    sql = (f"UPDATE {_name(model._meta.table_name)} SET {', '.join(f'{_name(column)} = {param}' for column in values)}"
           f" WHERE {' AND '.join(conditions)}")
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
    found = []
    for row in rows:
        instance = model(__no_default__=1)
        for field, value in zip(named, row, strict=True):
            instance.__data__[field.name] = field.python_value(value)
        found.append(instance)
    return found


def insert_values(model, values: dict) -> None:
    """INSERT a row of `model` with only the columns in `values` (by column name): the database gives the rest
    (a generated key)."""
    fields = model._meta.columns
    columns = ", ".join(_name(column) for column in values)
    database.execute_sql(
        f"INSERT INTO {_name(model._meta.table_name)} ({columns}) VALUES ({_placeholders(len(values))})",
        [fields[column].db_value(value) for column, value in values.items()],
    )


def insert_row(model, values: dict) -> None:
    """INSERT a row of `model` with every column: `values` by field name, the field's default elsewhere (the
    defaults are peewee's, not the table's). For tables whose key is not generated by the database."""
    columns, params = [], []
    for field in model._meta.sorted_fields:
        if field.name in values:
            value = values[field.name]
        else:
            value = field.default() if callable(field.default) else field.default
        columns.append(_name(field.column_name))
        params.append(field.db_value(value))
    database.execute_sql(
        f"INSERT INTO {_name(model._meta.table_name)} ({', '.join(columns)}) VALUES ({_placeholders(len(params))})",
        params,
    )


def update_run(
    run_id: str,
    *,
    where: dict,
    values: dict,
    add: dict,
    returning: tuple[str, ...],
) -> tuple | None:
    """UPDATE the run `run_id` if its columns equal `where`: set `values`, and add to each column of `add`
    its amount (counters: the event sequence, the lease epoch, budgets).

    Returns the `returning` columns of the row as written, or None when the row did not match (nothing
    written). One statement where UPDATE ... RETURNING exists; the update and a read of the row elsewhere
    (MariaDB, whose row lock taken by the update makes that read the row as written). Call inside a write
    transaction.
    """
    param = database.param
    assignments = [f"{_name(column)} = {param}" for column in values]
    assignments += [f"{_name(column)} = {_name(column)} + {param}" for column in add]
    conditions = [f"{_name(column)} = {param}" for column in ("id", *where)]
    sql = f"UPDATE {_name('runs')} SET {', '.join(assignments)} WHERE {' AND '.join(conditions)}"
    params = [*_run_values(values), *add.values(), run_id, *_run_values(where)]
    selected = ", ".join(_name(column) for column in returning)
    if supports_returning():
        return database.execute_sql(f"{sql} RETURNING {selected}", params).fetchone()
    if database.execute_sql(sql, params).rowcount != 1:
        return None
    return database.execute_sql(
        f"SELECT {selected} FROM {_name('runs')} WHERE {_name('id')} = {param}", (run_id,)
    ).fetchone()


def insert_event(run_id: str, sequence: int, kind: str, at, payload_json: str, *, notify_channel: str | None = None
                 ) -> None:
    """INSERT the event; with `notify_channel` (PostgreSQL) the same round trip also queues the notification
    of the run's id on that channel (sent at commit). On PostgreSQL inside a transaction the insert is
    deferred to the transaction's next statement or its COMMIT (store/db.py, SidecarPostgresqlDatabase)."""
    fields = RunEvent._meta.columns
    values = (run_id, sequence, kind, fields["at"].db_value(at), payload_json)
    columns = ", ".join(_name(column) for column in _EVENT_COLUMNS)
    sql = f"INSERT INTO {_name('run_events')} ({columns}) VALUES ({_placeholders(len(values))})"
    if notify_channel is not None:
        sql += f"; SELECT pg_notify({database.param}, {database.param})"
        values = (*values, notify_channel, run_id)
    if dialect() == "postgresql":
        # Nothing reads the insert's result: it goes to the server with the transaction's next statement.
        database.defer(sql, values)
    else:
        database.execute_sql(sql, values)
