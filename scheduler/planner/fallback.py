"""What a job refused by its deadline runs on instead, where running can still help (``fall_back``).

The safety margin guards a plan that has time to spare. A job refused because its fastest run is on
time only inside that margin, or not at all, is often better run than dropped: the daemon's tick and
``gpusched plan`` ask this module, so what the preview says is what the daemon does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from scheduler.models import Capacity, Offer
from scheduler.planner.book import Market
from scheduler.planner.inputs import Measured, PlanJob, PlannerPolicy, TeamBudget
from scheduler.planner.plan import Decision, plan

__all__ = ["fall_back"]


def fall_back(d: Decision, job: PlanJob, offers: Sequence[Offer], now: datetime, policy: PlannerPolicy, *,
              measured: Measured | None = None, team_budgets: Mapping[str, TeamBudget] | None = None,
              market: Market | None = None) -> Decision:
    """``d``, or, when it refuses ``job`` by its deadline, the on-demand run that can still help.

    First the cheapest on-demand run that meets the deadline without the safety margin (the cheapest
    run with no deadline at all can finish hours later than a dearer one that is on time). That goes
    for a job that never ran too (capacity ``auto`` or ``on-demand``: one that asked for spot or
    reserved only keeps its choice): its fastest run is on time only inside the margin, so it runs at
    risk and says so, rather than being refused for an estimate as likely to be pessimistic as not
    (issue 17: the baselines, whose estimates were learnt from other runs, ran such jobs that ours
    refused). Only a job that already ran (``epochs_done`` or ``preemptions``) goes on when no run
    meets the deadline, on on-demand, keeping its epochs; a new job is refused with the deadline to ask
    for. Ours takes the run that finishes soonest, or the cheapest of those that finish within the safety
    margin's share of the time to it (``_soonest_late``): the cheapest run of all can finish hours after
    a dearer one (a V100 run done 3 h late where an A100 run was 3 minutes late, issue 17). The margin
    and soonest steps are ours only: the simulator's baselines stand for tools that know no margin to give
    up, and keep the plain fall-back (the cheapest run) for a job that ran. Each step plans with
    ``team_budgets``, so a job refused for its team's money stays refused.
    """
    if d.action != "refuse" or job.deadline_at is None:
        return d
    ran = bool(job.epochs_done or job.preemptions)
    if not ran and (policy.strategy != "gpusched" or job.spec.policy.capacity not in ("auto", "on-demand")):
        return d
    spec = job.spec.with_capacity(Capacity.on_demand.value)
    if policy.strategy == "gpusched":
        on_time = job.model_copy(update={"spec": spec})
        [again] = plan([on_time], offers, [], now, policy.model_copy(update={"deadline_safety": 0.0}),
                       measured=measured, team_budgets=team_budgets)
        if again.action == "launch":
            why = "the deadline leaves no safety margin" if ran else "at risk: on time only inside the safety margin"
            return again.model_copy(update={"reason": f"{why} ({d.reason}); on on-demand with none: {again.reason}"})
    if not ran:
        return d
    late = job.model_copy(update={"deadline_at": None, "spec": spec})
    [again] = plan([late], offers, [], now, policy, measured=measured, team_budgets=team_budgets, market=market)
    if again.action != "launch":
        return d
    if policy.strategy != "gpusched":
        return again.model_copy(update={"reason": f"the deadline can no longer be met ({d.reason}); "
                                                  f"finishing on the cheapest run: {again.reason}"})
    again = _soonest_late(again, late, offers, now, policy, measured, team_budgets)
    return again.model_copy(update={"reason": f"the deadline can no longer be met ({d.reason}); "
                                              f"finishing on on-demand as soon as possible: {again.reason}"})


_MINUTE = timedelta(minutes=1)


def _soonest_late(cheapest: Decision, late: PlanJob, offers: Sequence[Offer], now: datetime, policy: PlannerPolicy,
                  measured: Measured | None, team_budgets: Mapping[str, TeamBudget] | None) -> Decision:
    """Among the on-demand runs of a job past its deadline, the cheapest of those that finish within the safety
    margin's share of the time to the soonest finish any run makes; ``cheapest`` (the cheapest run of all) where
    that is one of them.

    The soonest finish is found to the minute by bisecting the deadline the planner is asked to meet (with no
    margin): whether some run meets a deadline only grows with it, and each question is one job's plan."""
    assert cheapest.choice is not None
    exact = policy.model_copy(update={"deadline_safety": 0.0})

    def meets(deadline: datetime) -> Decision | None:
        [d] = plan([late.model_copy(update={"deadline_at": deadline})], offers, [], now, exact,
                   measured=measured, team_budgets=team_budgets)
        return d if d.action == "launch" else None

    lo, hi = now, cheapest.choice.finish_by  # nothing meets ``lo``; the cheapest run meets ``hi``
    while hi - lo > _MINUTE:
        mid = lo + (hi - lo) / 2
        if meets(mid) is not None:
            hi = mid
        else:
            lo = mid
    within = hi + (hi - now) * policy.deadline_safety
    if cheapest.choice.finish_by <= within:
        return cheapest
    return meets(within) or cheapest
