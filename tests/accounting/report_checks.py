"""One check that a monthly report agrees with itself: every sum in it equals its headline.

Used on a table of small ledgers (test_report_consistency.py) and on the demo's month
(tests/simulation/test_demo.py). Exact in the report object; within half a cent a row in the CSV,
whose every figure is rounded on its own.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from decimal import Decimal

from scheduler.accounting.reports import BREAKDOWNS, MonthlyReport, render_csv
from scheduler.money import Money

ZERO = Decimal(0)


def _sum(items: Iterable[Money | None]) -> Decimal:
    return sum((m.amount for m in items if m is not None), ZERO)


def assert_agrees(r: MonthlyReport) -> None:
    assert r.total.amount == r.billed.amount + r.reserved_fees.amount
    assert r.savings.amount == r.on_demand_equivalent.amount - r.billed.amount
    assert r.idle_hours == r.billed_idle_hours + r.prepaid_idle_hours
    assert r.reserved_fees.amount == _sum(v.fee for v in r.reservations)
    assert r.reserved_unused.amount == _sum(v.unused_fee for v in r.reservations)
    assert r.reserved_busy_hours == sum((v.busy_hours for v in r.reservations), ZERO)
    assert r.reserved_on_demand_value.amount == _sum(v.on_demand_value for v in r.reservations)
    for v in r.reservations:
        assert v.fee.amount == v.used_fee.amount + v.unused_fee.amount
        assert ZERO <= v.used_fee.amount <= v.fee.amount
    for _, attr, _title in BREAKDOWNS:
        rows = getattr(r, attr)
        assert _sum(b.cost for b in rows) == r.total.amount, attr
        assert _sum(b.billed for b in rows) == r.billed.amount, attr
        assert _sum(b.on_demand_equivalent for b in rows) == r.on_demand_equivalent.amount, attr
        assert _sum(b.savings for b in rows) == r.savings.amount, attr
        assert _sum(b.reserved_fee for b in rows) == r.reserved_fees.amount, attr
        assert sum((b.hours for b in rows), ZERO) == r.busy_hours + r.idle_hours, attr
        assert sum((b.reserved_hours for b in rows), ZERO) == r.reserved_busy_hours, attr
        for b in rows:
            assert b.cost.amount == b.billed.amount + b.reserved_fee.amount, (attr, b.key)
        unused = [b for b in rows if b.unused_reservation]
        assert _sum(b.cost for b in unused) == r.reserved_unused.amount, attr
        if r.total.amount:
            assert abs(sum((b.share_pct for b in rows), ZERO) - 100) < Decimal("1e-20"), attr
    assert _sum(c.cost for c in r.team_by_capacity) == r.total.amount
    if r.unit_costs is not None:  # every GPU-hour that ran is some model's; the unused reservations are no one's
        assert _sum(g.cost for g in r.unit_costs.by_gpu) + r.reserved_unused.amount == r.total.amount
        assert _sum(g.on_demand_equivalent for g in r.unit_costs.by_gpu) == r.on_demand_equivalent.amount
    # Jobs are not a breakdown (idle hours have no job), but they can never add up to more than the whole.
    assert _sum(j.cost for j in r.jobs) <= r.billed.amount
    assert _sum(j.reserved_fee for j in r.jobs) <= r.reserved_fees.amount - r.reserved_unused.amount
    past = [d for d in r.by_day if not d.future]
    assert _sum(d.cost for d in past) == r.total.amount
    assert _sum(d.billed for d in past) == r.billed.amount
    assert _sum(d.reserved_fee for d in past) == r.reserved_fees.amount
    for d in r.by_day:
        if d.future:  # a day to come has no figures, not zeros
            assert (d.hours, d.billed, d.cost, d.reserved_fee) == (None, None, None, None)
            assert d.day >= r.as_of.date()
    assert r.trend[-1].total == r.total and r.trend[-1].savings == r.savings and r.trend[-1].month == r.month
    if r.forecast is not None:
        f = r.forecast
        assert f.total.amount == f.billed.amount + f.reserved_fees.amount + f.queued.amount
        assert f.queued.amount == _sum(q.in_month for q in f.queued_jobs)
        assert all(q.estimate is None or q.in_month <= q.estimate for q in f.queued_jobs)
        assert r.forecast.billed >= r.billed and r.forecast.reserved_fees >= r.reserved_fees
    _assert_csv_agrees(r)


def _assert_csv_agrees(r: MonthlyReport) -> None:
    rows = list(csv.DictReader(io.StringIO(render_csv(r))))
    [total] = [row for row in rows if row["section"] == "total"]
    cent = Decimal("0.005")
    assert Decimal(total["cost"]) == r.total.quantize().amount
    for section, _attr, _title in BREAKDOWNS:
        parts = [row for row in rows if row["section"] == section]
        for column in ("cost", "billed", "on_demand_equivalent", "savings", "reserved_fee"):
            got = sum((Decimal(row[column] or 0) for row in parts), ZERO)
            assert abs(got - Decimal(total[column])) <= cent * (len(parts) + 1), (section, column)
    days = [row for row in rows if row["section"] == "day"]
    assert len(days) == len(r.by_day)
    assert all(row["cost"] == "" for row, d in zip(days, r.by_day) if d.future)
