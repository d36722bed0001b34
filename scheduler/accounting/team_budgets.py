"""Team-month budgets in the report: budget vs actual vs forecast, per team with a budget in the settings.

The planner holds each team's billed spend this month against ``GPUSCHED_TEAM_BUDGETS`` (a job that
would not fit what is left waits, ``scheduler/planner/plan.py``); the report shows the same figure, so
"100%" in the report, in a budget alert and in a waiting job's reason mean the same thing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from decimal import Decimal

from scheduler.accounting.report_models import Breakdown, Forecast, TeamMonthBudget
from scheduler.money import FxRates, Money

__all__ = ["team_month_budgets"]

_HUNDRED = Decimal(100)


def team_month_budgets(
    by_team: Sequence[Breakdown], budgets: Mapping[str, Money], forecast: Forecast | None, currency: str,
    fx: FxRates,
) -> tuple[TeamMonthBudget, ...]:
    """One row per team in ``budgets`` (also a team that spent nothing yet), in the report currency."""
    billed = {b.key: b.billed.amount for b in by_team if not b.unused_reservation}
    # The report's forecast runs the month-so-far rate to the month's end; each team's share runs alike.
    scale = Decimal(1)
    if forecast is not None and forecast.hours_elapsed > 0:
        scale = (forecast.hours_elapsed + forecast.hours_left) / forecast.hours_elapsed
    queued: dict[str, Decimal] = defaultdict(Decimal)  # the work each team has waiting, as the forecast counts it
    for job in forecast.queued_jobs if forecast is not None else ():
        queued[job.team] += job.in_month.amount
    rows = []
    for team, budget in sorted(budgets.items()):
        limit = fx.convert(budget, currency).amount
        actual = billed.get(team, Decimal(0))
        ahead = actual * scale + queued[team]
        rows.append(TeamMonthBudget(
            team=team, budget=Money(amount=limit, currency=currency), actual=Money(amount=actual, currency=currency),
            forecast=Money(amount=ahead, currency=currency),
            used_pct=actual / limit * _HUNDRED if limit else Decimal(0),
            forecast_pct=ahead / limit * _HUNDRED if limit else Decimal(0),
            over_budget=actual >= limit, forecast_over=ahead > limit,
        ))  # fmt: skip
    return tuple(rows)
