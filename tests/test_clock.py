"""The sped-up clock: anchored at an epoch, every process (the emulators, a daemon, that daemon restarted)
reads the same time."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from scheduler.clock import ScaledClock
from scheduler.errors import SettingsError
from scheduler.settings import load_settings


def test_two_clocks_with_one_epoch_read_the_same_time_whenever_they_were_made() -> None:
    epoch = datetime.now(timezone.utc) - timedelta(seconds=30)
    first = ScaledClock(60, epoch=epoch)
    time.sleep(0.2)
    restarted = ScaledClock(60, epoch=epoch)  # a daemon started again later
    a, b = first.now(), restarted.now()
    assert abs((b - a).total_seconds()) < 60 * 0.1  # the same to within the reads' own spacing
    assert a - epoch >= timedelta(minutes=29)  # 30 real seconds since the epoch are 30 sped-up minutes


def test_without_an_epoch_a_clock_starts_from_the_real_time_of_day() -> None:
    before = datetime.now(timezone.utc)
    clock = ScaledClock(600)
    assert before <= clock.now() <= before + timedelta(minutes=10)


def test_an_epoch_needs_a_timezone_and_excludes_a_start() -> None:
    with pytest.raises(ValueError, match="timezone"):
        ScaledClock(60, epoch=datetime(2026, 12, 1))
    with pytest.raises(ValueError, match="not both"):
        ScaledClock(60, start=datetime.now(timezone.utc), epoch=datetime.now(timezone.utc))


def test_the_epoch_setting_is_an_aware_time_or_empty() -> None:
    assert load_settings(_env_file=None, sandbox_epoch="").sandbox_epoch is None
    when = load_settings(_env_file=None, sandbox_epoch="2026-12-01T08:00:00+08:00").sandbox_epoch
    assert when == datetime(2026, 12, 1, tzinfo=timezone.utc)
    with pytest.raises(SettingsError, match="GPUSCHED_SANDBOX_EPOCH"):
        load_settings(_env_file=None, sandbox_epoch="2026-12-01T00:00:00")
