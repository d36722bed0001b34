"""What the planner is given: the jobs to place, the slots we hold, the team budgets and the policy."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Literal

from pydantic import Field

from scheduler.models import Capacity, Frozen, JobSpec, Kind, Offer
from scheduler.money import Currency, FxRates, Money

Source = Literal["new", "warm", "reserved"]  # where an option's machine comes from
Measured = Mapping[tuple[str, str, int], float]  # perf.estimate's measured rates: (model, gpu, img_size) -> img/s
OwnRates = tuple[tuple[str, str, int, float], ...]  # one job's own: (model, gpu, img_size, img/s), ``own_first``


class TeamBudget(Frozen):
    """A team's monthly budget and what is left of it this month (spend so far deducted)."""

    monthly: Money
    left: Money


class PlanJob(Frozen):
    id: str
    spec: JobSpec
    submitted_at: datetime
    deadline_at: datetime | None  # resolved absolute deadline
    epochs_done: int = 0  # resume point for train jobs
    preemptions: int = 0
    restarts: int | None = None  # losses in a row without progress (None: every preemption counts)
    avoid: frozenset[str] = frozenset()  # "Offer.key|capacity" that recently raised NoCapacity
    spent: Money | None = None  # already spent on earlier attempts; counts against the budget
    # The job's own measured rates, (model, gpu, img_size, img/s per GPU), from its earlier attempts' epochs:
    # they read before the pooled ``measured`` of every job (``perf_learning.own_rates``).
    own_rates: OwnRates = ()
    # A spot stint (training with a deadline, steered: ``lifecycle.steering``): the steering rule watches the
    # job at every checkpoint and moves it to on-demand while that still meets the deadline. On spot it must
    # then finish through its expected reclaims by the deadline itself and leave room, within the safety
    # margin, for that move (its uninterrupted hours plus an on-demand changeover); the margin and the bad
    # case are the rule's to keep. A run its expected reclaims make late on spot is a stint only with the rule's
    # move to the fastest on-demand setup, and is priced with it (``cost.stint_leg``, ``rank.Timing.leg``).
    stint: bool = False

    @property
    def as_stint(self) -> bool:
        """``stint`` where it applies: a training job with a deadline (the steering rule watches no other)."""
        return self.stint and self.deadline_at is not None and self.spec.kind is Kind.train


def own_first(measured: Measured | None, own: OwnRates) -> Measured:
    """``measured`` with one job's own rates in place of the pooled ones of the same keys."""
    if not own:
        return measured or {}
    return {**(measured or {}), **{(model, gpu, img_size): rate for model, gpu, img_size, rate in own}}


class FleetSlot(Frozen):
    """Capacity we already hold: a warm idle instance of ours, or a free unit of owned reserved capacity."""

    kind: Literal["warm", "reserved"]
    instance_id: str | None  # warm: our instance id; reserved: None until launched
    offer: Offer
    capacity: Capacity  # warm: what it was launched with; reserved: Capacity.reserved
    until: datetime | None = None  # reserved: the commitment's end


class PlannerPolicy(Frozen):
    currency: Currency = "CNY"  # all costs compared in this currency
    fx: FxRates = FxRates()
    boot_hours: float = Field(default=0.05, ge=0)  # launch -> running
    restart_hours: float = Field(default=0.15, ge=0)  # after a spot reclaim: boot + image pull + data/checkpoint
    deadline_safety: float = Field(default=0.1, ge=0, lt=1)  # finish with this share of the remaining time spare
    max_preemptions_before_on_demand: int | None = Field(default=None, ge=0)  # None: max_restarts decides
    # Baselines for `gpusched simulate`: "on-demand" (everything on-demand, cheapest fitting),
    # "spot-greedy" / "skypilot-like" (cheapest spot list price, blind to interruptions).
    strategy: Literal["gpusched", "on-demand", "spot-greedy", "skypilot-like"] = "gpusched"

    @property
    def naive_spot(self) -> bool:
        return self.strategy in ("spot-greedy", "skypilot-like")
