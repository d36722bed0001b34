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

With fewer than ``MIN_SAMPLES`` idle starts there is no evidence, and the machine
stays warm for the configured window, as before. A job that sets
``policy.idle_stop_minutes`` gets exactly that, and ``GPUSCHED_IDLE_WARM=fixed``
turns the learning off.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.tables import AttemptRow, InstanceRow, UsageIntervalRow

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


def verdict_for(s: Session, kind: Kind, now: datetime, window: timedelta, restart_hours: float) -> Verdict:
    """``judge`` over the store's last ``LOOKBACK``: idle intervals and attempts of this kind."""
    provider, region, instance_type, capacity = kind
    since = now - LOOKBACK
    starts = s.scalars(
        select(UsageIntervalRow.start).join(InstanceRow, InstanceRow.id == UsageIntervalRow.instance_id).where(
            UsageIntervalRow.kind == "idle", UsageIntervalRow.provider == provider,
            UsageIntervalRow.region == region, UsageIntervalRow.instance_type == instance_type,
            UsageIntervalRow.capacity == capacity, UsageIntervalRow.start >= since,
            InstanceRow.reserved.is_(False))
    ).all()
    launches = sorted(s.scalars(
        select(AttemptRow.created_at).where(
            AttemptRow.provider == provider, AttemptRow.region == region,
            AttemptRow.instance_type == instance_type, AttemptRow.capacity == capacity,
            AttemptRow.created_at >= since)
    ).all())
    # An idle start seen now has no future yet: judge only those a whole window old.
    settled = [t for t in starts if t + window <= now]
    return judge(settled, launches, window, restart_hours)


@dataclass
class WarmMemo:
    """One verdict per kind, reused for ``REFRESH``: the reaper asks every tick."""

    verdicts: dict[Kind, tuple[datetime, Verdict]]

    def __init__(self) -> None:
        self.verdicts = {}

    def get(self, s: Session, kind: Kind, now: datetime, window: timedelta, restart_hours: float) -> Verdict:
        hit = self.verdicts.get(kind)
        if hit is not None and now - hit[0] < REFRESH:
            return hit[1]
        v = verdict_for(s, kind, now, window, restart_hours)
        self.verdicts[kind] = (now, v)
        return v
