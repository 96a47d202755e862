"""The vocabularies and lease rules, without a database."""

from datetime import datetime, timedelta

import pytest

from sidecar.domain.lease import MAX_REQUEUES, LeasePolicy, reap_verdict
from sidecar.domain.vocabulary import (
    BASE_STATUSES,
    OutboundKind,
    OutboundOutcome,
    RunStatus,
    SegmentOutcome,
    TerminationReason,
    ToolEffect,
)


def test_exact_strings_of_the_contract():
    assert [s.value for s in RunStatus] == [
        "queued", "running", "waiting_for_input", "waiting_for_approval", "waiting_for_dependency",
        "completed", "failed", "cancelled",
    ]
    assert [s.value for s in SegmentOutcome] == [
        "completed", "awaiting_input", "awaiting_approval", "awaiting_dependency", "failed", "cancelled",
        "requeued", "lease_lost",
    ]
    assert {r.value for r in TerminationReason} == {
        "completed", "max_iterations", "budget_exhausted", "deadline_exceeded", "policy_denied",
        "approval_denied", "provider_failed", "cancelled", "retries_exhausted", "not_retryable",
        "checkpoint_invalid",
    }
    assert [e.value for e in ToolEffect] == ["read_only", "idempotent_write", "non_idempotent_write"]
    assert [k.value for k in OutboundKind] == ["send", "cancel"]
    assert [o.value for o in OutboundOutcome] == [
        "pending", "accepted", "rejected", "not_delivered", "outcome_unknown", "superseded",
    ]


@pytest.mark.parametrize(
    "status, terminal, person, dependency, lease",
    [
        ("queued", False, False, False, False),
        ("running", False, False, False, True),
        ("waiting_for_input", False, True, False, False),
        ("waiting_for_approval", False, True, False, False),
        ("waiting_for_dependency", False, False, True, False),
        ("completed", True, False, False, False),
        ("failed", True, False, False, False),
        ("cancelled", True, False, False, False),
    ],
)
def test_status_predicates(status, terminal, person, dependency, lease):
    s = RunStatus(status)
    assert s.is_terminal is terminal
    assert s.awaits_person is person
    assert s.awaits_dependency is dependency
    assert s.is_waiting is (person or dependency)
    assert s.holds_lease is lease


def test_predicates_cover_every_status_exactly_once():
    # Every status is exactly one of: terminal, waiting, queued, running. A new status must be classified.
    for s in RunStatus:
        kinds = [s.is_terminal, s.is_waiting, s is RunStatus.QUEUED, s.holds_lease]
        assert kinds.count(True) == 1, s


def test_base_vocabulary_lacks_only_the_dependency_wait():
    assert set(RunStatus) - BASE_STATUSES == {RunStatus.WAITING_FOR_DEPENDENCY}


def test_lease_policy_arithmetic():
    policy = LeasePolicy(3.0)
    now = datetime(2026, 1, 1)
    assert policy.expiry(now) == now + timedelta(seconds=3)
    assert policy.heartbeat_interval == pytest.approx(1.0)
    assert policy.reap_interval == 3.0
    with pytest.raises(ValueError):
        LeasePolicy(0)


def test_reap_verdicts():
    assert reap_verdict(0, None).requeue
    assert reap_verdict(MAX_REQUEUES - 1, None).requeue
    exhausted = reap_verdict(MAX_REQUEUES, None)
    assert not exhausted.requeue and exhausted.termination_reason == "retries_exhausted"
    in_flight = reap_verdict(0, "write_note call_1")
    assert not in_flight.requeue and in_flight.termination_reason == "not_retryable"


def test_only_non_idempotent_writes_are_unsafe_to_retry():
    assert ToolEffect.READ_ONLY.retry_safe and ToolEffect.IDEMPOTENT_WRITE.retry_safe
    assert not ToolEffect.NON_IDEMPOTENT_WRITE.retry_safe


def test_text_from_outside_loses_its_nul_characters_and_unpaired_surrogates_and_nothing_else():
    from sidecar.domain.text import storable, unstorable

    value = {"a\x00": ["x\x00y", {"k": "\ud800"}, 3, None, True], "\udfff": "b\udc00", "plain": "é\u2028😀"}
    assert storable(value) == {"a\ufffd": ["x\ufffdy", {"k": "\ufffd"}, 3, None, True], "\ufffd": "b\ufffd",
                               "plain": "é\u2028😀"}
    assert storable("no nul") == "no nul"
    assert [unstorable(t) for t in ("a\x00", "\ud83d", "😀\u2028", "")] == [
        "the NUL character", "an unpaired surrogate", None, None]


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32-le"])
def test_json_from_outside_is_made_storable_however_it_carries_the_code_point(encoding):
    from sidecar.domain.text import storable_json

    carried = {  # JSON text -> what is stored
        '{"k\\u0000": "a\\u0000b"}': {"k\ufffd": "a\ufffdb"},
        '["\\uD800", "\\udfff", "\\ud83d\\ude00"]': ["\ufffd", "\ufffd", "😀"],
        '"\\\\u0000"': "\\u0000",  # an escaped backslash before "u0000": text, not a NUL
        '{"plain": "é\\u00e9\\u2028😀", "n": [1, null, true]}': {"plain": "éé\u2028😀", "n": [1, None, True]},
    }
    for text, stored in carried.items():
        assert storable_json(text) == stored
        assert storable_json(text.encode(encoding)) == stored
    # A surrogate written as such in the bytes, not escaped: json.loads lets it through, and it is replaced.
    assert storable_json(b'["a\xed\xa0\x80"]') == ["a\ufffd"]
    with pytest.raises(ValueError):
        storable_json(b'"\xff\xfe\xfd')  # not text in any encoding JSON may use
