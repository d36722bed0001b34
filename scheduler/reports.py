"""The monthly cost report: aggregate the ledger's cost records, then render them.

``build_report`` reads one UTC calendar month of ``CostRecordRow`` rows (plus,
for a month still in progress, the ledger's priced view of open intervals),
converts every amount into the report currency with the given FX rates and
sums in Decimal. Rounding happens only in the renderers (HTML with embedded
charts, CSV, Markdown), so the report object itself stays exact.
"""

from __future__ import annotations

import base64
import csv
import functools
import io
import os
import re
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Callable, Iterable, Protocol, Sequence

from jinja2 import Environment, PackageLoader, StrictUndefined
from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.clock import utc
from scheduler.errors import UserError
from scheduler.models import Frozen
from scheduler.money import CURRENCIES, FxRates, Money
from scheduler.tables import CostRecordRow, IdleStopRow, JobRow, UsageIntervalRow

NO_PROJECT = "(no project)"
_MONTH_RE = re.compile(r"^([1-9][0-9]{3})-(0[1-9]|1[0-2])$")
_HUNDRED = Decimal(100)
_SECONDS_PER_HOUR = Decimal(3600)
# Known capacity types first, in a fixed order, so charts keep their colours month to month.
_CAPACITY_ORDER = ("spot", "on-demand", "reserved")
_CAPACITY_COLOURS = {"spot": "#2a9d8f", "on-demand": "#e76f51", "reserved": "#8d99ae"}


# --- the report --------------------------------------------------------------


class Breakdown(Frozen):
    key: str
    hours: Decimal
    cost: Money
    on_demand_equivalent: Money
    share_pct: Decimal  # of the month's total cost; 0 when the month cost nothing


class TeamCapacityCost(Frozen):
    """One cell of the team x capacity table behind the stacked team chart."""

    team: str
    capacity: str
    hours: Decimal
    cost: Money


class DayCost(Frozen):
    day: date
    hours: Decimal
    cost: Money
    idle_cost: Money  # the part of ``cost`` paid for machines without a job


class JobCost(Frozen):
    id: str
    name: str
    team: str
    project: str | None
    kind: str
    state: str
    hours: Decimal
    cost: Money  # this month
    on_demand_equivalent: Money
    cost_to_date: Money  # every month up to and including this one: what a budget is held against
    budget: Money | None
    over_budget: bool
    preemptions: int


class TeamBudget(Frozen):
    """A team's jobs that carry a budget: their budgets summed against their cost to date."""

    team: str
    jobs: int
    budget: Money
    actual: Money
    used_pct: Decimal
    over_budget: bool


class MonthlyReport(Frozen):
    month: str
    currency: str
    fx: dict[str, Decimal]  # report-currency units per one unit of each other currency
    generated_at: datetime
    period_start: datetime
    period_end: datetime  # exclusive
    records: int  # cost lines aggregated; 0 means no spend recorded
    total: Money
    on_demand_equivalent: Money
    savings: Money
    savings_pct: Decimal
    busy_hours: Decimal
    idle_hours: Decimal
    idle_cost: Money
    idle_stops: int
    idle_assumed_hours: Decimal  # the assumption behind the two figures below
    idle_hours_avoided: Decimal
    idle_cost_avoided: Money
    by_team: tuple[Breakdown, ...]
    by_project: tuple[Breakdown, ...]
    by_cloud: tuple[Breakdown, ...]
    by_gpu: tuple[Breakdown, ...]
    by_capacity: tuple[Breakdown, ...]
    team_by_capacity: tuple[TeamCapacityCost, ...]
    by_day: tuple[DayCost, ...]
    jobs: tuple[JobCost, ...]
    budget_vs_actual: tuple[TeamBudget, ...]
    notes: tuple[str, ...]


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
    on_demand = sum((l.on_demand for l in lines), Decimal(0))
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
            "Reserved machines are prepaid: they show no cost here, and their on-demand value counts as savings."
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


# --- rendering ---------------------------------------------------------------
# Rounding lives here and only here: money to cents, hours and percentages to one place.

_ONE_PLACE = Decimal("0.1")
_CENT = Decimal("0.01")


def fmt_money(money: Money) -> str:
    return str(money)


def fmt_hours(hours: Decimal) -> str:
    return f"{hours.quantize(_ONE_PLACE, rounding=ROUND_HALF_EVEN):,}"


def fmt_pct(pct: Decimal) -> str:
    return f"{pct.quantize(_ONE_PLACE, rounding=ROUND_HALF_EVEN)}%"


BREAKDOWNS = (
    ("team", "by_team", "Team"),
    ("project", "by_project", "Project"),
    ("cloud", "by_cloud", "Cloud"),
    ("gpu", "by_gpu", "GPU"),
    ("capacity", "by_capacity", "Capacity type"),
)


def _capacities(report: MonthlyReport) -> list[str]:
    seen = {c.capacity for c in report.team_by_capacity}
    return [c for c in _CAPACITY_ORDER if c in seen] + sorted(seen - set(_CAPACITY_ORDER))


def render_charts(report: MonthlyReport) -> dict[str, str]:
    """The report's charts as ``data:image/png;base64,...`` URIs, keyed by name; none for an empty month."""
    if report.records == 0:
        return {}
    # Imported here so the CLI and daemon do not pay matplotlib's import time until a report is drawn.
    # Figure + Agg canvas, not pyplot: no global figure state, safe on the daemon's scheduler thread.
    from matplotlib.figure import Figure

    def png(fig: Figure) -> str:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
        return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")

    # Floats below feed the plot only; every figure printed comes from the Decimal report.
    cur = report.currency
    teams = [b.key for b in reversed(report.by_team)]  # barh draws bottom-up: biggest team on top
    fig = Figure(figsize=(7.5, 0.5 * len(teams) + 1.4))
    ax = fig.add_subplot()
    left = [0.0] * len(teams)
    cells = {(c.team, c.capacity): float(c.cost.amount) for c in report.team_by_capacity}
    for capacity in _capacities(report):
        widths = [cells.get((t, capacity), 0.0) for t in teams]
        ax.barh(teams, widths, left=left, label=capacity, color=_CAPACITY_COLOURS.get(capacity))
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlabel(cur)
    ax.set_title("Spend by team and capacity type")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    charts = {"team_capacity": png(fig)}

    fig = Figure(figsize=(7.5, 3))
    ax = fig.add_subplot()
    days = [d.day.day for d in report.by_day]
    idle = [float(d.idle_cost.amount) for d in report.by_day]
    busy = [float(d.cost.amount) - i for d, i in zip(report.by_day, idle)]
    ax.bar(days, busy, label="busy", color="#264653")
    ax.bar(days, idle, bottom=busy, label="idle", color="#f4a261")
    ax.set_xlim(0.4, len(days) + 0.6)
    ax.set_xlabel(f"day of {report.month} (UTC)")
    ax.set_ylabel(cur)
    ax.set_title("Daily spend")
    ax.legend(fontsize="small")
    charts["daily"] = png(fig)

    fig = Figure(figsize=(7.5, 3))
    ax = fig.add_subplot()
    clouds = [b.key for b in report.by_cloud]
    xs = list(range(len(clouds)))
    ax.bar([x - 0.2 for x in xs], [float(b.cost.amount) for b in report.by_cloud], 0.4, label="actual", color="#264653")
    ax.bar(
        [x + 0.2 for x in xs],
        [float(b.on_demand_equivalent.amount) for b in report.by_cloud],
        0.4,
        label="on-demand equivalent",
        color="#e9c46a",
    )
    ax.set_xticks(xs, clouds)
    ax.set_ylabel(cur)
    ax.set_title("Actual spend vs on-demand equivalent, by cloud")
    ax.legend(fontsize="small")
    charts["clouds"] = png(fig)
    return charts


@functools.cache
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("scheduler", "templates"),
        autoescape=True,  # team and job names are user input
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(money=fmt_money, hours=fmt_hours, pct=fmt_pct)
    return env


def render_html(report: MonthlyReport) -> str:
    """A self-contained HTML page: styles inline, charts embedded as PNG data URIs."""
    template = _environment().get_template("report.html.j2")
    return template.render(
        r=report,
        charts=render_charts(report),
        breakdowns=BREAKDOWNS,
        last_day=(report.period_end - timedelta(days=1)).date(),
    )


CSV_COLUMNS = ("section", "key", "hours", "cost", "currency", "on_demand_equivalent", "share_pct")


def _csv_num(value: Decimal | None) -> str:
    return "" if value is None else str(value.quantize(_CENT, rounding=ROUND_HALF_EVEN))


def render_csv(report: MonthlyReport) -> str:
    """One flat table; ``section`` says which breakdown a row belongs to."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(CSV_COLUMNS)

    def row(section: str, key: str, hours: Decimal | None, cost: Money, od: Money | None, pct: Decimal | None) -> None:
        od_amount = od.amount if od else None
        num = _csv_num
        out.writerow((section, key, num(hours), num(cost.amount), cost.currency, num(od_amount), num(pct)))

    r = report
    row("total", r.month, r.busy_hours + r.idle_hours, r.total, r.on_demand_equivalent, _HUNDRED if r.records else None)
    row("savings", "vs on-demand", None, r.savings, None, r.savings_pct)
    row("usage", "busy", r.busy_hours, r.total - r.idle_cost, None, None)
    row("usage", "idle", r.idle_hours, r.idle_cost, None, None)
    row("idle_avoided", "estimate", r.idle_hours_avoided, r.idle_cost_avoided, None, None)
    for section, attr, _ in BREAKDOWNS:
        for b in getattr(r, attr):
            row(section, b.key, b.hours, b.cost, b.on_demand_equivalent, b.share_pct)
    for d in r.by_day:
        row("day", d.day.isoformat(), d.hours, d.cost, None, None)
    for j in r.jobs:
        row("job", j.id, j.hours, j.cost, j.on_demand_equivalent, None)
    return buf.getvalue()


def _md_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    def cells(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.replace("|", "\\|") for v in values) + " |"

    return [cells(headers), "|" + "|".join("---" for _ in headers) + "|", *(cells(r) for r in rows), ""]


def render_markdown(report: MonthlyReport) -> str:
    r = report
    lines = [f"# GPU spend report {r.month}", "", f"Generated {r.generated_at:%Y-%m-%d %H:%M} UTC, in {r.currency}."]
    lines.append("")
    if r.records == 0:
        lines += ["No spend recorded for this month.", ""]
    else:
        lines += ["## Summary", ""]
        lines += _md_table(
            ("figure", "value"),
            [
                ("Total spend", fmt_money(r.total)),
                ("On-demand equivalent", fmt_money(r.on_demand_equivalent)),
                ("Savings vs on-demand", f"{fmt_money(r.savings)} ({fmt_pct(r.savings_pct)})"),
                ("Busy hours", fmt_hours(r.busy_hours)),
                ("Idle hours", fmt_hours(r.idle_hours)),
                ("Paid for idle machines", fmt_money(r.idle_cost)),
                ("Idle stops", str(r.idle_stops)),
                ("Idle cost avoided (estimate)", fmt_money(r.idle_cost_avoided)),
                ("Idle hours avoided (estimate)", fmt_hours(r.idle_hours_avoided)),
            ],
        )
        for _, attr, title in BREAKDOWNS:
            lines += [f"## By {title.lower()}", ""]
            lines += _md_table(
                (title, "hours", "cost", "on-demand equivalent", "share"),
                [
                    (b.key, fmt_hours(b.hours), fmt_money(b.cost), fmt_money(b.on_demand_equivalent),
                     fmt_pct(b.share_pct))
                    for b in getattr(r, attr)
                ],  # fmt: skip
            )
        if r.budget_vs_actual:
            lines += ["## Budget vs actual", ""]
            lines += _md_table(
                ("team", "jobs", "budget", "actual to date", "used", "over"),
                [
                    (t.team, str(t.jobs), fmt_money(t.budget), fmt_money(t.actual), fmt_pct(t.used_pct),
                     "yes" if t.over_budget else "no")
                    for t in r.budget_vs_actual
                ],
            )  # fmt: skip
        lines += ["## Jobs", ""]
        lines += _md_table(
            ("job", "name", "team", "kind", "state", "cost", "cost to date", "budget", "preemptions"),
            [
                (j.id, j.name, j.team, j.kind, j.state, fmt_money(j.cost), fmt_money(j.cost_to_date),
                 (fmt_money(j.budget) + (" OVER" if j.over_budget else "")) if j.budget else "-", str(j.preemptions))
                for j in r.jobs
            ],
        )  # fmt: skip
    lines += ["## Notes", "", *(f"- {n}" for n in r.notes), ""]
    return "\n".join(lines)


def _write_atomic(path: Path, text: str) -> None:
    # A mailer or web server reading the report never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(report: MonthlyReport, out_dir: Path) -> dict[str, Path]:
    """Write report-<month>.html/.csv/.md into ``out_dir``; returns {"html"|"csv"|"md": path}."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for ext, render in (("html", render_html), ("csv", render_csv), ("md", render_markdown)):
        path = out_dir / f"report-{report.month}.{ext}"
        _write_atomic(path, render(report))
        paths[ext] = path
    return paths
