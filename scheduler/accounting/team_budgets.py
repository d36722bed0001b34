"""Monthly budgets in the report: budget vs actual vs forecast, per team and per project with a budget set.

The planner holds each team's billed spend this month against ``GPUSCHED_TEAM_BUDGETS`` (a job that
would not fit what is left waits, ``scheduler/planner/plan.py``); the report shows the same figure, so
"100%" in the report, in a budget alert and in a waiting job's reason mean the same thing. A project's
budget (``GPUSCHED_PROJECT_BUDGETS``, job.yaml's ``project:``) is measured the same way, from the
report's by-project breakdown, and alerted at the same thresholds; nothing waits for it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import TypeVar

from scheduler.accounting.queued_work import QueuedJob
from scheduler.accounting.report_models import (
    Breakdown,
    Forecast,
    MonthBudget,
    ProjectMonthBudget,
    TeamMonthBudget,
)
from scheduler.money import FxRates, Money

__all__ = ["project_month_budgets", "team_month_budgets"]

_HUNDRED = Decimal(100)
B = TypeVar("B", bound=MonthBudget)


def _rows(
    make: Callable[..., B], field: str, rows: Sequence[Breakdown], budgets: Mapping[str, Money],
    forecast: Forecast | None, owner: Callable[[QueuedJob], str | None], currency: str, fx: FxRates,
) -> tuple[B, ...]:
    billed = {b.key: b.billed.amount for b in rows if not b.unused_reservation}
    # The report's forecast runs the month-so-far rate to the month's end; each share runs alike, and each
    # adds its own part of the work queued now.
    scale = Decimal(1)
    if forecast is not None and forecast.hours_elapsed > 0:
        scale = (forecast.hours_elapsed + forecast.hours_left) / forecast.hours_elapsed
    queued: dict[str | None, Decimal] = defaultdict(Decimal)
    for job in forecast.queued_jobs if forecast is not None else ():
        queued[owner(job)] += job.in_month.amount
    out = []
    for name, budget in sorted(budgets.items()):
        limit = fx.convert(budget, currency).amount
        actual = billed.get(name, Decimal(0))
        ahead = actual * scale + queued[name]
        out.append(make(**{field: name},
            budget=Money(amount=limit, currency=currency), actual=Money(amount=actual, currency=currency),
            forecast=Money(amount=ahead, currency=currency),
            used_pct=actual / limit * _HUNDRED if limit else Decimal(0),
            forecast_pct=ahead / limit * _HUNDRED if limit else Decimal(0),
            over_budget=actual >= limit, forecast_over=ahead > limit,
        ))  # fmt: skip
    return tuple(out)


def team_month_budgets(
    by_team: Sequence[Breakdown], budgets: Mapping[str, Money], forecast: Forecast | None, currency: str,
    fx: FxRates,
) -> tuple[TeamMonthBudget, ...]:
    """One row per team in ``budgets`` (also a team that spent nothing yet), in the report currency."""
    return _rows(TeamMonthBudget, "team", by_team, budgets, forecast, lambda j: j.team, currency, fx)


def project_month_budgets(
    by_project: Sequence[Breakdown], budgets: Mapping[str, Money], forecast: Forecast | None, currency: str,
    fx: FxRates,
) -> tuple[ProjectMonthBudget, ...]:
    """One row per project in ``budgets`` (also one that spent nothing yet), in the report currency."""
    return _rows(ProjectMonthBudget, "project", by_project, budgets, forecast, lambda j: j.project, currency, fx)
