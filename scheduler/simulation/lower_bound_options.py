"""The lower bound's market: offers priced once in one currency, and every option a job may use.

An option is one offer with one capacity (spot, on-demand, or a unit of owned
reserved capacity at zero marginal cost). A job may use an option when its job
file allows it (``planner.allowed``: gpus, gpu_count, providers, regions,
``policy.capacity``; one machine for reserved capacity), the job fits the GPU's
memory, it finishes by its deadline when started at submission, and it costs no
more than its budget. Its cost is the uninterrupted hours ``perf.estimate`` gives
for the GPU setup x the hourly price x nodes. Stock is ignored: sold-out states in
the sandbox come and go, and ignoring them can only lower the bound.

Capacity limits and reservations are ``Pool``s: machines that jobs share
(``lower_bound_lp`` keeps them within their limits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Callable, Mapping, Sequence

from providers.catalog import owned_offers
from scheduler.errors import UserError
from scheduler.jobs.perf import Estimate, estimate
from scheduler.limits import MAX_RUN_HOURS, run_too_long
from scheduler.models import Capacity, Frozen, JobSpec, Offer, ReservedCapacity
from scheduler.money import FxRates, Money
from scheduler.planner.allowed import OfferFilter, job_capacities


class BoundOption(Frozen):
    """One way to run one job: an offer, a capacity, its uninterrupted hours and the whole job's cost."""

    offer_key: str
    provider: str
    region: str
    zone: str
    instance_type: str
    gpu: str
    gpu_count: int
    capacity: Capacity
    hours: float  # wall hours, uninterrupted, no boot; setup (image pull, downloads) included
    cost: Money  # hours x hourly price x nodes, in the bound's currency (zero for reserved)
    pooled: bool = False  # shares machines with other jobs under a capacity limit or a reservation


class JobOptions(Frozen):
    """Every option a job may use, cheapest first; ``why_not`` says why the list is empty."""

    options: tuple[BoundOption, ...]
    why_not: str | None = None


@dataclass(frozen=True)
class Pool:
    name: str
    limit: int
    offer_key: str
    capacities: frozenset[Capacity]
    until: datetime | None = None  # reserved capacity ends here


@dataclass
class _Rejections:
    """Why options fell away, kept to explain a job that has none left."""

    matched: int = 0
    memory: list[str] = field(default_factory=list)
    fastest_hours: float | None = None
    over_budget: Decimal | None = None  # the cheapest option that met everything but the budget
    reservation: int = 0
    estimate_error: str | None = None
    too_long: tuple[float, str] | None = None  # the fastest setup past ``limits.MAX_RUN``: its hours, why


@dataclass(frozen=True, slots=True)
class Listing:
    offer: Offer
    key: str
    prices: tuple[tuple[Capacity, Decimal, int | None], ...]  # capacity, hourly in the bound's currency, pool


@dataclass(slots=True)
class Candidate:
    """An option before it is kept: plain values, so that thousands of jobs x hundreds of offers stay cheap."""

    cost: Decimal  # in the bound's currency
    hours: float  # the machine-hours of work, uninterrupted
    listing: Listing
    capacity: Capacity
    pool: int | None
    elapsed: float  # the hours it takes on the clock on average: ``hours``, or spot's through its expected reclaims

    def sort_key(self) -> tuple:
        # Free options before pooled ones at the same cost: pruning stops at the first free one.
        return (self.cost, self.hours, self.listing.key, self.capacity.value, -1 if self.pool is None else self.pool)

    def option(self, currency: str) -> BoundOption:
        o = self.listing.offer
        return BoundOption(
            offer_key=self.listing.key, provider=o.provider, region=o.region, zone=o.zone,
            instance_type=o.instance_type, gpu=o.gpu, gpu_count=o.gpu_count, capacity=self.capacity, hours=self.hours,
            cost=Money(amount=self.cost, currency=currency), pooled=self.pool is not None,
        )


class PricedCatalog:
    """Offers priced once in one currency, for asking many jobs' options (the lower bound and the trace
    generator do), and the ``Pool`` each (offer, capacity) is in.

    Not the planner's ``planner.book.CandidateBook``: that one lives for one ``plan()`` call, keeps stock,
    reclaim rates and fleet slots, and groups candidates by every number the planner computes; this one
    lives for a whole trace, ignores stock and reclaims, and only indexes offers by GPU count.
    """

    def __init__(self, offers: Sequence[Offer], *, currency: str, fx: FxRates, pools: Sequence[Pool] = ()) -> None:
        self.currency = currency
        self.fx = fx
        self.pools = pools
        pool_of = {(p.offer_key, c): i for i, p in enumerate(pools) for c in p.capacities
                   if c is not Capacity.reserved}
        self.reserved: dict[str, list[int]] = {}
        for i, p in enumerate(pools):
            if Capacity.reserved in p.capacities:
                self.reserved.setdefault(p.offer_key, []).append(i)
        self.by_count: dict[int, list[Listing]] = {}
        for offer in offers:
            key = offer.key
            prices = []
            for cap in (Capacity.spot, Capacity.on_demand):
                price = offer.price(cap)
                if price is not None:
                    prices.append((cap, fx.convert(price.per_hour, currency).amount, pool_of.get((key, cap))))
            self.by_count.setdefault(offer.gpu_count, []).append(Listing(offer, key, tuple(prices)))

    def options(self, spec: JobSpec, submitted_at: datetime) -> JobOptions:
        """Every option ``spec`` may use when submitted at ``submitted_at``, cheapest first."""
        options, why = self.candidates(spec, submitted_at)
        return JobOptions(options=tuple(c.option(self.currency) for c in options), why_not=why)

    def candidates(self, spec: JobSpec, submitted_at: datetime, speed: Callable[[str], float] | None = None,
                   *, reclaims: bool = False) -> tuple[list[Candidate], str | None]:
        """Every option the job may use, cheapest first, and why there are none when empty.

        ``speed``: per GPU model, how much longer (>1) or shorter (<1) than ``perf.estimate`` says the job
        really runs there; None takes the estimate as the truth.

        ``reclaims``: a spot option costs the hours its expected reclaims make it take at the offer's rate
        (``expected_spot_hours``), not the uninterrupted ones: the least any schedule pays *on average* there,
        not the least it can pay (a run that happens not to be reclaimed pays less). Deadlines are still judged
        on the uninterrupted hours here; ``Candidate.elapsed`` keeps the expected ones, for the bound that asks the
        job to be on time on average too (``lower_bound(..., on_time=True)``).
        """
        deadline = spec.deadline_at(submitted_at)
        # What the job file allows, as it is. The planner narrows it (``plan._planner_capacities``); the
        # bound must not: it runs every job uninterrupted, so the restart budget that takes spot away from
        # a job there never binds here, and it is one figure for every policy, so the simulator's
        # baselines, which override the job file, do not move it.
        capacities = job_capacities(spec.policy.capacity)
        nodes = spec.resources.nodes
        budget = spec.policy.budget
        # The budget compared in the bound's currency: one conversion per job, not per option.
        budget_cap = None if budget is None else self.fx.convert(budget, self.currency).amount

        out: list[Candidate] = []
        why = _Rejections()
        wanted = OfferFilter.of(spec)
        listings = [x for x in self.by_count.get(wanted.gpu_count, ()) if wanted.admits(x.offer)]
        why.matched = len(listings)
        # One estimate per machine shape; most shapes are sold in several zones and clouds.
        shapes: dict[tuple[str, int, int], list[Listing]] = {}
        for x in listings:
            shapes.setdefault((x.offer.gpu, x.offer.gpu_count, x.offer.vcpus), []).append(x)
        for (gpu, gpu_count, vcpus), group in shapes.items():
            try:
                est: Estimate = estimate(spec, gpu, gpu_count, vcpus, nodes=nodes)
            except UserError as exc:
                why.estimate_error = exc.message
                continue
            if not est.fits or not math.isfinite(est.hours):
                why.memory.append(est.why_not or f"does not fit in {gpu} memory")
                continue
            if est.hours > MAX_RUN_HOURS:  # no option for the planner either (``limits.MAX_RUN``)
                if why.too_long is None or est.hours < why.too_long[0]:
                    why.too_long = (est.hours, run_too_long(est.hours, gpu, gpu_count, nodes))
                continue
            factor = 1.0 if speed is None else speed(gpu)
            hours = est.hours * factor
            finish = submitted_at + timedelta(hours=hours)
            if why.fastest_hours is None or hours < why.fastest_hours:
                why.fastest_hours = hours
            if deadline is not None and finish > deadline:
                continue
            hours_d = Decimal(repr(hours)) * nodes
            for x in group:
                for cap, hourly, pool in x.prices:
                    if cap not in capacities:
                        continue
                    elapsed = hours
                    if reclaims and cap is Capacity.spot:
                        elapsed = expected_spot_hours(est, factor, x.offer.spot_interruptions_per_hour * nodes)
                        cost = hourly * Decimal(repr(elapsed)) * nodes
                    else:
                        cost = hourly * hours_d
                    if budget_cap is not None and cost > budget_cap:
                        if why.over_budget is None or cost < why.over_budget:
                            why.over_budget = cost
                        continue
                    out.append(Candidate(cost, hours, x, cap, pool, elapsed))
                if Capacity.reserved in capacities and nodes == 1:
                    for i in self.reserved.get(x.key, ()):
                        until = self.pools[i].until
                        if until is not None and finish > until:
                            why.reservation += 1
                            continue
                        out.append(Candidate(Decimal(0), hours, x, Capacity.reserved, i, hours))
        out.sort(key=Candidate.sort_key)
        return out, (None if out else _why_not(spec, submitted_at, deadline, why, self.currency))


def expected_spot_hours(est: Estimate, speed: float, rate: float) -> float:
    """At least the hours a run of ``est`` (``speed`` times slower than estimated) is expected to take on spot
    reclaimed ``rate`` times an hour; boots left out.

    The work goes in units that a reclaim loses whole while in progress: epochs, inference shards, or the whole
    run for a job that starts over (val, export). Reclaims come at random (the sandbox draws each machine's from
    an exponential law), so every unit of ``u`` hours takes (e^(rate u) - 1) / rate hours on average, however
    many came before. Those hours see ``rate`` reclaims an hour on average, and each is followed by the setup
    again on a fresh machine (the data and weights fetched anew) before the work resumes: at least that setup's
    hours per reclaim (a reclaim during a setup only adds more)."""
    setup = est.setup_hours * speed
    work = max(est.hours * speed - setup, 0.0)
    unit = est.epoch_hours * speed if est.epoch_hours and math.isfinite(est.epoch_hours) else work
    x = rate * unit
    units = work * math.expm1(x) / x if x > 1e-12 else work
    return setup + units * (1 + rate * setup)


def _why_not(spec: JobSpec, at: datetime, deadline: datetime | None, why: _Rejections, currency: str) -> str:
    if why.estimate_error is not None and why.fastest_hours is None and not why.memory:
        return f"cannot estimate the job: {why.estimate_error}"
    if why.matched == 0:
        return "no offer matches the job's gpus, gpu_count, providers and regions"
    if why.fastest_hours is None and why.too_long is not None:
        return why.too_long[1]  # its fastest setup's
    if why.fastest_hours is None:
        return f"fits no allowed GPU: {why.memory[0]}" if why.memory else "no allowed offer can run it"
    if deadline is not None and at + timedelta(hours=why.fastest_hours) > deadline:
        left = (deadline - at).total_seconds() / 3600
        return (f"even uninterrupted the fastest option needs {why.fastest_hours:.1f} h; "
                f"the deadline leaves {left:.1f} h")
    if why.over_budget is not None:
        cheapest = Money(amount=why.over_budget, currency=currency)
        return f"every option that meets the deadline is over budget (cheapest {cheapest})"
    if why.reservation:
        return "every reservation the job may use ends before the job would"
    if spec.policy.capacity == "reserved":
        return "asks for reserved capacity and no reservation matches"
    return f"no allowed capacity ({spec.policy.capacity}) is sold for the matching offers"


def feasible_options(
    spec: JobSpec, submitted_at: datetime, offers: Sequence[Offer], *, currency: str, fx: FxRates
) -> JobOptions:
    """Every spot / on-demand option ``spec`` may use when submitted at ``submitted_at``, cheapest first."""
    return PricedCatalog(offers, currency=currency, fx=fx).options(spec, submitted_at)


def make_pools(
    offers: Sequence[Offer], capacity_limits: Mapping[str, int] | None, reserved: Sequence[ReservedCapacity]
) -> list[Pool]:
    """Limits keyed ``Offer.key`` (spot and on-demand share them) or ``Offer.key|spot`` / ``|on-demand``."""
    by_key = {o.key: o for o in offers}
    pools: list[Pool] = []
    claimed: dict[tuple[str, Capacity], str] = {}
    for name, limit in sorted((capacity_limits or {}).items()):
        key, _, cap_text = name.partition("|")
        if key not in by_key:
            raise UserError(f"capacity limit {name!r}: no offer has that key",
                            fix="key limits by provider/region/zone/instance_type, optionally |spot or |on-demand")
        if cap_text:
            if cap_text not in (Capacity.spot.value, Capacity.on_demand.value):
                raise UserError(f"capacity limit {name!r}: {cap_text!r} is not spot or on-demand",
                                fix=f"write {key}|spot or {key}|on-demand, or {key} for both")
            caps = frozenset({Capacity(cap_text)})
        else:
            caps = frozenset({Capacity.spot, Capacity.on_demand})
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise UserError(f"capacity limit {name!r}: {limit!r} is not a whole number of machines",
                            fix="give the most machines of that offer that may run at once, e.g. 2")
        for cap in caps:
            if (key, cap) in claimed:
                raise UserError(f"capacity limits {claimed[(key, cap)]!r} and {name!r} both limit {key} {cap.value}",
                                fix="keep one of them")
            claimed[(key, cap)] = name
        pools.append(Pool(name, limit, key, caps))
    for r, offer in owned_offers(reserved, offers):
        pools.append(Pool(f"reserved {r.count} x {r.provider} {r.instance_type} in {offer.zone}", r.count,
                           offer.key, frozenset({Capacity.reserved}), r.until))
    return pools
