"""The ledger: when each instance billed, and what that cost.

The lifecycle opens a usage interval when an instance starts billing, switches
it between ``busy`` (with a job) and ``idle`` as work comes and goes, and closes
it when billing stops. ``account`` turns closed intervals into cost records,
one per UTC calendar month an interval touches, priced at the instance's
launch price, with the on-demand equivalent beside it so reports can show
savings (a reserved machine costs 0 but keeps its on-demand equivalent).

Running machines. Two things keep a month's figures complete while machines
are still up:

* ``account(now)`` rolls an open interval that began before the current UTC
  month over: it is closed at each month boundary it crossed and continued by a
  fresh open interval, so the month just ended is priced and final. The open
  interval a caller knew may therefore be replaced by its continuation; always
  find the open interval by instance (``open_interval_of``), never keep a row.
* ``open_costs(now)`` prices open intervals up to ``now`` without writing
  anything; ``cost_lines(month, now)`` gives a month's written records plus
  everything not yet written, as one list of ``CostLine``.

``spent_by_job`` answers "how much of its budget has this job used"; and
``record_idle_stop`` notes each machine the idle reaper stopped, for the
report's "waste avoided".

Decimal throughout. Hours and amounts are rounded to the column scale (8
places) once per interval; the month pieces then share that total exactly
(the last piece takes the remainder), so pieces always sum to the whole.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Literal

from sqlalchemy import Select, bindparam, select
from sqlalchemy.orm import Session

from scheduler.models import Frozen
from scheduler.money import Currency, FxRates, Money, total
from scheduler.store.tables import CostRecordRow, IdleStopRow, InstanceRow, UsageIntervalRow
from scheduler.times import utc

UsageKind = Literal["busy", "idle"]
USAGE_KINDS: tuple[str, ...] = ("busy", "idle")
SCALE = Decimal("0.00000001")  # the Numeric(20, 8) money columns
SECONDS_PER_HOUR = Decimal(3600)
_MONTH_RE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


class CostLine(Frozen):
    """One priced piece of usage within one month: a written record or a live estimate.

    Shaped like ``CostRecordRow`` (Decimal amounts beside a currency) so reports
    read both the same way; ``cost``, ``on_demand`` and ``savings`` give Money.
    """

    month: str
    usage_interval_id: int
    instance_id: str
    job_id: str | None
    team: str
    project: str | None
    kind: str
    provider: str
    region: str
    gpu: str
    instance_type: str
    capacity: str
    start: datetime
    end: datetime
    hours: Decimal
    amount: Decimal
    on_demand_amount: Decimal
    currency: Currency
    final: bool  # True: a cost record; False: priced on the fly (open or not yet accounted)

    @property
    def cost(self) -> Money:
        return Money(amount=self.amount, currency=self.currency)

    @property
    def on_demand(self) -> Money:
        return Money(amount=self.on_demand_amount, currency=self.currency)

    @property
    def savings(self) -> Money:
        return self.on_demand - self.cost


# --- writing intervals


def open_interval_of(session: Session, instance_id: str) -> UsageIntervalRow | None:
    """The instance's open interval, if it has one."""
    rows = session.scalars(_OPEN_OF, {"instance_id": instance_id}).all()  # one, but for a bug elsewhere
    return rows[-1] if rows else None


def billing_capacity(instance: InstanceRow) -> str:
    """How the hours are paid for: a reserved machine runs as on-demand at the cloud but costs nothing more."""
    return "reserved" if instance.reserved else instance.capacity


def open_interval(
    session: Session,
    instance: InstanceRow,
    *,
    kind: UsageKind,
    job_id: str | None,
    team: str,
    project: str | None,
    at: datetime,
) -> UsageIntervalRow:
    """Start a new billing span for ``instance`` at ``at``, closing its open one there first."""
    if kind not in USAGE_KINDS:
        raise ValueError(f"usage kind must be one of {USAGE_KINDS}, not {kind!r}")
    at = utc(at)
    close_interval(session, instance.id, at)
    row = UsageIntervalRow(
        instance_id=instance.id,
        job_id=job_id,
        team=team,
        project=project,
        kind=kind,
        provider=instance.provider,
        region=instance.region,
        gpu=instance.gpu,
        instance_type=instance.instance_type,
        capacity=billing_capacity(instance),
        start=at,
        end=None,
        accounted=False,
    )
    session.add(row)
    session.flush()
    return row


def billed_until(session: Session, instance_id: str) -> datetime | None:
    """When the instance's last closed interval ended (its billing last stopped); None if it never billed."""
    stmt = select(UsageIntervalRow.end).where(
        UsageIntervalRow.instance_id == instance_id, UsageIntervalRow.end.is_not(None)
    ).order_by(UsageIntervalRow.end.desc()).limit(1)
    end = session.scalar(stmt)
    return utc(end) if end is not None else None


def close_interval(session: Session, instance_id: str, at: datetime) -> UsageIntervalRow | None:
    """End the instance's open interval at ``at``; None when it had none.

    More than one open interval would be a bug elsewhere; all of them are
    closed so none bills forever, and the latest is returned.
    """
    at = utc(at)
    rows = list(session.scalars(_OPEN_OF, {"instance_id": instance_id}))
    for row in rows:
        if utc(row.start) > at:
            raise ValueError(f"cannot close usage interval {row.id} at {at}: it started later, at {row.start}")
        row.end = at
    session.flush()
    return rows[-1] if rows else None


# --- pricing


def month_of(at: datetime) -> str:
    at = utc(at)
    return f"{at.year:04d}-{at.month:02d}"


def next_month_start(at: datetime) -> datetime:
    at = utc(at)
    year, month = (at.year + 1, 1) if at.month == 12 else (at.year, at.month + 1)
    return datetime(year, month, 1, tzinfo=timezone.utc)


def month_start(at: datetime) -> datetime:
    at = utc(at)
    return datetime(at.year, at.month, 1, tzinfo=timezone.utc)


def split_by_month(start: datetime, end: datetime) -> list[tuple[str, datetime, datetime]]:
    """``[start, end)`` cut at UTC month boundaries: (``YYYY-MM``, piece start, piece end)."""
    start, end = utc(start), utc(end)
    pieces: list[tuple[str, datetime, datetime]] = []
    while start < end:
        cut = min(next_month_start(start), end)
        pieces.append((month_of(start), start, cut))
        start = cut
    return pieces


def exact_seconds(delta: timedelta) -> Decimal:
    # timedelta.total_seconds() is a float; the parts are exact integers.
    return Decimal(delta.days * 86_400 + delta.seconds) + Decimal(delta.microseconds) / Decimal(1_000_000)


@dataclass(frozen=True)
class PricedSpan:
    """One month's share of a priced span; amounts in the instance's price currency."""

    month: str
    start: datetime
    end: datetime
    hours: Decimal
    amount: Decimal
    on_demand_amount: Decimal


def _quantize(value: Decimal) -> Decimal:
    return value.quantize(SCALE, rounding=ROUND_HALF_EVEN)


def price_span(start: datetime, end: datetime, price: Decimal, on_demand: Decimal) -> list[PricedSpan]:
    """Price ``[start, end)`` per month. Rounded once per whole; the last piece takes the remainder."""
    months = split_by_month(start, end)
    if not months:
        return []
    seconds = exact_seconds(utc(end) - utc(start))
    total_hours = _quantize(seconds / SECONDS_PER_HOUR)
    total_amount = _quantize(seconds * price / SECONDS_PER_HOUR)
    total_on_demand = _quantize(seconds * on_demand / SECONDS_PER_HOUR)
    pieces: list[PricedSpan] = []
    hours_left, amount_left, on_demand_left = total_hours, total_amount, total_on_demand
    for i, (month, piece_start, piece_end) in enumerate(months):
        if i == len(months) - 1:
            hours, amount, on_demand_amount = hours_left, amount_left, on_demand_left
        else:
            s = exact_seconds(piece_end - piece_start)
            hours = _quantize(s / SECONDS_PER_HOUR)
            amount = _quantize(s * price / SECONDS_PER_HOUR)
            on_demand_amount = _quantize(s * on_demand / SECONDS_PER_HOUR)
            hours_left -= hours
            amount_left -= amount
            on_demand_left -= on_demand_amount
        pieces.append(PricedSpan(month, piece_start, piece_end, hours, amount, on_demand_amount))
    return pieces


# --- accounting


def account(session: Session, now: datetime) -> int:
    """Write cost records for every closed, unaccounted interval that ended by ``now``.

    First rolls open intervals over past month boundaries (see the module
    docstring). Idempotent: an interval is marked accounted in the same
    transaction as its records, so a second run finds nothing. Returns the
    number of records written.
    """
    now = utc(now)
    _roll_over_months(session, now)
    written = 0
    for interval, instance in session.execute(_CLOSED_UNACCOUNTED, {"now": now}).tuples():
        end = interval.end if interval.end is not None else now  # the query asks for closed ones only
        for piece in price_span(interval.start, end, instance.price_amount, instance.on_demand_amount):
            session.add(_record(interval, instance, piece))
            written += 1
        interval.accounted = True
    session.flush()
    return written


def _roll_over_months(session: Session, now: datetime) -> None:
    this_month = month_start(now)
    # Sorted here, not by ORDER BY id: SQLite would walk the whole table in id order for that, every
    # tick, instead of the few open rows the partial index (migration 0015) finds.
    for interval in sorted(session.scalars(_OPEN_SINCE_BEFORE, {"month": this_month}), key=lambda row: row.id):
        start = utc(interval.start)
        while start < this_month:
            cut = next_month_start(start)
            interval.end = cut
            interval = _continuation(interval, cut)
            session.add(interval)
            start = cut
    session.flush()


# What an interval says about who used which machine; carried into continuations and cost lines.
_ATTRIBUTION = ("instance_id", "job_id", "team", "project", "kind", "provider", "region", "gpu",
                "instance_type", "capacity")


def _attribution(interval: UsageIntervalRow) -> dict:
    return {name: getattr(interval, name) for name in _ATTRIBUTION}


def _continuation(interval: UsageIntervalRow, at: datetime) -> UsageIntervalRow:
    return UsageIntervalRow(
        **_attribution(interval),
        start=at,
        end=None,
        accounted=False,
    )


def _cost_fields(interval: UsageIntervalRow, instance: InstanceRow, piece: PricedSpan) -> dict:
    """What a priced piece of an interval says, for a stored record and an on-the-fly line alike."""
    return dict(
        usage_interval_id=interval.id,
        month=piece.month,
        **_attribution(interval),
        start=piece.start,
        end=piece.end,
        hours=piece.hours,
        amount=piece.amount,
        on_demand_amount=piece.on_demand_amount,
        currency=instance.price_currency,
    )


def _record(interval: UsageIntervalRow, instance: InstanceRow, piece: PricedSpan) -> CostRecordRow:
    return CostRecordRow(**_cost_fields(interval, instance, piece))


# --- reading costs


def open_costs(session: Session, now: datetime) -> list[CostLine]:
    """Open intervals priced up to ``now``, per month; writes nothing."""
    now = utc(now)
    stmt = _with_instance().where(UsageIntervalRow.end.is_(None), UsageIntervalRow.start < now)
    return list(_estimate(session.execute(stmt).tuples(), now))


def cost_lines(session: Session, month: str, now: datetime) -> list[CostLine]:
    """Everything that billed in ``month`` (``YYYY-MM``) as of ``now``.

    Written cost records first, then usage not yet written (closed but
    unaccounted, and open up to ``now``) priced on the fly, so a report in
    the middle of a month includes the machines running right now.
    """
    if not _MONTH_RE.match(month):
        raise ValueError(f"month must look like 2026-11, not {month!r}")
    now = utc(now)
    records = session.scalars(select(CostRecordRow).where(CostRecordRow.month == month).order_by(CostRecordRow.id))
    lines = [_line_from_record(r) for r in records]
    lines.extend(pending_lines(session, month, now))
    return lines


def pending_lines(session: Session, month: str, now: datetime) -> list[CostLine]:
    """The part of ``cost_lines`` not yet written as cost records: closed but unaccounted usage, and open
    usage up to ``now``, priced on the fly. For callers that sum the written records in SQL (/metrics)."""
    now = utc(now)
    pending = _with_instance().where(UsageIntervalRow.accounted.is_(False), UsageIntervalRow.start < now)
    return [line for line in _estimate(session.execute(pending).tuples(), now) if line.month == month]


def spent_by_job(
    session: Session,
    job_ids: Iterable[str],
    *,
    fx: FxRates | None = None,
    now: datetime | None = None,
) -> dict[str, Money]:
    """What each job has cost so far, for its budget; jobs that never ran are absent.

    Written records plus closed intervals not yet accounted (a tick plans
    before it accounts); open intervals too when ``now`` is given. A job that
    ran in one currency gets that currency. One that ran on clouds billing in
    different currencies needs ``fx`` and is given in ``fx.base``; without it
    this raises ValueError rather than add yuan to dollars.
    """
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    by_job: dict[str, list[Money]] = defaultdict(list)
    rows = session.execute(_RECORDS_OF_JOBS, {"ids": ids})
    for job_id, amount, currency in rows.tuples():
        if job_id is not None:  # always, given in_(ids); says so to the type checker
            by_job[job_id].append(Money(amount=amount, currency=currency))
    pending = session.execute(_UNACCOUNTED_OF_JOBS, {"ids": ids}).tuples()
    for line in _estimate(pending, utc(now) if now is not None else None):
        if line.job_id is not None:
            by_job[line.job_id].append(line.cost)
    spent: dict[str, Money] = {}
    for job_id, items in by_job.items():
        currencies = {m.currency for m in items}
        if len(currencies) == 1:
            spent[job_id] = total(items, currencies.pop())
        elif fx is not None:
            spent[job_id] = total(items, fx.base, fx)
        else:
            raise ValueError(f"job {job_id} spent in {' and '.join(sorted(currencies))}: pass fx to add them up")
    return spent


# --- idle stops


IdleAction = Literal["stopped", "terminated"]


def record_idle_stop(session: Session, instance: InstanceRow, at: datetime, action: IdleAction) -> IdleStopRow:
    """Note that the idle reaper stopped or terminated ``instance``: the report's "waste avoided"."""
    if action not in ("stopped", "terminated"):
        raise ValueError(f"idle stop action must be 'stopped' or 'terminated', not {action!r}")
    row = IdleStopRow(
        instance_id=instance.id,
        at=utc(at),
        action=action,
        team=instance.team,
        project=instance.project,
        provider=instance.provider,
        gpu=instance.gpu,
        capacity=billing_capacity(instance),
        price_amount=instance.price_amount,
        price_currency=instance.price_currency,
    )
    session.add(row)
    session.flush()
    return row


def _with_instance() -> Select[tuple[UsageIntervalRow, InstanceRow]]:
    return (
        select(UsageIntervalRow, InstanceRow)
        .join(InstanceRow, InstanceRow.id == UsageIntervalRow.instance_id)
        .order_by(UsageIntervalRow.id)
    )


# Asked every tick: built once (``scheduler.store.database``, "Statements built once").
_OPEN_OF = (select(UsageIntervalRow)
            .where(UsageIntervalRow.instance_id == bindparam("instance_id"), UsageIntervalRow.end.is_(None))
            .order_by(UsageIntervalRow.start, UsageIntervalRow.id))
_CLOSED_UNACCOUNTED = (
    _with_instance()
    .where(UsageIntervalRow.accounted.is_(False), UsageIntervalRow.end.is_not(None),
           UsageIntervalRow.end <= bindparam("now"))
    # PostgreSQL: a second daemon accounting at the same moment waits here,
    # then sees accounted=true and skips the row. SQLite ignores it (BEGIN IMMEDIATE).
    .with_for_update(of=UsageIntervalRow)
)
_OPEN_SINCE_BEFORE = (select(UsageIntervalRow)
                      .where(UsageIntervalRow.end.is_(None), UsageIntervalRow.start < bindparam("month"))
                      .with_for_update())
_RECORDS_OF_JOBS = select(CostRecordRow.job_id, CostRecordRow.amount, CostRecordRow.currency).where(
    CostRecordRow.job_id.in_(bindparam("ids", expanding=True)))
_UNACCOUNTED_OF_JOBS = _with_instance().where(UsageIntervalRow.accounted.is_(False),
                                              UsageIntervalRow.job_id.in_(bindparam("ids", expanding=True)))


def _estimate(
    rows: Iterable[tuple[UsageIntervalRow, InstanceRow]], now: datetime | None
) -> Iterable[CostLine]:
    """Price intervals on the fly: closed ones to their end, open ones to ``now`` (skipped if None)."""
    for interval, instance in rows:
        end = utc(interval.end) if interval.end is not None else now
        if end is None:
            continue
        if now is not None:
            end = min(end, now)
        for piece in price_span(interval.start, end, instance.price_amount, instance.on_demand_amount):
            yield CostLine(**_cost_fields(interval, instance, piece), final=False)


def _line_from_record(record: CostRecordRow) -> CostLine:
    return CostLine(
        month=record.month,
        usage_interval_id=record.usage_interval_id,
        instance_id=record.instance_id,
        job_id=record.job_id,
        team=record.team,
        project=record.project,
        kind=record.kind,
        provider=record.provider,
        region=record.region,
        gpu=record.gpu,
        instance_type=record.instance_type,
        capacity=record.capacity,
        start=utc(record.start),
        end=utc(record.end),
        hours=record.hours,
        amount=record.amount,
        on_demand_amount=record.on_demand_amount,
        currency=record.currency,
        final=True,
    )
