"""The sped-up sandbox clock: processes that share its start agree on the time."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest

from scheduler.clock import ScaledClock, SystemClock


def test_clocks_started_apart_from_one_moment_agree() -> None:
    since = SystemClock().now() - timedelta(seconds=2)
    first = ScaledClock(600, since=since)
    threading.Event().wait(0.2)  # the second process starts later
    second = ScaledClock(600, since=since)
    apart = abs((first.now() - second.now()).total_seconds())
    assert apart < 0.05 * 600  # 50 ms of real time at most, from reading the two clocks one after the other
    # Two real seconds after ``since`` at 600x: twenty sandbox minutes on, not two seconds.
    assert first.now() - since >= timedelta(seconds=2 * 600)


def test_clocks_started_apart_without_a_shared_start_disagree_by_the_gap_times_the_speedup() -> None:
    first = ScaledClock(600)
    threading.Event().wait(0.2)
    second = ScaledClock(600)
    assert (first.now() - second.now()).total_seconds() >= 0.2 * 599 - 1


@pytest.mark.parametrize("kwargs", [
    {"start": datetime(2026, 11, 20, tzinfo=timezone.utc), "since": datetime(2026, 11, 20, tzinfo=timezone.utc)},
    {"since": datetime(2026, 11, 20)},
])
def test_since_needs_a_timezone_and_excludes_start(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        ScaledClock(60, **kwargs)
