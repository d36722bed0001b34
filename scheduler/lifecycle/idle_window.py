"""Whether a machine whose job just ended is worth keeping warm, learned from the last days.

A warm machine saves the next job that wants it a boot, an image pull and a
download (``restart_hours``, about ten minutes), but bills every minute it waits.
Waiting pays only where jobs that could reuse it come often: over the last
``LOOKBACK`` we replay every time a machine of the same kind (provider, region,
instance type, capacity) went idle, and ask when the next attempt on that kind
was created, whether or not a machine was kept warm for it. With ``window`` the
warm time, that history says what keeping warm would have bought::

    saved  = (idle starts followed by a launch within the window) x restart_hours
    billed = sum over idle starts of min(time to that next launch, window)

The machine is kept warm only when ``saved > billed``. Bursts of experiments on
one instance type pass that test; a month of jobs spread over many types does
not (on the month trace, 18 of 393 idle starts were followed by a launch of the
same kind within 10 minutes: 2.7 machine-hours saved for 64 billed).

A kind with fewer than ``MIN_SAMPLES`` idle starts of its own borrows the verdict of
every kind together (each idle start still matched with launches of its own kind):
a new instance type is not kept warm on a fleet where nothing ever is. With fewer
than ``MIN_SAMPLES`` idle starts in all there is no evidence, and the machine
stays warm for the configured window, as before. A job that sets
``policy.idle_stop_minutes`` gets exactly that, and ``GPUSCHED_IDLE_WARM=fixed``
turns the learning off.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.store.tables import AttemptRow, InstanceRow, UsageIntervalRow

LOOKBACK = timedelta(days=7)
MIN_SAMPLES = 5
REFRESH = timedelta(minutes=10)  # how long one verdict per kind is reused

Kind = tuple[str, str, str, str]  # (provider, region, instance_type, capacity)


@dataclass(frozen=True)
class Verdict:
    keep_warm: bool
    idle_starts: int
    wanted_again: int  # idle starts followed by a launch of the same kind within the window
    saved_hours: float
    billed_hours: float

    def why(self, window: timedelta) -> str:
        minutes = round(window.total_seconds() / 60)
        return (f"{self.wanted_again} of {self.idle_starts} machines of this kind were wanted again within "
                f"{minutes} min over the last {LOOKBACK.days} days: warm time would save "
                f"{self.saved_hours:.1f} h of boots for {self.billed_hours:.1f} h billed")


def judge(idle_starts: Sequence[datetime], launches: Sequence[datetime], window: timedelta,
          restart_hours: float) -> Verdict:
    """The verdict from history alone: ``launches`` must be sorted; both lists hold one kind."""
    window_h = window.total_seconds() / 3600
    wanted = 0
    billed = 0.0
    for t in idle_starts:
        i = bisect.bisect_right(launches, t)
        gap_h = (launches[i] - t).total_seconds() / 3600 if i < len(launches) else float("inf")
        if gap_h <= window_h:
            wanted += 1
        billed += min(gap_h, window_h)
    saved = wanted * restart_hours
    keep = len(idle_starts) < MIN_SAMPLES or saved > billed
    return Verdict(keep_warm=keep, idle_starts=len(idle_starts), wanted_again=wanted, saved_hours=saved,
                   billed_hours=billed)


def pooled(verdicts: Iterable[Verdict]) -> Verdict:
    """Several kinds' verdicts as one: their counts added up, judged by the same rule."""
    vs = list(verdicts)
    starts = sum(v.idle_starts for v in vs)
    saved, billed = sum(v.saved_hours for v in vs), sum(v.billed_hours for v in vs)
    return Verdict(keep_warm=starts < MIN_SAMPLES or saved > billed, idle_starts=starts,
                   wanted_again=sum(v.wanted_again for v in vs), saved_hours=saved, billed_hours=billed)


def verdicts(s: Session, now: datetime, window: timedelta, restart_hours: float) -> dict[Kind, Verdict]:
    """``judge`` for every kind over the store's last ``LOOKBACK``: its idle intervals and attempts."""
    return _read_since(s, now - LOOKBACK).verdicts(now, window, restart_hours)


def _read_since(s: Session, since: datetime) -> _History:
    """The idle starts and launches from ``since`` on, read whole."""
    history = _History()
    history.add(s.execute(_idle_starts().where(UsageIntervalRow.start >= since)),
                s.execute(_launches().where(AttemptRow.created_at >= since)))
    return history


def _idle_starts():
    return (select(UsageIntervalRow.id, UsageIntervalRow.provider, UsageIntervalRow.region,
                   UsageIntervalRow.instance_type, UsageIntervalRow.capacity, UsageIntervalRow.start)
            .join(InstanceRow, InstanceRow.id == UsageIntervalRow.instance_id)
            .where(UsageIntervalRow.kind == "idle", InstanceRow.reserved.is_(False)))


def _launches():
    return select(AttemptRow.id, AttemptRow.provider, AttemptRow.region, AttemptRow.instance_type,
                  AttemptRow.capacity, AttemptRow.created_at)


class _History:
    """Idle starts and launches per kind, in any order; ``verdicts`` judges those of the last ``LOOKBACK``."""

    def __init__(self) -> None:
        self.starts: dict[Kind, list[datetime]] = defaultdict(list)
        self.launches: dict[Kind, list[datetime]] = defaultdict(list)
        self.last_start_id = self.last_launch_id = 0

    def add(self, starts: Iterable, launches: Iterable) -> None:
        for row_id, provider, region, instance_type, capacity, start in starts:
            self.starts[(provider, region, instance_type, capacity)].append(start)
            self.last_start_id = max(self.last_start_id, row_id)
        for row_id, provider, region, instance_type, capacity, created in launches:
            self.launches[(provider, region, instance_type, capacity)].append(created)
            self.last_launch_id = max(self.last_launch_id, row_id)

    def forget_before(self, since: datetime) -> None:
        for table in (self.starts, self.launches):
            for kind in list(table):
                kept = [t for t in table[kind] if t >= since]
                if kept:
                    table[kind] = kept
                else:
                    del table[kind]

    def verdicts(self, now: datetime, window: timedelta, restart_hours: float) -> dict[Kind, Verdict]:
        since = now - LOOKBACK
        out: dict[Kind, Verdict] = {}
        # In one order whatever the order read (kinds, and starts within a kind), so that float sums agree
        # between a full read and the memo's additions.
        for kind in sorted(self.starts):
            # An idle start seen now has no future yet: judge those a window old.
            starts = sorted(t for t in self.starts[kind] if since <= t and t + window <= now)
            if starts:
                launches = sorted(t for t in self.launches.get(kind, ()) if t >= since)
                out[kind] = judge(starts, launches, window, restart_hours)
        return out


class WarmMemo:
    """Every kind's verdict for one warm window, reused for ``REFRESH``: the reaper asks every tick.

    On SQLite (one writer at a time: a row committed later always has a higher id) a refresh reads only
    the idle intervals and attempts added since the last one, and keeps the last ``LOOKBACK`` of them here:
    the same verdicts as ``verdicts`` over the store (``test_idle_window`` compares the two), without
    reading a week of a busy fleet's history again every ten minutes. PostgreSQL writers may commit ids
    out of order, and a clock that went back needs what was forgotten: those read it all again."""

    def __init__(self) -> None:
        self._at: dict[timedelta, datetime] = {}
        self._verdicts: dict[timedelta, dict[Kind, Verdict]] = {}
        self._history: _History | None = None
        self._read_at: datetime | None = None

    def get(self, s: Session, kind: Kind, now: datetime, window: timedelta, restart_hours: float) -> Verdict:
        at = self._at.get(window)
        if at is None or not timedelta(0) <= now - at < REFRESH:
            self._verdicts[window] = self._refreshed(s, now, window, restart_hours)
            self._at[window] = now
        known = self._verdicts[window]
        own = known.get(kind)
        if own is not None and own.idle_starts >= MIN_SAMPLES:
            return own
        return pooled(known.values())

    def _refreshed(self, s: Session, now: datetime, window: timedelta, restart_hours: float) -> dict[Kind, Verdict]:
        if s.get_bind().dialect.name != "sqlite":
            return verdicts(s, now, window, restart_hours)
        since = now - LOOKBACK
        h = self._history
        if h is None or self._read_at is None or now < self._read_at:
            h = self._history = _read_since(s, since)
        else:
            h.add(s.execute(_idle_starts().where(UsageIntervalRow.id > h.last_start_id,
                                                 UsageIntervalRow.start >= since)),
                  s.execute(_launches().where(AttemptRow.id > h.last_launch_id, AttemptRow.created_at >= since)))
            h.forget_before(since)
        self._read_at = now
        return h.verdicts(now, window, restart_hours)
