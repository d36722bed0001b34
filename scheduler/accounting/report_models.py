"""The monthly cost report's shape: ``MonthlyReport`` and the rows it is made of.

Shared by ``scheduler/accounting/reports.py``, which builds a report from the ledger, and
``scheduler/accounting/report_render.py``, which draws it; living apart from both keeps
the two free of an import cycle. Amounts are exact Decimals: nothing here rounds.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

from scheduler.models import Frozen
from scheduler.money import Money

__all__ = ["Breakdown", "DayCost", "JobCost", "MonthlyReport", "TeamBudget", "TeamCapacityCost"]


class Breakdown(Frozen):
    key: str
    hours: Decimal
    cost: Money
    on_demand_equivalent: Money
    share_pct: Decimal  # of the month's total cost; 0 when the month cost nothing


class TeamCapacityCost(Frozen):
    """One cell of the team x capacity table behind the stacked team chart."""

    team: str
    capacity: str
    hours: Decimal
    cost: Money


class DayCost(Frozen):
    day: date
    hours: Decimal
    cost: Money
    idle_cost: Money  # the part of ``cost`` paid for machines without a job


class JobCost(Frozen):
    id: str
    name: str
    team: str
    project: str | None
    kind: str
    state: str
    hours: Decimal
    cost: Money  # this month
    on_demand_equivalent: Money
    cost_to_date: Money  # every month up to and including this one: what a budget is held against
    budget: Money | None
    over_budget: bool
    preemptions: int


class TeamBudget(Frozen):
    """A team's jobs that carry a budget: their budgets summed against their cost to date."""

    team: str
    jobs: int
    budget: Money
    actual: Money
    used_pct: Decimal
    over_budget: bool


class MonthlyReport(Frozen):
    month: str
    currency: str
    fx: dict[str, Decimal]  # report-currency units per one unit of each other currency
    generated_at: datetime
    period_start: datetime
    period_end: datetime  # exclusive
    records: int  # cost lines aggregated; 0 means no spend recorded
    total: Money
    on_demand_equivalent: Money
    savings: Money
    savings_pct: Decimal
    busy_hours: Decimal
    idle_hours: Decimal
    idle_cost: Money
    idle_stops: int
    idle_assumed_hours: Decimal  # the assumption behind the two figures below
    idle_hours_avoided: Decimal
    idle_cost_avoided: Money
    by_team: tuple[Breakdown, ...]
    by_project: tuple[Breakdown, ...]
    by_cloud: tuple[Breakdown, ...]
    by_gpu: tuple[Breakdown, ...]
    by_capacity: tuple[Breakdown, ...]
    team_by_capacity: tuple[TeamCapacityCost, ...]
    by_day: tuple[DayCost, ...]
    jobs: tuple[JobCost, ...]
    budget_vs_actual: tuple[TeamBudget, ...]
    notes: tuple[str, ...]
