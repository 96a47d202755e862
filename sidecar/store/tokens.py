"""API tokens: the plaintext is shown once at creation; only its SHA-256 is stored.

A presented token is looked up by its hash. The database compares hashes, never the secret itself, so
the comparison's timing says nothing about the token (and a 256-bit random secret leaves nothing to
guess byte by byte anyway).
"""

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime

from peewee import IntegrityError

from ..domain.clock import utcnow
from ..domain.errors import NameTaken, NotFound
from . import statements
from .db import transactional
from .models import ApiToken

ROLES = ("host", "operator")
PREFIX = "nrllm_"


@dataclass(frozen=True)
class TokenInfo:
    id: str
    name: str
    role: str
    created_at: datetime
    revoked_at: datetime | None


def _info(row: ApiToken) -> TokenInfo:
    return TokenInfo(row.id, row.name, row.role, row.created_at, row.revoked_at)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create(name: str, role: str) -> tuple[str, TokenInfo]:
    """A new token: returns its plaintext (never stored, never shown again) and its record."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    if not name or len(name) > 128:
        raise ValueError("a token name has 1 to 128 characters")
    plaintext = PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(id=str(uuid.uuid4()), name=name, role=role, token_sha256=digest(plaintext), created_at=utcnow())
    try:
        _insert(row)
    except IntegrityError:
        raise NameTaken(f"a token named {name!r} already exists") from None
    return plaintext, _info(row)


@transactional
def _insert(row: ApiToken) -> None:
    row.save(force_insert=True)


def exists(name: str) -> bool:
    return ApiToken.select().where(ApiToken.name == name).exists()


def list_tokens() -> list[TokenInfo]:
    return [_info(row) for row in ApiToken.select().order_by(ApiToken.created_at, ApiToken.name)]


@transactional
def revoke(name: str) -> bool:
    """Revoke by name. False when it was already revoked; NotFound when there is no such token."""
    row = ApiToken.get_or_none(ApiToken.name == name)
    if row is None:
        raise NotFound(f"no token named {name!r}")
    if row.revoked_at is not None:
        return False
    ApiToken.update(revoked_at=utcnow()).where(ApiToken.id == row.id).execute()
    return True


def lookup(presented: str) -> TokenInfo | None:
    """The live (not revoked) token with this plaintext, or None."""
    row = statements.select_one(ApiToken, token_sha256=digest(presented), revoked_at=None)  # on every request
    return _info(row) if row else None
