"""Decisions on a paused run, pure: the turn digest, the rights a decision needs, the results they give.

A pause for approval shows the person the calls of one model turn; the turn digest is the SHA-256 of
what was shown (each call's name, arguments and effect, in call order, as canonical JSON), so an
approval names exactly the content it approves. A pause for input carries a JSON schema that the
submitted input must match (input_schemas.py holds what such a schema may be and how input is checked).
"""

import hashlib
import json
from enum import StrEnum


class PauseKind(StrEnum):
    INPUT = "input"
    APPROVAL = "approval"


class DecisionKind(StrEnum):
    APPROVE = "approve"
    DENY = "deny"
    INPUT = "input"

    @property
    def pause_kind(self) -> PauseKind:
        """The kind of pause this decision answers."""
        return PauseKind.INPUT if self is DecisionKind.INPUT else PauseKind.APPROVAL

    @property
    def action(self) -> str:
        """The permission a decider needs (asked through the permission hook)."""
        return ACTION_FOR[self.pause_kind]


ACTION_FOR = {PauseKind.APPROVAL: "agent:approve", PauseKind.INPUT: "agent:input"}

# Comments and questions are shown to people and given to the model: bounded, like other texts.
MAX_COMMENT = 4000


def canonical_json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def turn_digest(pending_calls: list[dict]) -> str:
    """SHA-256 hex of the pending calls as shown: name, arguments and effect of each, in call order."""
    shown = [{"name": c["name"], "arguments": c["arguments"], "effect": c["effect"]} for c in pending_calls]
    return hashlib.sha256(canonical_json(shown).encode()).hexdigest()


def compact_json(value) -> str:
    """The submitted input as the model receives it (ask_user's result): compact, in the submitted order."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def denied_text(comment: str | None) -> str:
    """The result a denied call gets (docs/http-api.md, "Built-in tools": `denied: ` and the decider's comment)."""
    return f"denied: {comment.strip() if comment and comment.strip() else '(no comment)'}"
