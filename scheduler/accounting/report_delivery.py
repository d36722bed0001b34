"""Sending the monthly report: the files first (HTML, CSV, Markdown, PDF, and the month's audit log as
``audit-<month>.csv``), then mail and chat.

The files are written before anything is sent, so a mail server or webhook that is down loses
nothing: the outcome names the channel that failed and why, and the files stay where they are.
The monthly cron (``scheduler/app/wiring.py``) and ``gpusched report --send`` both come here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path

import httpx

from providers.bills import BillReader
from scheduler.accounting.audit_export import write_audit
from scheduler.accounting.bill_render import render_bills_csv
from scheduler.accounting.delivery import Delivered, Notice, channels_configured, deliver, mail_message
from scheduler.accounting.focus import write_focus
from scheduler.accounting.report_models import MonthlyReport
from scheduler.accounting.report_pdf import write_pdf
from scheduler.accounting.report_render import (
    fmt_money,
    fmt_pct,
    render_html,
    render_markdown,
    write_atomic,
    write_report,
)
from scheduler.accounting.reports import monthly_report_and_focus
from scheduler.clock import SystemClock
from scheduler.settings import Settings
from scheduler.store.database import Store

__all__ = ["SentReport", "report_notice", "send_report", "write_and_send"]

_TOP_TEAMS = 5


class SentReport:
    """The files written and what each channel did with them."""

    def __init__(self, paths: Mapping[str, Path], outcomes: list[Delivered]) -> None:
        self.paths = dict(paths)
        self.outcomes = outcomes

    @property
    def failed(self) -> list[Delivered]:
        return [o for o in self.outcomes if not o.ok]


def report_notice(report: MonthlyReport, paths: Mapping[str, Path]) -> Notice:
    """The chat message for a month's report: the headline, the biggest teams, team budgets, where the files are."""
    r = report
    facts: list[tuple[str, str]] = [("Total (amortized)", fmt_money(r.total))]
    if r.forecast is not None:
        facts.append(("Forecast to month end", fmt_money(r.forecast.total)))
        if r.forecast.queued_jobs:
            facts.append(("of which queued work", f"{fmt_money(r.forecast.queued)} "
                                                  f"({len(r.forecast.queued_jobs)} job(s))"))
    facts += [
        ("Billed by the hour", fmt_money(r.billed)),
        ("Reservation fees", fmt_money(r.reserved_fees)),
        ("Saved vs on-demand", f"{fmt_money(r.savings)} ({fmt_pct(r.savings_pct)})"),
    ]
    for b in r.by_team[:_TOP_TEAMS]:
        facts.append((f"Team {b.key}", f"{fmt_money(b.cost)} ({fmt_pct(b.share_pct)})"))
    for t in r.team_budgets:
        facts.append((f"Budget {t.team}", f"{fmt_pct(t.used_pct)} of {fmt_money(t.budget)} used, forecast "
                                          f"{fmt_pct(t.forecast_pct)}"))
    for p in r.project_budgets:
        facts.append((f"Budget project {p.project}", f"{fmt_pct(p.used_pct)} of {fmt_money(p.budget)} used, "
                                                     f"forecast {fmt_pct(p.forecast_pct)}"))
    if r.bills is not None:
        facts.append(("Bills vs ledger", "; ".join(
            f"{c.cloud} {c.status}" + (f" ({fmt_pct(c.difference_pct)})" if c.difference_pct is not None else "")
            + (f", {len(c.unknown)} unknown" if c.unknown else "") for c in r.bills.clouds)))
    names = ", ".join(p.name for p in paths.values())
    return Notice(
        title=f"GPU spend {r.month}: {fmt_money(r.total)}" + ("" if r.forecast is None else " so far"),
        facts=tuple(facts),
        footer=f"Report files: {names}" if names else None,
        severity="warning" if any(t.over_budget for t in (*r.team_budgets, *r.project_budgets)) else "info",
    )


def send_report(settings: Settings, report: MonthlyReport, paths: Mapping[str, Path], *,
                http: httpx.Client | None = None, now: datetime | None = None) -> list[Delivered]:
    """Mail the report (HTML body, PDF and CSV attached) and post its summary to every webhook, at ``now``
    (default: when the report was generated)."""
    mail = None
    if settings.smtp_url is not None and settings.report_mail_to:
        attachments = [paths[k] for k in ("pdf", "csv") if k in paths]
        mail = mail_message(
            sender=settings.report_mail_from, to=settings.report_mail_to,
            subject=f"GPU spend report {report.month}: {fmt_money(report.total)}", at=report.generated_at,
            text=render_markdown(report), html=render_html(report, phone_charts=False), attachments=attachments,
        )  # fmt: skip
    return deliver(settings, report_notice(report, paths), mail=mail, http=http, now=now or report.generated_at)


# What ``write_and_send`` tells its ``step`` callback, in order (focus and send only when asked for).
REPORT_STEPS = ("the ledger", "html", "csv", "md", "xlsx", "focus", "pdf", "send")


def write_and_send(settings: Settings, month: str, *, out_dir: Path | None = None, now: datetime | None = None,
                   store: Store | None = None, send: bool = True, http: httpx.Client | None = None,
                   focus: bool = False, bills: Mapping[str, BillReader] | None = None,
                   step: Callable[[str], None] | None = None) -> SentReport:
    """Write the month's report files (the PDF and the audit log too; with ``focus`` the FOCUS file) and,
    with ``send`` and channels set up, deliver them. With ``bills`` (the clouds' bill readers) the report
    reconciles each cloud's own bill with the ledger, and ``bills-<month>.csv`` lists every instance.
    ``step`` is told each of ``REPORT_STEPS`` as it starts (a progress bar)."""
    tell = step or (lambda _name: None)
    tell("the ledger")
    at = now or SystemClock().now()
    report, rows = monthly_report_and_focus(settings, month, now=at, store=store, focus=focus, bills=bills)
    folder = out_dir or settings.reports_path
    paths = write_report(report, folder, step=tell)
    if rows is not None:
        tell("focus")
        paths["focus"] = write_focus(rows, month, folder)
    tell("pdf")
    paths["pdf"] = write_pdf(report, folder)
    if report.bills is not None:
        paths["bills"] = folder / f"bills-{month}.csv"
        write_atomic(paths["bills"], render_bills_csv(report.bills))
    paths["audit"] = write_audit(settings, month, folder, store=store)
    outcomes = []
    if send and channels_configured(settings):
        tell("send")
        outcomes = send_report(settings, report, paths, http=http, now=at)
    return SentReport(paths, outcomes)
