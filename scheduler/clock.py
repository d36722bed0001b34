"""The only place that reads the wall clock or sleeps.

Everything else takes a ``Clock``: the daemon gets ``SystemClock``; the demo, the
simulator and the tests get ``SimClock`` and move time forward explicitly.
All times are timezone-aware UTC datetimes (``times.utc`` normalises one).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class SimClock:
    """Simulated time: ``sleep`` and ``advance`` move it, nothing else does."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("SimClock needs a timezone-aware start time")
        self._now = start.astimezone(timezone.utc)

    def now(self) -> datetime:
        return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(timedelta(seconds=seconds))

    def advance(self, delta: timedelta) -> datetime:
        if delta < timedelta(0):
            raise ValueError("time does not run backwards")
        self._now += delta
        return self._now

    def set(self, when: datetime) -> None:
        when = when.astimezone(timezone.utc)
        if when < self._now:
            raise ValueError("time does not run backwards")
        self._now = when


class ScaledClock:
    """Real time sped up ``factor`` times from ``start``: lets a sandbox daemon show hours in minutes.

    ``since`` instead: the clock read ``since`` at that real moment (past or present) and has run ``factor``
    times faster from then; processes given the same ``since`` (two daemons and the emulators of one
    sandbox) agree on the time, where each process's own start would put them apart.
    """

    def __init__(self, factor: float, start: datetime | None = None, *, since: datetime | None = None) -> None:
        if factor <= 0:
            raise ValueError("factor must be positive")
        if start is not None and since is not None:
            raise ValueError("give start or since, not both")
        self.factor = factor
        self._t0 = time.monotonic()
        if since is not None:
            if since.tzinfo is None:
                raise ValueError("since needs a timezone")
            if since > datetime.now(timezone.utc):
                # Run back from a future moment, the clock would read the past, faster: years before year 1.
                raise ValueError(f"since ({since.isoformat()}) is in the future: give a moment already past")
            self._start = since.astimezone(timezone.utc)
            self._t0 -= (datetime.now(timezone.utc) - self._start).total_seconds()
        else:
            self._start = (start or datetime.now(timezone.utc)).astimezone(timezone.utc)

    def now(self) -> datetime:
        return self._start + timedelta(seconds=(time.monotonic() - self._t0) * self.factor)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds / self.factor)
