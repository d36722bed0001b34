"""``gpusched bills --month M``: read each configured cloud's own bill and reconcile it with the ledger.

The clouds are those in GPUSCHED_BILLS (with GPUSCHED_BACKEND=live and each cloud's credentials); the
ledger is the store's. It prints the table (per cloud: ledger, billed, difference and its percent,
what others' instances cost, how many unknown and missing), then every billed instance gpusched does
not know and every ledger instance the bill lacks, and writes ``bills-<month>.csv`` with every instance.
It writes nothing to the store. Exit status 1 when a bill could not be read (the table says why), else 0:
a difference is a finding, not a failure.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from providers.bills import BillReader, check_month
from providers.registry import build_bill_readers
from scheduler.accounting.bill_models import BillReconciliation
from scheduler.accounting.bill_render import (
    MISSING_HEADERS,
    UNKNOWN_HEADERS,
    bills_notes,
    bills_table,
    missing_cells,
    render_bills_csv,
    unknown_cells,
)
from scheduler.accounting.reconcile_bills import reconcile_month
from scheduler.accounting.report_render import write_atomic
from scheduler.app.startup import open_store
from scheduler.clock import Clock, SystemClock
from scheduler.errors import UserError
from scheduler.settings import Settings

__all__ = ["NO_BILLS_FIX", "bill_readers", "run_bills"]

NO_BILLS_FIX = ("set GPUSCHED_BILLS=aws,alibaba,tencent (the clouds whose bills to read) with "
                "GPUSCHED_BACKEND=live and each cloud's credentials; README, Reports")


def bill_readers(settings: Settings, clock: Clock, *, required: bool) -> dict[str, BillReader]:
    """The configured bill readers; with ``required``, a UserError when none is configured."""
    if required and not settings.bills:
        raise UserError("no cloud bills to read: GPUSCHED_BILLS is empty", fix=NO_BILLS_FIX)
    return build_bill_readers(settings, clock)


def run_bills(settings: Settings, month: str, out_dir: Path | None, console: Console) -> int:
    check_month(month)
    clock = SystemClock()
    readers = bill_readers(settings, clock, required=True)
    store = open_store(settings)
    try:
        with store.session(write=False) as s:
            rec = reconcile_month(s, readers, month, now=clock.now(), cluster=settings.cluster,
                                  currency=settings.report_currency, fx=settings.fx_for(month),
                                  fx_dated=settings.fx_dated(month), tolerance_pct=settings.bill_tolerance_pct)
    finally:
        store.dispose()
    print_reconciliation(console, rec)
    folder = out_dir or settings.reports_path
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"bills-{month}.csv"
    write_atomic(path, render_bills_csv(rec))
    console.print(f"every instance: {path}", highlight=False, markup=False)
    return 1 if any(not c.read for c in rec.clouds) else 0


def print_reconciliation(console: Console, rec: BillReconciliation) -> None:
    console.print(bills_table(rec))
    for title, headers, rows in (
        ("Billed instances gpusched does not know", UNKNOWN_HEADERS,
         [unknown_cells(c.cloud, u) for c in rec.clouds for u in c.unknown]),
        ("Ledger instances missing from the bill", MISSING_HEADERS,
         [missing_cells(c.cloud, m) for c in rec.clouds for m in c.missing]),
    ):
        if not rows:
            continue
        table = Table(title=title)
        for header in headers:
            table.add_column(header, overflow="fold")
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))  # text from the clouds' bills: never read as markup
        console.print(table)
    for note in bills_notes(rec):
        console.print(f"- {note}", highlight=False, markup=False)
