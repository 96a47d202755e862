"""Time as the store keeps it: naive UTC datetimes (every supported database compares them alike)."""

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def rfc3339(value: datetime | None) -> str | None:
    """The contract's time format: RFC 3339, UTC, with a Z."""
    if value is None:
        return None
    return value.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
