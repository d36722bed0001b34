"""The work queued now, priced for the month's forecast: what the jobs waiting to run are expected to cost.

The run-rate part of the forecast (``reports._forecast``) carries on what ran so far; it knows nothing
of a big job submitted this morning. This adds each queued (or planned, not yet launched) job's expected
cost from its latest plan (``jobs.plan_json``, written by the tick: the choice, else the best of the
alternatives the planner ranked), converted into the report currency. A job is assumed to start now and
to spend evenly over its expected hours, so only the part that fits before the month's end counts. A job
the planner has not planned yet has no estimate: it is counted, and the report says so, but adds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.accounting.report_lines import convert, rounded
from scheduler.models import Frozen
from scheduler.money import CURRENCIES, FxRates, Money
from scheduler.states import JobState
from scheduler.store.tables import JobRow

__all__ = ["QueuedJob", "plan_estimate", "queued_work"]

_WAITING = (JobState.queued.value, JobState.planned.value)


class QueuedJob(Frozen):
    """A job waiting to run at the report time, and what it is expected to cost."""

    id: str
    name: str
    team: str
    project: str | None
    estimate: Money | None  # its whole expected cost (None: not planned yet)
    est_hours: Decimal | None
    in_month: Money  # the part expected before the month's end (0 without an estimate)


def plan_estimate(plan: Mapping | None) -> tuple[Money, Decimal] | None:
    """(expected cost, expected hours) of a stored plan's choice, else of its best alternative; None if neither."""
    if not isinstance(plan, Mapping):
        return None
    options = [plan.get("choice"), *(plan.get("alternatives") or ())[:1]]
    for option in options:
        if not isinstance(option, Mapping) or not isinstance(option.get("est_cost"), Mapping):
            continue
        cost = option["est_cost"]
        try:
            amount, hours = Decimal(str(cost["amount"])), Decimal(str(option.get("est_hours", 0)))
        except (KeyError, InvalidOperation):
            continue
        if cost.get("currency") in CURRENCIES and amount.is_finite() and hours.is_finite() and amount >= 0:
            return Money(amount=amount, currency=cost["currency"]), max(hours, Decimal(0))
    return None


def queued_work(session: Session, *, currency: str, fx: FxRates, hours_left: Decimal) -> tuple[QueuedJob, ...]:
    """The jobs waiting now, each with its estimate and the part of it expected in the ``hours_left``."""
    out = []
    for job in session.scalars(select(JobRow).where(JobRow.state.in_(_WAITING)).order_by(JobRow.submitted_at,
                                                                                          JobRow.id)):
        found = plan_estimate(job.plan_json)
        estimate = hours = None
        in_month = Decimal(0)
        if found is not None:
            money, hours = found
            estimate = Money(amount=convert(money.amount, money.currency, currency, fx), currency=currency)
            share = Decimal(1) if hours <= hours_left or hours == 0 else hours_left / hours
            in_month = rounded(estimate.amount * share)
        out.append(QueuedJob(id=job.id, name=job.name, team=job.team, project=job.project, estimate=estimate,
                             est_hours=hours, in_month=Money(amount=in_month, currency=currency)))
    return tuple(out)
