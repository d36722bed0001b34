"""The monthly cost report: aggregate one month of the ledger's cost records.

``build_report`` reads one UTC calendar month of ``CostRecordRow`` rows (plus,
for a month still in progress, the ledger's priced view of open intervals),
converts every amount into the report currency with the given FX rates and
sums in Decimal. The report's models live in ``scheduler/accounting/report_models.py``;
rounding happens only in the renderers in ``scheduler/accounting/report_render.py`` (HTML
with embedded charts, CSV, Markdown), so the report object itself stays exact.
Both are re-exported here, so ``reports.write_report(...)`` keeps working.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Callable, Iterable, Protocol, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.accounting import ledger
from scheduler.accounting.report_models import Breakdown, DayCost, JobCost, MonthlyReport, TeamBudget, TeamCapacityCost
from scheduler.accounting.report_render import (
    BREAKDOWNS,
    CSV_COLUMNS,
    fmt_hours,
    fmt_money,
    fmt_pct,
    render_charts,
    render_csv,
    render_html,
    render_markdown,
    write_report,
)
from scheduler.clock import SystemClock
from scheduler.errors import UserError
from scheduler.money import CURRENCIES, FxRates, Money
from scheduler.settings import Settings
from scheduler.store.database import Store
from scheduler.store.tables import CostRecordRow, IdleStopRow, JobRow, UsageIntervalRow
from scheduler.times import utc

__all__ = [
    # aggregation, defined here
    "NO_PROJECT",
    "CostLike",
    "build_report",
    "month_bounds",
    "previous_month",
    # the report's models (scheduler.accounting.report_models)
    "Breakdown",
    "DayCost",
    "JobCost",
    "MonthlyReport",
    "TeamBudget",
    "TeamCapacityCost",
    # rendering (scheduler.accounting.report_render)
    "BREAKDOWNS",
    "CSV_COLUMNS",
    "fmt_hours",
    "fmt_money",
    "fmt_pct",
    "render_charts",
    "render_csv",
    "render_html",
    "render_markdown",
    "write_report",
]

NO_PROJECT = "(no project)"
_MONTH_RE = re.compile(r"^([1-9][0-9]{3})-(0[1-9]|1[0-2])$")
_HUNDRED = Decimal(100)
_SECONDS_PER_HOUR = Decimal(3600)


class CostLike(Protocol):
    """What the report reads from a cost line: a CostRecordRow, or the ledger's open-interval view."""

    job_id: str | None
    team: str
    project: str | None
    kind: str
    provider: str
    gpu: str
    capacity: str
    start: datetime
    end: datetime
    hours: Decimal
    amount: Decimal
    on_demand_amount: Decimal
    currency: str


# --- months ------------------------------------------------------------------


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


def previous_month(now: datetime) -> str:
    """The last complete UTC month before ``now``: what the monthly cron reports on."""
    first = utc(now).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return (first - timedelta(days=1)).strftime("%Y-%m")


# --- aggregation -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Line:
    """One cost line with its money already in the report currency."""

    job_id: str | None
    team: str
    project: str | None
    kind: str
    provider: str
    gpu: str
    capacity: str
    start: datetime
    end: datetime
    hours: Decimal
    cost: Decimal
    on_demand: Decimal


def _seconds(delta: timedelta) -> Decimal:
    # timedelta.total_seconds() is a float; money prorated by it would not sum exactly.
    return Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds) / Decimal(1_000_000)


def _convert(amount: Decimal, currency: str, to: str, fx: FxRates) -> Decimal:
    if currency not in CURRENCIES:
        raise UserError(
            f"a cost is recorded in {currency!r}, which the report cannot convert",
            fix=f"record prices in one of {', '.join(CURRENCIES)}",
        )
    return fx.convert(Money(amount=Decimal(amount), currency=currency), to).amount


def _line(raw: CostLike, currency: str, fx: FxRates) -> _Line:
    return _Line(
        job_id=raw.job_id,
        team=raw.team,
        project=raw.project,
        kind=raw.kind,
        provider=raw.provider,
        gpu=raw.gpu,
        capacity=raw.capacity,
        start=utc(raw.start),
        end=utc(raw.end),
        hours=Decimal(raw.hours),
        cost=_convert(raw.amount, raw.currency, currency, fx),
        on_demand=_convert(raw.on_demand_amount, raw.currency, currency, fx),
    )


def _clip(line: _Line, start: datetime, end: datetime) -> _Line | None:
    """The part of ``line`` inside [start, end), prorated by time; None if it lies outside."""
    lo, hi = max(line.start, start), min(line.end, end)
    if lo == line.start and hi == line.end:
        return line if line.start < end and line.end >= start else None
    if hi <= lo:
        return None
    share = _seconds(hi - lo) / _seconds(line.end - line.start)
    return _Line(
        line.job_id, line.team, line.project, line.kind, line.provider, line.gpu, line.capacity,
        lo, hi, line.hours * share, line.cost * share, line.on_demand * share,
    )  # fmt: skip


def _allocate(amount: Decimal, weights: Sequence[Decimal]) -> list[Decimal]:
    """Split ``amount`` in proportion to ``weights``; the last part takes the remainder so parts sum exactly."""
    weight = sum(weights, Decimal(0))
    if weight == 0:
        return [amount] + [Decimal(0)] * (len(weights) - 1)
    parts = [amount * w / weight for w in weights[:-1]]
    parts.append(amount - sum(parts, Decimal(0)))
    return parts


def _day_seconds(start: datetime, end: datetime) -> list[tuple[date, Decimal]]:
    """Seconds of [start, end) falling on each UTC day."""
    if end <= start:
        return [(start.date(), Decimal(0))]
    pieces: list[tuple[date, Decimal]] = []
    cursor = start
    while cursor < end:
        midnight = datetime.combine(cursor.date() + timedelta(days=1), time(), tzinfo=timezone.utc)
        stop = min(end, midnight)
        pieces.append((cursor.date(), _seconds(stop - cursor)))
        cursor = stop
    return pieces


def _by_day(lines: Iterable[_Line], start: datetime, end: datetime, currency: str) -> tuple[DayCost, ...]:
    # Every day of the month appears, so the daily chart has a stable x axis.
    hours: dict[date, Decimal] = defaultdict(Decimal)
    cost: dict[date, Decimal] = defaultdict(Decimal)
    idle: dict[date, Decimal] = defaultdict(Decimal)
    for line in lines:
        pieces = _day_seconds(line.start, line.end)
        weights = [s for _, s in pieces]
        days = [d for d, _ in pieces]
        for day, h, c in zip(days, _allocate(line.hours, weights), _allocate(line.cost, weights)):
            hours[day] += h
            cost[day] += c
            if line.kind == "idle":
                idle[day] += c
    out = []
    day = start.date()
    while day < end.date():
        out.append(DayCost(day=day, hours=hours[day], cost=_m(cost[day], currency), idle_cost=_m(idle[day], currency)))
        day += timedelta(days=1)
    return tuple(out)


def _m(amount: Decimal, currency: str) -> Money:
    return Money(amount=amount, currency=currency)


def _pct(part: Decimal, whole: Decimal) -> Decimal:
    return part / whole * _HUNDRED if whole else Decimal(0)


def _breakdown(
    lines: Sequence[_Line], key: Callable[[_Line], str], total: Decimal, currency: str
) -> tuple[Breakdown, ...]:
    sums: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 3)
    for line in lines:
        acc = sums[key(line)]
        acc[0] += line.hours
        acc[1] += line.cost
        acc[2] += line.on_demand
    rows = [
        Breakdown(key=k, hours=h, cost=_m(c, currency), on_demand_equivalent=_m(od, currency), share_pct=_pct(c, total))
        for k, (h, c, od) in sums.items()
    ]
    return tuple(sorted(rows, key=lambda b: (-b.cost.amount, b.key)))


def _team_by_capacity(lines: Sequence[_Line], currency: str) -> tuple[TeamCapacityCost, ...]:
    sums: dict[tuple[str, str], list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 2)
    for line in lines:
        acc = sums[(line.team, line.capacity)]
        acc[0] += line.hours
        acc[1] += line.cost
    return tuple(
        TeamCapacityCost(team=t, capacity=c, hours=h, cost=_m(cost, currency))
        for (t, c), (h, cost) in sorted(sums.items())
    )


def _idle_avoided(
    session: Session,
    start: datetime,
    end: datetime,
    now: datetime,
    assumed_hours: Decimal,
    currency: str,
    fx: FxRates,
) -> tuple[int, Decimal, Decimal]:
    """(stops, hours avoided, cost avoided) for the idle reaper's stops in [start, end).

    An estimate: each stopped machine is assumed to have kept billing for
    ``assumed_hours``, cut short by its next billing start, the month end, and
    ``now`` (time that has not happened yet was not saved yet).
    """
    stops = session.scalars(
        select(IdleStopRow).where(IdleStopRow.at >= start, IdleStopRow.at < end).order_by(IdleStopRow.at)
    ).all()
    if not stops:
        return 0, Decimal(0), Decimal(0)
    starts: dict[str, list[datetime]] = defaultdict(list)
    for instance_id, began in session.execute(
        select(UsageIntervalRow.instance_id, UsageIntervalRow.start).where(
            UsageIntervalRow.instance_id.in_(sorted({s.instance_id for s in stops})), UsageIntervalRow.start > start
        )
    ):
        starts[instance_id].append(utc(began))
    hours_total, cost_total = Decimal(0), Decimal(0)
    for stop in stops:
        at = utc(stop.at)
        later = [b for b in starts[stop.instance_id] if b > at]
        horizon = min([end, max(now, at), *later])
        hours = min(assumed_hours, _seconds(horizon - at) / _SECONDS_PER_HOUR)
        hours_total += hours
        cost_total += _convert(stop.price_amount, stop.price_currency, currency, fx) * hours
    return len(stops), hours_total, cost_total


def _jobs(
    session: Session, lines: Sequence[_Line], month: str, currency: str, fx: FxRates
) -> tuple[JobCost, ...]:
    this_month: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 3)
    first_seen: dict[str, _Line] = {}
    for line in lines:
        if line.job_id is None:
            continue
        acc = this_month[line.job_id]
        acc[0] += line.hours
        acc[1] += line.cost
        acc[2] += line.on_demand
        first_seen.setdefault(line.job_id, line)
    if not this_month:
        return ()
    ids = sorted(this_month)
    rows = {j.id: j for j in session.scalars(select(JobRow).where(JobRow.id.in_(ids)))}
    earlier: dict[str, Decimal] = defaultdict(Decimal)
    for job_id, amount, cur in session.execute(
        select(CostRecordRow.job_id, CostRecordRow.amount, CostRecordRow.currency).where(
            CostRecordRow.job_id.in_(ids), CostRecordRow.month < month
        )
    ):
        earlier[job_id] += _convert(amount, cur, currency, fx)
    out = []
    for job_id, (hours, cost, od) in this_month.items():
        row, seen = rows.get(job_id), first_seen[job_id]
        budget = None
        if row is not None and row.budget_amount is not None and row.budget_currency is not None:
            budget = _m(_convert(row.budget_amount, row.budget_currency, currency, fx), currency)
        to_date = _m(earlier[job_id] + cost, currency)
        out.append(
            JobCost(
                id=job_id,
                name=row.name if row else job_id,  # a job row may be gone; its cost still counts
                team=row.team if row else seen.team,
                project=row.project if row else seen.project,
                kind=row.kind if row else "?",
                state=row.state if row else "unknown",
                hours=hours,
                cost=_m(cost, currency),
                on_demand_equivalent=_m(od, currency),
                cost_to_date=to_date,
                budget=budget,
                over_budget=budget is not None and to_date > budget,
                preemptions=row.preemptions if row else 0,
            )
        )
    return tuple(sorted(out, key=lambda j: (-j.cost.amount, j.id)))


def _budgets(jobs: Sequence[JobCost], currency: str) -> tuple[TeamBudget, ...]:
    sums: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 3)
    for job in jobs:
        if job.budget is None:
            continue
        acc = sums[job.team]
        acc[0] += 1
        acc[1] += job.budget.amount
        acc[2] += job.cost_to_date.amount
    return tuple(
        TeamBudget(
            team=team,
            jobs=int(n),
            budget=_m(budget, currency),
            actual=_m(actual, currency),
            used_pct=_pct(actual, budget),
            over_budget=actual > budget,
        )
        for team, (n, budget, actual) in sorted(sums.items())
    )


def build_report(
    session: Session,
    month: str,
    *,
    currency: str,
    fx: FxRates,
    now: datetime,
    idle_assumed_hours: Decimal = Decimal(8),
    open_costs: Sequence[CostLike] | None = None,
    notes: Sequence[str] = (),
) -> MonthlyReport:
    """Aggregate one UTC month into a report in ``currency``.

    ``open_costs`` are still-running intervals priced up to ``now`` (the
    ledger's ``open_costs``); the part of each inside the month is added.
    ``notes`` are appended to the report's own (e.g. where prices came from).
    """
    start, end = month_bounds(month)
    if currency not in CURRENCIES:
        raise UserError(f"unknown report currency {currency!r}", fix=f"use one of {', '.join(CURRENCIES)}")
    if idle_assumed_hours < 0:
        raise UserError("idle_assumed_hours cannot be negative", fix="give the hours an idle machine would have run")
    now = utc(now)
    records = session.scalars(
        select(CostRecordRow).where(CostRecordRow.month == month).order_by(CostRecordRow.start, CostRecordRow.id)
    ).all()
    lines = [_line(r, currency, fx) for r in records]
    open_lines = [c for c in (_clip(_line(o, currency, fx), start, end) for o in open_costs or ()) if c is not None]
    lines += open_lines

    total = sum((l.cost for l in lines), Decimal(0))
    # Savings count only hours paid by the hour: prepaid reserved hours were bought before the month.
    on_demand = sum((l.on_demand for l in lines if l.capacity != "reserved"), Decimal(0))
    reserved_hours = sum((l.hours for l in lines if l.capacity == "reserved"), Decimal(0))
    reserved_value = sum((l.on_demand for l in lines if l.capacity == "reserved"), Decimal(0))
    stops, avoided_hours, avoided_cost = _idle_avoided(session, start, end, now, idle_assumed_hours, currency, fx)
    jobs = _jobs(session, lines, month, currency, fx)
    rates = {cur: fx.rate(cur, currency) for cur in CURRENCIES if cur != currency}

    own_notes = [
        "Amounts are converted to {} at configured rates: {}.".format(
            currency, "; ".join(f"1 {cur} = {rate:.6g} {currency}" for cur, rate in rates.items())
        ),
        f"Idle waste avoided is an estimate, not a bill: each machine the idle reaper stopped is assumed to "
        f"have kept billing for {idle_assumed_hours.normalize():f} h, or until it next started billing, "
        f"the month ended, or the report was generated, whichever came first.",
        "Idle hours are billed hours with no job on the machine; they are charged to the team that launched it.",
        "Job budgets cover a job's whole life, so they are compared with each job's cost to date "
        "(all months up to this one).",
    ]
    if now < end:
        own_notes.append(f"The month is not over: figures run up to {now:%Y-%m-%d %H:%M} UTC.")
    if any(l.capacity == "reserved" for l in lines):
        own_notes.append(
            f"Reserved machines are prepaid: they ran {reserved_hours:.1f} h worth {_m(reserved_value, currency)} "
            "at on-demand prices, show no cost here, and are left out of the on-demand equivalent and the "
            "savings (the commitment was paid before the month)."
        )
    if open_lines:
        own_notes.append(f"Includes {len(open_lines)} still-running interval(s) priced up to the report time.")

    return MonthlyReport(
        month=month,
        currency=currency,
        fx=rates,
        generated_at=now,
        period_start=start,
        period_end=end,
        records=len(lines),
        total=_m(total, currency),
        on_demand_equivalent=_m(on_demand, currency),
        savings=_m(on_demand - total, currency),
        savings_pct=_pct(on_demand - total, on_demand),
        busy_hours=sum((l.hours for l in lines if l.kind != "idle"), Decimal(0)),
        idle_hours=sum((l.hours for l in lines if l.kind == "idle"), Decimal(0)),
        idle_cost=_m(sum((l.cost for l in lines if l.kind == "idle"), Decimal(0)), currency),
        idle_stops=stops,
        idle_assumed_hours=idle_assumed_hours,
        idle_hours_avoided=avoided_hours,
        idle_cost_avoided=_m(avoided_cost, currency),
        by_team=_breakdown(lines, lambda l: l.team, total, currency),
        by_project=_breakdown(lines, lambda l: l.project or NO_PROJECT, total, currency),
        by_cloud=_breakdown(lines, lambda l: l.provider, total, currency),
        by_gpu=_breakdown(lines, lambda l: l.gpu, total, currency),
        by_capacity=_breakdown(lines, lambda l: l.capacity, total, currency),
        team_by_capacity=_team_by_capacity(lines, currency),
        by_day=_by_day(lines, start, end, currency),
        jobs=jobs,
        budget_vs_actual=_budgets(jobs, currency),
        notes=tuple(own_notes) + tuple(notes),
    )


def write_monthly_report(settings: Settings, month: str, *, out_dir: Path | None = None,
                         now: datetime | None = None, store: Store | None = None) -> dict[str, Path]:
    """Account open usage up to ``now`` and write the month's report files."""
    now = now or SystemClock().now()
    own = store is None
    store = store or Store(settings.db_url)
    if own:
        store.migrate()
    try:
        with store.session() as s:
            ledger.account(s, now)
            report = build_report(
                s, month, currency=settings.report_currency, fx=settings.fx, now=now,
                open_costs=ledger.open_costs(s, now),
            )
        return write_report(report, out_dir or settings.reports_path)
    finally:
        if own:
            store.dispose()
