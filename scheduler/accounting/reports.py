"""The monthly cost report: aggregate one month of the ledger's cost records.

``build_report`` reads one UTC calendar month of ``CostRecordRow`` rows (plus,
for a month still in progress, the ledger's priced view of open intervals),
converts every amount into the report currency with the month's FX rates, charges
busy reserved hours their share of the reservations' amortized fees
(``report_lines``, ``reservations``) and sums in Decimal. The definitions the
report holds to are in ``report_models``' docstring. Amounts are kept at 12
places, so every breakdown adds up to the headline exactly; rounding
to cents happens only in the renderers in ``scheduler/accounting/report_render.py``
(HTML with embedded charts, CSV, Markdown). Both are re-exported here, so
``reports.write_report(...)`` keeps working.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from providers.bills import BillReader
from scheduler.accounting import ledger
from scheduler.accounting.advice import advise
from scheduler.accounting.focus import FocusRow, focus_rows, write_focus
from scheduler.accounting.queued_work import queued_work
from scheduler.accounting.reconcile_bills import reconcile_month
from scheduler.accounting.report_lines import (
    RESERVED,
    CostLike,
    Line,
    PoolUse,
    convert,
    month_bounds,
    month_lines,
    priced_period,
    rounded,
    seconds,
)
from scheduler.accounting.report_models import (
    UNUSED_RESERVATIONS,
    Breakdown,
    DayCost,
    Forecast,
    JobCost,
    MonthlyReport,
    MonthTotals,
    ReservationUse,
    TeamBudget,
    TeamCapacityCost,
    TeamMonthBudget,
)
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
from scheduler.accounting.reservations import pools_for
from scheduler.accounting.team_budgets import project_month_budgets, team_month_budgets
from scheduler.accounting.unit_costs import unit_costs
from scheduler.clock import SystemClock
from scheduler.errors import UserError
from scheduler.models import ReservedCapacity
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
    "monthly_report",
    "month_bounds",
    "previous_month",
    # the report's models (scheduler.accounting.report_models)
    "Breakdown",
    "DayCost",
    "Forecast",
    "JobCost",
    "MonthlyReport",
    "MonthTotals",
    "ReservationUse",
    "UNUSED_RESERVATIONS",
    "TeamBudget",
    "TeamCapacityCost",
    "TeamMonthBudget",
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
_HUNDRED = Decimal(100)
_SECONDS_PER_HOUR = Decimal(3600)
T = TypeVar("T")


# --- months ------------------------------------------------------------------


def previous_month(now: datetime) -> str:
    """The last complete UTC month before ``now``: what the monthly cron reports on."""
    first = utc(now).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return (first - timedelta(days=1)).strftime("%Y-%m")


# --- aggregation -------------------------------------------------------------


def _allocate(amount: Decimal, weights: Sequence[Decimal]) -> list[Decimal]:
    """Split ``amount`` in proportion to ``weights``; the last part takes the remainder so parts sum exactly."""
    weight = sum(weights, Decimal(0))
    if weight == 0:
        return [amount] + [Decimal(0)] * (len(weights) - 1)
    parts = [rounded(amount * w / weight) for w in weights[:-1]]
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
        pieces.append((cursor.date(), seconds(stop - cursor)))
        cursor = stop
    return pieces


def _by_day(
    lines: Iterable[Line], uses: Sequence[PoolUse], start: datetime, end: datetime, as_of: datetime, currency: str
) -> tuple[DayCost, ...]:
    # Every day of the month appears, so the daily chart has a stable x axis; days after the report time
    # are future days, with no figures rather than zeros.
    hours: dict[date, Decimal] = defaultdict(Decimal)
    billed: dict[date, Decimal] = defaultdict(Decimal)
    idle: dict[date, Decimal] = defaultdict(Decimal)
    fees: dict[date, Decimal] = defaultdict(Decimal)
    for line in lines:
        pieces = _day_seconds(line.start, line.end)
        weights = [s for _, s in pieces]
        days = [d for d, _ in pieces]
        for day, h, c in zip(days, _allocate(line.hours, weights), _allocate(line.cost, weights)):
            hours[day] += h
            billed[day] += c
            if not line.busy:
                idle[day] += c
    for use in uses:
        for day, fee in use.pool.fee_by_day.items():
            fees[day] += fee
    out = []
    day = start.date()
    while day < end.date():
        if datetime.combine(day, time(), tzinfo=timezone.utc) >= as_of and day not in hours:
            out.append(DayCost(day=day, future=True, hours=None, billed=None, idle_cost=None, reserved_fee=None,
                               cost=None))  # fmt: skip
        else:
            out.append(DayCost(
                day=day, future=False, hours=hours[day], billed=_m(billed[day], currency),
                idle_cost=_m(idle[day], currency), reserved_fee=_m(fees[day], currency),
                cost=_m(billed[day] + fees[day], currency),
            ))  # fmt: skip
        day += timedelta(days=1)
    return tuple(out)


def _m(amount: Decimal, currency: str) -> Money:
    return Money(amount=amount, currency=currency)


def _pct(part: Decimal, whole: Decimal) -> Decimal:
    return part / whole * _HUNDRED if whole else Decimal(0)


def _breakdown(
    lines: Sequence[Line], key: Callable[[Line], str], unused: Decimal, total: Decimal, currency: str
) -> tuple[Breakdown, ...]:
    """Rows by ``key``, then the reservations' unused part as a row of its own: they add up to ``total``."""
    sums: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 5)
    for line in lines:
        acc = sums[key(line)]
        acc[0] += line.hours
        acc[1] += line.cost
        acc[2] += line.billed_on_demand
        acc[3] += line.reserved_busy_hours
        acc[4] += line.fee
    rows = [
        Breakdown(
            key=k, hours=h, billed=_m(c, currency), on_demand_equivalent=_m(od, currency),
            savings=_m(od - c, currency), reserved_hours=rh, reserved_fee=_m(fee, currency),
            cost=_m(c + fee, currency), share_pct=_pct(c + fee, total),
        )
        for k, (h, c, od, rh, fee) in sums.items()
    ]  # fmt: skip
    rows.sort(key=lambda b: (-b.cost.amount, b.key))
    if unused:
        zero = _m(Decimal(0), currency)
        rows.append(Breakdown(
            key=UNUSED_RESERVATIONS, hours=Decimal(0), billed=zero, on_demand_equivalent=zero, savings=zero,
            reserved_hours=Decimal(0), reserved_fee=_m(unused, currency), cost=_m(unused, currency),
            share_pct=_pct(unused, total), unused_reservation=True,
        ))  # fmt: skip
    return tuple(rows)


def _team_by_capacity(lines: Sequence[Line], unused: Decimal, currency: str) -> tuple[TeamCapacityCost, ...]:
    sums: dict[tuple[str, str], list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 2)
    for line in lines:
        acc = sums[(line.team, line.capacity)]
        acc[0] += line.hours
        acc[1] += line.total
    cells = [
        TeamCapacityCost(team=t, capacity=c, hours=h, cost=_m(cost, currency))
        for (t, c), (h, cost) in sorted(sums.items())
    ]
    if unused:
        cells.append(TeamCapacityCost(team=UNUSED_RESERVATIONS, capacity=RESERVED, hours=Decimal(0),
                                      cost=_m(unused, currency)))  # fmt: skip
    return tuple(cells)


def _reservations(uses: Sequence[PoolUse], currency: str) -> tuple[ReservationUse, ...]:
    out = []
    for u in uses:
        p = u.pool
        out.append(ReservationUse(
            provider=p.key[0], region=p.key[1], instance_type=p.key[2], count=p.count, note="; ".join(p.notes),
            configured=p.configured, fee_set=p.configured and not p.fee_missing, prepaid_hours=p.prepaid_hours,
            busy_hours=u.busy_hours, idle_hours=u.idle_hours,
            utilisation_pct=_pct(u.busy_hours, p.prepaid_hours) if p.prepaid_hours else None,
            fee=_m(p.fee, currency), used_fee=_m(u.used_fee, currency), unused_fee=_m(u.unused_fee, currency),
            on_demand_value=_m(u.on_demand_value, currency),
        ))  # fmt: skip
    return tuple(sorted(out, key=lambda r: (r.provider, r.region, r.instance_type)))


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
        hours = min(assumed_hours, seconds(horizon - at) / _SECONDS_PER_HOUR)
        hours_total += hours
        cost_total += convert(stop.price_amount, stop.price_currency, currency, fx) * hours
    return len(stops), hours_total, cost_total


def _jobs(
    session: Session, lines: Sequence[Line], month: str, currency: str, fx: FxRates,
    fx_for: Callable[[str], FxRates],
) -> tuple[JobCost, ...]:
    this_month: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 5)
    first_seen: dict[str, Line] = {}
    for line in lines:
        if line.job_id is None:
            continue
        acc = this_month[line.job_id]
        acc[0] += line.hours
        acc[1] += line.cost
        acc[2] += line.billed_on_demand
        acc[3] += line.reserved_busy_hours
        acc[4] += line.fee
        first_seen.setdefault(line.job_id, line)
    if not this_month:
        return ()
    ids = sorted(this_month)
    rows = {j.id: j for j in session.scalars(select(JobRow).where(JobRow.id.in_(ids)))}
    earlier: dict[str, Decimal] = defaultdict(Decimal)
    for job_id, amount, cur, when in session.execute(
        select(CostRecordRow.job_id, CostRecordRow.amount, CostRecordRow.currency, CostRecordRow.month).where(
            CostRecordRow.job_id.in_(ids), CostRecordRow.month < month
        )
    ):
        earlier[job_id] += convert(amount, cur, currency, fx_for(when))  # each month at its own rates
    out = []
    for job_id, (hours, cost, od, reserved_hours, fee) in this_month.items():
        row, seen = rows.get(job_id), first_seen[job_id]
        budget = None
        if row is not None and row.budget_amount is not None and row.budget_currency is not None \
                and row.budget_amount.is_finite():  # not: a row stored before the bounds (scheduler.limits)
            budget = _m(convert(row.budget_amount, row.budget_currency, currency, fx), currency)
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
                reserved_hours=reserved_hours,
                reserved_fee=_m(fee, currency),
                cost_to_date=to_date,
                budget=budget,
                over_budget=budget is not None and to_date > budget,
                preemptions=row.preemptions if row else 0,
                submitted_by=row.submitted_by if row else None,
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


def _as_of(start: datetime, end: datetime, now: datetime) -> datetime:
    return min(max(now, start), end)


def _forecast(
    session: Session, billed: Decimal, reserved: Sequence[ReservedCapacity], start: datetime, end: datetime,
    as_of: datetime, currency: str, fx: FxRates,
) -> Forecast | None:
    """The month to its end: billed hours at the month-so-far hourly rate, reservation fees as amortized,
    and the work queued now (``queued_work``)."""
    if not start < as_of < end:
        return None
    elapsed, left = seconds(as_of - start), seconds(end - as_of)
    billed_to_end = billed + billed * left / elapsed
    fees = sum((p.fee for p in pools_for(reserved, start, end, currency, fx).values()), Decimal(0))
    waiting = queued_work(session, currency=currency, fx=fx, hours_left=left / _SECONDS_PER_HOUR)
    queued = sum((j.in_month.amount for j in waiting), Decimal(0))
    return Forecast(
        total=_m(billed_to_end + fees + queued, currency), billed=_m(billed_to_end, currency),
        reserved_fees=_m(fees, currency), queued=_m(queued, currency), queued_jobs=waiting,
        hours_elapsed=elapsed / _SECONDS_PER_HOUR, hours_left=left / _SECONDS_PER_HOUR,
    )  # fmt: skip


def _rates(fx: FxRates, currency: str) -> dict[str, Decimal]:
    return {cur: fx.rate(cur, currency) for cur in CURRENCIES if cur != currency}


def _month_totals(
    month: str, lines: Sequence[Line], uses: Sequence[PoolUse], currency: str, fx: FxRates, complete: bool
) -> MonthTotals:
    billed = sum((l.cost for l in lines), Decimal(0))
    od = sum((l.billed_on_demand for l in lines), Decimal(0))
    fees = sum((u.pool.fee for u in uses), Decimal(0))
    return MonthTotals(
        month=month, fx=_rates(fx, currency), complete=complete, total=_m(billed + fees, currency),
        billed=_m(billed, currency), reserved_fees=_m(fees, currency),
        reserved_unused=_m(sum((u.unused_fee for u in uses), Decimal(0)), currency),
        on_demand_equivalent=_m(od, currency), savings=_m(od - billed, currency),
    )  # fmt: skip


def _trend(
    session: Session, month: str, months: int, reserved: Sequence[ReservedCapacity], currency: str,
    fx_for: Callable[[str], FxRates], now: datetime,
) -> list[MonthTotals]:
    """The ``months`` months before ``month`` that had any spend, oldest first, each at its own FX rates."""
    out = []
    start, _ = month_bounds(month)
    for _ in range(months):
        month = previous_month(start)
        start, end = month_bounds(month)
        fx = fx_for(month)
        lines, _opened = month_lines(session, month, start, end, currency, fx)
        as_of = _as_of(start, end, now)
        charged, uses = priced_period(lines, reserved, start, as_of, currency, fx)
        totals = _month_totals(month, charged, uses, currency, fx, complete=as_of == end)
        if lines or totals.reserved_fees.amount:
            out.append(totals)
    return out[::-1]


def build_report(
    session: Session,
    month: str,
    *,
    currency: str,
    fx: FxRates,
    now: datetime,
    idle_assumed_hours: Decimal = Decimal(8),
    open_costs: Sequence[CostLike] | None = None,
    reserved: Sequence[ReservedCapacity] = (),
    fx_for: Callable[[str], FxRates] | None = None,
    fx_dated: bool = False,
    trend_months: int = 3,
    notes: Sequence[str] = (),
    team_budgets: Mapping[str, Money] | None = None,
    advice_days: int = 30,
    project_budgets: Mapping[str, Money] | None = None,
) -> MonthlyReport:
    """Aggregate one UTC month into a report in ``currency``.

    ``open_costs`` are still-running intervals priced up to ``now`` (the
    ledger's ``open_costs``); the part of each inside the month is added.
    ``reserved``: the reservations, with their terms, whose fees are amortized into the month.
    ``fx`` converts this month; ``fx_for(month)`` the earlier months of the trend and of jobs' cost
    to date (default: ``fx`` for all); ``fx_dated`` says whether ``fx`` was set for this month.
    ``notes`` are appended to the report's own (e.g. where prices came from).
    ``team_budgets``: each team's monthly budget (GPUSCHED_TEAM_BUDGETS), shown as budget vs actual vs forecast;
    ``project_budgets`` each project's (GPUSCHED_PROJECT_BUDGETS), alike.
    ``advice_days``: how far back (30-90 days before the report's figures end) the advice looks.
    """
    start, end = month_bounds(month)
    if currency not in CURRENCIES:
        raise UserError(f"unknown report currency {currency!r}", fix=f"use one of {', '.join(CURRENCIES)}")
    if idle_assumed_hours < 0:
        raise UserError("idle_assumed_hours cannot be negative", fix="give the hours an idle machine would have run")
    now = utc(now)
    as_of = _as_of(start, end, now)
    rates_for = fx_for or (lambda _month: fx)
    raw, opened = month_lines(session, month, start, end, currency, fx, open_costs or ())
    lines, uses = priced_period(raw, reserved, start, as_of, currency, fx)
    this = _month_totals(month, lines, uses, currency, fx, complete=as_of == end)
    billed, fees, unused = this.billed.amount, this.reserved_fees.amount, this.reserved_unused.amount
    total = billed + fees
    on_demand = this.on_demand_equivalent.amount
    prepaid = sum((u.pool.prepaid_hours for u in uses), Decimal(0))
    reserved_busy = sum((l.reserved_busy_hours for l in lines), Decimal(0))
    stops, avoided_hours, avoided_cost = _idle_avoided(session, start, end, now, idle_assumed_hours, currency, fx)
    jobs = _jobs(session, lines, month, currency, fx, rates_for)
    rates = _rates(fx, currency)
    by_team = _breakdown(lines, lambda l: l.team, unused, total, currency)
    by_project = _breakdown(lines, lambda l: l.project or NO_PROJECT, unused, total, currency)
    forecast = _forecast(session, billed, reserved, start, end, as_of, currency, fx)

    own_notes = [
        "Amounts are converted to {} at {} rates: {}.".format(
            currency, f"the rates set for {month}" if fx_dated else "the default",
            "; ".join(f"1 {cur} = {rate:.6g} {currency}" for cur, rate in rates.items()),
        ),
        "Total = billed by the hour (spot and on-demand) + reservation fees, amortized. Savings compare the "
        "billed hours with the same hours at on-demand prices; prepaid reserved hours are left out of both, "
        "and their on-demand value is shown beside the reservations' fees.",
        f"Idle waste avoided is an estimate, not a bill: each machine the idle reaper stopped is assumed to "
        f"have kept billing for {idle_assumed_hours.normalize():f} h, or until it next started billing, "
        f"the month ended, or the report was generated, whichever came first.",
        "Idle hours are hours with no job on the machine: billed idle on spot and on-demand machines, "
        "prepaid idle on reserved ones; they are charged to the team that launched it.",
        "Job budgets cover a job's whole life, so they are compared with each job's billed cost to date "
        "(all months up to this one); hours on a reserved machine cost a job nothing at the margin.",
    ]
    if uses:
        own_notes.append(
            "Reservation fees are amortized: an upfront fee is spread evenly over every hour of its term, a "
            "monthly fee over the hours of its month. A job's busy hours on a reserved machine carry the fee "
            "of those hours; prepaid hours without a job are the reservation's unused part, a row of its own."
        )
    for u in uses:
        label = u.pool.label
        if not u.pool.configured:
            own_notes.append(f"Reserved machines ran on {label}, which no reservation in GPUSCHED_RESERVED covers: "
                             "their hours have no fee and no prepaid hours to measure use against.")
        elif u.pool.fee_missing:
            own_notes.append(f"The reservation {label} has no fee in GPUSCHED_RESERVED (upfront_fee / monthly_fee), "
                             "so it counts as free here and the total leaves its cost out.")
    if now < end:
        own_notes.append(f"The month is not over: figures run up to {as_of:%Y-%m-%d %H:%M} UTC.")
    if forecast is not None:
        waiting = forecast.queued_jobs
        own_notes.append(
            "The forecast to the month's end = the run rate (billed so far, carried on at the same hourly rate) + "
            "the reservation fees as amortized + the work queued now: "
            + (f"{len(waiting)} waiting job(s) at the cost their latest plan expects, the part that fits before "
               "the month's end if each started now" if waiting else "no job is waiting")
            + (f"; {forecast.unestimated} of them not planned yet, counted at nothing" if forecast.unestimated
               else "") + "."
        )  # fmt: skip
    if opened:
        own_notes.append(f"Includes {opened} still-running interval(s) priced up to the report time.")

    return MonthlyReport(
        month=month,
        currency=currency,
        fx=rates,
        fx_dated=fx_dated,
        generated_at=now,
        period_start=start,
        period_end=end,
        as_of=as_of,
        records=len(lines),
        total=_m(total, currency),
        billed=_m(billed, currency),
        reserved_fees=_m(fees, currency),
        reserved_unused=_m(unused, currency),
        on_demand_equivalent=_m(on_demand, currency),
        savings=_m(on_demand - billed, currency),
        savings_pct=_pct(on_demand - billed, on_demand),
        busy_hours=sum((l.hours for l in lines if l.busy), Decimal(0)),
        idle_hours=sum((l.hours for l in lines if not l.busy), Decimal(0)),
        billed_hours=sum((l.hours for l in lines if not l.reserved), Decimal(0)),
        billed_idle_hours=sum((l.hours for l in lines if not l.busy and not l.reserved), Decimal(0)),
        prepaid_idle_hours=sum((l.hours for l in lines if not l.busy and l.reserved), Decimal(0)),
        idle_cost=_m(sum((l.cost for l in lines if not l.busy), Decimal(0)), currency),
        reserved_prepaid_hours=prepaid,
        reserved_busy_hours=reserved_busy,
        reserved_utilisation_pct=_pct(reserved_busy, prepaid) if prepaid else None,
        reserved_on_demand_value=_m(sum((u.on_demand_value for u in uses), Decimal(0)), currency),
        reservations=_reservations(uses, currency),
        idle_stops=stops,
        idle_assumed_hours=idle_assumed_hours,
        idle_hours_avoided=avoided_hours,
        idle_cost_avoided=_m(avoided_cost, currency),
        by_team=by_team,
        by_project=by_project,
        by_cloud=_breakdown(lines, lambda l: l.provider, unused, total, currency),
        by_gpu=_breakdown(lines, lambda l: l.gpu, unused, total, currency),
        by_capacity=_breakdown(lines, lambda l: l.capacity, unused, total, currency),
        team_by_capacity=_team_by_capacity(lines, unused, currency),
        by_day=_by_day(lines, uses, start, end, as_of, currency),
        forecast=forecast,
        trend=(*_trend(session, month, trend_months, reserved, currency, rates_for, now), this),
        jobs=jobs,
        budget_vs_actual=_budgets(jobs, currency),
        notes=tuple(own_notes) + tuple(notes),
        team_budgets=team_month_budgets(by_team, team_budgets or {}, forecast, currency, fx),
        project_budgets=project_month_budgets(by_project, project_budgets or {}, forecast, currency, fx),
        advice=advise(session, as_of, currency=currency, fx=fx, lookback_days=advice_days,
                      open_costs=open_costs or ()),
        unit_costs=unit_costs(session, month, lines, start=start, as_of=as_of, reserved=reserved, currency=currency,
                              fx_for=rates_for),
    )


def _in_store(settings: Settings, store: Store | None, work: Callable[[Session], T]) -> T:
    own = store is None
    store = store or Store(settings.db_url)
    if own:
        store.migrate()
    try:
        with store.session() as s:
            return work(s)
    finally:
        if own:
            store.dispose()


def _report_in(s: Session, settings: Settings, month: str, now: datetime,
               bills: Mapping[str, BillReader] | None = None) -> MonthlyReport:
    ledger.account(s, now)
    report = build_report(
        s, month, currency=settings.report_currency, fx=settings.fx_for(month), now=now,
        open_costs=ledger.open_costs(s, now), reserved=settings.reserved, fx_for=settings.fx_for,
        fx_dated=settings.fx_dated(month), team_budgets=settings.team_budgets,
        project_budgets=settings.project_budgets,
    )
    if not bills:
        return report
    reconciled = reconcile_month(s, bills, month, now=now, cluster=settings.cluster,
                                 currency=settings.report_currency, fx=settings.fx_for(month),
                                 fx_dated=settings.fx_dated(month), tolerance_pct=settings.bill_tolerance_pct)
    return report.model_copy(update={"bills": reconciled})


def monthly_report(settings: Settings, month: str, *, now: datetime | None = None,
                   store: Store | None = None, bills: Mapping[str, BillReader] | None = None) -> MonthlyReport:
    """Account open usage up to ``now`` and build the month's report with the settings' terms and rates;
    with ``bills`` (the clouds' bill readers), the report reconciles each cloud's bill with the ledger."""
    at = now or SystemClock().now()
    return _in_store(settings, store, lambda s: _report_in(s, settings, month, at, bills))


def _focus_in(s: Session, settings: Settings, month: str, now: datetime) -> list[FocusRow]:
    start, end = month_bounds(month)
    return focus_rows(
        s, month, start=start, end=end, as_of=_as_of(start, end, utc(now)), currency=settings.report_currency,
        fx=settings.fx_for(month), reserved=settings.reserved, open_costs=ledger.open_costs(s, utc(now)),
        account=f"gpusched-{settings.cluster}",
    )


def monthly_report_and_focus(settings: Settings, month: str, *, now: datetime | None = None,
                             store: Store | None = None, focus: bool = False,
                             bills: Mapping[str, BillReader] | None = None,
                             ) -> tuple[MonthlyReport, list[FocusRow] | None]:
    """The month's report and, with ``focus``, its ledger as FOCUS rows, from one accounting up to ``now``."""
    at = now or SystemClock().now()

    def work(s: Session) -> tuple[MonthlyReport, list[FocusRow] | None]:
        report = _report_in(s, settings, month, at, bills)
        return report, (_focus_in(s, settings, month, at) if focus else None)

    return _in_store(settings, store, work)


def write_monthly_report(settings: Settings, month: str, *, out_dir: Path | None = None,
                         now: datetime | None = None, store: Store | None = None,
                         focus: bool = False) -> dict[str, Path]:
    """Account open usage up to ``now`` and write the month's report files; with ``focus``, the month's
    ledger as a FOCUS 1.0 file (focus-<month>.csv) beside them, from the same accounting."""
    report, rows = monthly_report_and_focus(settings, month, now=now, store=store, focus=focus)
    folder = out_dir or settings.reports_path
    paths = write_report(report, folder)
    if rows is not None:
        paths["focus"] = write_focus(rows, month, folder)
    return paths
