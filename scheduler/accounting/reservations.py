"""Reservations in the monthly report: their fees amortized, and how much of what was prepaid was used.

The amortization rule (the one AWS Cost Explorer's "amortized cost" uses, at hourly grain):

* an ``upfront_fee`` is spread evenly over every hour of the term [``start``, ``until``): a UTC day
  carries ``upfront_fee x (hours of the term in that day) / (hours of the whole term)``;
* a ``monthly_fee`` is spread over the hours of its calendar month: a UTC day carries
  ``monthly_fee x (hours of the term in that day) / (hours in that month)``;
* each day's amount is rounded once to the ledger's 8 places, and a period's fee is the sum of its
  days, so a month's fee is exactly the sum of its daily bars.

A reservation covers ``count`` machines, so its prepaid hours in a period are ``count`` x the hours
of the term inside the period. "Used" means a job ran on a reserved machine (busy hours); a reserved
machine up without a job is prepaid idle, and is part of the unused share like hours nobody ran.
Reservations of the same provider, region and instance type are pooled: the ledger does not say
which of two identical reservations a machine ran under.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import ROUND_HALF_EVEN, Decimal

from scheduler.models import ReservedCapacity
from scheduler.money import FxRates, Money
from scheduler.times import utc

__all__ = ["PoolKey", "ReservationPool", "day_fees", "pools_for", "prepaid_hours"]

SCALE = Decimal("0.00000001")  # the ledger's 8 places
_SECONDS_PER_HOUR = Decimal(3600)

PoolKey = tuple[str, str, str]  # provider, region, instance type: what a ledger line says of its machine


def _seconds(delta: timedelta) -> Decimal:
    return Decimal(delta.days * 86_400 + delta.seconds) + Decimal(delta.microseconds) / Decimal(1_000_000)


def _month_seconds(day: date) -> Decimal:
    first = datetime(day.year, day.month, 1, tzinfo=timezone.utc)
    nxt = datetime(day.year + day.month // 12, day.month % 12 + 1, 1, tzinfo=timezone.utc)
    return _seconds(nxt - first)


def _overlap(res: ReservedCapacity, start: datetime, end: datetime) -> tuple[datetime, datetime] | None:
    lo = max(utc(start), utc(res.start)) if res.start is not None else utc(start)
    hi = min(utc(end), utc(res.until))
    return (lo, hi) if lo < hi else None


def prepaid_hours(res: ReservedCapacity, start: datetime, end: datetime) -> Decimal:
    """Machine-hours ``res`` prepaid inside [start, end)."""
    span = _overlap(res, start, end)
    return Decimal(res.count) * _seconds(span[1] - span[0]) / _SECONDS_PER_HOUR if span else Decimal(0)


def _q(value: Decimal) -> Decimal:
    return value.quantize(SCALE, rounding=ROUND_HALF_EVEN)


def _month_start(at: datetime) -> datetime:
    return datetime(at.year, at.month, 1, tzinfo=timezone.utc)


def day_fees(res: ReservedCapacity, start: datetime, end: datetime) -> dict[date, Money]:
    """The amortized fee of ``res`` for each UTC day of [start, end) that the term touches.

    Each piece is the difference of two rounded running totals (fee accrued since the term's, or the
    month's, start), so pieces never lose a fraction: a whole term's days add up to the upfront fee and
    a whole month's to the monthly fee, exactly.
    """
    span = _overlap(res, start, end)
    if span is None or not res.has_fee:
        return {}
    currency = (res.upfront_fee or res.monthly_fee).currency  # type: ignore[union-attr]

    def accrued(at: datetime) -> Decimal:
        """Fee accrued from the term's start (upfront) and from the month's start (monthly) up to ``at``."""
        amount = Decimal(0)
        if res.upfront_fee is not None and res.start is not None:
            term = _seconds(utc(res.until) - utc(res.start))
            amount += _q(res.upfront_fee.amount * _seconds(at - utc(res.start)) / term)
        if res.monthly_fee is not None:
            amount += _q(res.monthly_fee.amount * _seconds(at - _month_start(at)) / _month_seconds(at.date()))
        return amount

    out: dict[date, Money] = {}
    cursor, stop = span
    while cursor < stop:
        midnight = datetime.combine(cursor.date() + timedelta(days=1), datetime.min.time(), tzinfo=timezone.utc)
        nxt = min(stop, midnight)
        amount = accrued(nxt) - accrued(cursor)
        if res.monthly_fee is not None and nxt == _month_start(nxt):
            # Midnight on the 1st closes the old month: its running total is the whole monthly fee, not 0.
            amount += res.monthly_fee.amount
        out[cursor.date()] = Money(amount=amount, currency=currency)
        cursor = nxt
    return out


@dataclass
class ReservationPool:
    """The reservations of one provider, region and instance type, over one report period."""

    key: PoolKey
    count: int = 0
    notes: list[str] = field(default_factory=list)
    configured: bool = True  # False: the ledger shows reserved machines that no reservation in the settings covers
    fee_missing: bool = False  # a reservation of the pool has no fee in the settings
    prepaid_hours: Decimal = Decimal(0)
    fee_by_day: dict[date, Decimal] = field(default_factory=dict)  # report currency

    @property
    def fee(self) -> Decimal:
        return sum(self.fee_by_day.values(), Decimal(0))

    @property
    def label(self) -> str:
        return " ".join(self.key)


def pools_for(
    reserved: Iterable[ReservedCapacity], start: datetime, end: datetime, currency: str, fx: FxRates,
    seen: Sequence[PoolKey] = (),
) -> dict[PoolKey, ReservationPool]:
    """The reservations whose term touches [start, end), pooled by key, fees in ``currency``.

    ``seen``: keys of reserved machines in the ledger; one with no reservation gets an empty pool
    (no prepaid hours, no fee) so the report can say so rather than drop its hours.
    """
    pools: dict[PoolKey, ReservationPool] = {}
    for res in reserved:
        hours = prepaid_hours(res, start, end)
        if hours == 0:
            continue
        key = (res.provider, res.region, res.instance_type)
        pool = pools.setdefault(key, ReservationPool(key))
        pool.count += res.count
        pool.prepaid_hours += hours
        pool.fee_missing = pool.fee_missing or not res.has_fee
        if res.note:
            pool.notes.append(res.note)
        # Converted before it is spread, so the days of a whole month or term still add up to its fee.
        in_currency = res.model_copy(update={
            "upfront_fee": fx.convert(res.upfront_fee, currency) if res.upfront_fee else None,
            "monthly_fee": fx.convert(res.monthly_fee, currency) if res.monthly_fee else None,
        })  # fmt: skip
        for day, fee in day_fees(in_currency, start, end).items():
            pool.fee_by_day[day] = pool.fee_by_day.get(day, Decimal(0)) + fee.amount
    for key in seen:
        if key not in pools:
            pools[key] = ReservationPool(key, configured=False)
    return pools
