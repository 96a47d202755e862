"""Sealing, without a database: round trips, one altered byte, a removed key, rotation."""

import base64

import pytest

from sidecar.domain.sealing import (
    CheckpointTampered,
    KeyNotConfigured,
    Sealer,
    check_key,
    fingerprint,
    generate_key,
)

OLD, NEW = generate_key(), generate_key()
CHECKPOINT = {"tool_call_id": "call_1", "conversation": [{"role": "user", "content": "grüße"}], "budget": {"n": 1}}


def _altered(token: str, index: int) -> str:
    raw = bytearray(base64.urlsafe_b64decode(token))
    raw[index] ^= 0x01
    return base64.urlsafe_b64encode(bytes(raw)).decode("ascii")


def test_a_sealed_value_opens_to_what_was_sealed_and_names_the_newest_key():
    sealer = Sealer([NEW, OLD])
    token, fp = sealer.seal(CHECKPOINT)
    assert fp == fingerprint(NEW) == sealer.newest_fingerprint
    assert sealer.unseal(token, fp) == CHECKPOINT
    assert "grüße" not in token and "call_1" not in token


def test_the_fingerprint_identifies_the_key_without_showing_it():
    fp = fingerprint(NEW)
    assert len(fp) == 16 and int(fp, 16) >= 0
    assert fp not in NEW and fp != fingerprint(OLD)


def test_every_altered_byte_is_tampering():
    sealer = Sealer([NEW])
    token, fp = sealer.seal(CHECKPOINT)
    for index in range(len(base64.urlsafe_b64decode(token))):
        with pytest.raises(CheckpointTampered):
            sealer.unseal(_altered(token, index), fp)


@pytest.mark.parametrize("token", ["", "not base64 !", "gAAAAA", "grüße", "AAAA" * 40])
def test_a_token_that_is_not_one_is_tampering(token):
    with pytest.raises(CheckpointTampered):
        Sealer([NEW]).unseal(token, fingerprint(NEW))


def test_a_value_sealed_under_another_configured_key_than_its_fingerprint_names_is_tampering():
    # Only the named key is tried: an edited fingerprint column is not quietly healed by trying the rest.
    token, _ = Sealer([OLD]).seal(CHECKPOINT)
    with pytest.raises(CheckpointTampered):
        Sealer([NEW, OLD]).unseal(token, fingerprint(NEW))


def test_a_value_whose_key_was_removed_is_not_configured_rather_than_tampered():
    token, fp = Sealer([OLD]).seal(CHECKPOINT)
    with pytest.raises(KeyNotConfigured) as raised:
        Sealer([NEW]).unseal(token, fp)
    assert fp in str(raised.value) and OLD not in str(raised.value)
    # Putting the key back repairs it.
    assert Sealer([NEW, OLD]).unseal(token, fp) == CHECKPOINT


def test_rotation_reseals_under_the_newest_key_and_the_old_key_can_go():
    token, fp = Sealer([OLD]).seal(CHECKPOINT)
    rotating = Sealer([NEW, OLD])
    new_token, new_fp = rotating.reseal(token, fp)
    assert new_fp == fingerprint(NEW) and new_token != token
    assert Sealer([NEW]).unseal(new_token, new_fp) == CHECKPOINT
    # Already under the newest key: nothing to do, the same token back.
    assert rotating.reseal(new_token, new_fp) == (new_token, new_fp)


def test_rotation_refuses_what_it_cannot_open():
    token, fp = Sealer([OLD]).seal(CHECKPOINT)
    with pytest.raises(KeyNotConfigured):
        Sealer([NEW]).reseal(token, fp)
    with pytest.raises(CheckpointTampered):
        Sealer([NEW, OLD]).reseal(_altered(token, 40), fp)


def test_a_sealed_value_that_is_not_an_object_is_refused():
    from cryptography.fernet import Fernet

    token = Fernet(NEW).encrypt(b"[1, 2]").decode()
    with pytest.raises(CheckpointTampered):
        Sealer([NEW]).unseal(token, fingerprint(NEW))


def test_keys_are_checked_and_a_listed_twice_key_counts_once():
    assert Sealer([NEW, NEW, OLD]).fingerprints == (fingerprint(NEW), fingerprint(OLD))
    with pytest.raises(ValueError, match="at least one"):
        Sealer([])
    for bad in ["", "short", "x" * 44, NEW[:-2], "ü" * 44]:
        with pytest.raises(ValueError) as raised:
            check_key(bad)
        assert bad not in str(raised.value) or bad == ""
