"""The planner, table-driven: offers are built here, nothing is mocked.

Durations come from the real performance model (``scheduler.jobs.perf``), so the
tests compute deadlines and budgets from it instead of hard-coding hours.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from scheduler.jobs.perf import estimate
from scheduler.limits import MAX_RUN
from scheduler.models import Capacity, JobSpec, Offer, Price, Stock
from scheduler.money import FxRates, Money
from scheduler.planner import cost
from scheduler.planner.inputs import FleetSlot, PlanJob, PlannerPolicy
from scheduler.planner.plan import (
    MAX_ALTERNATIVES,
    SPARE_RESTARTS,
    Decision,
    Option,
    options_for,
    plan,
    spot_allowed,
)

NOW = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
POLICY = PlannerPolicy()
TIME_RE = re.compile(r"move the deadline to (\d{4}-\d\d-\d\d \d\d:\d\d) UTC")
BUDGET_RE = re.compile(r"at least (\d+) (CNY|USD)")


def price(text: str | None) -> Price | None:
    return None if text is None else Price(per_hour=Money.parse(text), source="test", as_of=date(2026, 11, 1))


def make_offer(
    instance_type: str = "g5.xlarge",
    *,
    provider: str = "aws",
    region: str = "us-east-1",
    zone: str | None = None,
    gpu: str = "A10G",
    gpu_count: int = 1,
    vcpus: int = 8,
    od: str | None = "1.00 USD",
    spot: str | None = "0.40 USD",
    od_stock: Stock = Stock.available,
    spot_stock: Stock = Stock.available,
    rate: float = 0.05,
) -> Offer:
    return Offer(
        provider=provider, region=region, zone=zone or f"{region}a", instance_type=instance_type, gpu=gpu,
        gpu_count=gpu_count, gpu_mem_gib=22.4, vcpus=vcpus, mem_gib=32, on_demand=price(od), spot=price(spot),
        on_demand_stock=od_stock, spot_stock=spot_stock, spot_interruptions_per_hour=rate,
    )


def make_spec(
    *,
    kind: str = "train",
    model: str = "yolov9-s",
    epochs: int = 10,
    img_size: int = 640,
    images: int = 20_000,
    capacity: str = "auto",
    budget: str | None = None,
    priority: int = 50,
    gpus: tuple[str, ...] | None = None,
    gpu_count: int = 1,
    nodes: int = 1,
    providers: tuple[str, ...] | None = None,
    regions: tuple[str, ...] | None = None,
    max_restarts: int = 10,
) -> JobSpec:
    raw: dict = {
        "name": "job", "team": "vision", "kind": kind, "model": model,
        "resources": {"gpus": gpus, "gpu_count": gpu_count, "nodes": nodes},
        "where": {"providers": providers, "regions": regions},
        "policy": {"capacity": capacity, "budget": budget, "priority": priority, "max_restarts": max_restarts},
    }
    if kind == "train":
        raw["data"] = {"uri": "s3://bucket/data", "train_images": images, "val_images": images // 10}
        raw["train"] = {"epochs": epochs, "img_size": img_size}
    else:
        raw["infer"] = {"source": "s3://bucket/images", "images": images, "weights": "s3://bucket/best.pt",
                        "img_size": img_size}
    return JobSpec.model_validate(raw)


def make_job(
    job_id: str = "j1",
    *,
    deadline_h: float | None = None,
    preemptions: int = 0,
    avoid: frozenset[str] = frozenset(),
    spent: str | None = None,
    submitted_at: datetime = NOW,
    **spec: object,
) -> PlanJob:
    return PlanJob(
        id=job_id, spec=make_spec(**spec), submitted_at=submitted_at,  # type: ignore[arg-type]
        deadline_at=None if deadline_h is None else NOW + timedelta(hours=deadline_h),
        preemptions=preemptions, avoid=avoid, spent=None if spent is None else Money.parse(spent),
    )


def reserved_slot(offer: Offer, until_h: float = 24 * 30) -> FleetSlot:
    return FleetSlot(kind="reserved", instance_id=None, offer=offer, capacity=Capacity.reserved,
                     until=NOW + timedelta(hours=until_h))


def warm_slot(offer: Offer, instance_id: str = "inst-warm", capacity: Capacity = Capacity.on_demand) -> FleetSlot:
    return FleetSlot(kind="warm", instance_id=instance_id, offer=offer, capacity=capacity)


def hours_on(job: PlanJob, gpu: str) -> float:
    return estimate(job.spec, gpu, 1, 8, epochs_done=job.epochs_done).hours


def decide(job: PlanJob, offers: list[Offer], fleet: Sequence[FleetSlot] = (),
           policy: PlannerPolicy = POLICY) -> Decision:
    [d] = plan([job], offers, list(fleet), NOW, policy)
    return d


def find(options: list[Option] | tuple[Option, ...], instance_type: str, capacity: Capacity) -> Option:
    [o] = [o for o in options if o.instance_type == instance_type and o.capacity is capacity]
    return o


def close(a: float, b: float, tol: float = 1e-3) -> bool:
    return abs(a - b) <= tol


# --- choosing ------------------------------------------------------------------------


def test_loose_deadline_takes_the_cheapest_spot() -> None:
    offers = [
        make_offer("g5.xlarge", gpu="A10G", od="1.006 USD", spot="0.44 USD"),
        make_offer("g6.xlarge", gpu="L4", od="0.805 USD", spot="0.40 USD"),
        make_offer("g4dn.xlarge", gpu="T4", od="0.526 USD", spot="0.22 USD"),
    ]
    job = make_job(deadline_h=48)
    d = decide(job, offers)
    assert d.action == "launch" and d.choice is not None
    assert d.choice.capacity is Capacity.spot
    feasible = [o for o in options_for(job, offers, [], NOW, POLICY) if o.feasible]
    assert len(feasible) == 6
    assert d.choice.est_cost == min(o.est_cost for o in feasible)
    assert "cheapest" in d.reason and d.choice.instance_type in d.reason


@pytest.mark.parametrize(
    ("kind", "rate"),
    [("train", 0.0), ("train", 0.2), ("train", 1.5), ("infer", 0.1), ("infer", 2.0)],
)
def test_spot_cost_counts_expected_interruptions(kind: str, rate: float) -> None:
    """Expected hours = h + n x restart + min(n x lost, h); lost = half an epoch (train) or half a
    shard (infer: 200,000 images are 10 shards)."""
    offer = make_offer(spot="0.50 USD", rate=rate)
    job = make_job(kind=kind, images=20_000 if kind == "train" else 200_000)
    est = estimate(job.spec, "A10G", 1, 8)
    n = rate * est.hours
    lost = est.epoch_hours / 2
    if kind == "infer":
        assert est.epochs_left == 10 and close(est.epoch_hours, (est.hours - est.setup_hours) / 10)
    expected = est.hours + n * POLICY.restart_hours + min(n * lost, est.hours)
    spot = find(options_for(job, [offer], [], NOW, POLICY), "g5.xlarge", Capacity.spot)
    assert close(spot.expected_interruptions, n)
    assert close(spot.est_hours, expected)
    assert close(float(spot.est_cost.amount), expected * 0.5 * 7.2, tol=0.01)
    assert close((spot.finish_by - NOW).total_seconds() / 3600, POLICY.boot_hours + expected)


@pytest.mark.parametrize(
    ("rate", "slack", "capacity", "spot_why"),
    [
        (0.3, "loose", Capacity.spot, None),
        (0.3, "tight", Capacity.on_demand, "deadline"),  # interruptions push the expected finish past it
        (0.0, "tight", Capacity.on_demand, "late interruption"),  # no slack left for even one interruption
    ],
)
def test_on_demand_when_the_deadline_is_too_tight_for_spot(rate: float, slack: str, capacity: Capacity,
                                                           spot_why: str | None) -> None:
    offer = make_offer(od="1.00 USD", spot="0.30 USD", rate=rate)
    probe = make_job()
    h = hours_on(probe, "A10G")
    # Tight: on-demand just meets it (expected finish inside the safety margin), spot cannot.
    deadline_h = 48.0 if slack == "loose" else (POLICY.boot_hours + h) / (1 - POLICY.deadline_safety) + 0.005
    job = make_job(deadline_h=deadline_h)
    d = decide(job, [offer])
    assert d.action == "launch" and d.choice is not None and d.choice.capacity is capacity
    if spot_why is not None:
        spot = find(d.alternatives, "g5.xlarge", Capacity.spot)
        assert not spot.feasible and spot_why in spot.why


@pytest.mark.parametrize(
    ("stint", "rate", "room_h", "capacity", "spot_why"),
    [
        # Must finish on spot with the margin and bad case: its reclaims push it past the cutoff.
        (False, 1.0, 0.5, Capacity.on_demand, "deadline"),
        # A stint: on time through its expected reclaims, and room to move to on-demand within the margin.
        (True, 1.0, 0.5, Capacity.spot, None),
        (True, 0.75, -0.05, Capacity.on_demand, "on spot with a move to on-demand"),  # no room for that move
        # Late in expectation, with room: spot until the rule's move, then on-demand, priced so (below).
        (True, 2.0, 0.5, Capacity.spot, None),
        (True, 2.0, -0.05, Capacity.on_demand, "misses deadline"),  # late, and no room to move
    ],
)
def test_a_spot_stint_leaves_the_margin_and_the_bad_case_to_the_steering_rule(
        stint: bool, rate: float, room_h: float, capacity: Capacity, spot_why: str | None) -> None:
    """``PlanJob.stint``: a training job the steering rule watches may run on spot when it is on time through its
    expected reclaims and a move to on-demand (a boot, a restart, half an epoch) after its uninterrupted hours
    still fits before the safety margin: the margin and the bad case are the rule's to keep."""
    offer = make_offer(od="1.00 USD", spot="0.30 USD", rate=rate)
    probe = make_job(epochs=100)  # about 6 h on an A10G
    est = estimate(probe.spec, "A10G", 1, 8)
    move_h = POLICY.boot_hours + POLICY.restart_hours + est.epoch_hours / 2
    # The deadline leaves ``room_h`` beyond spot's uninterrupted run and the move, stretched by the margin.
    deadline_h = (POLICY.boot_hours + est.hours + move_h + room_h) / (1 - POLICY.deadline_safety)
    job = make_job(epochs=100, deadline_h=deadline_h).model_copy(update={"stint": stint})
    d = decide(job, [offer])
    assert d.action == "launch" and d.choice is not None and d.choice.capacity is capacity
    spot = find((d.choice, *d.alternatives), "g5.xlarge", Capacity.spot)
    cutoff = NOW + timedelta(hours=deadline_h * (1 - POLICY.deadline_safety))
    if "then on-demand" in d.reason:  # late on spot in expectation: the move makes the cutoff
        assert rate == 2.0 and abs((spot.finish_by - cutoff).total_seconds()) < 1
    else:  # the whole run on spot, through its expected reclaims, finishes inside the safety margin or later
        assert spot.finish_by > cutoff
    if spot_why is not None:
        assert not spot.feasible and spot_why in spot.why


@pytest.mark.parametrize(("spot", "capacity", "instance_type"), [
    ("0.30 USD", Capacity.spot, "g5.xlarge"),  # spot until the move, then the A100: cheaper than the A100 throughout
    ("0.90 USD", Capacity.on_demand, "p4de.2xlarge"),  # dearer spot: the A100 throughout costs less
])
def test_a_stint_late_on_spot_is_priced_with_its_move_to_the_fastest_on_demand(
        spot: str, capacity: Capacity, instance_type: str) -> None:
    """A stint its expected reclaims make late on its own setup runs on spot until the steering rule's move to
    the fastest on-demand setup (the last moment that still meets the deadline less its margin), and is priced
    as spot until then plus on-demand after (``cost.stint_leg``, ``cost.stint_cost``)."""
    slow = make_offer("g5.xlarge", od="1.00 USD", spot=spot, rate=1.0)
    fast = make_offer("p4de.2xlarge", gpu="A100-80G", od="1.20 USD", spot=None)
    cutoff_h = 5.5  # A10G: ~5.9 h uninterrupted, ~7 h through its reclaims; the A100: ~3.6 h
    deadline_h = cutoff_h / (1 - POLICY.deadline_safety)
    job = make_job(epochs=100, deadline_h=deadline_h).model_copy(update={"stint": True})
    d = decide(job, [slow, fast])
    assert d.action == "launch" and d.choice is not None
    assert (d.choice.instance_type, d.choice.capacity) == (instance_type, capacity)
    moved = find((d.choice, *d.alternatives), "g5.xlarge", Capacity.spot)
    a100 = find((d.choice, *d.alternatives), "p4de.2xlarge", Capacity.on_demand)
    assert moved.feasible and a100.feasible
    est = estimate(job.spec, "A10G", 1, 8)
    spot_h = cost.on_spot(est.hours, 1.0, 1, est.epoch_hours, POLICY.restart_hours)[1]  # expected, with reclaims
    leg = cost.stint_leg(POLICY.boot_hours, spot_h, cutoff_h, hours_on(job, "A100-80G"), POLICY.boot_hours,
                         POLICY.restart_hours, est.epoch_hours)
    assert leg is not None and 0 < leg.spot_hours and leg.leg_hours > 0
    hours = Decimal(repr(spot_h))
    leg_cost = cost.expected_cost(a100.price_per_hour.amount, Decimal(repr(leg.leg_hours)))
    assert moved.est_cost.amount == max(cost.expected_cost(moved.price_per_hour.amount, hours),
                                        cost.expected_cost(moved.price_per_hour.amount, Decimal(repr(leg.spot_hours)))
                                        + leg_cost)
    assert abs((moved.finish_by - (NOW + timedelta(hours=cutoff_h))).total_seconds()) < 1  # the move makes the cutoff
    assert (moved.est_cost < a100.est_cost) is (capacity is Capacity.spot)
    if capacity is Capacity.spot:
        assert "then on-demand on aws 1x A100-80G" in d.reason


def test_a_stint_asked_about_spot_alone_still_has_its_move() -> None:
    """The steering rule asks the planner about a waiting job on spot alone (``steering._planner_takes_spot``: the
    job's capacity set to spot); the move to on-demand is still the rule's to make, so the late run is still a
    stint with a move. (Without it, the first simulation of this change sent the job to on-demand at its reclaim.)"""
    slow = make_offer("g5.xlarge", od="1.00 USD", spot="0.90 USD", rate=1.0)
    fast = make_offer("p4de.2xlarge", gpu="A100-80G", od="1.20 USD", spot=None)
    job = make_job(epochs=100, deadline_h=5.5 / (1 - POLICY.deadline_safety))
    asked = job.model_copy(update={"stint": True, "spec": job.spec.with_capacity("spot")})
    d = decide(asked, [slow, fast])
    assert d.action == "launch" and d.choice is not None and d.choice.capacity is Capacity.spot
    assert "then on-demand on aws 1x A100-80G" in d.reason
    assert decide(asked.model_copy(update={"stint": False}), [slow, fast]).action == "refuse"


@pytest.mark.parametrize(("hours", "cutoff", "target", "expected"), [
    # start 0.1 h, changeover 0.1 + 0.2 + 0.1 = 0.4 h (boot, restart, half an epoch of 0.2 h)
    (10.0, 8.0, 5.0, (5.0, 2.8, 8.0)),  # spot from 0.1 to 5.1 h (half its run), then 2.5 h of work on the target
    (10.0, 8.0, 10.0, None),  # the target is no faster than spot: moving never catches up
    (10.0, 5.4, 5.0, None),  # even a move at the start would end after the cutoff
    (10.0, 11.0, 5.0, (10.0, 0.0, 10.1)),  # the move would come after spot's own end: all of it on spot
])
def test_stint_leg(hours: float, cutoff: float, target: float, expected: tuple[float, float, float] | None) -> None:
    """``cost.stint_leg``: the latest move to the target that still ends by the cutoff, and what each side runs."""
    leg = cost.stint_leg(0.1, hours, cutoff, target, 0.1, 0.2, 0.2)
    if expected is None:
        assert leg is None
    else:
        assert leg is not None and all(close(a, b, 1e-9) for a, b in zip(leg, expected, strict=True))


def test_a_stint_is_a_training_jobs_only() -> None:
    """Inference resumes too, but the steering rule watches training only: its stint flag changes nothing."""
    offer = make_offer(od="1.00 USD", spot="0.30 USD", rate=1.0)
    probe = make_job(kind="infer", images=500_000)  # about 4 h on an A10G
    h = hours_on(probe, "A10G")
    job = make_job(kind="infer", images=500_000,
                   deadline_h=(POLICY.boot_hours + h + 0.5) / (1 - POLICY.deadline_safety))
    plain, stint = decide(job, [offer]), decide(job.model_copy(update={"stint": True}), [offer])
    assert plain.choice is not None and stint.choice is not None
    assert plain.choice.capacity is stint.choice.capacity is Capacity.on_demand


@pytest.mark.parametrize(("until_h", "action", "source"), [(24 * 30, "reuse", "reserved"), (0.1, "launch", "new")])
def test_reserved_slot_is_used_first_while_it_lasts(until_h: float, action: str, source: str) -> None:
    cheap_spot = make_offer("g5.xlarge", spot="0.05 USD", rate=0.0)
    reserved = make_offer("gn7i-c8g1.2xlarge", provider="alibaba", region="cn-hangzhou", gpu="A10",
                          od="8.00 CNY", spot=None)
    d = decide(make_job(deadline_h=48), [cheap_spot], [reserved_slot(reserved, until_h)])
    assert d.action == action and d.choice is not None and d.choice.source == source
    if source == "reserved":
        assert d.choice.est_cost == Money.zero("CNY") and d.choice.price_per_hour.amount == 0
        assert "reserved" in d.reason
    else:
        res = [o for o in d.alternatives if o.source == "reserved"]
        assert res and "reservation ends" in res[0].why


def test_reserved_capacity_comes_before_an_equally_free_faster_offer() -> None:
    free_spot = make_offer("g5.xlarge", gpu="A10G", od=None, spot="0.00 USD", rate=0.0)
    slow_reserved = make_offer("g4dn.xlarge", gpu="T4", od="0.526 USD", spot=None)
    d = decide(make_job(), [free_spot], [reserved_slot(slow_reserved)])
    assert d.choice is not None and d.choice.source == "reserved"
    assert d.alternatives[0].est_cost == d.choice.est_cost and d.alternatives[0].finish_by < d.choice.finish_by


def test_a_warm_machine_wins_a_cost_tie_over_a_faster_launch() -> None:
    """An idle reserved machine (warm, zero cost) beats launching a faster free reserved unit."""
    warm_t4 = warm_slot(make_offer("g4dn.xlarge", gpu="T4", spot=None), "inst-t4", Capacity.reserved)
    a100 = reserved_slot(make_offer("p4de.24xlarge", gpu="A100-80G", spot=None))
    d = decide(make_job(epochs=50), [], [warm_t4, a100])
    assert d.action == "reuse" and d.choice is not None and d.choice.instance_id == "inst-t4"
    assert d.alternatives[0].source == "reserved" and d.alternatives[0].finish_by < d.choice.finish_by


@pytest.mark.parametrize(
    ("spot", "action", "source"),
    [
        (None, "reuse", "warm"),  # same type on-demand costs the same: the warm one wins the tie (no boot)
        ("0.10 USD", "launch", "new"),  # warm machines compete on cost: a much cheaper spot wins
    ],
)
def test_warm_slot_is_reused_when_it_is_as_cheap(spot: str | None, action: str, source: str) -> None:
    offer = make_offer("g5.xlarge", od="1.00 USD", spot=spot, rate=0.0)
    warm = warm_slot(make_offer("g5.xlarge", od="1.00 USD", spot=None), "inst-7")
    d = decide(make_job(deadline_h=48), [offer], [warm])
    assert d.action == action and d.choice is not None and d.choice.source == source
    if source == "warm":
        assert d.choice.instance_id == "inst-7"
        new = find(d.alternatives, "g5.xlarge", Capacity.on_demand)
        assert new.est_cost == d.choice.est_cost and new.finish_by > d.choice.finish_by
        assert "inst-7" in d.reason


@pytest.mark.parametrize(("loser_capacity", "loser_action"), [("auto", "launch"), ("reserved", "wait")])
def test_two_jobs_compete_for_one_reserved_slot_and_priority_wins(loser_capacity: str, loser_action: str) -> None:
    offer = make_offer("g5.xlarge")
    slot = reserved_slot(make_offer("g5.2xlarge", od="1.21 USD", spot=None))
    low = make_job("low", priority=20, capacity=loser_capacity, deadline_h=2)  # earlier deadline, lower priority
    high = make_job("high", priority=80, deadline_h=48)
    decisions = {d.job_id: d for d in plan([low, high], [offer], [slot], NOW, POLICY)}
    assert decisions["high"].action == "reuse" and decisions["high"].choice.source == "reserved"
    assert decisions["low"].action == loser_action
    if loser_action == "wait":
        assert "held for higher-priority job high" in decisions["low"].reason
    else:
        assert decisions["low"].choice.source == "new"
        held = [o for o in decisions["low"].alternatives if o.source == "reserved"]
        assert held and "high" in held[0].why


def test_each_reserved_unit_goes_to_one_job() -> None:
    unit = make_offer("g5.2xlarge", od="1.21 USD", spot=None)
    jobs = [make_job(f"j{i}", capacity="reserved") for i in range(3)]
    decisions = plan(jobs, [], [reserved_slot(unit), reserved_slot(unit)], NOW, POLICY)
    assert sorted(d.action for d in decisions) == ["reuse", "reuse", "wait"]


# --- refusing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget_currency", "capacity", "hint"),
    [("CNY", "on-demand", "allow spot"), ("USD", "on-demand", "allow spot"), ("CNY", "auto", None)],
)
def test_budget_refusal_names_the_amount_and_the_fix(budget_currency: str, capacity: str,
                                                      hint: str | None) -> None:
    offer = make_offer(od="1.00 USD", spot="0.20 USD", rate=0.0)
    unlimited = options_for(make_job(deadline_h=48), [offer], [], NOW, POLICY)
    spot_cost = find(unlimited, "g5.xlarge", Capacity.spot).est_cost.amount
    od_cost = find(unlimited, "g5.xlarge", Capacity.on_demand).est_cost.amount
    cheapest_allowed = od_cost if capacity == "on-demand" else spot_cost
    rate = Decimal(1) if budget_currency == "CNY" else Decimal(1) / Decimal("7.2")
    budget = ((spot_cost + od_cost) / 2 if hint else spot_cost / 2) * rate  # spot would fit when hinted
    job = make_job(capacity=capacity, deadline_h=48, budget=f"{budget:.2f} {budget_currency}")
    d = decide(job, [offer])
    assert d.action == "refuse"
    m = BUDGET_RE.search(d.reason)
    assert m and m.group(2) == budget_currency
    assert int(m.group(1)) == math.ceil(cheapest_allowed * rate)
    assert (hint in d.reason) if hint else ("allow" not in d.reason)
    raised = make_job(capacity=capacity, deadline_h=48, budget=f"{m.group(1)} {budget_currency}")
    assert decide(raised, [offer]).action == "launch"


@pytest.mark.parametrize(
    ("spent_share", "action"), [(None, "launch"), (Decimal(2), "launch"), (Decimal("0.5"), "refuse")]
)
def test_money_already_spent_counts_against_the_budget(spent_share: Decimal | None, action: str) -> None:
    """``spent_share``: how many times this attempt's cost the budget still has left after earlier attempts."""
    offer = make_offer(od="1.00 USD", spot=None)
    cost = options_for(make_job(), [offer], [], NOW, POLICY)[0].est_cost.amount
    budget = Decimal(120)
    spent = None if spent_share is None else f"{(budget - spent_share * cost) / Decimal('7.2'):.4f} USD"
    d = decide(make_job(budget=f"{budget} CNY", spent=spent), [offer])
    assert d.action == action
    if action == "refuse":
        assert "already spent" in d.reason and "over the 120.00 CNY budget" in d.reason


@pytest.mark.parametrize(("with_a100", "hint"), [(True, "allow A100-80G"), (False, None)])
def test_deadline_refusal_says_when_it_could_finish(with_a100: bool, hint: str | None) -> None:
    offers = [make_offer("g4dn.xlarge", gpu="T4", od="0.526 USD", spot="0.22 USD")]
    if with_a100:
        offers.append(make_offer("p4de.24xlarge", gpu="A100-80G", od="5.00 USD", spot=None))
    job = make_job(gpus=("T4",), deadline_h=0.5, epochs=5)
    assert hours_on(job, "T4") > 0.5 > hours_on(job, "A100-80G") + POLICY.boot_hours
    d = decide(job, offers)
    assert d.action == "refuse" and "after the deadline" in d.reason
    assert (hint in d.reason) if hint else ("allow" not in d.reason)
    m = TIME_RE.search(d.reason)
    assert m is not None
    suggested = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
    moved = make_job(gpus=("T4",), deadline_h=(suggested - NOW).total_seconds() / 3600, epochs=5)
    assert decide(moved, offers).action == "launch"


def test_a_refusal_past_its_deadline_names_the_cheapest_of_the_fastest_options_in_planner_order() -> None:
    # One bundle of on-demand T4s (the fastest: spot must survive its bad case too) in four regions, two at
    # the lowest price: the refusal names the one the planner's order puts first among them (cost, then
    # region), the option ``options_for`` ranks first among the on-demand ones, whatever the input order.
    offers = [make_offer("g4dn.xlarge", gpu="T4", region=region, od=od, spot="0.20 USD")
              for region, od in (("ap-south-1", "0.90 USD"), ("us-west-2", "0.526 USD"),
                                 ("us-east-1", "0.60 USD"), ("eu-west-1", "0.526 USD"))]
    job = make_job(gpus=("T4",), deadline_h=-2, epochs=5, submitted_at=NOW - timedelta(hours=4))
    ranked = [o for o in options_for(job, offers, [], NOW, POLICY) if o.capacity is Capacity.on_demand]
    assert [o.region for o in ranked] == ["eu-west-1", "us-west-2", "us-east-1", "ap-south-1"]
    for order in (offers, offers[::-1]):
        d = decide(job, order)
        assert d.action == "refuse" and "after the deadline" in d.reason
        assert d.reason.startswith("fastest option (aws g4dn.xlarge on-demand in eu-west-1a) finishes"), d.reason


@pytest.mark.parametrize(
    ("gpus", "offer_gpus", "fix"),
    [(("T4",), ("T4", "A100-80G"), "allow A100-80G"), (None, ("T4",), "smaller model")],
)
def test_gpu_memory_refusal(gpus: tuple[str, ...] | None, offer_gpus: tuple[str, ...], fix: str) -> None:
    offers = [make_offer(f"type-{g}", gpu=g) for g in offer_gpus]
    job = make_job(model="yolov9-e", img_size=2048, gpus=gpus)
    assert not estimate(job.spec, "T4").fits and estimate(job.spec, "A100-80G").fits
    d = decide(job, offers)
    assert d.action == "refuse"
    assert "GiB" in d.reason and fix in d.reason
    assert all(not o.feasible for o in d.alternatives)


@pytest.mark.parametrize("deadline_h", [None, 24.0 * 400])
def test_a_run_past_a_year_is_no_option_and_a_refusal_names_the_fastest(deadline_h: float | None) -> None:
    # Each field within its bound, together some 30,000 years on one T4: the finish time, reclaims and a
    # deadline's bad case on top, was past the clock's last year (an OverflowError in `gpusched plan`).
    big = {"model": "yolov9-c", "epochs": 10_000, "images": 100_000_000, "img_size": 1280}
    offers = [make_offer("g4dn.xlarge", gpu="T4"), make_offer("p4d.24xlarge", gpu="A100-40G", gpu_count=8)]
    d = decide(make_job(deadline_h=deadline_h, gpus=("T4", "A100-40G"), gpu_count=8, **big), offers)
    assert d.action == "refuse"
    fastest = estimate(make_spec(**big, gpu_count=8), "A100-40G", 8, 8).hours / 24
    assert fastest > MAX_RUN.days
    assert d.reason.startswith(f"the job would run ~{fastest:,.0f} days on 8x A100-40G; a job may run at most 366 "
                               "days: use fewer epochs or images"), d.reason
    assert all(not o.feasible for o in d.alternatives)
    # Where one setup runs within the year, the others are no option, and say why.
    small = {**big, "epochs": 120, "images": 1_000_000}
    assert estimate(make_spec(**small), "T4").hours > MAX_RUN.days * 24 > estimate(make_spec(**small), "A10G").hours
    d = decide(make_job(gpus=("T4", "A10G"), **small), [make_offer("g4dn.xlarge", gpu="T4"), make_offer()])
    assert d.action == "launch" and d.choice is not None and d.choice.gpu == "A10G"
    assert all(o.feasible == (o.gpu == "A10G") for o in d.alternatives)
    assert {o.why for o in d.alternatives if o.gpu == "T4"} == {
        "would run ~486 days on 1x T4; a job may run at most 366 days"}
    # Asked for the slow GPU only, the refusal names the one that would do.
    d = decide(make_job(gpus=("T4",), **small), [make_offer("g4dn.xlarge", gpu="T4"), make_offer()])
    assert d.action == "refuse" and d.reason.endswith("or more GPUs or nodes or allow A10G"), d.reason


@pytest.mark.parametrize(
    ("gpus", "regions", "fix"),
    [(("H100",), None, "allow A10G"), (None, ("eu-west-1",), "allow region us-east-1")],
)
def test_no_matching_offer_is_refused_with_the_filter_to_widen(gpus, regions, fix: str) -> None:
    d = decide(make_job(gpus=gpus, regions=regions), [make_offer()])
    assert d.action == "refuse" and "no offer matches" in d.reason and fix in d.reason
    assert d.alternatives == ()


# --- stock ----------------------------------------------------------------------------


@pytest.mark.parametrize("blocker", ["sold out", "recently out of capacity"])
def test_blocked_cheapest_falls_back_to_the_next_best(blocker: str) -> None:
    best = make_offer("x.large", spot="0.20 USD", rate=0.0,
                      spot_stock=Stock.sold_out if blocker == "sold out" else Stock.available)
    next_best = make_offer("y.large", spot="0.30 USD", rate=0.0)
    avoid = frozenset({f"{best.key}|spot"}) if blocker != "sold out" else frozenset()
    d = decide(make_job(avoid=avoid), [best, next_best])
    assert d.action == "launch" and d.choice is not None
    assert (d.choice.instance_type, d.choice.capacity) == ("y.large", Capacity.spot)
    blocked = find(d.alternatives, "x.large", Capacity.spot)
    assert not blocked.feasible and blocked.why == blocker
    assert find(d.alternatives, "x.large", Capacity.on_demand).feasible  # only that capacity is blocked


@pytest.mark.parametrize(
    ("stock", "avoid_all", "words"),
    [(Stock.sold_out, False, "sold out"), (Stock.available, True, "recently out of capacity")],
)
def test_everything_blocked_by_stock_means_wait(stock: Stock, avoid_all: bool, words: str) -> None:
    offers = [make_offer(t, od_stock=stock, spot_stock=stock) for t in ("a.large", "b.large")]
    avoid = frozenset(f"{o.key}|{c}" for o in offers for c in ("spot", "on-demand")) if avoid_all else frozenset()
    [d] = plan([make_job(deadline_h=48, avoid=avoid)], offers, [], NOW, POLICY, alternatives=8)
    assert d.action == "wait" and d.choice is None
    assert words in d.reason
    assert len(d.alternatives) == 4 and all(o.why == words for o in d.alternatives)


def test_sold_out_but_over_budget_is_refused_not_waited() -> None:
    offer = make_offer(od="1.00 USD", spot=None, od_stock=Stock.sold_out)
    d = decide(make_job(budget="1 CNY"), [offer])
    assert d.action == "refuse" and "budget" in d.reason


# --- filters -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capacity", "expected"),
    [
        ("spot", {Capacity.spot}),
        ("on-demand", {Capacity.on_demand}),
        ("reserved", {Capacity.reserved}),
        ("auto", {Capacity.spot, Capacity.on_demand, Capacity.reserved}),
    ],
)
def test_capacity_policy_limits_the_options(capacity: str, expected: set[Capacity]) -> None:
    offer = make_offer()
    fleet = [reserved_slot(make_offer("g5.2xlarge"))]
    job = make_job(capacity=capacity)
    assert {o.capacity for o in options_for(job, [offer], fleet, NOW, POLICY)} == expected
    d = decide(job, [offer], fleet)
    assert d.choice is not None and d.choice.capacity in expected


def test_reserved_only_job_without_a_free_unit_waits() -> None:
    d = decide(make_job(capacity="reserved"), [make_offer()])
    assert d.action == "wait" and "reserved" in d.reason


@pytest.mark.parametrize(
    ("providers", "regions", "expected"),
    [
        (None, None, {"aws", "alibaba", "tencent"}),
        (("alibaba", "tencent"), None, {"alibaba", "tencent"}),
        (None, ("ap-guangzhou",), {"tencent"}),
        (("aws",), ("us-east-1", "cn-hangzhou"), {"aws"}),
    ],
)
def test_provider_and_region_filters(providers, regions, expected: set[str]) -> None:
    offers = [
        make_offer("g5.xlarge", provider="aws", region="us-east-1"),
        make_offer("ecs.gn7i-c8g1.2xlarge", provider="alibaba", region="cn-hangzhou", gpu="A10",
                   od="8.00 CNY", spot="3.00 CNY"),
        make_offer("PNV4.2XLARGE32", provider="tencent", region="ap-guangzhou", gpu="A10",
                   od="9.00 CNY", spot="3.50 CNY"),
    ]
    job = make_job(providers=providers, regions=regions)
    assert {o.provider for o in options_for(job, offers, [], NOW, POLICY)} == expected
    assert decide(job, offers).choice.provider in expected


@pytest.mark.parametrize(("gpu_count", "expected"), [(1, {"g5.xlarge"}), (4, {"g5.12xlarge"})])
def test_gpu_count_must_match_exactly(gpu_count: int, expected: set[str]) -> None:
    offers = [make_offer("g5.xlarge"),
              make_offer("g5.12xlarge", gpu_count=4, vcpus=48, od="5.67 USD", spot="2.10 USD")]
    job = make_job(gpu_count=gpu_count, epochs=2)
    assert {o.instance_type for o in options_for(job, offers, [], NOW, POLICY)} == expected


def test_multi_node_job_pays_every_node_and_skips_fleet_slots() -> None:
    offer = make_offer(od="1.00 USD", spot=None)
    fleet = [warm_slot(offer), reserved_slot(offer)]
    options = options_for(make_job(nodes=3, epochs=2), [offer], fleet, NOW, POLICY)
    assert [o.source for o in options] == ["new"]
    assert options[0].price_per_hour == Money(amount=Decimal("21.6"), currency="CNY")


@pytest.mark.parametrize(
    ("usd_rate", "currency", "winner"),
    [("7.2", "CNY", "aws"), ("9.0", "CNY", "alibaba"), ("7.2", "USD", "aws"), ("9.0", "USD", "alibaba")],
)
def test_offers_in_different_currencies_compare_through_fx(usd_rate: str, currency: str, winner: str) -> None:
    offers = [
        make_offer("g5.xlarge", provider="aws", od="1.00 USD", spot=None),
        make_offer("ecs.gn7i", provider="alibaba", region="cn-hangzhou", gpu="A10G", od="8.00 CNY", spot=None),
    ]
    fx = FxRates(base="CNY", rates={"USD": Decimal(usd_rate)})
    policy = PlannerPolicy(currency=currency, fx=fx)
    d = decide(make_job(), offers, policy=policy)
    assert d.choice is not None and d.choice.provider == winner
    for o in (d.choice, *d.alternatives):
        assert o.est_cost.currency == currency and o.price_per_hour.currency == currency
    aws = next(o for o in (d.choice, *d.alternatives) if o.provider == "aws")
    assert aws.price_per_hour == fx.convert(Money.parse("1.00 USD"), currency)


@pytest.mark.parametrize(
    ("preemptions", "max_restarts", "cap", "capacity", "expected"),
    [
        # A reclaim must leave a restart to spare (a job lost max_restarts + 1 times fails):
        (0, 10, None, "auto", Capacity.spot), (8, 10, None, "auto", Capacity.spot),
        (9, 10, None, "auto", Capacity.on_demand), (10, 10, None, "auto", Capacity.on_demand),
        (3, 5, None, "auto", Capacity.spot), (4, 5, None, "auto", Capacity.on_demand),
        (0, 2, None, "auto", Capacity.spot), (1, 2, None, "auto", Capacity.on_demand),
        (0, 1, None, "auto", Capacity.on_demand), (0, 0, None, "auto", Capacity.on_demand),
        # an explicit spot-only job keeps spot
        (9, 10, None, "spot", Capacity.spot), (0, 0, None, "spot", Capacity.spot), (7, 10, 6, "spot", Capacity.spot),
        # a policy's flat cap on reclaims, where set, comes first
        (5, 10, 6, "auto", Capacity.spot), (6, 10, 6, "auto", Capacity.on_demand),
        (4, 5, 6, "auto", Capacity.on_demand), (0, 10, 0, "auto", Capacity.on_demand),
    ],
)
def test_repeated_preemptions_move_a_job_off_spot(preemptions: int, max_restarts: int, cap: int | None,
                                                  capacity: str, expected: Capacity) -> None:
    assert SPARE_RESTARTS == 1  # the table is written for it
    policy = PlannerPolicy(max_preemptions_before_on_demand=cap)
    offer = make_offer(od="1.00 USD", spot="0.30 USD")
    job = make_job(preemptions=preemptions, capacity=capacity, max_restarts=max_restarts)
    d = decide(job, [offer], policy=policy)
    assert d.choice is not None and d.choice.capacity is expected
    if capacity == "auto":  # the steering rule asks spot_allowed before a move to spot
        assert spot_allowed(preemptions, max_restarts, policy) is (expected is Capacity.spot)
    if expected is Capacity.on_demand:
        assert all(o.capacity is not Capacity.spot for o in options_for(job, [offer], [], NOW, policy))


@pytest.mark.parametrize("strategy", ["on-demand", "spot-greedy", "skypilot-like"])
def test_baselines_ignore_the_restart_budget(strategy: str) -> None:
    policy = PlannerPolicy(strategy=strategy)
    assert spot_allowed(9, 2, policy) is policy.naive_spot


@pytest.mark.parametrize("wanted", ["auto", "spot", "on-demand", "reserved"])
@pytest.mark.parametrize(("preemptions", "max_restarts"), [(0, 10), (9, 10), (0, 0)])
def test_the_planner_only_narrows_what_the_job_file_allows(wanted: str, preemptions: int, max_restarts: int) -> None:
    # One definition of what a job file allows (planner.allowed, which the lower bound reads as it is);
    # the planner's own rule (the restart budget) may take capacities away, never add one.
    from scheduler.planner.allowed import job_capacities
    from scheduler.planner.plan import _planner_capacities

    allowed = job_capacities(wanted)
    narrowed = _planner_capacities(wanted, preemptions, max_restarts, POLICY)
    assert narrowed <= allowed and (narrowed == allowed or (wanted == "auto" and Capacity.spot not in narrowed))


def test_an_offer_with_a_gpu_the_model_does_not_know_is_skipped_not_fatal() -> None:
    offers = [make_offer("mystery.xlarge", gpu="MI300X", od="0.10 USD", spot=None), make_offer("g5.xlarge")]
    d = decide(make_job(), offers)
    assert d.action == "launch" and d.choice is not None and d.choice.instance_type == "g5.xlarge"
    unknown = find(d.alternatives, "mystery.xlarge", Capacity.on_demand)
    assert not unknown.feasible and "MI300X" in unknown.why


# --- ordering, alternatives, determinism ------------------------------------------------


def _market() -> tuple[list[PlanJob], list[Offer], list[FleetSlot]]:
    offers = [
        make_offer("g4dn.xlarge", gpu="T4", od="0.526 USD", spot="0.22 USD"),
        make_offer("g4dn.xlarge", gpu="T4", zone="us-east-1b", od="0.526 USD", spot="0.22 USD"),
        make_offer("g5.xlarge", gpu="A10G", od="1.006 USD", spot="0.44 USD", spot_stock=Stock.sold_out),
        make_offer("g6.xlarge", gpu="L4", od="0.805 USD", spot="0.40 USD", rate=0.2),
        make_offer("ecs.gn7i", provider="alibaba", region="cn-hangzhou", gpu="A10",
                   od="8.00 CNY", spot="2.50 CNY"),
        make_offer("GT4.4XLARGE96", provider="tencent", region="ap-guangzhou", gpu="A100-40G",
                   od="28.00 CNY", spot=None),
    ]
    fleet = [
        reserved_slot(make_offer("g5.2xlarge", gpu="A10G", od="1.21 USD", spot=None)),
        warm_slot(offers[3], "inst-a"),
        warm_slot(offers[0], "inst-b", Capacity.spot),
    ]
    jobs = [
        make_job("a", priority=90, deadline_h=10),
        make_job("b", priority=50, deadline_h=3, budget="40 CNY"),
        make_job("c", priority=50, deadline_h=None, submitted_at=NOW - timedelta(hours=1)),
        make_job("d", priority=50, deadline_h=None, kind="infer", images=50_000),
        make_job("e", priority=10, deadline_h=0.3, capacity="on-demand"),
        make_job("f", priority=50, deadline_h=3, avoid=frozenset({f"{offers[4].key}|spot"})),
    ]
    return jobs, offers, fleet


def test_jobs_are_planned_by_priority_then_deadline_then_submission() -> None:
    jobs, offers, fleet = _market()
    assert [d.job_id for d in plan(jobs, offers, fleet, NOW, POLICY)] == ["a", "b", "f", "c", "d", "e"]


@pytest.mark.parametrize("seed", range(4))
def test_same_inputs_in_any_order_give_the_same_plan(seed: int) -> None:
    jobs, offers, fleet = _market()
    expected = [d.model_dump(mode="json") for d in plan(jobs, offers, fleet, NOW, POLICY)]
    rng = random.Random(seed)
    for items in (jobs, offers, fleet):
        rng.shuffle(items)
    assert [d.model_dump(mode="json") for d in plan(jobs, offers, fleet, NOW, POLICY)] == expected


@pytest.mark.parametrize("seed", range(40))
def test_the_lazy_ranking_is_the_order_of_every_candidate_scored_in_full(seed: int) -> None:
    # planner.heap ranks most groups from a cost and a rank alone and scores only what a decision
    # shows; the order must be the one full scores give (rank, prefix, member), candidate by candidate.
    from scheduler.planner.book import CandidateBook
    from scheduler.planner.plan import _canonical_fleet, _Planning

    rng = random.Random(seed)
    offers = [make_offer(f"t{i % 4}.xlarge", region=rng.choice(["us-east-1", "us-west-2"]),
                         zone=f"z{rng.randint(0, 2)}", gpu=rng.choice(["T4", "A10G", "L4", "MI300X"]),
                         od=rng.choice(["1.00 USD", "0.50 USD", "8.00 CNY", None]),
                         spot=rng.choice(["0.40 USD", "0.4 USD", "2.00 CNY", None]),
                         spot_stock=rng.choice([Stock.available, Stock.sold_out]), rate=rng.choice([0.0, 0.05, 1.0]))
              for i in range(rng.randint(1, 12))]
    fleet = [reserved_slot(offers[0], until_h=rng.choice([1, 720])), warm_slot(offers[-1])][: rng.randint(0, 2)]
    job = make_job(deadline_h=rng.choice([None, -5, 0.5, 3, 48]), budget=rng.choice([None, "5 CNY", "500 CNY"]),
                   kind=rng.choice(["train", "infer"]), epochs=rng.choice([1, 10]), img_size=rng.choice([640, 1280]),
                   avoid=frozenset({f"{offers[0].key}|spot"}) if rng.random() < 0.3 else frozenset())
    p = _Planning(job, CandidateBook(offers, _canonical_fleet(fleet), NOW, POLICY, None))
    lazy = [(s.group.index, mem.tail, r) for s, mem, r in p.ranking.picks()]
    full = sorted(((r, s.prefix, mem.tail), s.group.index, r) for s in p.ranking.scored
                  for r, line in s.runs for mem in line.members)
    assert lazy == [(index, key[2], r) for key, index, r in full]


def test_alternatives_are_sorted_and_keep_the_infeasible_with_their_why() -> None:
    _, offers, fleet = _market()
    job = make_job("z", deadline_h=1.2, budget="30 CNY")
    [d] = plan([job], offers, fleet, NOW, POLICY, alternatives=8)
    assert d.choice is not None and d.choice not in d.alternatives
    assert 0 < len(d.alternatives) <= 8
    flags = [o.feasible for o in d.alternatives]
    assert flags == sorted(flags, reverse=True)  # feasible first
    feasible = [o for o in d.alternatives if o.feasible]
    non_reserved = [o.est_cost.amount for o in feasible if o.capacity is not Capacity.reserved]
    assert non_reserved == sorted(non_reserved)
    assert all(o.est_cost >= d.choice.est_cost for o in feasible)
    infeasible = [o for o in d.alternatives if not o.feasible]
    assert infeasible and all(o.why and not o.why.startswith("feasible") for o in infeasible)
    assert any("sold out" in o.why for o in options_for(job, offers, fleet, NOW, POLICY))


@pytest.mark.parametrize("limit", [0, 1, 2, MAX_ALTERNATIVES, 8])
def test_a_decision_keeps_at_most_the_runners_up_asked_for(limit: int) -> None:
    _, offers, fleet = _market()
    job = make_job("z", deadline_h=1.2, budget="30 CNY")
    [everything] = plan([job], offers, fleet, NOW, POLICY, alternatives=50)
    [d] = plan([job], offers, fleet, NOW, POLICY, alternatives=limit)
    assert d.choice == everything.choice and d.reason == everything.reason
    assert d.alternatives == everything.alternatives[:limit]  # the best ones, in the same order
    assert len(everything.alternatives) > 8


def test_options_for_puts_plans_choice_first() -> None:
    jobs, offers, fleet = _market()
    for job in jobs:
        d = decide(job, offers, fleet)
        options = options_for(job, offers, fleet, NOW, POLICY)
        if d.choice is not None:
            assert options[0] == d.choice
            assert set(d.alternatives) <= set(options[1:])
        else:
            assert not any(o.feasible for o in options)


def test_decisions_survive_a_json_round_trip() -> None:
    jobs, offers, fleet = _market()
    for d in plan(jobs, offers, fleet, NOW, POLICY):
        assert Decision.model_validate(d.model_dump(mode="json")) == d


def test_options_built_without_validation_equal_validated_ones() -> None:
    # planner.built makes decisions and options from fields the planner typed itself, unvalidated:
    # validating the same fields must give the same model, down to each value's type.
    jobs, offers, fleet = _market()
    for d in plan(jobs, offers, fleet, NOW, POLICY):
        for o in [d.choice, *d.alternatives] if d.choice is not None else d.alternatives:
            again = Option.model_validate(dict(o))
            assert again == o and again.model_dump_json() == o.model_dump_json()
            assert list(o.__dict__) == list(Option.model_fields) and o.model_fields_set == again.model_fields_set
            assert [type(v) for v in o.__dict__.values()] == [type(v) for v in again.__dict__.values()]
        again_d = Decision.model_validate(dict(d))
        assert again_d == d and again_d.model_dump_json() == d.model_dump_json()
        assert list(d.__dict__) == list(Decision.model_fields)
        # The field-name set is shared (see built): copying with an update must leave it alone.
        assert d.model_copy(update={"reason": "x"}).reason == "x" and d.model_fields_set == set(Decision.model_fields)


def test_alternatives_show_one_zone_per_instance_type_and_capacity() -> None:
    offers = [make_offer("g5.xlarge", zone=f"us-east-1{z}", spot="0.40 USD", rate=0.0) for z in "abcd"]
    offers.append(make_offer("g6.xlarge", gpu="L4", spot="0.45 USD", rate=0.0))
    job = make_job(deadline_h=48)
    d = decide(job, offers)
    assert d.choice is not None and (d.choice.instance_type, d.choice.capacity) == ("g5.xlarge", Capacity.spot)
    shapes = [(o.instance_type, o.capacity) for o in d.alternatives]
    assert len(shapes) == len(set(shapes)) == 3  # g5 on-demand, g6 spot, g6 on-demand
    assert ("g5.xlarge", Capacity.spot) not in shapes
    assert len(options_for(job, offers, [], NOW, POLICY)) == 10  # options_for keeps every zone


# --- baseline strategies for `gpusched simulate` ------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "job_capacity", "rate", "spot", "expected", "interruptions_priced"),
    [
        ("gpusched", "auto", 0.05, "0.40 USD", Capacity.spot, True),
        ("on-demand", "auto", 0.05, "0.40 USD", Capacity.on_demand, False),
        ("on-demand", "spot", 0.05, "0.40 USD", Capacity.on_demand, False),  # the baseline overrides the file
        ("spot-greedy", "auto", 3.0, "0.90 USD", Capacity.spot, False),  # blind to a terrible reclaim rate
        ("skypilot-like", "on-demand", 3.0, "0.90 USD", Capacity.spot, False),
        ("gpusched", "auto", 3.0, "0.90 USD", Capacity.on_demand, True),  # ours prices reclaims, leaves spot
    ],
)
def test_strategies_pick_their_capacity(strategy, job_capacity, rate, spot, expected, interruptions_priced):
    offers = [make_offer(rate=rate, spot=spot)]
    job = make_job(deadline_h=48, capacity=job_capacity, epochs=30)
    d = decide(job, offers, policy=PlannerPolicy(strategy=strategy))
    assert d.choice is not None and d.choice.capacity is expected
    if expected is Capacity.spot:
        assert (d.choice.expected_interruptions > 0) is interruptions_priced


# --- team budgets per month -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("monthly", "left", "jobs", "expected"),  # left in units of one job's expected cost
    [
        ("1000 CNY", "100", 1, ["launch"]),
        ("1000 CNY", "0.5", 1, ["wait"]),  # the month is spent: wait for the next one
        ("0.10 CNY", "0.01", 1, ["refuse"]),  # would not fit even a whole month
        ("1000 CNY", "1.5", 2, ["launch", "wait"]),  # the first job uses what is left
    ],
)
def test_team_budget_waits_or_refuses(monthly, left, jobs, expected):
    from scheduler.planner.inputs import TeamBudget

    offers = [make_offer(spot="0.40 USD")]
    queued = [make_job(f"j{i}", deadline_h=48, epochs=30) for i in range(jobs)]
    one = plan(queued[:1], offers, [], NOW, POLICY)[0]
    assert one.choice is not None and Money.parse("5 CNY") < one.choice.est_cost < Money.parse("12 CNY")
    budgets = {"vision": TeamBudget(monthly=Money.parse(monthly), left=one.choice.est_cost * Decimal(left))}
    decisions = plan(queued, offers, [], NOW, POLICY, team_budgets=budgets)
    assert [d.action for d in decisions] == expected
    for d in decisions:
        if d.action in ("wait", "refuse"):
            assert "team vision" in d.reason and d.choice is None


def test_other_teams_budgets_do_not_apply():
    from scheduler.planner.inputs import TeamBudget

    budgets = {"someone-else": TeamBudget(monthly=Money.parse("1 CNY"), left=Money.parse("0 CNY"))}
    [d] = plan([make_job(deadline_h=48)], [make_offer()], [], NOW, POLICY, team_budgets=budgets)
    assert d.action == "launch"
