"""How long finished runs are kept: a duration (30d, 12h, 90m) or a point in time, as the purge reads it."""

import re
from datetime import UTC, datetime, timedelta

_DURATION = re.compile(r"^\s*(\d+)\s*([dhm])\s*$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def parse_duration(text: str) -> timedelta:
    """`30d`, `12h` or `90m` (a positive whole number and a unit); ValueError otherwise."""
    match = _DURATION.match(text or "")
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"{text!r} is not a duration such as 30d, 12h or 90m")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


def parse_cutoff(text: str, now: datetime) -> datetime:
    """The moment before which finished runs go: now minus a duration, or an ISO 8601 date or date-time
    (without a zone it is UTC; a date is its midnight, UTC). Naive UTC, as the store keeps times."""
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is neither a duration (30d, 12h, 90m) nor an ISO date or date-time") from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment
