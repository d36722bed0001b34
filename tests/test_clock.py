"""The sped-up sandbox clock: processes that share its start (the emulators, daemons, a daemon restarted
after a crash) agree on the time."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from scheduler.clock import ScaledClock, SystemClock
from scheduler.errors import SettingsError
from scheduler.settings import load_settings


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


def test_two_clocks_with_one_epoch_read_the_same_time_whenever_they_were_made() -> None:
    epoch = datetime.now(timezone.utc) - timedelta(seconds=30)
    first = ScaledClock(60, since=epoch)
    time.sleep(0.2)
    restarted = ScaledClock(60, since=epoch)  # a daemon started again later
    a, b = first.now(), restarted.now()
    assert abs((b - a).total_seconds()) < 60 * 0.1  # the same to within the reads' own spacing
    assert a - epoch >= timedelta(minutes=29)  # 30 real seconds since the epoch are 30 sped-up minutes


def test_without_an_epoch_a_clock_starts_from_the_real_time_of_day() -> None:
    before = datetime.now(timezone.utc)
    clock = ScaledClock(600)
    assert before <= clock.now() <= before + timedelta(minutes=10)


def test_an_epoch_needs_a_timezone_and_excludes_a_start() -> None:
    with pytest.raises(ValueError, match="timezone"):
        ScaledClock(60, since=datetime(2026, 12, 1))
    with pytest.raises(ValueError, match="in the future"):  # it would read the past, sped up: before year 1
        ScaledClock(60, since=datetime.now(timezone.utc) + timedelta(days=1))
    with pytest.raises(ValueError, match="not both"):
        ScaledClock(60, start=datetime.now(timezone.utc), since=datetime.now(timezone.utc))


def test_the_epoch_setting_is_an_aware_time_or_empty() -> None:
    assert load_settings(_env_file=None, sandbox_clock_start="").sandbox_clock_start is None
    when = load_settings(_env_file=None, sandbox_clock_start="2026-12-01T08:00:00+08:00").sandbox_clock_start
    assert when == datetime(2026, 12, 1, tzinfo=timezone.utc)
    with pytest.raises(SettingsError, match="GPUSCHED_SANDBOX_CLOCK_START"):
        load_settings(_env_file=None, sandbox_clock_start="2026-12-01T00:00:00")
