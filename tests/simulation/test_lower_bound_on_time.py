"""The floor on what an always-on-time schedule pays on average (``lower_bound(..., reclaims=True, on_time=True)``):
a job whose cheap spot run takes longer through its expected reclaims than its deadline allows pays for faster
hours (issue 17, item 1: how much of a month's gap to the uninterrupted bound no schedule can close).

Hand-checked on one job and one offer sold both ways, then against always-on-time schedules run with random
reclaims: their mean bill is never below the floor."""

from __future__ import annotations

import math
import random
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from scheduler.errors import UserError
from scheduler.jobs.jobfile import parse_job
from scheduler.jobs.perf import Estimate, estimate
from scheduler.models import JobSpec, Offer, Price
from scheduler.money import FxRates, Money
from scheduler.simulation.lower_bound import lower_bound
from scheduler.simulation.lower_bound_lp import prune
from scheduler.simulation.lower_bound_options import PricedCatalog, expected_spot_hours
from scheduler.simulation.trace_file import TraceEntry

T0 = datetime(2026, 11, 2, 1, 0, tzinfo=timezone.utc)
FX = FxRates(base="CNY", rates={"USD": Decimal("7.2")})
SPOT, ON_DEMAND, RATE = Decimal("6"), Decimal("20"), 0.5


def _offer(instance_type: str = "one.a10", *, spot: str | None = str(SPOT), on_demand: str = str(ON_DEMAND),
           rate: float = RATE, gpu: str = "A10") -> Offer:
    def price(amount: str) -> Price:
        return Price(per_hour=Money(amount=Decimal(amount), currency="CNY"), source="test", as_of=date(2026, 11, 1))

    return Offer(provider="alibaba", region="cn-hangzhou", zone="cn-hangzhou-h", instance_type=instance_type,
                 gpu=gpu, gpu_count=1, gpu_mem_gib=80 if gpu == "A100-80G" else 24, vcpus=16, mem_gib=64,
                 on_demand=price(on_demand), spot=price(spot) if spot else None,
                 spot_interruptions_per_hour=rate)


def _job(window_hours: float | None, gpus: tuple[str, ...] = ("A10",)) -> JobSpec:
    doc: dict = {"name": "retrain", "team": "ops", "kind": "train", "model": "yolov9-e",
                 "data": {"uri": "s3://data/set/", "train_images": 48_000, "val_images": 4_800},
                 "train": {"epochs": 20, "img_size": 960, "batch": 16, "weights": "s3://models/yolov9-e.pt"},
                 "resources": {"gpus": list(gpus)}}
    if window_hours is not None:
        doc["policy"] = {"deadline": (T0 + timedelta(hours=window_hours)).isoformat()}
    return parse_job(doc)


EST: Estimate = estimate(_job(None), "A10", 1, 16)
HOURS = EST.hours  # on-demand: uninterrupted
ELAPSED = expected_spot_hours(EST, 1.0, RATE)  # spot, on average through its reclaims


def _bound(window_hours: float | None, *, on_time: bool = True, offers: list[Offer] | None = None) -> Decimal:
    lb = lower_bound([TraceEntry(at=T0, job=_job(window_hours))], offers or [_offer()], currency="CNY", fx=FX,
                     reclaims=True, on_time=on_time)
    assert lb.status == "optimal"
    return lb.total.amount


def test_the_model_makes_spot_slower_on_average_and_cheaper() -> None:
    assert ELAPSED > HOURS * 1.2
    assert SPOT * Decimal(repr(ELAPSED)) < ON_DEMAND * Decimal(repr(HOURS))


@pytest.mark.parametrize(("window", "spot_share"), [
    (ELAPSED * 1.5, 1.0),  # time to spare: spot alone, as without the row
    (ELAPSED + 1e-3, 1.0),  # just enough on average
    ((HOURS + ELAPSED) / 2, 0.5),  # half the work on each, so that the hours meet the deadline on average
    (HOURS + (ELAPSED - HOURS) / 4, 0.25),
    (HOURS + 1e-3, 1e-3 / (ELAPSED - HOURS)),  # hardly any time to lose: on-demand nearly alone
])
def test_the_job_runs_on_spot_as_much_as_its_deadline_allows_on_average(window: float, spot_share: float) -> None:
    expected = (SPOT * Decimal(repr(ELAPSED)) * Decimal(repr(spot_share))
                + ON_DEMAND * Decimal(repr(HOURS)) * Decimal(repr(1 - spot_share)))
    assert float(_bound(window)) == pytest.approx(float(expected), rel=1e-5)
    # Without the row the deadline is judged on uninterrupted hours: spot alone whenever it fits at all.
    assert float(_bound(window, on_time=False)) == pytest.approx(float(SPOT) * ELAPSED, rel=1e-9)


def test_a_job_nothing_finishes_in_time_on_average_is_priced_as_without_the_row() -> None:
    spot_only = _offer(spot=str(SPOT), on_demand="1000")  # on-demand dear, never on time: only spot
    lb = lower_bound([TraceEntry(at=T0, job=_job(HOURS * 1.05))], [spot_only], currency="CNY", fx=FX,
                     reclaims=True, on_time=True)
    # On-demand meets the deadline, so the row is set and the mix pays for it: dearer than spot alone.
    assert lb.total.amount > SPOT * Decimal(repr(ELAPSED))
    only_spot = _job(HOURS * 1.05).model_copy(
        update={"policy": _job(HOURS * 1.05).policy.model_copy(update={"capacity": "spot"})})
    lb = lower_bound([TraceEntry(at=T0, job=only_spot)], [spot_only], currency="CNY", fx=FX,
                     reclaims=True, on_time=True)
    assert float(lb.total.amount) == pytest.approx(float(SPOT) * ELAPSED, rel=1e-9)


def test_a_faster_dearer_option_is_kept_for_the_mix_and_lowers_the_floor() -> None:
    # A100 on-demand: dearer than the A10's, but fast; the A10's spot, slow through its reclaims.
    fast = _offer("fast.a100", spot=None, on_demand="30", gpu="A100-80G")
    window = (HOURS + ELAPSED) / 2
    alone = _bound(window)
    with_fast = lower_bound([TraceEntry(at=T0, job=_job(window, ("A10", "A100-80G")))], [_offer(), fast],
                            currency="CNY", fx=FX, reclaims=True, on_time=True)
    assert with_fast.status == "optimal"
    assert with_fast.total.amount < alone  # fewer dear hours buy the same time back
    assert {s.option.gpu for s in with_fast.jobs[0].shares} == {"A10", "A100-80G"}


def test_prune_keeps_every_option_faster_than_the_free_ones_before_it() -> None:
    catalog = PricedCatalog([_offer(), _offer("fast.a100", spot=None, on_demand="30", gpu="A100-80G")],
                            currency="CNY", fx=FX)
    options, _ = catalog.candidates(_job(None, ("A10", "A100-80G")), T0, reclaims=True)
    plain, exact = prune(options, lambda _pool: False, 20)
    assert len(plain) == 1 and exact  # the cheapest free option dominates without the row
    kept, exact = prune(options, lambda _pool: False, 20, on_the_clock=True)
    assert exact
    assert [c.elapsed for c in kept] == sorted((c.elapsed for c in kept), reverse=True)
    assert min(c.elapsed for c in kept) == min(c.elapsed for c in options)


def test_on_time_needs_reclaims() -> None:
    with pytest.raises(UserError):
        lower_bound([TraceEntry(at=T0, job=_job(HOURS * 2))], [_offer()], currency="CNY", fx=FX, on_time=True)


def _run_on_time(window: float, rng: random.Random) -> float:
    """One run of an always-on-time schedule with reclaims at random: spot, epoch by epoch, while losing the
    attempt in progress and setting up again would still leave on-demand time to finish; then on-demand."""
    setup, epoch = EST.setup_hours, EST.epoch_hours or 0.0
    epochs = round((HOURS - setup) / epoch)
    clock, bill, done, on_spot, fresh = 0.0, 0.0, 0, True, True
    life = rng.expovariate(RATE)
    while done < epochs:
        left = epochs - done
        if on_spot and window - clock - 2 * (setup + epoch) < setup + left * epoch:
            on_spot, fresh = False, True  # from here on-demand: no reclaims, done by the deadline
        if not on_spot:
            hours = (setup if fresh else 0.0) + left * epoch
            return bill + float(ON_DEMAND) * hours if clock + hours <= window + 1e-9 else math.inf
        need = (setup if fresh else 0.0) + epoch
        if life >= need:
            clock, bill, life, done, fresh = clock + need, bill + float(SPOT) * need, life - need, done + 1, False
        else:  # reclaimed: the epoch in progress is lost, a fresh machine sets up again
            clock, bill, life, fresh = clock + life, bill + float(SPOT) * life, rng.expovariate(RATE), True
    return bill


@pytest.mark.parametrize("window_over_hours", [1.1, 1.25, 1.5, 2.0])
def test_always_on_time_schedules_pay_at_least_the_floor_on_average(window_over_hours: float) -> None:
    window = HOURS * window_over_hours
    rng = random.Random(11)
    runs = [_run_on_time(window, rng) for _ in range(3000)]
    assert all(math.isfinite(r) for r in runs)  # the schedule is on time in every run
    floor = float(_bound(window))
    assert sum(runs) / len(runs) >= floor
    # And the floor is above the one that judges the deadline on uninterrupted hours where the deadline binds.
    if window < ELAPSED:
        assert floor > float(_bound(window, on_time=False))


def test_a_job_whose_on_time_options_pruning_cut_keeps_the_floor_solvable() -> None:
    """Spot only, two GPUs, both in pools that run short: with one option kept per capacity, only the cheap slow
    one is left, which is not on time on average. The job is priced as without its row rather than making the LP
    infeasible (which would price every job on its cheapest option alone)."""
    slow, fast = _offer(), _offer("fast.a100", spot="30", gpu="A100-80G")
    window = (HOURS + ELAPSED) / 2
    spec = _job(window, ("A10", "A100-80G"))
    spot_only = spec.model_copy(update={"policy": spec.policy.model_copy(update={"capacity": "spot"})})
    # Eight jobs at once, seven slow machines (enough for their uninterrupted hours, not for all eight at once).
    entries = [TraceEntry(at=T0, job=spot_only.model_copy(update={"name": f"retrain-{k}"})) for k in range(8)]
    limits = {slow.key: 7, fast.key: 1}
    lb = lower_bound(entries, [slow, fast], currency="CNY", fx=FX, reclaims=True, on_time=True,
                     capacity_limits=limits, max_options=1)
    assert lb.status == "optimal"
    assert lb.inexact_prunes == 8  # the cap cut the fast option of every job
    # Without the cap the fast option is kept, and being on time on average costs more.
    full = lower_bound(entries, [slow, fast], currency="CNY", fx=FX, reclaims=True, on_time=True,
                       capacity_limits=limits)
    assert full.status == "optimal" and full.total.amount > lb.total.amount
