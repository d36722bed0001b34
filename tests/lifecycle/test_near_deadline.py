"""Where a deadline is near, the tick and the steering rule follow the planner's safety margin.

A job that already ran and is refused by its deadline is finished on on-demand (``planner.fallback``); a job
that never ran and is on time only inside the margin runs at risk on on-demand.

Issue 17 (diagnosis months tight-deadlines 41, heavy-inference 41): a yolov9-c retrain, twice reclaimed,
was refused because its fastest on-demand run (a V100) finished inside the 10% safety margin; with the
deadline dropped, the cheapest on-demand run (an L4, 30% slower) was taken and finished 5.7 h late,
while the V100 run would have been on time. The margin guards a plan that has time to spare; a job
with none left takes the cheapest run that is still on time, and when there is none, the run that
finishes soonest (or the cheapest within the margin's share of the time to that finish).

The steering rule weighs slack without that margin: it moved such a job, on on-demand with 2 h to
spare, to spot, and the planner put it straight back on on-demand (a boot and half an epoch lost).
It now asks the planner first (``steering._planner_takes_spot``).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from providers.catalog import load_catalog
from scheduler.jobs.jobfile import parse_job
from scheduler.lifecycle.steering import _on_time_later_on_demand, _planner_takes_spot
from scheduler.money import Money
from scheduler.planner.fallback import fall_back
from scheduler.planner.inputs import PlanJob, PlannerPolicy, TeamBudget
from scheduler.planner.plan import plan
from tests.lifecycle.test_lifecycle import World, job_spec

NOW = datetime(2026, 11, 4, 5, tzinfo=timezone.utc)
OFFERS = [o for o in load_catalog() if o.region == "us-east-1" and o.instance_type in ("p3.2xlarge", "g6.xlarge")]


def job_file(gpus: list[str], capacity: str):
    return parse_job({
        "name": "weed-spot-c-w45", "team": "agri", "kind": "train", "model": "yolov9-c",
        "data": {"uri": "s3://bucket/weed", "train_images": 57600, "val_images": 5760},
        "train": {"epochs": 60, "batch": 64}, "resources": {"gpus": gpus},
        "where": {"providers": ["aws"], "regions": ["us-east-1"]},
        "policy": {"deadline": "34h", "capacity": capacity},
    }, "test.yaml")


SPEC = job_file(["V100", "L4"], "auto")


def on_demand_hours(gpu: str, epochs_done: int = 4) -> float:
    """The planner's own estimate of the job's remaining run on one GPU, on on-demand."""
    job = PlanJob(id="probe", spec=job_file([gpu], "on-demand"), submitted_at=NOW, deadline_at=None,
                  epochs_done=epochs_done, preemptions=2 if epochs_done else 0)
    [d] = plan([job], OFFERS, [], NOW, PlannerPolicy())
    assert d.action == "launch" and d.choice is not None
    return d.choice.est_hours


def job_due_in(hours: float) -> PlanJob:
    return PlanJob(id="j", spec=SPEC, submitted_at=NOW - timedelta(hours=2), deadline_at=NOW + timedelta(hours=hours),
                   epochs_done=4, preemptions=2)


def best_effort(job: PlanJob):
    [refused] = plan([job], OFFERS, [], NOW, PlannerPolicy())
    assert refused.action == "refuse"
    return fall_back(refused, job, OFFERS, NOW, PlannerPolicy())


def test_the_setup_has_a_fast_dear_run_and_a_slow_cheap_one() -> None:
    v100, l4 = on_demand_hours("V100"), on_demand_hours("L4")
    assert l4 > v100 / 0.95  # the L4 misses a deadline the V100 meets with under 10% to spare


def test_inside_the_safety_margin_the_on_time_run_is_taken_not_the_cheapest() -> None:
    v100 = on_demand_hours("V100")
    d = best_effort(job_due_in(v100 / 0.95))  # on time with 5% spare: inside the 10% margin
    assert d.action == "launch" and d.choice is not None
    assert (d.choice.gpu, d.choice.capacity.value) == ("V100", "on-demand")
    assert d.choice.finish_by <= NOW + timedelta(hours=v100 / 0.95)
    assert d.reason.startswith("the deadline leaves no safety margin (")


def test_past_any_on_time_run_the_run_that_finishes_soonest_is_taken() -> None:
    """Issue 17 (tight-deadlines, 32): a retrain 3 minutes late on an A100 was finished on a V100, the
    cheapest run, 3 h late. The L4 here is cheaper but finishes 15 h after the V100."""
    v100 = on_demand_hours("V100")
    d = best_effort(job_due_in(v100 * 0.9))  # even the fastest run is late
    assert d.action == "launch" and d.choice is not None
    assert (d.choice.gpu, d.choice.capacity.value) == ("V100", "on-demand")
    assert d.reason.startswith("the deadline can no longer be met (")
    assert "as soon as possible" in d.reason


def test_past_any_on_time_run_the_cheapest_run_within_the_margin_of_the_soonest_is_taken() -> None:
    """With a margin wide enough that the L4 finishes within its share of the time to the V100's
    finish, the cheaper L4 is taken: a dearer run is bought only for a finish that much sooner."""
    v100, l4 = on_demand_hours("V100"), on_demand_hours("L4")
    wide = PlannerPolicy(deadline_safety=0.9)
    assert l4 < v100 * 1.9  # inside 90% of the time to the soonest finish
    job = job_due_in(v100 * 0.9)
    [refused] = plan([job], OFFERS, [], NOW, wide)
    assert refused.action == "refuse"
    d = fall_back(refused, job, OFFERS, NOW, wide)
    assert d.action == "launch" and d.choice is not None
    assert (d.choice.gpu, d.choice.capacity.value) == ("L4", "on-demand")


def test_the_baselines_finish_a_late_job_on_the_cheapest_run() -> None:
    job = job_due_in(on_demand_hours("V100") * 0.9)
    baseline = PlannerPolicy(strategy="on-demand")
    [refused] = plan([job], OFFERS, [], NOW, baseline)
    assert refused.action == "refuse"
    d = fall_back(refused, job, OFFERS, NOW, baseline)
    assert d.action == "launch" and d.choice is not None
    assert (d.choice.gpu, d.choice.capacity.value) == ("L4", "on-demand")
    assert "finishing on the cheapest run" in d.reason


def new_job_due_in(hours: float) -> PlanJob:
    return PlanJob(id="j", spec=SPEC, submitted_at=NOW, deadline_at=NOW + timedelta(hours=hours))


def test_a_job_that_never_ran_runs_at_risk_inside_the_margin() -> None:
    v100 = on_demand_hours("V100", epochs_done=0)
    job = new_job_due_in(v100 / 0.95).model_copy(update={"epochs_done": 0, "preemptions": 0})
    [refused] = plan([job], OFFERS, [], NOW, PlannerPolicy())
    assert refused.action == "refuse"
    d = fall_back(refused, job, OFFERS, NOW, PlannerPolicy())
    assert d.action == "launch" and d.choice is not None
    assert (d.choice.gpu, d.choice.capacity.value) == ("V100", "on-demand")
    assert d.choice.finish_by <= NOW + timedelta(hours=v100 / 0.95)
    assert d.reason.startswith("at risk: on time only inside the safety margin (")


def test_a_job_that_never_ran_is_refused_when_no_run_is_on_time() -> None:
    job = new_job_due_in(on_demand_hours("V100", epochs_done=0) * 0.9)
    [refused] = plan([job], OFFERS, [], NOW, PlannerPolicy())
    assert fall_back(refused, job, OFFERS, NOW, PlannerPolicy()) is refused


def test_a_new_job_that_asked_for_spot_only_is_not_put_on_on_demand() -> None:
    job = new_job_due_in(on_demand_hours("V100", epochs_done=0) / 0.95)
    job = job.model_copy(update={"spec": job_file(["V100", "L4"], "spot")})
    [refused] = plan([job], OFFERS, [], NOW, PlannerPolicy())
    assert refused.action == "refuse"
    assert fall_back(refused, job, OFFERS, NOW, PlannerPolicy()) is refused


def test_the_baselines_refuse_a_job_that_never_ran_inside_the_margin() -> None:
    job = new_job_due_in(on_demand_hours("V100", epochs_done=0) / 0.95)
    baseline = PlannerPolicy(strategy="on-demand")
    [refused] = plan([job], OFFERS, [], NOW, baseline)
    assert refused.action == "refuse"
    assert fall_back(refused, job, OFFERS, NOW, baseline) is refused


def test_a_job_refused_for_its_team_budget_stays_refused() -> None:
    """The fall-backs plan with the team budgets: a refusal for money is not turned into a launch."""
    budgets = {"agri": TeamBudget(monthly=Money.parse("1 CNY"), left=Money.parse("1 CNY"))}
    for job in (job_due_in(on_demand_hours("V100") / 0.95),  # ran, inside the margin
                new_job_due_in(on_demand_hours("V100", epochs_done=0) / 0.95)):  # new, inside the margin
        [refused] = plan([job], OFFERS, [], NOW, PlannerPolicy(), team_budgets=budgets)
        assert refused.action == "refuse"
        assert fall_back(refused, job, OFFERS, NOW, PlannerPolicy(), team_budgets=budgets) is refused


# --- the steering rule moves a job to spot only where the planner would place it there -----------------


def running_job(store, sim_clock, deadline_min: int):
    """A World, and a 60-epoch training job (about half an hour on its machines) due ``deadline_min`` from now,
    as the steering rule reads a running one: its spec, now, and its row's columns."""
    w = World(store, sim_clock)
    base = job_spec(deadline=f"{deadline_min}m")
    spec = base.model_copy(update={"train": base.train.model_copy(update={"epochs": 60})})
    now = sim_clock.now()
    job = SimpleNamespace(id="j", submitted_at=now, deadline_at=now + timedelta(minutes=deadline_min), epochs_done=0,
                          preemptions=0, restarts=0)
    return w, spec, now, job


@pytest.mark.parametrize("deadline_min, takes_spot", [
    (48 * 60, True),  # two days for half an hour of work: spot, reclaims and all
    (40, False),  # on-demand just fits; spot's reclaims would make it late: the planner keeps on-demand
])
def test_the_rule_asks_the_planner_before_a_move_to_spot(store, sim_clock, deadline_min: int,
                                                         takes_spot: bool) -> None:
    w, spec, now, job = running_job(store, sim_clock, deadline_min)
    with store.session(write=False) as s:
        assert _planner_takes_spot(w.ctx, s, job, spec, now, {}, frozenset()) is takes_spot


# --- the rule's guard leaves spot only when no faster on-demand run is on time after another tick ---------


@pytest.mark.parametrize("deadline_min, tick_h, keeps_spot", [
    (48 * 60, 0.25, True),  # two days for half an hour of work: on-demand is on time whenever it starts
    (45, 0.0, True),  # on-demand (39 min) fits with its margin if it starts now (the changeover is the boot alone)...
    (45, 0.25, False),  # ... not after another tick and a changeover: the guard's move is made
])
def test_the_guard_waits_while_the_planner_has_an_on_time_on_demand_run_after_another_tick(
        store, sim_clock, deadline_min: int, tick_h: float, keeps_spot: bool) -> None:
    """Issue 17 (tight-deadlines, 44): a stint on two slow spot A10s was moved off spot after 4 epochs because
    the guard weighed those A10s on on-demand, while the planner moved the job to faster V100s with hours to
    spare. The guard's move now waits while the planner, asked as of one more decision and a changeover from
    now, would still launch the job on on-demand within the safety margin (``steering._on_time_later_on_demand``)."""
    w, spec, now, job = running_job(store, sim_clock, deadline_min)
    boot = w.ctx.planner_policy().boot_hours
    inp = SimpleNamespace(tick_h=tick_h, changeover_h=boot + (0.2 if tick_h else 0.0))
    with store.session(write=False) as s:
        assert _on_time_later_on_demand(w.ctx, s, job, spec, now, {}, frozenset(), (), inp) is keeps_spot
