"""Submission times as nbgrader writes and reads them (timestamp.txt)."""

from __future__ import annotations

from datetime import datetime, timezone

TIMESTAMP = "timestamp.txt"


def nbgrader_time(when: datetime) -> str:
    """A time as nbgrader's submit writes timestamp.txt: UTC, microseconds, the zone named."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def parse_time(text: str) -> datetime | None:
    """timestamp.txt as nbgrader writes it, or an ISO 8601 time; a time without a zone is UTC (as
    nbgrader's parse_utc reads one).  None when it is neither."""
    text = text.strip()
    if text.endswith(" UTC"):
        text = text[:-4] + "+00:00"
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)
