"""The XLSX workbook: one sheet per breakdown, numbers as numbers, each sheet's total the report's headline."""

from __future__ import annotations

import io
from decimal import Decimal

import pytest
from openpyxl import load_workbook
from openpyxl.worksheet.worksheet import Worksheet
from sqlalchemy.orm import Session

from scheduler.accounting.report_models import MonthlyReport
from scheduler.accounting.report_xlsx import SHEETS, render_xlsx
from scheduler.models import ReservedCapacity
from tests.accounting.test_focus import YEAR
from tests.accounting.test_reports import Ledger, mixed_month, report_for

EXACT = 1e-6  # cells read back as floats: 12-place Decimals, 15 significant digits


@pytest.fixture
def report(session: Session, ledger: Ledger) -> MonthlyReport:
    mixed_month(ledger)
    half_used = ReservedCapacity(**{**YEAR.model_dump(), "count": 2})  # an unused row too
    return report_for(session, reserved=[half_used])


def table(ws: Worksheet) -> tuple[list[str], list[list[object]], list[object]]:
    """(headers, data rows, total row) of a sheet."""
    rows = [list(r) for r in ws.iter_rows(values_only=True)]
    assert rows[-1][0] == "Total"
    return [str(h) for h in rows[0]], rows[1:-1], rows[-1]


def column(headers: list[str], rows: list[list[object]], name: str) -> float:
    i = headers.index(name)
    return sum(float(r[i]) for r in rows if r[i] is not None)  # type: ignore[arg-type]


def test_one_sheet_per_breakdown(report: MonthlyReport) -> None:
    wb = load_workbook(io.BytesIO(render_xlsx(report)))
    assert wb.sheetnames == ["Summary", "Team", "Project", "Cloud", "GPU", "Capacity", "Jobs", "Days", "Reservations",
                             "Unit costs"]


@pytest.mark.parametrize(("title", "attr"), [(t, a) for t, a, _ in SHEETS])
def test_breakdown_sheets_add_up_to_the_headline(report: MonthlyReport, title: str, attr: str) -> None:
    wb = load_workbook(io.BytesIO(render_xlsx(report)))
    headers, rows, total = table(wb[title])
    assert len(rows) == len(getattr(report, attr))
    assert report.reserved_unused.amount > 0 and any(r[0] == "(unused reservations)" for r in rows)
    for name, want in (("cost", report.total), ("billed", report.billed), ("reserved fee", report.reserved_fees),
                       ("on-demand equivalent", report.on_demand_equivalent)):
        assert column(headers, rows, name) == pytest.approx(float(want.amount), abs=EXACT)
        assert total[headers.index(name)] == pytest.approx(float(want.amount), abs=EXACT)
    assert column(headers, rows, "share") == pytest.approx(1.0)


def test_days_jobs_and_reservations_add_up(report: MonthlyReport) -> None:
    wb = load_workbook(io.BytesIO(render_xlsx(report)))
    headers, rows, _ = table(wb["Days"])
    assert column(headers, rows, "cost") == pytest.approx(float(report.total.amount), abs=EXACT)
    headers, rows, _ = table(wb["Reservations"])
    assert column(headers, rows, "fee (amortized)") == pytest.approx(float(report.reserved_fees.amount), abs=EXACT)
    assert column(headers, rows, "unused part") == pytest.approx(float(report.reserved_unused.amount), abs=EXACT)
    headers, rows, total = table(wb["Jobs"])
    want = sum((j.cost.amount + j.reserved_fee.amount for j in report.jobs), Decimal(0))
    assert column(headers, rows, "cost") == pytest.approx(float(want), abs=EXACT) == total[headers.index("cost")]


def test_numbers_are_numbers_with_currency_formats(report: MonthlyReport) -> None:
    wb = load_workbook(io.BytesIO(render_xlsx(report)))
    summary = {r[0].value: r[1] for r in wb["Summary"].iter_rows(min_row=2)}
    total = summary["Total cost (amortized)"]
    assert isinstance(total.value, float) and total.value == pytest.approx(float(report.total.amount), abs=EXACT)
    assert total.number_format == '#,##0.00 "CNY"'
    team = wb["Team"]
    cost = team.cell(2, 8)
    assert isinstance(cost.value, float) and cost.number_format == '#,##0.00 "CNY"'
    assert team.cell(2, 9).number_format == "0.0%"


def test_an_empty_month_has_sheets_with_zero_totals(session: Session) -> None:
    wb = load_workbook(io.BytesIO(render_xlsx(report_for(session, "2026-02"))))
    headers, rows, total = table(wb["Team"])
    assert rows == [] and total[headers.index("cost")] == 0
