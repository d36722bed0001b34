"""A month's cost lines in the report currency, each with its share of the reservations' fees.

The layer under ``reports.py``: it reads the ledger's lines for one period, converts them, and
charges every busy hour on a reserved machine its part of that reservation's amortized fee
(``reservations.py``): ``fee x hours / prepaid hours``, rounded down to the report's 12 places, so the
parts never exceed the fee and what is left is the reservation's unused part, exactly. Sums of lines
are therefore exact in any grouping, which is what lets every breakdown add up to the headline.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import ROUND_DOWN, ROUND_HALF_EVEN, Decimal
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.accounting.reservations import PoolKey, ReservationPool, pools_for
from scheduler.errors import UserError
from scheduler.models import ReservedCapacity
from scheduler.money import CURRENCIES, FxRates, Money
from scheduler.store.tables import CostRecordRow
from scheduler.times import utc

RESERVED = "reserved"
SCALE = Decimal("1e-12")
_MONTH_RE = re.compile(r"^([1-9][0-9]{3})-(0[1-9]|1[0-2])$")


class CostLike(Protocol):
    """What the report reads from a cost line: a CostRecordRow, or the ledger's open-interval view."""

    instance_id: str
    job_id: str | None
    team: str
    project: str | None
    kind: str
    provider: str
    region: str
    instance_type: str
    gpu: str
    capacity: str
    start: datetime
    end: datetime
    hours: Decimal
    amount: Decimal
    on_demand_amount: Decimal
    currency: str


@dataclass(frozen=True, slots=True)
class Line:
    """One cost line with its money in the report currency."""

    job_id: str | None
    team: str
    project: str | None
    kind: str
    provider: str
    region: str
    instance_type: str
    gpu: str
    capacity: str
    start: datetime
    end: datetime
    hours: Decimal
    cost: Decimal  # as billed (0 for a reserved machine)
    on_demand: Decimal
    fee: Decimal = Decimal(0)  # its share of a reservation's amortized fee (busy reserved hours only)
    instance_id: str = ""  # the machine; the FOCUS export's ResourceId

    @property
    def reserved(self) -> bool:
        return self.capacity == RESERVED

    @property
    def busy(self) -> bool:
        return self.kind != "idle"

    @property
    def pool_key(self) -> PoolKey:
        return (self.provider, self.region, self.instance_type)

    @property
    def billed_on_demand(self) -> Decimal:
        """Its on-demand equivalent where it counts: hours billed by the hour, not prepaid ones."""
        return Decimal(0) if self.reserved else self.on_demand

    @property
    def reserved_busy_hours(self) -> Decimal:
        return self.hours if self.reserved and self.busy else Decimal(0)

    @property
    def total(self) -> Decimal:
        return self.cost + self.fee


def month_bounds(month: str) -> tuple[datetime, datetime]:
    """``"2026-11"`` -> [2026-11-01T00:00Z, 2026-12-01T00:00Z)."""
    m = _MONTH_RE.match(month) if isinstance(month, str) else None
    if m is None:
        raise UserError(f"month must look like 2026-11, not {month!r}", fix="give the year and month as YYYY-MM")
    year, mon = int(m.group(1)), int(m.group(2))
    if (year, mon) == (9999, 12):  # its end, 10000-01-01, is past what a datetime holds
        raise UserError(f"month {month!r} is past the last one gpusched can report", fix="give a month before 9999-12")
    start = datetime(year, mon, 1, tzinfo=timezone.utc)
    end = datetime(year + mon // 12, mon % 12 + 1, 1, tzinfo=timezone.utc)
    return start, end


def seconds(delta: timedelta) -> Decimal:
    # timedelta.total_seconds() is a float; money prorated by it would not sum exactly.
    return Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds) / Decimal(1_000_000)


def rounded(value: Decimal) -> Decimal:
    """Round to the report's 12 places. Every amount a report adds is rounded so, once, where it is made
    (a conversion, a prorated part), so sums are exact in any order and grouping. 12, not the ledger's 8:
    an 8-place USD amount at a 1-place rate (7.2) stays exact, so the report agrees with the ledger."""
    return value.quantize(SCALE, rounding=ROUND_HALF_EVEN)


def convert(amount: Decimal, currency: str, to: str, fx: FxRates) -> Decimal:
    if currency not in CURRENCIES:
        raise UserError(
            f"a cost is recorded in {currency!r}, which the report cannot convert",
            fix=f"record prices in one of {', '.join(CURRENCIES)}",
        )
    return rounded(fx.convert(Money(amount=Decimal(amount), currency=currency), to).amount)


def to_line(raw: CostLike, currency: str, fx: FxRates) -> Line:
    return Line(
        job_id=raw.job_id, team=raw.team, project=raw.project, kind=raw.kind, provider=raw.provider,
        region=raw.region, instance_type=raw.instance_type, gpu=raw.gpu, capacity=raw.capacity,
        start=utc(raw.start), end=utc(raw.end), hours=Decimal(raw.hours),
        cost=convert(raw.amount, raw.currency, currency, fx),
        on_demand=convert(raw.on_demand_amount, raw.currency, currency, fx), instance_id=raw.instance_id,
    )  # fmt: skip


def clip(line: Line, start: datetime, end: datetime) -> Line | None:
    """The part of ``line`` inside [start, end), prorated by time; None if it lies outside."""
    lo, hi = max(line.start, start), min(line.end, end)
    if lo == line.start and hi == line.end:
        return line if line.start < end and line.end >= start else None
    if hi <= lo:
        return None
    share = seconds(hi - lo) / seconds(line.end - line.start)
    return dataclasses.replace(line, start=lo, end=hi, hours=rounded(line.hours * share),
                               cost=rounded(line.cost * share), on_demand=rounded(line.on_demand * share))


@dataclass(frozen=True)
class PoolUse:
    """A reservation pool with the use the period's lines made of it."""

    pool: ReservationPool
    busy_hours: Decimal
    idle_hours: Decimal
    used_fee: Decimal
    on_demand_value: Decimal  # the busy hours at on-demand prices

    @property
    def unused_fee(self) -> Decimal:
        return self.pool.fee - self.used_fee


def charge_reservations(
    lines: Sequence[Line], pools: dict[PoolKey, ReservationPool]
) -> tuple[list[Line], list[PoolUse]]:
    """Give each busy reserved line its share of its pool's fee; returns the lines and each pool's use."""
    busy: dict[PoolKey, Decimal] = defaultdict(Decimal)
    for line in lines:
        busy[line.pool_key] += line.reserved_busy_hours
    charged: list[Line] = []
    used: dict[PoolKey, Decimal] = defaultdict(Decimal)
    for line in lines:
        if line.reserved_busy_hours:
            pool = pools[line.pool_key]
            # Over-use (more busy hours than prepaid: settings that lag the fleet) spreads the fee over the
            # hours that ran, so the fee is charged once, never more.
            hours = max(pool.prepaid_hours, busy[line.pool_key])
            share = (pool.fee * line.hours / hours).quantize(SCALE, rounding=ROUND_DOWN) if hours else Decimal(0)
            line = dataclasses.replace(line, fee=share)
            used[line.pool_key] += share
        charged.append(line)
    uses = []
    for key, pool in pools.items():
        mine = [l for l in lines if l.reserved and l.pool_key == key]
        uses.append(PoolUse(
            pool=pool,
            busy_hours=busy[key],
            idle_hours=sum((l.hours for l in mine if not l.busy), Decimal(0)),
            used_fee=used[key],
            on_demand_value=sum((l.on_demand for l in mine if l.busy), Decimal(0)),
        ))  # fmt: skip
    return charged, uses


def month_lines(
    session: Session, month: str, start: datetime, end: datetime, currency: str, fx: FxRates,
    open_costs: Iterable[CostLike] = (),
) -> tuple[list[Line], int]:
    """The month's written records and the open costs inside it, converted; and how many were open."""
    records = session.scalars(
        select(CostRecordRow).where(CostRecordRow.month == month).order_by(CostRecordRow.start, CostRecordRow.id)
    ).all()
    lines = [to_line(r, currency, fx) for r in records]
    opened = [c for c in (clip(to_line(o, currency, fx), start, end) for o in open_costs) if c is not None]
    return lines + opened, len(opened)


def priced_period(
    lines: Sequence[Line], reserved: Iterable[ReservedCapacity], start: datetime, as_of: datetime,
    currency: str, fx: FxRates,
) -> tuple[list[Line], list[PoolUse]]:
    """``lines`` charged with the fees of the reservations over [start, as_of)."""
    seen = sorted({l.pool_key for l in lines if l.reserved})
    pools = pools_for(reserved, start, as_of, currency, fx, seen=seen)
    return charge_reservations(lines, pools)
