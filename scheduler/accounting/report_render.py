"""Rendering of the monthly cost report: HTML with embedded charts, CSV, Markdown, files on disk.

Rounding lives here and only here: money to cents, hours and percentages to one
place; the ``MonthlyReport`` built by ``scheduler/accounting/reports.py`` stays exact. The
HTML page comes from the package template ``scheduler/accounting/templates/report.html.j2``.
"""

from __future__ import annotations

import base64
import csv
import functools
import io
import os
import tempfile
from datetime import timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Iterable, Sequence

from jinja2 import Environment, PackageLoader, StrictUndefined

from scheduler.accounting.report_models import MonthlyReport
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

# Known capacity types first, in a fixed order, so charts keep their colours month to month.
_CAPACITY_ORDER = ("spot", "on-demand", "reserved")
_CAPACITY_COLOURS = {"spot": "#2a9d8f", "on-demand": "#e76f51", "reserved": "#8d99ae"}
_HUNDRED = Decimal(100)  # the total row's share of the month, in percent
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
        loader=PackageLoader("scheduler.accounting", "templates"),
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
