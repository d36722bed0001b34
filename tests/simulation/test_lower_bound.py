"""The lower bound: hand-checkable LPs on a tiny market, then the bundled catalog.

Hours come from ``perf.estimate`` (the model the bound is defined on); the
expected costs are worked out here from those hours and the offers' prices.
"""

from __future__ import annotations

from collections import Counter
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from providers.catalog import load_catalog
from scheduler.errors import UserError
from scheduler.jobs.jobfile import parse_job
from scheduler.jobs.perf import estimate
from scheduler.models import Capacity, JobSpec, Offer, Price, ReservedCapacity
from scheduler.money import FxRates, Money
from scheduler.simulation.lower_bound import lower_bound
from scheduler.simulation.lower_bound_options import PricedCatalog, feasible_options
from scheduler.simulation.trace_file import TraceEntry
from scheduler.simulation.traces import generate_month

T0 = datetime(2026, 11, 2, 1, 0, tzinfo=timezone.utc)  # on a whole hour, so buckets line up
FX = FxRates(base="CNY", rates={"USD": Decimal("7.2")})


def _offer(instance_type: str, zone: str, *, on_demand: str | None, spot: str | None = None,
           provider: str = "alibaba", region: str = "cn-hangzhou", currency: str = "CNY") -> Offer:
    def price(amount: str | None) -> Price | None:
        if amount is None:
            return None
        return Price(per_hour=Money(amount=Decimal(amount), currency=currency), source="test", as_of=date(2026, 11, 1))

    return Offer(provider=provider, region=region, zone=f"{region}-{zone}", instance_type=instance_type, gpu="A10",
                 gpu_count=1, gpu_mem_gib=24, vcpus=16, mem_gib=64, on_demand=price(on_demand), spot=price(spot))


CHEAP = _offer("cheap.a10", "h", on_demand="10")
MID = _offer("mid.a10", "i", on_demand="14")
DEAR = _offer("dear.a10", "j", on_demand="20")
MARKET = [DEAR, CHEAP, MID]  # order must not matter


def _job(name: str = "nightly", **policy: Any) -> JobSpec:
    doc: dict[str, Any] = {
        "name": name, "team": "ops", "kind": "infer", "model": "yolov9-s",
        "infer": {"source": "s3://frames/day/", "images": 400_000, "weights": "s3://models/best.pt"},
        "resources": {"gpus": ["A10"]},
    }
    if policy:
        doc["policy"] = policy
    return parse_job(doc)


HOURS = estimate(_job(), "A10", 1, 16).hours  # the same for every offer above: same GPU, same vCPUs


def _entry(at: datetime = T0, name: str = "nightly", **policy: Any) -> TraceEntry:
    return TraceEntry(at=at, job=_job(name, **policy))


def _pair(window_hours: float) -> list[TraceEntry]:
    """Two jobs submitted together, each due ``window_hours`` later."""
    due = (T0 + timedelta(hours=window_hours)).isoformat()
    return [_entry(name="a", deadline=due), _entry(name="b", deadline=due)]


def _cost(price: str, hours: float = HOURS) -> float:
    return float(price) * hours


def test_without_limits_every_job_runs_on_its_cheapest_offer() -> None:
    lb = lower_bound(_pair(3 * HOURS), MARKET, currency="CNY", fx=FX)
    assert lb.status == "optimal"
    assert float(lb.total.amount) == pytest.approx(2 * _cost("10"), rel=1e-9)
    assert lb.total == lb.unconstrained_total
    assert not lb.capacity_bound
    for job in lb.jobs:
        assert job.cheapest is not None and job.cheapest.offer_key == CHEAP.key
        assert [(s.option.offer_key, s.fraction) for s in job.shares] == [(CHEAP.key, 1.0)]


def test_a_limit_sends_the_second_of_two_overlapping_jobs_to_the_next_cheapest_offer() -> None:
    lb = lower_bound(_pair(HOURS), MARKET, currency="CNY", fx=FX, capacity_limits={CHEAP.key: 1})
    assert lb.status == "optimal"
    assert float(lb.total.amount) == pytest.approx(_cost("10") + _cost("14"), rel=1e-6)
    assert lb.capacity_bound
    assert float(lb.unconstrained_total.amount) == pytest.approx(2 * _cost("10"), rel=1e-9)
    on_cheap = sum(s.fraction for j in lb.jobs for s in j.shares if s.option.offer_key == CHEAP.key)
    assert on_cheap == pytest.approx(1.0, abs=1e-6)


def test_a_loose_deadline_lets_both_jobs_take_turns_on_the_limited_offer() -> None:
    """Not a fixed start: a scheduler could run them one after the other, so the bound must allow it."""
    lb = lower_bound(_pair(2 * HOURS + 0.5), MARKET, currency="CNY", fx=FX, capacity_limits={CHEAP.key: 1})
    assert float(lb.total.amount) == pytest.approx(2 * _cost("10"), rel=1e-6)
    assert not lb.capacity_bound


def test_the_relaxation_may_split_a_job_between_offers() -> None:
    """Both due in 1.5 x their run time on one machine: whole jobs need 2 x, the LP fits 1.5 jobs there."""
    lb = lower_bound(_pair(1.5 * HOURS), MARKET, currency="CNY", fx=FX, capacity_limits={CHEAP.key: 1},
                     bucket=timedelta(seconds=36))
    on_cheap = sum(s.fraction for j in lb.jobs for s in j.shares if s.option.offer_key == CHEAP.key)
    assert on_cheap == pytest.approx(1.5, abs=0.02)
    assert any(len(j.shares) == 2 for j in lb.jobs)
    assert float(lb.total.amount) == pytest.approx(1.5 * _cost("10") + 0.5 * _cost("14"), rel=0.01)
    # Below the cheapest whole-job schedule, which is what makes it a bound.
    assert float(lb.total.amount) < _cost("10") + _cost("14")


@pytest.mark.parametrize("usd_cny", [Decimal("7.2"), Decimal("7.5")])
@pytest.mark.parametrize("currency", ["CNY", "USD"])
def test_prices_in_usd_and_cny_are_compared_after_fx(usd_cny: Decimal, currency: str) -> None:
    aws = _offer("g5.xlarge", "a", on_demand="1.50", provider="aws", region="us-east-1", currency="USD")
    ali = _offer("ecs.gn7i", "h", on_demand="11", currency="CNY")
    fx = FxRates(base="CNY", rates={"USD": usd_cny})
    lb = lower_bound(_pair(3 * HOURS), [aws, ali], currency=currency, fx=fx)
    aws_cny, ali_cny = Decimal("1.50") * usd_cny, Decimal("11")
    winner, hourly_cny = (aws, aws_cny) if aws_cny < ali_cny else (ali, ali_cny)
    hourly = hourly_cny if currency == "CNY" else hourly_cny / usd_cny
    assert lb.total.currency == currency
    assert float(lb.total.amount) == pytest.approx(2 * float(hourly) * HOURS, rel=1e-9)
    assert {s.option.offer_key for j in lb.jobs for s in j.shares} == {winner.key}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"resources": {"gpus": ["H100"]}}, "no offer matches"),
        ({"policy": {"deadline": "10m"}}, "deadline leaves"),
        ({"policy": {"budget": "1 CNY"}}, "over budget"),
        ({"policy": {"capacity": "spot"}}, "no allowed capacity"),
        ({"policy": {"capacity": "reserved"}}, "reserved"),
        # A run past ``limits.MAX_RUN`` is no option for the planner, nor here (its finish was past the clock's end).
        ({"infer": {"source": "s3://frames/day/", "images": 1_000_000_000, "img_size": 2048,
                    "weights": "s3://models/best.pt"}},
         "would run ~663 days on 1x A10; a job may run at most 366 days"),
    ],
)
def test_a_job_nothing_can_run_is_counted_not_priced(change: dict[str, Any], why: str) -> None:
    doc = _job("stuck").model_dump(mode="json", exclude_none=True)
    doc.update(change)
    entries = [_entry(name="fine"), TraceEntry(at=T0, job=parse_job(doc))]
    lb = lower_bound(entries, MARKET, currency="CNY", fx=FX)
    assert (lb.priced_jobs, lb.infeasible_jobs) == (1, 1)
    stuck = lb.jobs[1]
    assert stuck.cost is None and stuck.cheapest is None and stuck.shares == ()
    assert stuck.why_not is not None and why in stuck.why_not
    assert float(lb.total.amount) == pytest.approx(_cost("10"), rel=1e-9)


@pytest.mark.parametrize(
    ("factors", "window_hours", "expected"),
    [
        # (job a's, job b's) true speed over the estimate; both due ``window_hours`` after submission;
        # the bound's cost in hours at CHEAP's price, or None where nothing can run the job in time.
        ((1.0, 1.0), 3.0, (1.0, 1.0)),  # the estimate itself: the same as no ``speed``
        ((1.5, 0.8), 3.0, (1.5, 0.8)),  # slower costs more hours, faster fewer
        ((1.5, 1.0), 1.2, (None, 1.0)),  # on time at the estimate, late at its true speed: no schedule can
        ((0.8, 1.0), 0.9, (0.8, None)),  # late at the estimate, on time at its true speed
    ],
)
def test_the_bound_at_true_speeds_prices_each_job_at_its_own_speed(
        factors: tuple[float, float], window_hours: float, expected: tuple[float | None, float | None]) -> None:
    entries = _pair(window_hours * HOURS)
    seen: list[tuple[int, str]] = []

    def speed(i: int, gpu: str) -> float:
        seen.append((i, gpu))
        return factors[i]

    lb = lower_bound(entries, MARKET, currency="CNY", fx=FX, speed=speed)
    assert {gpu for _, gpu in seen} == {"A10"} and {i for i, _ in seen} == {0, 1}
    for job, want in zip(lb.jobs, expected, strict=True):
        if want is None:
            assert job.cost is None and job.why_not is not None and "fastest option needs" in job.why_not
        else:
            assert job.cost is not None
            assert float(job.cost.amount) == pytest.approx(_cost("10", want * HOURS), rel=1e-9)
            assert job.shares[0].option.hours == pytest.approx(want * HOURS, rel=1e-12)
    assert lb.infeasible_jobs == expected.count(None)
    if factors == (1.0, 1.0):
        assert lb == lower_bound(entries, MARKET, currency="CNY", fx=FX).model_copy(
            update={"solve_seconds": lb.solve_seconds})


def test_a_budget_rules_out_only_the_options_above_it() -> None:
    budget = Decimal(repr(_cost("12"))).quantize(Decimal("0.01"))  # between CHEAP and MID
    options = feasible_options(_job(budget=f"{budget} CNY"), T0, MARKET, currency="CNY", fx=FX).options
    assert [o.offer_key for o in options] == [CHEAP.key]
    unbounded = feasible_options(_job(), T0, MARKET, currency="CNY", fx=FX).options
    assert [o.offer_key for o in unbounded] == [CHEAP.key, MID.key, DEAR.key]


def test_a_job_over_budget_everywhere_but_the_limited_offer_cannot_be_priced_elsewhere() -> None:
    budget = Decimal(repr(_cost("12"))).quantize(Decimal("0.01"))  # CHEAP fits it, MID and DEAR do not
    lb = lower_bound([_entry(budget=f"{budget} CNY")], MARKET, currency="CNY", fx=FX, capacity_limits={CHEAP.key: 0})
    assert lb.status == "infeasible"  # the only option it may use has no machines
    assert lb.total == lb.unconstrained_total  # the fallback, itself a bound


def test_reserved_units_are_free_but_limited_and_end_when_the_reservation_does() -> None:
    far = ReservedCapacity(provider="alibaba", region="cn-hangzhou", instance_type="dear.a10", count=1,
                           until=T0 + timedelta(days=30))
    lb = lower_bound(_pair(HOURS), MARKET, currency="CNY", fx=FX, reserved=[far])
    assert float(lb.total.amount) == pytest.approx(_cost("10"), rel=1e-6)  # one free, one on CHEAP
    assert lb.unconstrained_total.amount == 0 and lb.capacity_bound
    reserved = [s for j in lb.jobs for s in j.shares if s.option.capacity is Capacity.reserved]
    assert sum(s.fraction for s in reserved) == pytest.approx(1.0, abs=1e-6)

    soon = far.model_copy(update={"until": T0 + timedelta(hours=HOURS / 2)})
    lb = lower_bound(_pair(HOURS), MARKET, currency="CNY", fx=FX, reserved=[soon])
    assert float(lb.total.amount) == pytest.approx(2 * _cost("10"), rel=1e-9)


@pytest.mark.parametrize(
    ("limits", "expected_price"),
    [
        ({}, "5"),  # CHEAP spot
        ({"KEY|spot": 0}, "11"),  # spot gone: MID on-demand beats CHEAP's 12 on-demand
        ({"KEY|on-demand": 0}, "5"),  # only on-demand limited
        ({"KEY": 0}, "11"),  # both gone
    ],
)
def test_a_limit_key_names_an_offer_and_optionally_one_capacity(limits: dict[str, int], expected_price: str) -> None:
    cheap = _offer("cheap.a10", "h", on_demand="12", spot="5")
    mid = _offer("mid.a10", "i", on_demand="11")
    keyed = {k.replace("KEY", cheap.key): v for k, v in limits.items()}
    lb = lower_bound([_entry(deadline="30d")], [cheap, mid], currency="CNY", fx=FX, capacity_limits=keyed)
    assert float(lb.total.amount) == pytest.approx(_cost(expected_price), rel=1e-6)


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"alibaba/cn-hangzhou/cn-hangzhou-x/none": 1}, "no offer has that key"),
        ({f"{CHEAP.key}|reserved": 1}, "is not spot or on-demand"),
        ({CHEAP.key: -1}, "not a whole number"),
        ({CHEAP.key: 1, f"{CHEAP.key}|spot": 1}, "both limit"),
    ],
)
def test_bad_capacity_limits_are_user_errors(limits: dict[str, int], message: str) -> None:
    with pytest.raises(UserError, match=message):
        lower_bound([_entry()], MARKET, currency="CNY", fx=FX, capacity_limits=limits)


def test_pruning_that_cuts_before_a_free_option_is_counted() -> None:
    limits = {CHEAP.key: 1, MID.key: 1}
    cut = lower_bound(_pair(HOURS), MARKET, currency="CNY", fx=FX, capacity_limits=limits, max_options=1)
    full = lower_bound(_pair(HOURS), MARKET, currency="CNY", fx=FX, capacity_limits=limits)
    assert cut.inexact_prunes == 2 and full.inexact_prunes == 0
    assert cut.status == "infeasible"  # one CHEAP machine cannot run both jobs in time
    assert float(full.total.amount) == pytest.approx(_cost("10") + _cost("14"), rel=1e-6)


def test_coarser_buckets_keep_the_lp_small_and_only_weaken_the_bound() -> None:
    entries = [_entry(at=T0 + timedelta(minutes=20 * i), name=f"j{i}", deadline=f"{int(2 * HOURS) + 1}h")
               for i in range(6)]
    fine = lower_bound(entries, MARKET, currency="CNY", fx=FX, capacity_limits={CHEAP.key: 1})
    coarse = lower_bound(entries, MARKET, currency="CNY", fx=FX, capacity_limits={CHEAP.key: 1}, max_cells=4)
    assert fine.bucket_hours == 1.0 and coarse.bucket_hours > 1.0
    assert coarse.variables < fine.variables
    assert fine.capacity_bound
    assert coarse.total.amount <= fine.total.amount + Decimal("1e-6")
    assert coarse.total.amount >= coarse.unconstrained_total.amount - Decimal("1e-6")


def test_an_empty_trace_costs_nothing() -> None:
    lb = lower_bound([], MARKET, currency="CNY", fx=FX)
    assert (lb.total, lb.status, lb.priced_jobs, lb.jobs) == (Money.zero("CNY"), "no jobs", 0, ())


# --- on the bundled catalog ------------------------------------------------------------


@pytest.fixture(scope="module")
def small_month() -> list[TraceEntry]:
    return generate_month(5, teams=1, scale=0.3)


def test_with_no_limit_binding_the_lp_is_the_sum_of_per_job_minima(small_month: list[TraceEntry]) -> None:
    offers = load_catalog()
    catalog = PricedCatalog(offers, currency="CNY", fx=FX)
    per_job = [catalog.options(e.job, e.at).options for e in small_month]
    expected = sum(opts[0].cost.amount for opts in per_job if opts)

    free = lower_bound(small_month, offers, currency="CNY", fx=FX)
    roomy = {o.key: 10_000 for o in offers}  # limits that never bind still build and solve the LP
    limited = lower_bound(small_month, offers, currency="CNY", fx=FX, capacity_limits=roomy)
    for lb in (free, limited):
        assert lb.status == "optimal" and not lb.capacity_bound
        assert lb.total.amount == pytest.approx(expected, abs=Decimal("0.01"))
        assert lb.priced_jobs == sum(1 for opts in per_job if opts)
    assert free.infeasible_jobs == 0  # the generator only makes runnable jobs


def test_a_tight_limit_on_the_catalog_raises_the_bound(small_month: list[TraceEntry]) -> None:
    offers = load_catalog()
    free = lower_bound(small_month, offers, currency="CNY", fx=FX)
    # No machines of the type the unconstrained bound leans on most, in any zone (zones often tie on price);
    # kept: the jobs that have another type to go to, so the LP stays feasible.
    types = Counter(s.option.instance_type for j in free.jobs for s in j.shares)
    favourite = types.most_common(1)[0][0]
    catalog = PricedCatalog(offers, currency="CNY", fx=FX)
    movable = [e for e in small_month
               if any(o.instance_type != favourite for o in catalog.options(e.job, e.at).options)]
    starved = {o.key: 0 for o in offers if o.instance_type == favourite}
    before = lower_bound(movable, offers, currency="CNY", fx=FX)
    after = lower_bound(movable, offers, currency="CNY", fx=FX, capacity_limits=starved)
    assert after.status == "optimal"
    assert after.capacity_bound
    assert after.total > before.total
    assert after.unconstrained_total == before.unconstrained_total  # the limits are what moved it
    assert all(s.option.instance_type != favourite for j in after.jobs for s in j.shares)
