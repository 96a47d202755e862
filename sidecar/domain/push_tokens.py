"""The token a delegation's push config carries: `<run id>.<32 random bytes, URL-safe base64>`.

The run id in front lets the webhook find the run's few delegations without an index on secrets; the
whole token is then compared in constant time (docs/delegation.md, "Pushes").
"""

import secrets

RUN_ID_LENGTH = 36  # a UUID in its text form


def new_push_token(run_id: str) -> str:
    return f"{run_id}.{secrets.token_urlsafe(32)}"


def run_id_of(token: str) -> str | None:
    """The run a token names, or None for text that is no push token."""
    run_id, dot, _ = token.partition(".")
    return run_id if dot and len(run_id) == RUN_ID_LENGTH else None
