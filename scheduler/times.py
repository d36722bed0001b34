"""Time values: every time in gpusched is a timezone-aware UTC datetime.

Pure helpers only; reading the wall clock is ``clock``'s job alone.
"""

from __future__ import annotations

from datetime import datetime, timezone


def utc(dt: datetime) -> datetime:
    """Normalise to aware UTC; naive datetimes (SQLite returns them) are taken as UTC."""
    if dt.tzinfo is None:
        return dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc)
