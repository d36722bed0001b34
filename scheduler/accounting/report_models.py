"""The monthly cost report's shape: ``MonthlyReport`` and the rows it is made of.

Shared by ``scheduler/accounting/reports.py``, which builds a report from the ledger, and
``scheduler/accounting/report_render.py``, which draws it; living apart from both keeps
the two free of an import cycle. Amounts are exact Decimals: nothing here rounds.

One set of definitions holds everywhere (headline, tables, charts, CSV):

* **billed**: spot and on-demand hours as the clouds bill them by the hour;
* **reserved fee**: what the reservations cost in the period, amortized (``accounting/reservations.py``);
* **cost** = billed + reserved fee; the report's ``total`` is what the company pays for GPUs in the
  period, and every breakdown's rows (with the "unused reservations" row) add up to it;
* **on-demand equivalent**: the billed hours at on-demand prices; **savings** = it - billed. Prepaid
  reserved hours are left out of both: their on-demand value is shown apart, beside the reservation's fee.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import ClassVar

from scheduler.accounting.advice import Advice
from scheduler.accounting.bill_models import BillReconciliation
from scheduler.accounting.queued_work import QueuedJob
from scheduler.accounting.unit_costs import UnitCosts
from scheduler.models import Frozen
from scheduler.money import Money

__all__ = [
    "UNUSED_RESERVATIONS",
    "Breakdown",
    "DayCost",
    "Forecast",
    "JobCost",
    "MonthTotals",
    "MonthBudget",
    "MonthlyReport",
    "ProjectMonthBudget",
    "ReservationUse",
    "TeamBudget",
    "TeamCapacityCost",
    "TeamMonthBudget",
]

# The key of the row every breakdown gives to the prepaid hours nobody used.
UNUSED_RESERVATIONS = "(unused reservations)"


class Breakdown(Frozen):
    key: str
    hours: Decimal  # machine-hours of every capacity type, busy and idle
    billed: Money  # spot and on-demand hours, as billed
    on_demand_equivalent: Money  # those billed hours at on-demand prices
    savings: Money  # on_demand_equivalent - billed
    reserved_hours: Decimal  # hours a job ran on a reserved machine
    reserved_fee: Money  # the amortized fee of those hours (of the unused ones, in the unused row)
    cost: Money  # billed + reserved_fee
    share_pct: Decimal  # of the month's total cost; 0 when the month cost nothing
    unused_reservation: bool = False  # the row of prepaid hours nobody used


class TeamCapacityCost(Frozen):
    """One cell of the team x capacity table behind the stacked team chart (cost = billed + reserved fee)."""

    team: str
    capacity: str
    hours: Decimal
    cost: Money


class DayCost(Frozen):
    """One UTC day; a day after the report time is ``future`` and has no figures (not zero ones)."""

    day: date
    future: bool
    hours: Decimal | None
    billed: Money | None
    idle_cost: Money | None  # the part of ``billed`` paid for machines without a job
    reserved_fee: Money | None
    cost: Money | None  # billed + reserved_fee


class ReservationUse(Frozen):
    """One reservation (those of one provider, region and instance type, pooled) over the period."""

    provider: str
    region: str
    instance_type: str
    count: int
    note: str
    configured: bool  # False: reserved machines ran that no reservation in the settings covers
    fee_set: bool  # False: a reservation has no fee in the settings, so it counts as free
    prepaid_hours: Decimal  # count x hours of the term in the period
    busy_hours: Decimal  # a job ran on it
    idle_hours: Decimal  # up, without a job: prepaid idle
    utilisation_pct: Decimal | None  # busy / prepaid; None with nothing prepaid
    fee: Money  # amortized over the period
    used_fee: Money  # the busy hours' part, charged to whoever ran them
    unused_fee: Money  # fee - used_fee: its own line in every breakdown
    on_demand_value: Money  # the busy hours at on-demand prices: what the work would have cost without it


class Forecast(Frozen):
    """The month to its end, in three parts: the run rate (billed at the month-so-far hourly rate), the
    reservation fees as amortized, and the work queued now (``queued_work``: each waiting job's planned
    cost, the part of it that fits before the month's end)."""

    total: Money  # billed + reserved_fees + queued
    billed: Money  # the run rate: billed so far, carried on to the month's end
    reserved_fees: Money
    queued: Money
    queued_jobs: tuple[QueuedJob, ...]
    hours_elapsed: Decimal
    hours_left: Decimal

    @property
    def unestimated(self) -> int:
        """Queued jobs without a plan yet: counted, priced at nothing."""
        return sum(1 for j in self.queued_jobs if j.estimate is None)


class MonthTotals(Frozen):
    """A month's headline, for the trend table; each month at its own FX rates."""

    month: str
    fx: dict[str, Decimal]
    complete: bool  # False: the month was still running at the report time
    total: Money
    billed: Money
    reserved_fees: Money
    reserved_unused: Money
    on_demand_equivalent: Money
    savings: Money


class JobCost(Frozen):
    id: str
    name: str
    team: str
    project: str | None
    kind: str
    state: str
    hours: Decimal
    cost: Money  # billed this month: what the job's budget is held against (reserved hours cost it nothing)
    on_demand_equivalent: Money  # its billed hours at on-demand prices
    reserved_hours: Decimal  # busy on a reserved machine
    reserved_fee: Money  # those hours' share of the reservation's amortized fee (not held against the budget)
    cost_to_date: Money  # billed in every month up to and including this one
    budget: Money | None
    over_budget: bool
    preemptions: int
    submitted_by: str | None = None  # the name on the API token that submitted it


class TeamBudget(Frozen):
    """A team's jobs that carry a budget: their budgets summed against their cost to date."""

    team: str
    jobs: int
    budget: Money
    actual: Money
    used_pct: Decimal
    over_budget: bool


class MonthBudget(Frozen):
    """A monthly budget in the settings against what was billed this month, and the forecast.

    ``actual`` is the billed spend (spot and on-demand) in the month; reserved hours cost nothing at the
    margin (the planner holds a team's against its budget this way). ``forecast`` runs ``actual`` to the
    month's end at the month-so-far hourly rate, as the report's own forecast does, plus the part of the
    work queued now that is the team's or project's (equal to ``actual`` once the month is over).
    """

    scope: ClassVar[str] = ""  # "team" | "project"
    budget: Money  # in the report currency
    actual: Money
    forecast: Money
    used_pct: Decimal
    forecast_pct: Decimal
    over_budget: bool  # actual >= budget: a team's new jobs wait (a project's budget is not enforced)
    forecast_over: bool  # forecast > budget

    @property
    def name(self) -> str:
        raise NotImplementedError


class TeamMonthBudget(MonthBudget):
    """A team's monthly budget (GPUSCHED_TEAM_BUDGETS); the planner enforces it."""

    scope: ClassVar[str] = "team"
    team: str

    @property
    def name(self) -> str:
        return self.team


class ProjectMonthBudget(MonthBudget):
    """A project's monthly budget (GPUSCHED_PROJECT_BUDGETS): reported and alerted, not enforced."""

    scope: ClassVar[str] = "project"
    project: str

    @property
    def name(self) -> str:
        return self.project


class MonthlyReport(Frozen):
    month: str
    currency: str
    fx: dict[str, Decimal]  # report-currency units per one unit of each other currency
    fx_dated: bool  # True: the rates set for this month; False: the default rates
    generated_at: datetime
    period_start: datetime
    period_end: datetime  # exclusive
    as_of: datetime  # figures run up to here: the period end, or the report time in a running month
    records: int  # cost lines aggregated; 0 with no reservation fee either means no spend recorded
    total: Money  # billed + reserved_fees: what the GPUs cost in the period, amortized
    billed: Money
    reserved_fees: Money
    reserved_unused: Money
    on_demand_equivalent: Money  # of the billed hours
    savings: Money  # on_demand_equivalent - billed
    savings_pct: Decimal
    busy_hours: Decimal
    idle_hours: Decimal  # billed_idle_hours + prepaid_idle_hours
    billed_hours: Decimal
    billed_idle_hours: Decimal
    prepaid_idle_hours: Decimal
    idle_cost: Money  # billed idle: what machines without a job cost by the hour
    reserved_prepaid_hours: Decimal
    reserved_busy_hours: Decimal
    reserved_utilisation_pct: Decimal | None
    reserved_on_demand_value: Money
    reservations: tuple[ReservationUse, ...]
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
    forecast: Forecast | None  # None once the month is over (or before it began)
    trend: tuple[MonthTotals, ...]  # the previous months, oldest first, then this one
    jobs: tuple[JobCost, ...]
    budget_vs_actual: tuple[TeamBudget, ...]
    notes: tuple[str, ...]
    team_budgets: tuple[TeamMonthBudget, ...] = ()  # the teams with a monthly budget in the settings
    project_budgets: tuple[ProjectMonthBudget, ...] = ()  # the projects with one
    advice: Advice | None = None  # commitments and right-sizing over the days before ``as_of``
    bills: BillReconciliation | None = None  # the clouds' own bills against the ledger, when bills are set up
    unit_costs: UnitCosts | None = None  # per training run, per 1,000 images, per GPU-hour (``unit_costs``)

    @property
    def empty(self) -> bool:
        return self.records == 0 and self.reserved_fees.amount == 0
