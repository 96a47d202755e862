"""Sealed data: JSON encrypted and authenticated with Fernet, and the fingerprint of the key that sealed it.

A sealed value is stored with the fingerprint of its key, so opening it can tell two failures apart that
must be handled differently (docs/architecture.md, "Checkpoints"):

- the key is no longer configured (an operator removed it by mistake): `KeyNotConfigured`; the run stays
  waiting and health reports it, since putting the key back repairs it;
- the key is configured but the token does not authenticate under it: `CheckpointTampered`; the run ends
  `checkpoint_invalid`.

Only the key named by the fingerprint is tried. MultiFernet's "try every key" would read a removed key as
tampering, and a token that fails under its own key but opens under another could only come from an
edited fingerprint column: that is tampering too, and is reported as such.
"""

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken

from .errors import CheckpointTampered, KeyNotConfigured

FINGERPRINT_HEX = 16  # 64 bits of SHA-256: enough to tell a handful of keys apart, and fits the column


def fingerprint(key: str) -> str:
    """What identifies a key in the store: a prefix of a hash of the key's bytes, which gives nothing away
    about a 256-bit random key (and is prefixed, so it is no hash anything else uses)."""
    raw = base64.urlsafe_b64decode(key.encode("ascii"))
    return hashlib.sha256(b"nrllm-sealing-key\0" + raw).hexdigest()[:FINGERPRINT_HEX]


def generate_key() -> str:
    return Fernet.generate_key().decode("ascii")


def check_key(key: str) -> None:
    """ValueError when `key` is not a Fernet key (32 bytes, URL-safe base64). The message never shows it."""
    try:
        Fernet(key)
    except (ValueError, TypeError, binascii.Error):
        raise ValueError("not a Fernet key (32 bytes in URL-safe base64, 44 characters)") from None


class Sealer:
    """Seals under the newest key and opens under any configured one. Keys are given newest first."""

    def __init__(self, keys: Sequence[str]):
        if not keys:
            raise ValueError("at least one sealing key is needed")
        self._by_fingerprint: dict[str, Fernet] = {}
        order = []
        for key in keys:
            check_key(key)
            fp = fingerprint(key)
            if fp not in self._by_fingerprint:  # the same key listed twice is one key
                self._by_fingerprint[fp] = Fernet(key)
                order.append(fp)
        self.fingerprints: tuple[str, ...] = tuple(order)

    @property
    def newest_fingerprint(self) -> str:
        return self.fingerprints[0]

    def knows(self, fp: str) -> bool:
        return fp in self._by_fingerprint

    def seal(self, data: dict) -> tuple[str, str]:
        """(token, fingerprint): `data` as JSON, sealed under the newest key."""
        plaintext = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        token = self._by_fingerprint[self.newest_fingerprint].encrypt(plaintext)
        return token.decode("ascii"), self.newest_fingerprint

    def unseal(self, token: str, fp: str) -> dict:
        """The sealed dict. KeyNotConfigured when no configured key has `fp`; CheckpointTampered when the
        token does not authenticate under that key (or is not what `seal` writes)."""
        fernet = self._by_fingerprint.get(fp)
        if fernet is None:
            raise KeyNotConfigured(f"sealed under key {fp}, which is not configured in NRLLM_SECRET_KEYS")
        try:
            # No TTL: a checkpoint may rightly wait for days; its age is the deadlines' business.
            data = json.loads(fernet.decrypt(token).decode("utf-8"))
        except (InvalidToken, TypeError, ValueError):  # ValueError covers bad base64, UTF-8 and JSON
            raise CheckpointTampered(f"the sealed value does not authenticate under key {fp}") from None
        if not isinstance(data, dict):
            raise CheckpointTampered("the sealed value is not a JSON object")
        return data

    def reseal(self, token: str, fp: str) -> tuple[str, str]:
        """(token, fingerprint) under the newest key; unchanged when it already is (so a rotation that is
        interrupted and run again does no work twice). Raises as unseal() does."""
        data = self.unseal(token, fp)
        if fp == self.newest_fingerprint:
            return token, fp
        return self.seal(data)
