"""The monthly report as an XLSX workbook (openpyxl): a summary sheet, then one sheet per breakdown.

Numbers are written as numbers (exact Decimals, not rounded text) with currency, hour and percent
formats, so a manager can sort, filter and sum them; each breakdown sheet ends with a total row equal
to the report's headline (the team, project, cloud, GPU, capacity and day sheets add up to the total
cost; the reservations sheet to the reservation fees; the jobs sheet to what the jobs cost).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from decimal import Decimal
from typing import Union

from openpyxl import Workbook
from openpyxl.styles import Font
from openpyxl.worksheet.worksheet import Worksheet

from scheduler.accounting.bill_render import render_bills_sheet
from scheduler.accounting.report_models import Breakdown, MonthlyReport
from scheduler.accounting.unit_costs import unit_rows
from scheduler.money import Money

__all__ = ["SHEETS", "render_xlsx"]

Cell = Union[str, Decimal, int, None]

_HOURS_FORMAT = "#,##0.0"
_PCT_FORMAT = "0.0%"
_HUNDRED = Decimal(100)
_BOLD = Font(bold=True)

# Sheet title, report attribute, first column's header: the breakdowns, as in the HTML and Markdown.
SHEETS = (
    ("Team", "by_team", "team"),
    ("Project", "by_project", "project"),
    ("Cloud", "by_cloud", "cloud"),
    ("GPU", "by_gpu", "GPU"),
    ("Capacity", "by_capacity", "capacity type"),
)


def _money_format(currency: str) -> str:
    return f'#,##0.00 "{currency}"'


def _amount(m: Money | None) -> Decimal | None:
    return None if m is None else m.amount


def _sheet(wb: Workbook, title: str, headers: Sequence[str], rows: Sequence[Sequence[Cell]],
           formats: dict[int, str], total: Sequence[Cell] | None = None) -> Worksheet:
    ws = wb.create_sheet(title)
    ws.append(list(headers))
    for cell in ws[1]:
        cell.font = _BOLD
    for row in rows:
        ws.append(list(row))
    if total is not None:
        ws.append(list(total))
        for cell in ws[ws.max_row]:
            cell.font = _BOLD
    for col, fmt in formats.items():
        for (cell,) in ws.iter_rows(min_row=2, min_col=col, max_col=col):
            cell.number_format = fmt
    ws.freeze_panes = "B2"
    for i, header in enumerate(headers, start=1):
        width = max([len(str(header))] + [len(str(r[i - 1])) for r in rows if r[i - 1] is not None][:200])
        ws.column_dimensions[ws.cell(1, i).column_letter].width = min(max(width + 2, 10), 48)
    return ws


def _breakdown_row(b: Breakdown) -> list[Cell]:
    return [b.key, b.hours, b.billed.amount, b.on_demand_equivalent.amount, b.savings.amount, b.reserved_hours,
            b.reserved_fee.amount, b.cost.amount, b.share_pct / _HUNDRED]  # fmt: skip


def render_xlsx(report: MonthlyReport) -> bytes:
    r, cur = report, report.currency
    money = _money_format(cur)
    wb = Workbook()
    summary = wb.active
    assert summary is not None  # a new workbook has one sheet
    summary.title = "Summary"
    figures: list[tuple[str, Cell, str]] = [
        ("Month", r.month, "@"),
        ("Currency", cur, "@"),
        ("Total cost (amortized)", r.total.amount, money),
        ("Billed by the hour (spot, on-demand)", r.billed.amount, money),
        ("Reservation fees (amortized)", r.reserved_fees.amount, money),
        ("of which unused", r.reserved_unused.amount, money),
        ("Billed hours at on-demand prices", r.on_demand_equivalent.amount, money),
        ("Saved vs on-demand", r.savings.amount, money),
        ("Saved vs on-demand, share", r.savings_pct / _HUNDRED, _PCT_FORMAT),
        ("Reserved prepaid hours", r.reserved_prepaid_hours, _HOURS_FORMAT),
        ("Reserved busy hours", r.reserved_busy_hours, _HOURS_FORMAT),
        ("Busy hours", r.busy_hours, _HOURS_FORMAT),
        ("Billed idle hours", r.billed_idle_hours, _HOURS_FORMAT),
        ("Billed idle cost", r.idle_cost.amount, money),
        ("Prepaid idle hours", r.prepaid_idle_hours, _HOURS_FORMAT),
        ("Idle cost avoided (estimate)", r.idle_cost_avoided.amount, money),
    ]
    if r.forecast is not None:
        figures[3:3] = [("Forecast to month end", r.forecast.total.amount, money),
                        ("Forecast: run rate (billed)", r.forecast.billed.amount, money),
                        ("Forecast: work queued now", r.forecast.queued.amount, money)]
    if r.unit_costs is not None:
        t, i = r.unit_costs.training, r.unit_costs.inference
        figures += [("Per training run (completed)", _amount(t.per_unit), money),
                    ("Per 1,000 images inferred", _amount(i.per_unit), money)]
    summary.append(["figure", "value"])
    summary["A1"].font = summary["B1"].font = _BOLD
    for name, value, fmt in figures:
        summary.append([name, value])
        summary.cell(summary.max_row, 2).number_format = fmt
    summary.column_dimensions["A"].width = 40
    summary.column_dimensions["B"].width = 22

    headers = ("hours", "billed", "on-demand equivalent", "saved", "reserved h", "reserved fee", "cost", "share")
    formats = {2: _HOURS_FORMAT, 3: money, 4: money, 5: money, 6: _HOURS_FORMAT, 7: money, 8: money, 9: _PCT_FORMAT}
    for title, attr, first in SHEETS:
        rows: tuple[Breakdown, ...] = getattr(r, attr)
        _sheet(wb, title, (first, *headers), [_breakdown_row(b) for b in rows], formats,
               total=["Total", r.busy_hours + r.idle_hours, r.billed.amount, r.on_demand_equivalent.amount,
                      r.savings.amount, r.reserved_busy_hours, r.reserved_fees.amount, r.total.amount,
                      Decimal(1) if rows else None])  # fmt: skip

    job_cost = sum((j.cost.amount + j.reserved_fee.amount for j in r.jobs), Decimal(0))
    _sheet(wb, "Jobs",
           ("job", "name", "team", "project", "kind", "state", "hours", "billed", "reserved h", "reserved fee", "cost",
            "billed to date", "budget", "over budget", "preemptions"),
           [(j.id, j.name, j.team, j.project, j.kind, j.state, j.hours, j.cost.amount, j.reserved_hours,
             j.reserved_fee.amount, j.cost.amount + j.reserved_fee.amount, j.cost_to_date.amount, _amount(j.budget),
             "yes" if j.over_budget else "no", j.preemptions) for j in r.jobs],
           {7: _HOURS_FORMAT, 8: money, 9: _HOURS_FORMAT, 10: money, 11: money, 12: money, 13: money},
           total=["Total", None, None, None, None, None, sum((j.hours for j in r.jobs), Decimal(0)),
                  sum((j.cost.amount for j in r.jobs), Decimal(0)), sum((j.reserved_hours for j in r.jobs), Decimal(0)),
                  sum((j.reserved_fee.amount for j in r.jobs), Decimal(0)), job_cost, None, None, None,
                  sum(j.preemptions for j in r.jobs)])  # fmt: skip

    past = [d for d in r.by_day if not d.future]  # days still to come have no figures, so no rows
    _sheet(wb, "Days", ("day (UTC)", "hours", "billed", "of which idle", "reserved fee", "cost"),
           [(d.day.isoformat(), d.hours, _amount(d.billed), _amount(d.idle_cost), _amount(d.reserved_fee),
             _amount(d.cost)) for d in past],
           {2: _HOURS_FORMAT, 3: money, 4: money, 5: money, 6: money},
           total=["Total", r.busy_hours + r.idle_hours, r.billed.amount, r.idle_cost.amount, r.reserved_fees.amount,
                  r.total.amount])  # fmt: skip

    _sheet(wb, "Reservations",
           ("provider", "region", "instance type", "count", "prepaid h", "busy h", "prepaid idle h", "used",
            "fee (amortized)", "used part", "unused part", "busy h at on-demand", "note"),
           [(v.provider, v.region, v.instance_type, v.count, v.prepaid_hours, v.busy_hours, v.idle_hours,
             None if v.utilisation_pct is None else v.utilisation_pct / _HUNDRED, v.fee.amount, v.used_fee.amount,
             v.unused_fee.amount, v.on_demand_value.amount, v.note) for v in r.reservations],
           {5: _HOURS_FORMAT, 6: _HOURS_FORMAT, 7: _HOURS_FORMAT, 8: _PCT_FORMAT, 9: money, 10: money, 11: money,
            12: money},
           total=["Total", None, None, sum(v.count for v in r.reservations), r.reserved_prepaid_hours,
                  r.reserved_busy_hours, r.prepaid_idle_hours,
                  None if r.reserved_utilisation_pct is None else r.reserved_utilisation_pct / _HUNDRED,
                  r.reserved_fees.amount, r.reserved_fees.amount - r.reserved_unused.amount, r.reserved_unused.amount,
                  r.reserved_on_demand_value.amount, None])  # fmt: skip
    budgets = (*r.team_budgets, *r.project_budgets)
    if budgets:
        _sheet(wb, "Budgets", ("for", "name", "budget", "actual", "used", "forecast", "forecast used", "over budget"),
               [(b.scope, b.name, b.budget.amount, b.actual.amount, b.used_pct / _HUNDRED, b.forecast.amount,
                 b.forecast_pct / _HUNDRED, "yes" if b.over_budget else "no") for b in budgets],
               {3: money, 4: money, 5: _PCT_FORMAT, 6: money, 7: _PCT_FORMAT})  # fmt: skip
    if r.unit_costs is not None:
        # units x per unit = cost, row by row (the package docstring of unit_costs says what each counts).
        _sheet(wb, "Unit costs",
               ("unit", "of", "units", "cost", "per unit", "GPU-hours", "billed", "on-demand equivalent"),
               [(u.unit, u.of, u.units, u.cost.amount, _amount(u.per_unit), u.gpu_hours, u.billed.amount,
                 u.on_demand_equivalent.amount) for u in unit_rows(r.unit_costs)],
               {3: "#,##0.0##", 4: money, 5: f'#,##0.0000 "{cur}"', 6: _HOURS_FORMAT, 7: money,
                8: money})  # fmt: skip
    render_bills_sheet(r.bills, lambda *a: _sheet(wb, *a), _money_format, _PCT_FORMAT)
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()

