"""The monthly report's charts, as PNG data URIs: one set for a screen or the PDF, one drawn for a phone.

The HTML page offers both (``<picture>``): a phone shows the narrow set, drawn 4 in wide at twice the
resolution with larger type, so its labels stay readable at a 390 px screen's width instead of
shrinking to half size; mail clients and the PDF use the wide set. Floats here feed the plot only:
every figure printed comes from the Decimal report, and each chart draws the same figures as the
tables (cost = billed + reserved fee, the unused reservations a bar of their own).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scheduler.accounting.report_models import MonthlyReport

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["CHART_NAMES", "DESKTOP", "PHONE", "ChartStyle", "render_charts"]

# Known capacity types first, in a fixed order, so charts keep their colours month to month.
_CAPACITY_ORDER = ("spot", "on-demand", "reserved")
_CAPACITY_COLOURS = {"spot": "#2a9d8f", "on-demand": "#e76f51", "reserved": "#8d99ae"}

CHART_NAMES = (
    ("team_capacity", "Cost by team, stacked by capacity type"),
    ("daily", "Daily cost through the month"),
    ("clouds", "Cost vs on-demand equivalent by cloud"),
)


@dataclass(frozen=True)
class ChartStyle:
    """How a set of charts is drawn: the size, the resolution and the smallest type on them."""

    width_in: float
    dpi: int
    font_pt: float  # every label, tick and legend; titles a little larger
    label_chars: int  # team names longer than this are shortened with an ellipsis
    legend_below: bool  # below the plot (a narrow chart has no room beside it)


DESKTOP = ChartStyle(width_in=7.5, dpi=96, font_pt=9, label_chars=48, legend_below=False)
# 4 in at 192 dpi: 768 px, shown about 360 px wide on a 390 px phone, so 10 pt type reads as about 12 px.
PHONE = ChartStyle(width_in=4.0, dpi=192, font_pt=10, label_chars=16, legend_below=True)


def _capacities(report: MonthlyReport) -> list[str]:
    seen = {c.capacity for c in report.team_by_capacity}
    return [c for c in _CAPACITY_ORDER if c in seen] + sorted(seen - set(_CAPACITY_ORDER))


def _short(name: str, chars: int) -> str:
    return name if len(name) <= chars else name[: chars - 1] + "\u2026"


def render_charts(report: MonthlyReport, style: ChartStyle = DESKTOP) -> dict[str, str]:
    """The report's charts as ``data:image/png;base64,...`` URIs, keyed by name; none for an empty month."""
    if report.empty:
        return {}
    # Imported here so the CLI and daemon do not pay matplotlib's import time until a report is drawn.
    # Figure + Agg canvas, not pyplot: no global figure state, safe on the daemon's scheduler thread.
    from matplotlib.figure import Figure

    font = style.font_pt

    def figure(height_in: float) -> Figure:
        # A narrow chart keeps its width: long labels shrink the plot ("constrained") rather than widen the
        # image, which the page would then scale down, type and all.
        return Figure(figsize=(style.width_in, height_in), dpi=style.dpi,
                      layout="constrained" if style.legend_below else None)

    def finish(fig: Figure, ax, title: str, *, columns: int = 1, beside: bool = False) -> str:  # noqa: ANN001
        ax.set_title(title, fontsize=font + 1)
        ax.tick_params(labelsize=font)
        ax.xaxis.label.set_size(font)
        ax.yaxis.label.set_size(font)
        if style.legend_below:  # under the plot, inside the figure's width ("outside": constrained layout)
            handles, labels = ax.get_legend_handles_labels()
            fig.legend(handles, labels, loc="outside lower center", ncol=columns, fontsize=font, frameon=False)
        elif beside:  # beside the bars, so it never covers the biggest team
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=font)
        else:
            ax.legend(fontsize=font)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=style.dpi, bbox_inches=None if style.legend_below else "tight")
        return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")

    cur = report.currency
    teams = [b.key for b in reversed(report.by_team)]  # barh draws bottom-up: biggest team on top
    fig = figure(0.5 * len(teams) + 1.4)
    ax = fig.add_subplot()
    left = [0.0] * len(teams)
    cells = {(c.team, c.capacity): float(c.cost.amount) for c in report.team_by_capacity}
    labels = [_short(t, style.label_chars) for t in teams]
    for capacity in _capacities(report):
        widths = [cells.get((t, capacity), 0.0) for t in teams]
        ax.barh(labels, widths, left=left, label=capacity, color=_CAPACITY_COLOURS.get(capacity))
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlabel(cur)
    title = "Cost by team and capacity type" + ("" if style.legend_below else " (reserved: amortized fee)")
    charts = {"team_capacity": finish(fig, ax, title, columns=3, beside=True)}

    fig = figure(3)
    ax = fig.add_subplot()
    past = [d for d in report.by_day if not d.future]  # future days stay blank, not drawn as zero
    days = [d.day.day for d in past]
    idle = [float(d.idle_cost.amount) if d.idle_cost else 0.0 for d in past]
    busy = [float(d.billed.amount) - i if d.billed else 0.0 for d, i in zip(past, idle)]
    fees = [float(d.reserved_fee.amount) if d.reserved_fee else 0.0 for d in past]
    ax.bar(days, busy, label="billed, busy", color="#264653")
    ax.bar(days, idle, bottom=busy, label="billed, idle", color="#f4a261")
    ax.bar(days, fees, bottom=[a + b for a, b in zip(busy, idle)], label="reserved fee (amortized)",
           color=_CAPACITY_COLOURS["reserved"])  # fmt: skip
    if len(past) < len(report.by_day):
        first_future = len(past) + 1
        ax.axvspan(first_future - 0.5, len(report.by_day) + 0.6, color="#eef1f4")
        ax.text((first_future + len(report.by_day)) / 2, 0.5, "to come", transform=ax.get_xaxis_transform(),
                ha="center", color="#8d99ae", fontsize=font)  # fmt: skip
    ax.set_xlim(0.4, len(report.by_day) + 0.6)
    ax.set_xlabel(f"day of {report.month} (UTC)")
    ax.set_ylabel(cur)
    charts["daily"] = finish(fig, ax, "Daily cost", columns=2)

    fig = figure(3)
    ax = fig.add_subplot()
    clouds = [b.key for b in report.by_cloud]
    xs = list(range(len(clouds)))
    billed = [float(b.billed.amount) for b in report.by_cloud]
    ax.bar([x - 0.2 for x in xs], billed, 0.4, label="billed by the hour", color="#264653")
    ax.bar([x - 0.2 for x in xs], [float(b.reserved_fee.amount) for b in report.by_cloud], 0.4, bottom=billed,
           label="reserved fee (amortized)", color=_CAPACITY_COLOURS["reserved"])  # fmt: skip
    ax.bar(
        [x + 0.2 for x in xs],
        [float(b.on_demand_equivalent.amount) for b in report.by_cloud],
        0.4,
        label="billed hours at on-demand prices",
        color="#e9c46a",
    )
    ax.set_xticks(xs, clouds)
    ax.set_ylabel(cur)
    charts["clouds"] = finish(fig, ax, "Cost vs on-demand equivalent, by cloud")
    return charts
