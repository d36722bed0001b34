"""Drawing a bill reconciliation: table rows for the monthly report's HTML, Markdown, CSV and XLSX, the
Rich table ``gpusched bills`` prints, and its own CSV file with every instance.

Rounding happens here only (money to cents, percentages to two places: the tolerance is 1%); the
``BillReconciliation`` stays exact. ``bill_models`` says what each figure means.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from scheduler.accounting.bill_models import BillMatch, BillReconciliation, CloudBill
from scheduler.money import Money

__all__ = [
    "BILL_HEADERS",
    "MISSING_HEADERS",
    "UNKNOWN_HEADERS",
    "bill_cells",
    "bill_csv_rows",
    "bills_table",
    "bills_markdown",
    "bills_notes",
    "missing_cells",
    "render_bills_csv",
    "render_bills_sheet",
    "unknown_cells",
]

BILL_HEADERS = ("cloud", "status", "ledger", "billed (gpusched's)", "difference", "difference %",
                "billed to others", "unknown", "missing")
UNKNOWN_HEADERS = ("cloud", "instance", "billed", "whose", "why")
MISSING_HEADERS = ("cloud", "instance", "cloud id", "team", "in the ledger")
_TWO = Decimal("0.01")
_HUNDRED = Decimal(100)
_STATUS = {"ok": "ok", "check": "CHECK", "unread": "NOT READ"}
_KIND = {"leak": "gpusched's, lost (leak)", "other-cluster": "another gpusched cluster",
         "not-gpusched": "not gpusched's"}


def _cents(x: Decimal) -> Decimal:
    q = x.quantize(_TWO, rounding=ROUND_HALF_EVEN)
    return q.copy_abs() if q == 0 else q  # a difference under half a cent reads 0.00, not -0.00


def _money(m: Money | None) -> str:
    return "-" if m is None else f"{_cents(m.amount):,} {m.currency}"


def _pct(p: Decimal | None) -> str:
    return "-" if p is None else f"{_cents(p)}%"


def bill_cells(c: CloudBill) -> tuple[str, ...]:
    """One cloud's row of the summary table, in the cloud's own currency."""
    if not c.read:
        return (c.cloud, _STATUS["unread"], "-", "-", "-", "-", "-", "-", "-")
    status = _STATUS[c.status] + (" (estimated)" if c.estimated else "")
    return (c.cloud, status, _money(c.ledger), _money(c.billed), _money(c.difference), _pct(c.difference_pct),
            _money(c.others), str(len(c.unknown)), str(len(c.missing)))


def unknown_cells(cloud: str, u: BillMatch) -> tuple[str, ...]:
    return (cloud, u.key, _money(u.billed), _KIND.get(u.kind or "", u.kind or ""), u.why)


def missing_cells(cloud: str, m: BillMatch) -> tuple[str, ...]:
    return (cloud, m.instance or m.key, m.cloud_id or "-", m.team or "-", _money(m.ledger))


def bills_notes(rec: BillReconciliation) -> list[str]:
    notes = [
        f"Bills vs ledger: each cloud's own bill for {rec.month} (AWS Cost Explorer, Alibaba BSS QueryInstanceBill, "
        "Tencent DescribeBillDetail) against gpusched's ledger, instance by instance, in the cloud's currency. "
        f"Differences within {rec.tolerance_pct.normalize():f}% are expected: each cloud bills from its own "
        "moments (AWS from running, Alibaba and Tencent from creation, until the machine stops or is released) "
        "and rounds as it settles; the ledger follows the same rules but learns of a change it did not make "
        "(a machine up, a reclaim) at the next tick.",
        "Report-currency figures convert at {} rates: {}.".format(
            f"the rates set for {rec.month}" if rec.fx_dated else "the default",
            "; ".join(f"1 {cur} = {rate:.6g} {rec.currency}" for cur, rate in rec.fx.items())),
    ]
    for c in rec.clouds:
        if not c.read:
            notes.append(f"The {c.cloud} bill could not be read: {c.error}")
        elif c.estimated:
            notes.append(f"The {c.cloud} bill for {rec.month} is not final yet: the cloud says it may still change.")
    return notes


def bills_table(rec: BillReconciliation) -> Any:
    """The summary as a Rich table (``gpusched bills``, the demo); every cell is plain text, never markup."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"Bills vs ledger, {rec.month} (each cloud in its own currency)")
    for i, header in enumerate(("cloud", "status", "ledger", "billed", "difference", "diff %", "others",
                                "unknown", "missing")):
        table.add_column(header, justify="right" if i > 1 else "left", no_wrap=i < 2)
    for c in rec.clouds:
        style = {"ok": "green", "check": "yellow", "unread": "red"}[c.status]
        cells = list(bill_cells(c))
        if c.read and c.currency:  # the currency once, by the cloud's name: the table fits a terminal
            cells[0] = f"{c.cloud} {c.currency}"
            cells = [cell.removesuffix(f" {c.currency}") for cell in cells]
        table.add_row(*(Text(cell, style=style if i == 1 else "") for i, cell in enumerate(cells)))
    return table


def bills_markdown(rec: BillReconciliation | None) -> list[str]:
    if rec is None:
        return []
    lines = ["## Bills vs ledger", ""]
    lines += _md_table(BILL_HEADERS, [bill_cells(c) for c in rec.clouds])
    unknown = [unknown_cells(c.cloud, u) for c in rec.clouds for u in c.unknown]
    if unknown:
        lines += ["Billed instances gpusched does not know:", ""]
        lines += _md_table(UNKNOWN_HEADERS, unknown)
    missing = [missing_cells(c.cloud, m) for c in rec.clouds for m in c.missing]
    if missing:
        lines += ["Ledger instances missing from the bill:", ""]
        lines += _md_table(MISSING_HEADERS, missing)
    return lines + [*(f"- {n}" for n in bills_notes(rec)), ""]


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    def cells(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.replace("|", "\\|") for v in values) + " |"

    return [cells(headers), "|" + "|".join("---" for _ in headers) + "|", *(cells(r) for r in rows), ""]


def bill_csv_rows(rec: BillReconciliation | None) -> list[tuple[str, str, dict[str, Decimal | None]]]:
    """(section, key, cells) for the monthly report's CSV, in the report currency: ``bill_ledger`` and
    ``bill_billed`` (cost), ``bill_difference`` (cost, share_pct: the difference's percent of the ledger),
    ``bill_others`` (cost billed to instances gpusched does not know). An unread bill has no row."""
    if rec is None:
        return []
    rows: list[tuple[str, str, dict[str, Decimal | None]]] = []
    for c in rec.clouds:
        if not c.read or c.ledger_report is None or c.billed_report is None or c.others_report is None:
            continue
        rows.append(("bill_ledger", c.cloud, {"cost": c.ledger_report.amount}))
        rows.append(("bill_billed", c.cloud, {"billed": c.billed_report.amount, "cost": c.billed_report.amount}))
        rows.append(("bill_difference", c.cloud, {"cost": c.billed_report.amount - c.ledger_report.amount,
                                                  "share_pct": c.difference_pct}))
        rows.append(("bill_others", c.cloud, {"cost": c.others_report.amount}))
    return rows


_FILE_COLUMNS = ("cloud", "month", "kind", "instance", "cloud_id", "team", "ledger", "billed", "difference",
                 "currency", "whose", "why")


def render_bills_csv(rec: BillReconciliation) -> str:
    """``bills-<month>.csv``: one row per cloud (kind ``total``), then every instance (``matched``,
    ``unknown``, ``missing``), amounts in the cloud's currency to the cent; empty: no such figure."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(_FILE_COLUMNS)

    def num(m: Money | None) -> str:
        return "" if m is None else str(_cents(m.amount))

    for c in rec.clouds:
        if not c.read:
            out.writerow([c.cloud, rec.month, "unread", "", "", "", "", "", "", "", "", c.error or ""])
            continue
        out.writerow([c.cloud, rec.month, "total", "", "", "", num(c.ledger), num(c.billed), num(c.difference),
                      c.currency, "", _pct(c.difference_pct)])
        for kind, rows in (("matched", c.matched), ("unknown", c.unknown), ("missing", c.missing)):
            for m in rows:
                out.writerow([c.cloud, rec.month, kind, m.instance or "", m.cloud_id or "", m.team or "",
                              num(m.ledger), num(m.billed), num(m.difference), c.currency,
                              _KIND.get(m.kind or "", ""), m.why])
    return buf.getvalue()


def render_bills_sheet(rec: BillReconciliation | None, sheet: Callable[..., Any], money_format: Callable[[str], str],
                       pct_format: str) -> None:
    """The XLSX report's "Bills" sheet: a row per cloud in the report currency, then every instance billed
    that the ledger does not know and every ledger instance the bill lacks (in the cloud's currency)."""
    if rec is None:
        return
    rows: list[list[Any]] = []
    for c in rec.clouds:
        if not c.read or c.ledger_report is None or c.billed_report is None or c.others_report is None:
            rows.append([c.cloud, "NOT READ", None, None, None, None, None, c.error])
            continue
        rows.append([c.cloud, _STATUS[c.status], c.ledger_report.amount, c.billed_report.amount,
                     c.billed_report.amount - c.ledger_report.amount,
                     None if c.difference_pct is None else c.difference_pct / _HUNDRED, c.others_report.amount,
                     f"{len(c.unknown)} unknown, {len(c.missing)} missing"])
    for c in rec.clouds:
        for u in c.unknown:
            rows.append([c.cloud, "unknown: " + u.key, None, None, None, None, None,
                         f"{_money(u.billed)}; {_KIND.get(u.kind or '', '')}: {u.why}"])
        for m in c.missing:
            rows.append([c.cloud, "missing: " + (m.instance or m.key), None, None, None, None, None,
                         f"{_money(m.ledger)} in the ledger, not on the bill"])
    money = money_format(rec.currency)
    sheet("Bills", ("cloud", "status", "ledger", "billed (gpusched's)", "difference", "difference %",
                    "billed to others", "note"), rows, {3: money, 4: money, 5: money, 6: pct_format, 7: money})
