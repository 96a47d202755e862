"""The token a delegation's push config carries: `<run id>.<32 random bytes, URL-safe base64>`.

The run id in front lets the webhook find the run's few delegations without an index on secrets; the
whole token is then compared in constant time (docs/delegation.md, "Pushes").

The token is a secret: the store keeps only its SHA-256 (`digest`), and the journalled request body keeps
it masked (`mask`: every character an asterisk, so the body keeps the length that was sent and counted).
A token is 256 random bits in characters JSON never escapes, so its text occurs in a body only where the
push config put it (the config's `token` and its `credentials`).
"""

import hashlib
import json
import secrets

RUN_ID_LENGTH = 36  # a UUID in its text form
MASK_CHARACTER = "*"
# Where a send's push config sits: A2A 1.0 (SendMessage) and 0.3 (message/send).
_CONFIG_KEYS = ("taskPushNotificationConfig", "pushNotificationConfig")


def new_push_token(run_id: str) -> str:
    return f"{run_id}.{secrets.token_urlsafe(32)}"


def run_id_of(token: str) -> str | None:
    """The run a token names, or None for text that is no push token."""
    run_id, dot, _ = token.partition(".")
    return run_id if dot and len(run_id) == RUN_ID_LENGTH else None


def digest(token: str) -> str:
    """What the store keeps of a token (a 256-bit random secret needs no slow hash)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def push_config(request: dict) -> dict | None:
    """The push config of a send request (either dialect), or None."""
    params = request.get("params") if isinstance(request, dict) else None
    config = (params.get("configuration") if isinstance(params, dict) else None) or {}
    for key in _CONFIG_KEYS:
        if isinstance(config, dict) and isinstance(config.get(key), dict):
            return config[key]
    return None


def is_masked(token: str) -> bool:
    return token != "" and token == MASK_CHARACTER * len(token)


def mask(body_text: str, token: str) -> str:
    """The body with every occurrence of the token's text masked (same length)."""
    return body_text.replace(token, MASK_CHARACTER * len(token))


def token_in_body(body_text: str) -> str | None:
    """The push token a send body carries in the clear (None without a push config, or when it is masked)."""
    try:
        config = push_config(json.loads(body_text))
    except ValueError:
        return None
    token = config.get("token") if config else None
    return token if isinstance(token, str) and token and not is_masked(token) else None
