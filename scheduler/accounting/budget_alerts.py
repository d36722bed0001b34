"""Budget alerts: tell the channels when a team's or a project's month's spend crosses 50 / 80 / 100% of its budget.

The daemon calls ``check_budget_alerts`` every ``GPUSCHED_BUDGET_CHECK_MINUTES``. Spend is the report's
own "actual" for the team (billed this month, as the planner holds it against the budget), so an alert,
the report's "Team budgets" table and a waiting job's reason agree; a project's (GPUSCHED_PROJECT_BUDGETS)
is its billed spend in the report's "Project budgets" table. Each (scope, name, month, threshold) is
announced once: its row in ``budget_alerts`` is claimed before sending (a second daemon's claim fails on
the unique key and it sends nothing), and released only when no channel took the message, so the next
check tries again. A restart does not repeat an alert. Crossing several thresholds at once (a big job's
first hours) sends one message, for the highest.
"""

from __future__ import annotations

from datetime import datetime

import httpx
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from scheduler.accounting import ledger
from scheduler.accounting.delivery import Delivered, Notice, channels_configured, deliver, mail_message
from scheduler.accounting.report_models import MonthBudget, MonthlyReport
from scheduler.accounting.report_render import fmt_money, fmt_pct
from scheduler.accounting.reports import build_report
from scheduler.logs import get_logger
from scheduler.models import Frozen
from scheduler.settings import Settings
from scheduler.store.database import Store
from scheduler.store.tables import BudgetAlertRow
from scheduler.times import utc

__all__ = ["BudgetAlert", "alert_notice", "check_budget_alerts"]

log = get_logger(__name__)


class BudgetAlert(Frozen):
    """One alert this check made: whose budget (a team's or a project's), the thresholds it newly crossed, and
    what the channels did."""

    scope: str  # team | project
    name: str
    month: str
    thresholds: tuple[int, ...]
    used_pct: str
    outcomes: tuple[Delivered, ...]
    recorded: bool  # False: no channel took it; it is tried again at the next check


def _at_limit(settings: Settings) -> str:
    waits = "new jobs of the team wait until next month or a raised GPUSCHED_TEAM_BUDGETS"
    if settings.budget_at_limit == "stop":
        return waits + "; its running training and inference jobs stop at their next checkpoint and wait too"
    return waits


def alert_notice(settings: Settings, month: str, row: MonthBudget, threshold: int) -> Notice:
    facts = [
        (row.scope.capitalize(), row.name),
        ("Month", month),
        ("Spent (billed)", f"{fmt_money(row.actual)} of {fmt_money(row.budget)} ({fmt_pct(row.used_pct)})"),
        ("Forecast to month end", f"{fmt_money(row.forecast)} ({fmt_pct(row.forecast_pct)})"),
    ]
    if threshold >= 100:
        facts.append(("What happens now", _at_limit(settings) if row.scope == "team" else
                      "nothing is held: a project's budget is watched, not enforced (team budgets are)"))
    return Notice(
        title=f"Budget alert: {row.scope} {row.name} passed {threshold}% of its {month} GPU budget",
        facts=tuple(facts),
        footer=f"Thresholds: GPUSCHED_BUDGET_ALERT_THRESHOLDS; budgets: GPUSCHED_{row.scope.upper()}_BUDGETS.",
        severity="critical" if threshold >= 100 else "warning",
    )


def _claim(store: Store, now: datetime, month: str, row: MonthBudget, thresholds: list[int]) -> list[int]:
    """The thresholds of ``thresholds`` this call claimed (not announced before, by us or another daemon)."""
    with store.session(write=False) as s:
        done = set(s.scalars(select(BudgetAlertRow.threshold_pct).where(
            BudgetAlertRow.scope == row.scope, BudgetAlertRow.name == row.name, BudgetAlertRow.month == month)))
    claimed = []
    for pct in thresholds:
        if pct in done:
            continue
        try:
            with store.session() as s:
                s.add(BudgetAlertRow(scope=row.scope, name=row.name, month=month, threshold_pct=pct, at=now,
                                     actual_amount=row.actual.amount, budget_amount=row.budget.amount,
                                     currency=row.budget.currency, delivered=""))
        except IntegrityError:
            continue  # another daemon claimed it first
        claimed.append(pct)
    return claimed


def _settle(store: Store, month: str, row: MonthBudget, thresholds: list[int], outcomes: list[Delivered],
            channels: list[str]) -> bool:
    """Keep the claims with what took the alert; release them when channels exist and none took it."""
    took = [f"{o.channel}: {o.detail}" for o in outcomes if o.ok]
    keep = bool(took) or not channels
    with store.session() as s:
        rows = s.scalars(select(BudgetAlertRow).where(
            BudgetAlertRow.scope == row.scope, BudgetAlertRow.name == row.name, BudgetAlertRow.month == month,
            BudgetAlertRow.threshold_pct.in_(thresholds))).all()
        if keep:
            for r in rows:
                r.delivered = "; ".join(took) if took else "no channel is set up (GPUSCHED_SMTP_URL, GPUSCHED_WEBHOOKS)"
        else:
            s.execute(delete(BudgetAlertRow).where(BudgetAlertRow.id.in_([r.id for r in rows])))
    return keep


def _month_so_far(settings: Settings, store: Store, month: str, now: datetime) -> MonthlyReport:
    """The month's report as of ``now``, read only: the tick writes the ledger, and a second writer of the
    same intervals (this check runs on its own thread) could record them twice. Usage the tick has not
    written yet is priced on the fly, as the planner's budget check prices it."""
    with store.session(write=False) as s:
        pending = [line for line in ledger.cost_lines(s, month, now) if not line.final]
        return build_report(
            s, month, currency=settings.report_currency, fx=settings.fx_for(month), now=now, open_costs=pending,
            reserved=settings.reserved, fx_for=settings.fx_for, fx_dated=settings.fx_dated(month),
            trend_months=0, team_budgets=settings.team_budgets, project_budgets=settings.project_budgets,
        )  # fmt: skip


def check_budget_alerts(settings: Settings, store: Store, now: datetime, *,
                        http: httpx.Client | None = None) -> list[BudgetAlert]:
    """Alert every team and project whose month's spend newly crossed a threshold; the alerts made (none: nothing
    new)."""
    if not (settings.team_budgets or settings.project_budgets) or not settings.budget_alert_thresholds:
        return []
    now = utc(now)
    month = now.strftime("%Y-%m")
    report = _month_so_far(settings, store, month, now)
    channels = channels_configured(settings)
    alerts = []
    rows: list[MonthBudget] = [*report.team_budgets, *report.project_budgets]
    for row in rows:
        crossed = [t for t in settings.budget_alert_thresholds if row.used_pct >= t]
        claimed = _claim(store, now, month, row, crossed) if crossed else []
        if not claimed:
            continue
        top = max(claimed)
        notice = alert_notice(settings, month, row, top)
        mail = None
        if "mail" in channels:
            text = "\n".join([notice.title, ""] + [f"{label}: {value}" for label, value in notice.facts]
                             + ["", notice.footer or ""])
            mail = mail_message(sender=settings.report_mail_from, to=settings.report_mail_to, subject=notice.title,
                                at=now, text=text)
        outcomes = deliver(settings, notice, mail=mail, http=http, now=now) if channels else []
        recorded = _settle(store, month, row, claimed, outcomes, channels)
        log.info("budget_alert", scope=row.scope, name=row.name, month=month, thresholds=claimed,
                 used_pct=str(row.used_pct), delivered=sum(o.ok for o in outcomes), channels=len(channels),
                 recorded=recorded)
        alerts.append(BudgetAlert(scope=row.scope, name=row.name, month=month, thresholds=tuple(claimed),
                                  used_pct=fmt_pct(row.used_pct), outcomes=tuple(outcomes), recorded=recorded))
    return alerts
