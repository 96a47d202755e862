"""Version 8: push tokens out of the outbound journal.

Sends journalled before the push token was kept out of the journal carry it in their body: each such body
gets the token masked, and its row the token's digest (and the digest of the new body). The token stays
valid: its wait already keeps only its digest. On SQLite the old text is zeroed where it stood
(secure_delete), and the file is compacted after the upgrade (the runner's scrub).
"""

import hashlib

from peewee import CharField, TextField

from ...domain import push_tokens
from ..db import dialect
from .frozen import FrozenModel, add_missing_columns

NAME = "push tokens out of the outbound journal"
SCRUBS_SQLITE_FILE = True  # it replaces secrets: no old copy may stay in the file's free pages
BATCH = 500  # rows read at once


class Outbound(FrozenModel):
    """The columns this version reads and writes."""

    id = CharField(max_length=36, primary_key=True)
    request_body = TextField()
    request_sha256 = CharField(max_length=64)
    push_token_sha256 = CharField(max_length=64, null=True)

    class Meta:
        table_name = "outbound"


def apply(db) -> None:
    add_missing_columns(db, Outbound.push_token_sha256)
    if dialect() != "sqlite":
        _mask_journalled_push_tokens()
        return
    (before,) = db.execute_sql("PRAGMA secure_delete").fetchone()
    db.execute_sql("PRAGMA secure_delete = ON")
    try:
        _mask_journalled_push_tokens()
    finally:
        db.execute_sql(f"PRAGMA secure_delete = {int(before)}")


def _mask_journalled_push_tokens() -> None:
    after = ""
    while True:
        page = list(Outbound.select(Outbound.id, Outbound.request_body)
                    .where(Outbound.id > after, Outbound.request_body.contains('"token"'))
                    .order_by(Outbound.id).limit(BATCH))
        for row in page:
            token = push_tokens.token_in_body(row.request_body)
            if token is not None:
                body = push_tokens.mask(row.request_body, token)
                Outbound.update(request_body=body, request_sha256=hashlib.sha256(body.encode()).hexdigest(),
                                push_token_sha256=push_tokens.digest(token)).where(Outbound.id == row.id).execute()
        if len(page) < BATCH:
            return
        after = page[-1].id
