"""Reserved slots exist only while a reservation's term is in force: from its start (when set) to its end."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from providers.catalog import load_catalog
from scheduler.lifecycle.fleet import reserved_slots
from scheduler.models import ReservedCapacity

UTC = timezone.utc
NOW = datetime(2026, 11, 4, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("start", "until", "slots"),
    [
        (None, datetime(2027, 3, 31, tzinfo=UTC), 2),
        (datetime(2026, 3, 31, tzinfo=UTC), datetime(2027, 3, 31, tzinfo=UTC), 2),
        (datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 12, 1, tzinfo=UTC), 0),  # bought, not begun
        (datetime(2025, 11, 4, tzinfo=UTC), NOW, 0),  # over
    ],
)
def test_a_reservation_gives_slots_only_within_its_term(start: datetime | None, until: datetime, slots: int) -> None:
    res = ReservedCapacity(provider="alibaba", region="cn-hangzhou", instance_type="ecs.gn7i-c8g1.2xlarge", count=2,
                           start=start, until=until)  # fmt: skip
    got = reserved_slots([res], load_catalog(), NOW, strict=True)
    assert len(got) == slots
    assert all(s.kind == "reserved" and s.offer.instance_type == res.instance_type for s in got)
