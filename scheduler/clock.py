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

    ``epoch`` anchors the clock instead: it reads ``epoch + (real now - epoch) * factor``, so every
    process given the same epoch (the emulators, a daemon, that daemon restarted after a crash) reads
    the same time, and a restart does not send the clock back to the real time of day.
    """

    def __init__(self, factor: float, start: datetime | None = None, *, epoch: datetime | None = None) -> None:
        if factor <= 0:
            raise ValueError("factor must be positive")
        if start is not None and epoch is not None:
            raise ValueError("give a start or an epoch, not both")
        if epoch is not None and epoch.tzinfo is None:
            raise ValueError("the epoch needs a timezone")
        self.factor = factor
        self._t0 = time.monotonic()
        real = datetime.now(timezone.utc)
        if epoch is not None:
            start = epoch + (real - epoch) * factor
        self._start = (start or real).astimezone(timezone.utc)

    def now(self) -> datetime:
        return self._start + timedelta(seconds=(time.monotonic() - self._t0) * self.factor)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds / self.factor)
