"""Rendering of the monthly cost report: HTML with embedded charts, CSV, Markdown, files on disk.

Rounding lives here and only here: money to cents, hours and percentages to one
place; the ``MonthlyReport`` built by ``scheduler/accounting/reports.py`` stays exact. The
HTML page comes from the package template ``scheduler/accounting/templates/report.html.j2``.
"""

from __future__ import annotations

import csv
import functools
import io
import os
import tempfile
from datetime import timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Callable, Iterable, Sequence

from jinja2 import Environment, PackageLoader, StrictUndefined

from scheduler.accounting.advice import CommitmentAdvice, RightSizing
from scheduler.accounting.bill_render import (
    BILL_HEADERS,
    MISSING_HEADERS,
    UNKNOWN_HEADERS,
    bill_cells,
    bill_csv_rows,
    bills_markdown,
    bills_notes,
    missing_cells,
    unknown_cells,
)
from scheduler.accounting.queued_work import QueuedJob
from scheduler.accounting.report_charts import CHART_NAMES, PHONE, render_charts
from scheduler.accounting.report_models import Breakdown, MonthBudget, MonthlyReport, ReservationUse
from scheduler.accounting.unit_costs import GpuUnitCost, RunUnitCost, unit_rows
from scheduler.money import Money

__all__ = [
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

_HUNDRED = Decimal(100)  # the total row's share of the month, in percent
_ONE_PLACE = Decimal("0.1")
_CENT = Decimal("0.01")
_UNIT_PLACES = Decimal("0.0001")


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


@functools.cache
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("scheduler.accounting", "templates"),
        autoescape=True,  # team and job names are user input
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(money=fmt_money, hours=fmt_hours, pct=fmt_pct, util=_util, label=reservation_label,
                       commitment=commitment_cells, sizing=right_sizing_cells, unit=unit_cells,
                       gpu_unit=gpu_unit_cells, queued=queued_cells)
    env.globals.update(bill_cells=bill_cells, unknown_cells=unknown_cells, missing_cells=missing_cells,
                       bills_notes=bills_notes, bill_headers=BILL_HEADERS, unknown_headers=UNKNOWN_HEADERS,
                       missing_headers=MISSING_HEADERS)
    return env


def render_html(report: MonthlyReport, *, phone_charts: bool = True) -> str:
    """A self-contained HTML page: styles inline, charts embedded as PNG data URIs.

    ``phone_charts``: also embed the charts drawn for a phone's width, which a browser picks on a narrow
    screen (``<picture>``). A mail leaves them out: mail clients show only the ``<img>``, and each chart
    would travel twice."""
    template = _environment().get_template("report.html.j2")
    return template.render(
        r=report,
        charts=render_charts(report),
        phone=render_charts(report, PHONE) if phone_charts else {},
        chart_names=CHART_NAMES,
        breakdowns=BREAKDOWNS,
        commitment_headers=COMMITMENT_HEADERS,
        unit_headers=UNIT_HEADERS,
        queued_headers=QUEUED_HEADERS,
        gpu_unit_headers=GPU_UNIT_HEADERS,
        unit_note=UNIT_NOTE,
        sizing_headers=RIGHT_SIZING_HEADERS,
        last_day=(report.period_end - timedelta(days=1)).date(),
    )


CSV_COLUMNS = (
    "section", "key", "hours", "billed", "on_demand_equivalent", "savings", "reserved_hours", "reserved_fee", "cost",
    "currency", "share_pct", "utilisation_pct", "reserved_on_demand_value", "units", "per_unit",
)  # fmt: skip


def _csv_num(value: Decimal | None, places: Decimal = _CENT) -> str:
    # per_unit to four places: a unit cost is often a fraction of a cent (per GPU-hour, per 1,000 images).
    return "" if value is None else str(value.quantize(places, rounding=ROUND_HALF_EVEN))


def render_csv(report: MonthlyReport) -> str:
    """One flat table; ``section`` says which part of the report a row belongs to. Empty: no figure
    (a day still to come, a column that does not apply), never a zero that was not measured."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(CSV_COLUMNS)
    r, cur = report, report.currency

    def amount(m: Money | None) -> Decimal | None:
        return None if m is None else m.amount

    def row(section: str, key: str, **cells: Decimal | Money | None) -> None:
        values = {k: _csv_num(amount(v) if isinstance(v, Money) or v is None else v,
                              _UNIT_PLACES if k == "per_unit" else _CENT) for k, v in cells.items()}
        out.writerow([section, key] + [cur if c == "currency" else values.get(c, "") for c in CSV_COLUMNS[2:]])

    row("total", r.month, hours=r.busy_hours + r.idle_hours, billed=r.billed,
        on_demand_equivalent=r.on_demand_equivalent, savings=r.savings, reserved_hours=r.reserved_busy_hours,
        reserved_fee=r.reserved_fees, cost=r.total,
        share_pct=_HUNDRED if not r.empty else None, utilisation_pct=r.reserved_utilisation_pct,
        reserved_on_demand_value=r.reserved_on_demand_value)  # fmt: skip
    row("savings", "vs on-demand", savings=r.savings, share_pct=r.savings_pct)
    row("usage", "busy", hours=r.busy_hours)
    row("usage", "billed idle", hours=r.billed_idle_hours, billed=r.idle_cost, cost=r.idle_cost)
    row("usage", "prepaid idle", hours=r.prepaid_idle_hours)
    row("idle_avoided", "estimate", hours=r.idle_hours_avoided, cost=r.idle_cost_avoided)
    for res in r.reservations:
        row("reservation", reservation_label(res), hours=res.prepaid_hours, reserved_hours=res.busy_hours,
            reserved_fee=res.fee, cost=res.fee, utilisation_pct=res.utilisation_pct,
            reserved_on_demand_value=res.on_demand_value)  # fmt: skip
        row("reservation_unused", reservation_label(res), reserved_fee=res.unused_fee, cost=res.unused_fee)
    for section, attr, _ in BREAKDOWNS:
        for b in getattr(r, attr):
            row(section, b.key, hours=b.hours, billed=b.billed, on_demand_equivalent=b.on_demand_equivalent,
                savings=b.savings, reserved_hours=b.reserved_hours, reserved_fee=b.reserved_fee, cost=b.cost,
                share_pct=b.share_pct)  # fmt: skip
    for d in r.by_day:
        row("day", d.day.isoformat(), hours=d.hours, billed=d.billed, reserved_fee=d.reserved_fee, cost=d.cost)
    if r.forecast is not None:
        f = r.forecast
        # cost = billed (the run rate) + reserved_fee + the queued work (its own row; per job below).
        row("forecast", r.month, billed=f.billed, reserved_fee=f.reserved_fees, cost=f.total)
        row("forecast_queued", r.month, cost=f.queued, units=Decimal(len(f.queued_jobs)))
        for q in f.queued_jobs:
            row("queued_job", q.id, hours=q.est_hours, cost=q.in_month)  # the part before the month's end
    for t in r.trend:
        row("trend", t.month, billed=t.billed, on_demand_equivalent=t.on_demand_equivalent, savings=t.savings,
            reserved_fee=t.reserved_fees, cost=t.total)  # fmt: skip
    for tb in (*r.team_budgets, *r.project_budgets):  # sections team_* and project_*
        row(f"{tb.scope}_budget", tb.name, cost=tb.budget)
        row(f"{tb.scope}_actual", tb.name, billed=tb.actual, cost=tb.actual, share_pct=tb.used_pct)
        row(f"{tb.scope}_forecast", tb.name, cost=tb.forecast, share_pct=tb.forecast_pct)
    if r.advice is not None:
        for a in r.advice.commitments:
            key = f"{a.term.name}: {a.scope} x {a.level.normalize():f}, break-even {fmt_pct(a.break_even * _HUNDRED)}"
            row("advice_commitment", key, hours=a.window_days * 24, cost=a.hourly_commitment, savings=a.saving,
                on_demand_equivalent=a.on_demand, utilisation_pct=a.utilisation * _HUNDRED)  # fmt: skip
        for z in r.advice.right_sizing:
            row("advice_right_sizing", f"{z.model} @{z.img_size}: {z.gpu} -> {z.cheaper_gpu}", hours=z.gpu_hours,
                savings=z.saving)  # fmt: skip
    if r.unit_costs is not None and not r.empty:
        # units x per_unit = cost: "training run" per completed run, "1,000 images inferred", and per GPU model
        # "GPU-hour", "busy GPU-hour" and "billed GPU-hour at on-demand prices" (cost = the on-demand equivalent).
        for u in unit_rows(r.unit_costs):
            row("unit_cost", f"{u.unit}: {u.of}", hours=u.gpu_hours, billed=u.billed,
                on_demand_equivalent=u.on_demand_equivalent, cost=u.cost, units=u.units, per_unit=u.per_unit)
    for section, key, cells in bill_csv_rows(r.bills):
        row(section, key, **cells)
    for j in r.jobs:
        row("job", j.id, hours=j.hours, billed=j.cost, on_demand_equivalent=j.on_demand_equivalent,
            savings=j.on_demand_equivalent - j.cost, reserved_hours=j.reserved_hours, reserved_fee=j.reserved_fee,
            cost=j.cost + j.reserved_fee)  # fmt: skip
    return buf.getvalue()


def reservation_label(res: ReservationUse) -> str:
    return f"{res.provider} {res.region} {res.instance_type} x{res.count}"


def _md_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    def cells(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.replace("|", "\\|") for v in values) + " |"

    return [cells(headers), "|" + "|".join("---" for _ in headers) + "|", *(cells(r) for r in rows), ""]


def _util(pct: Decimal | None) -> str:
    return "-" if pct is None else fmt_pct(pct)


def summary_rows(r: MonthlyReport) -> list[tuple[str, str]]:
    """The headline, as (figure, value) pairs: the Markdown summary, and what a test reads back."""
    rows = [
        ("Total cost (amortized)", fmt_money(r.total)),
        ("Billed by the hour (spot, on-demand)", fmt_money(r.billed)),
        ("Reservation fees (amortized)", fmt_money(r.reserved_fees)),
        ("of which unused", fmt_money(r.reserved_unused)),
        ("Billed hours at on-demand prices", fmt_money(r.on_demand_equivalent)),
        ("Saved vs on-demand", f"{fmt_money(r.savings)} ({fmt_pct(r.savings_pct)})"),
        ("Reserved capacity used", f"{fmt_hours(r.reserved_busy_hours)} of {fmt_hours(r.reserved_prepaid_hours)} "
                                   f"prepaid h ({_util(r.reserved_utilisation_pct)})"),
        ("Reserved busy hours at on-demand prices", fmt_money(r.reserved_on_demand_value)),
        ("Busy hours", fmt_hours(r.busy_hours)),
        ("Billed idle", f"{fmt_hours(r.billed_idle_hours)} of {fmt_hours(r.billed_hours)} billed h, "
                        f"{fmt_money(r.idle_cost)}"),
        ("Prepaid idle (reserved, no job)", f"{fmt_hours(r.prepaid_idle_hours)} h"),
        ("Idle stops", str(r.idle_stops)),
        ("Idle cost avoided (estimate)", fmt_money(r.idle_cost_avoided)),
        ("Idle hours avoided (estimate)", fmt_hours(r.idle_hours_avoided)),
    ]  # fmt: skip
    if r.forecast is not None:
        rows[1:1] = [("Forecast to month end", fmt_money(r.forecast.total)),
                     ("of which work queued now", f"{fmt_money(r.forecast.queued)} ({len(r.forecast.queued_jobs)} "
                                                  "job(s))")]  # fmt: skip
    if r.unit_costs is not None:
        t, i = r.unit_costs.training, r.unit_costs.inference
        rows += [("Per training run (completed)", f"{_per(t.per_unit)} ({t.jobs} run(s))"),
                 ("Per 1,000 images inferred", f"{_per(i.per_unit)} ({i.images or 0:,} images)")]
    return rows


BREAKDOWN_HEADERS = ("hours", "billed", "on-demand equivalent", "saved", "reserved fee", "cost", "share")


def breakdown_cells(b: Breakdown) -> tuple[str, ...]:
    if b.unused_reservation:
        return (b.key, "-", "-", "-", "-", fmt_money(b.reserved_fee), fmt_money(b.cost), fmt_pct(b.share_pct))
    return (b.key, fmt_hours(b.hours), fmt_money(b.billed), fmt_money(b.on_demand_equivalent), fmt_money(b.savings),
            fmt_money(b.reserved_fee), fmt_money(b.cost), fmt_pct(b.share_pct))  # fmt: skip


def commitment_level(a: CommitmentAdvice) -> str:
    if a.term.kind == "reservation":
        return f"{a.level.normalize():f} machine(s)"
    return f"{fmt_money(Money(amount=a.level, currency=a.saving.currency))}/h of on-demand"


def commitment_cells(a: CommitmentAdvice) -> tuple[str, ...]:
    return (a.term.name, a.scope, commitment_level(a), fmt_money(a.hourly_commitment) + "/h",
            fmt_pct(a.utilisation * _HUNDRED), fmt_pct(a.break_even * _HUNDRED), fmt_money(a.saving),
            fmt_money(a.saving_per_month))  # fmt: skip


COMMITMENT_HEADERS = ("commitment", "for", "size", "costs", "used", "break-even", "saves (window)", "saves per month")
RIGHT_SIZING_HEADERS = ("job class", "ran on", "GPU-h", "as fast on", "images/s per GPU", "on-demand per GPU-h",
                        "saves")  # fmt: skip


def right_sizing_cells(z: RightSizing) -> tuple[str, ...]:
    return (f"{z.model} @{z.img_size}", z.gpu, fmt_hours(z.gpu_hours), z.cheaper_gpu,
            f"{z.rate:.1f} -> {z.cheaper_rate:.1f}", f"{fmt_money(z.price)} -> {fmt_money(z.cheaper_price)}",
            fmt_money(z.saving))  # fmt: skip


BUDGET_HEADERS = ("budget", "actual", "used", "forecast", "forecast used")


def budget_cells(t: MonthBudget) -> tuple[str, ...]:
    spent = " (at the limit)" if t.scope == "team" else " (spent)"
    return (t.name, fmt_money(t.budget), fmt_money(t.actual), fmt_pct(t.used_pct) + (spent if t.over_budget else ""),
            fmt_money(t.forecast), fmt_pct(t.forecast_pct) + (" (over)" if t.forecast_over else ""))  # fmt: skip


QUEUED_HEADERS = ("job", "team", "project", "planned cost", "expected h", "before the month's end")


def queued_cells(q: QueuedJob) -> tuple[str, ...]:
    return (f"{q.name} ({q.id})", q.team, q.project or "-", fmt_money(q.estimate) if q.estimate else "not planned yet",
            "-" if q.est_hours is None else fmt_hours(q.est_hours), fmt_money(q.in_month))  # fmt: skip


UNIT_HEADERS = ("unit", "completed", "cost", "per unit", "GPU-hours", "saved vs on-demand")
GPU_UNIT_HEADERS = ("GPU", "GPU-hours", "busy", "cost", "per GPU-hour", "per busy GPU-hour",
                    "on-demand per GPU-hour")  # fmt: skip


def fmt_unit_price(m: Money) -> str:
    """A unit cost: cents, but four places under 1 (0.0202 CNY per 1,000 images is not 0.02)."""
    if abs(m.amount) >= 1 or not m.amount.is_finite():
        return fmt_money(m)
    return f"{m.amount.quantize(_UNIT_PLACES, rounding=ROUND_HALF_EVEN)} {m.currency}"


def _per(m: Money | None, unit: str = "") -> str:
    return "-" if m is None else f"{fmt_unit_price(m)}{unit}"


def unit_cells(u: RunUnitCost) -> tuple[str, ...]:
    if u.kind == "train":
        label, done, per = "training run", f"{u.jobs} run(s)", " per run"
    else:
        label, done, per = "1,000 images inferred", f"{u.images or 0:,} images, {u.jobs} job(s)", " per 1,000"
    return (label, done, fmt_money(u.cost), _per(u.per_unit, per), fmt_hours(u.gpu_hours), fmt_money(u.savings))


def gpu_unit_cells(g: GpuUnitCost) -> tuple[str, ...]:
    busy = g.busy_gpu_hours / g.gpu_hours * _HUNDRED if g.gpu_hours else None
    return (g.gpu, fmt_hours(g.gpu_hours), _util(busy), fmt_money(g.cost), _per(g.per_gpu_hour),
            _per(g.per_busy_gpu_hour), _per(g.on_demand_per_gpu_hour))  # fmt: skip


def _md_units(r: MonthlyReport) -> list[str]:
    u = r.unit_costs
    if u is None:
        return []
    lines = ["## Unit costs", ""]
    lines += _md_table(UNIT_HEADERS, [unit_cells(u.training), unit_cells(u.inference)])
    lines += _md_table(GPU_UNIT_HEADERS, [gpu_unit_cells(g) for g in u.by_gpu])
    return [*lines, UNIT_NOTE, ""]


UNIT_NOTE = ("Per training run and per 1,000 images: the jobs that completed this month, each at its whole cost "
             "(every attempt, every month it ran; billed + reservation fee). Per GPU-hour: this month's cost of "
             "the machines with that GPU over their GPU-hours (busy and idle), and over the busy ones alone; "
             "the reservations' unused part is in none of them.")


def _md_advice(r: MonthlyReport) -> list[str]:
    a = r.advice
    if a is None:
        return []
    lines = ["## Advice", ""]
    if a.commitments:
        lines += _md_table(COMMITMENT_HEADERS, [commitment_cells(c) for c in a.commitments])
    elif not a.right_sizing:
        lines += ["No commitment or GPU change would have saved over the window.", ""]
    if a.right_sizing:
        lines += _md_table(RIGHT_SIZING_HEADERS, [right_sizing_cells(z) for z in a.right_sizing])
    return [*lines, a.note, ""]


def render_markdown(report: MonthlyReport) -> str:
    r = report
    lines = [f"# GPU spend report {r.month}", "", f"Generated {r.generated_at:%Y-%m-%d %H:%M} UTC, in {r.currency}."]
    lines.append("")
    if r.empty:
        lines += ["No spend recorded for this month.", ""]
    else:
        lines += ["## Summary", ""]
        lines += _md_table(("figure", "value"), summary_rows(r))
        if r.reservations:
            lines += ["## Reservations", ""]
            lines += _md_table(
                ("reservation", "prepaid h", "busy h", "prepaid idle h", "used", "fee (amortized)", "used part",
                 "unused part", "busy h at on-demand"),
                [
                    (reservation_label(v), fmt_hours(v.prepaid_hours), fmt_hours(v.busy_hours),
                     fmt_hours(v.idle_hours), _util(v.utilisation_pct), fmt_money(v.fee), fmt_money(v.used_fee),
                     fmt_money(v.unused_fee), fmt_money(v.on_demand_value))
                    for v in r.reservations
                ],
            )  # fmt: skip
        if len(r.trend) > 1 or r.forecast is not None:
            lines += ["## Trend", ""]
            trend = [
                (t.month + ("" if t.complete else " (so far)"), fmt_money(t.billed), fmt_money(t.reserved_fees),
                 fmt_money(t.total), fmt_money(t.savings))
                for t in r.trend
            ]  # fmt: skip
            trend = [(*t[:3], "-", *t[3:]) for t in trend]
            if r.forecast is not None:
                f = r.forecast
                trend.append((f"{r.month} (forecast)", fmt_money(f.billed), fmt_money(f.reserved_fees),
                              fmt_money(f.queued), fmt_money(f.total), "-"))  # fmt: skip
            lines += _md_table(("month", "billed", "reservation fees", "queued work", "total", "saved vs on-demand"),
                               trend)  # fmt: skip
            if r.forecast is not None and r.forecast.queued_jobs:
                lines += ["## Work queued now", ""]
                lines += _md_table(QUEUED_HEADERS, [queued_cells(q) for q in r.forecast.queued_jobs])
        lines += _md_units(r)
        lines += _md_advice(r)
        for _, attr, title in BREAKDOWNS:
            lines += [f"## By {title.lower()}", ""]
            lines += _md_table((title, *BREAKDOWN_HEADERS), [breakdown_cells(b) for b in getattr(r, attr)])
        for title, rows in (("Team", r.team_budgets), ("Project", r.project_budgets)):
            if rows:
                lines += [f"## {title} budgets", ""]
                lines += _md_table((title.lower(), *BUDGET_HEADERS), [budget_cells(t) for t in rows])
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
            ("job", "name", "team", "submitted by", "kind", "state", "billed", "reserved h", "reserved fee",
             "billed to date", "budget", "preemptions"),
            [
                (j.id, j.name, j.team, j.submitted_by or "-", j.kind, j.state, fmt_money(j.cost),
                 fmt_hours(j.reserved_hours),
                 fmt_money(j.reserved_fee), fmt_money(j.cost_to_date),
                 (fmt_money(j.budget) + (" OVER" if j.over_budget else "")) if j.budget else "-", str(j.preemptions))
                for j in r.jobs
            ],
        )  # fmt: skip
    lines += bills_markdown(r.bills)  # a month without spend can still be billed (a leak)
    lines += ["## Notes", "", *(f"- {n}" for n in r.notes), ""]
    return "\n".join(lines)


def write_atomic(path: Path, content: str | bytes) -> None:
    # A mailer or web server reading the report never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        if isinstance(content, bytes):
            with os.fdopen(fd, "wb") as fh:
                fh.write(content)
        else:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
                fh.write(content)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(report: MonthlyReport, out_dir: Path,
                 step: Callable[[str], None] | None = None) -> dict[str, Path]:
    """Write report-<month>.html/.csv/.md/.xlsx into ``out_dir``; returns {"html"|"csv"|"md"|"xlsx": path}.
    ``step`` is told the name of each file before it is written (a progress bar)."""
    # Imported here: openpyxl's import time is paid only when files are written.
    from scheduler.accounting.report_xlsx import render_xlsx

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    renderers: tuple[tuple[str, Callable[[MonthlyReport], str | bytes]], ...] = (
        ("html", render_html), ("csv", render_csv), ("md", render_markdown), ("xlsx", render_xlsx))
    for ext, render in renderers:
        if step is not None:
            step(ext)
        path = out_dir / f"report-{report.month}.{ext}"
        write_atomic(path, render(report))
        paths[ext] = path
    return paths
