"""What a workload trace would cost at the very least: a linear program solved with HiGHS.

The bound is what every job would cost on its cheapest *allowed* capacity if
nothing ever went wrong: no spot interruptions, no boot, no idle machines, no
safety margins, only the hours ``perf.estimate`` gives for the GPU setup. The
simulator reports it beside the cost a policy actually ran up; the gap is what
any scheduler could still save, at most.

An option is one offer with one capacity (spot, on-demand, or a unit of owned
reserved capacity at zero marginal cost). A job may use an option when its own
filters allow it (gpus, gpu_count, providers, regions, ``policy.capacity``,
one machine for reserved capacity), the job fits the GPU's memory, it finishes
by its deadline when started at submission, and it costs no more than its
budget. Stock is ignored: sold-out states in the sandbox come and go, and
ignoring them can only lower the bound.

The linear program, with ``x[j, k]`` the share of job ``j`` run on option ``k``::

    minimise   sum_jk cost[j, k] x[j, k]
    subject to sum_k x[j, k] = 1                        every priced job runs once

Capacity limits (at most ``n`` machines of one offer at a time, from
``capacity_limits``) and reserved units (``count`` machines until ``until``)
are pools. A job may run its machine-hours on a pool's machines anywhere inside
its window: from submission to its deadline (a job without a deadline gets
``open_window``), clipped at a reservation's end. With ``y[j, p, t]`` the
machine-hours job ``j`` spends in pool ``p`` during time bucket ``t``::

    sum_t y[j, p, t] = sum_{k in p} hours[j, k] x[j, k] nodes[j]     its work, all of it
    y[j, p, t] <= overlap(t, window_j) nodes[j] sum_{k in p} x[j, k]  one gang at a time
    sum_j y[j, p, t] <= limit[p] bucket_hours                        the pool's machines

Every schedule that meets the deadlines satisfies these, so the optimum is a
lower bound: it is a relaxation twice over. Jobs are split fractionally across
options, and a job may spread its work over its window (preemptively) instead
of running in one piece. Coarser buckets make it weaker but smaller, never
wrong. Without pools the LP is the sum of every job's cheapest option.

Size, for 10,000 jobs x hundreds of offers:

* each job keeps its options cheapest first up to and including its cheapest
  free one (outside every pool, or in a pool that cannot run short during the
  job's window): that one dominates every dearer option, since the job can
  always move there and free capacity. At most ``max_options`` per capacity are
  kept (default 20). The first rule loses nothing; the second only bites when
  a job has more than 20 pooled options cheaper than its cheapest free one, and
  ``inexact_prunes`` counts those jobs (there the bound holds for the pruned
  problem only);
* a bucket where even every window at full use cannot exceed a pool's limit
  gets no row, and a job's quiet buckets in a pool are merged into one
  variable: both lose nothing;
* while more than ``max_cells`` (job, pool, bucket) cells remain, the buckets
  double (``bucket_hours`` reports the size used).

Jobs that nothing can run are left out and counted in ``infeasible_jobs``,
never priced at zero.
"""

from __future__ import annotations

import math
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence

import numpy as np
from pydantic import Field

from providers.catalog import owned_offers
from scheduler.errors import UserError
from scheduler.jobs.perf import Estimate, estimate
from scheduler.models import Capacity, Frozen, JobSpec, Offer, ReservedCapacity
from scheduler.money import Currency, FxRates, Money

if TYPE_CHECKING:
    import highspy

    from scheduler.simulation.trace_file import TraceEntry

DEFAULT_MAX_OPTIONS = 20
DEFAULT_BUCKET = timedelta(hours=1)
DEFAULT_OPEN_WINDOW = timedelta(days=7)
DEFAULT_MAX_CELLS = 400_000
_MAX_BUCKET_H = 24 * 7.0
_SHARE_EPSILON = 1e-9  # solver noise below this is not a share of a job
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


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


class Share(Frozen):
    option: BoundOption
    fraction: float = Field(gt=0, le=1)


class JobBound(Frozen):
    """One trace entry in the bound. ``cost`` is None exactly when nothing can run the job."""

    index: int  # position in the trace
    name: str
    team: str
    submitted_at: datetime
    cheapest: BoundOption | None  # the job's own minimum, ignoring capacity limits
    shares: tuple[Share, ...]  # the LP's choice: options and the share of the job each runs
    cost: Money | None
    why_not: str | None = None


class LowerBound(Frozen):
    total: Money  # the LP optimum over the priced jobs
    unconstrained_total: Money  # every priced job on its cheapest option, no capacity limits
    priced_jobs: int
    infeasible_jobs: int  # left out of both totals: no allowed option can run them
    status: str  # HiGHS's model status, lower case ("optimal"), or "no jobs"
    solve_seconds: float  # HiGHS's own run time
    capacity_bound: bool  # whether the limits raised the bound above the unconstrained total
    inexact_prunes: int  # jobs whose option list was cut before reaching an unpooled option
    variables: int
    constraints: int
    bucket_hours: float
    jobs: tuple[JobBound, ...]


class JobOptions(Frozen):
    """Every option a job may use, cheapest first; ``why_not`` says why the list is empty."""

    options: tuple[BoundOption, ...]
    why_not: str | None = None


# --- options of one job ----------------------------------------------------------


@dataclass(frozen=True)
class _Pool:
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


def allowed_capacities(spec: JobSpec) -> frozenset[Capacity]:
    wanted = spec.policy.capacity
    if wanted == "auto":
        return frozenset(Capacity)
    return frozenset({Capacity(wanted)})


class _Market:
    """The offers priced once in the bound's currency, and which pool each (offer, capacity) is in."""

    def __init__(self, offers: Sequence[Offer], currency: str, fx: FxRates, pools: Sequence[_Pool]) -> None:
        self.currency = currency
        self.fx = fx
        self.pools = pools
        pool_of = {(p.offer_key, c): i for i, p in enumerate(pools) for c in p.capacities
                   if c is not Capacity.reserved}
        self.reserved: dict[str, list[int]] = {}
        for i, p in enumerate(pools):
            if Capacity.reserved in p.capacities:
                self.reserved.setdefault(p.offer_key, []).append(i)
        self.by_count: dict[int, list[_Listing]] = {}
        for offer in offers:
            key = offer.key
            prices = []
            for cap in (Capacity.spot, Capacity.on_demand):
                price = offer.price(cap)
                if price is not None:
                    prices.append((cap, fx.convert(price.per_hour, currency).amount, pool_of.get((key, cap))))
            self.by_count.setdefault(offer.gpu_count, []).append(_Listing(offer, key, tuple(prices)))


@dataclass(frozen=True, slots=True)
class _Listing:
    offer: Offer
    key: str
    prices: tuple[tuple[Capacity, Decimal, int | None], ...]  # capacity, hourly in the bound's currency, pool


@dataclass(slots=True)
class _Candidate:
    """An option before it is kept: plain values, so that thousands of jobs x hundreds of offers stay cheap."""

    cost: Decimal  # in the bound's currency
    hours: float
    listing: _Listing
    capacity: Capacity
    pool: int | None

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


def _matching(spec: JobSpec, market: _Market) -> list[_Listing]:
    res, where = spec.resources, spec.where
    gpus = None if res.gpus is None else set(res.gpus)
    providers = None if where.providers is None else set(where.providers)
    regions = None if where.regions is None else set(where.regions)
    return [
        x for x in market.by_count.get(res.gpu_count, ())
        if (gpus is None or x.offer.gpu in gpus)
        and (providers is None or x.offer.provider in providers)
        and (regions is None or x.offer.region in regions)
    ]


def _job_options(spec: JobSpec, submitted_at: datetime, market: _Market) -> tuple[list[_Candidate], str | None]:
    """Every option the job may use, cheapest first, and why there are none when empty."""
    deadline = spec.deadline_at(submitted_at)
    capacities = allowed_capacities(spec)
    nodes = spec.resources.nodes
    budget = spec.policy.budget
    # The budget compared in the bound's currency: one conversion per job, not per option.
    budget_cap = None if budget is None else market.fx.convert(budget, market.currency).amount

    out: list[_Candidate] = []
    why = _Rejections()
    listings = _matching(spec, market)
    why.matched = len(listings)
    # One estimate per machine shape; most shapes are sold in several zones and clouds.
    shapes: dict[tuple[str, int, int], list[_Listing]] = {}
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
        hours = est.hours
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
                cost = hourly * hours_d
                if budget_cap is not None and cost > budget_cap:
                    if why.over_budget is None or cost < why.over_budget:
                        why.over_budget = cost
                    continue
                out.append(_Candidate(cost, hours, x, cap, pool))
            if Capacity.reserved in capacities and nodes == 1:
                for i in market.reserved.get(x.key, ()):
                    until = market.pools[i].until
                    if until is not None and finish > until:
                        why.reservation += 1
                        continue
                    out.append(_Candidate(Decimal(0), hours, x, Capacity.reserved, i))
    out.sort(key=_Candidate.sort_key)
    return out, (None if out else _why_not(spec, submitted_at, deadline, why, market.currency))


def _why_not(spec: JobSpec, at: datetime, deadline: datetime | None, why: _Rejections, currency: str) -> str:
    if why.estimate_error is not None and why.fastest_hours is None and not why.memory:
        return f"cannot estimate the job: {why.estimate_error}"
    if why.matched == 0:
        return "no offer matches the job's gpus, gpu_count, providers and regions"
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


class PricedCatalog:
    """Offers priced once in one currency, for asking many jobs' options (the trace generator does)."""

    def __init__(self, offers: Sequence[Offer], *, currency: str, fx: FxRates) -> None:
        self._market = _Market(offers, currency, fx, ())

    def options(self, spec: JobSpec, submitted_at: datetime) -> JobOptions:
        """Every spot / on-demand option ``spec`` may use when submitted at ``submitted_at``, cheapest first."""
        options, why = _job_options(spec, submitted_at, self._market)
        return JobOptions(options=tuple(c.option(self._market.currency) for c in options), why_not=why)


def feasible_options(
    spec: JobSpec, submitted_at: datetime, offers: Sequence[Offer], *, currency: str, fx: FxRates
) -> JobOptions:
    """Every spot / on-demand option ``spec`` may use when submitted at ``submitted_at``, cheapest first."""
    return PricedCatalog(offers, currency=currency, fx=fx).options(spec, submitted_at)


def _pools(
    offers: Sequence[Offer], capacity_limits: Mapping[str, int] | None, reserved: Sequence[ReservedCapacity]
) -> list[_Pool]:
    """Limits keyed ``Offer.key`` (spot and on-demand share them) or ``Offer.key|spot`` / ``|on-demand``."""
    by_key = {o.key: o for o in offers}
    pools: list[_Pool] = []
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
        pools.append(_Pool(name, limit, key, caps))
    for r, offer in owned_offers(reserved, offers):
        pools.append(_Pool(f"reserved {r.count} x {r.provider} {r.instance_type} in {offer.zone}", r.count,
                           offer.key, frozenset({Capacity.reserved}), r.until))
    return pools


def _prune(options: list[_Candidate], binds: Callable[[int], bool], max_options: int | None
           ) -> tuple[list[_Candidate], bool]:
    """Cheapest first, up to the first option no busy pool limits, at most ``max_options`` per capacity.

    Returns the kept options and whether the cut was exact (a free option kept, or nothing cut).
    """
    kept: list[_Candidate] = []
    per_cap: dict[Capacity, int] = {}
    for c in options:
        n = per_cap.get(c.capacity, 0)
        if max_options is not None and n >= max_options:
            continue
        per_cap[c.capacity] = n + 1
        kept.append(c)
        if c.pool is None or not binds(c.pool):
            return kept, True
    return kept, len(kept) == len(options)


# --- time buckets ------------------------------------------------------------------


@dataclass
class _PricedJob:
    index: int  # position in the trace
    options: list[_Candidate]  # cheapest first
    start_h: float  # submission, hours after the bucket origin
    windows: dict[int, float]  # pool -> end of the job's window in it, hours after the origin
    nodes: int


@dataclass(frozen=True)
class _Busy:
    """The buckets of one pool where the jobs that may use it could ask for more than its limit."""

    first: int  # bucket index of flags[0]
    flags: np.ndarray  # bool per bucket
    prefix: np.ndarray  # prefix[i] = flags[:i].sum()

    def count(self, a: int, b: int) -> int:
        a, b = max(a - self.first, 0), min(max(b - self.first, 0), len(self.flags))
        return int(self.prefix[b] - self.prefix[a]) if b > a else 0

    def buckets(self, a: int, b: int) -> list[int]:
        a, b = max(a - self.first, 0), min(max(b - self.first, 0), len(self.flags))
        return [] if b <= a else [int(t) + self.first + a for t in np.flatnonzero(self.flags[a:b])]


def _pools_of(options: Sequence[_Candidate]) -> set[int]:
    return {c.pool for c in options if c.pool is not None}


def _bucket_range(start_h: float, end_h: float, bucket_h: float) -> tuple[int, int]:
    return math.floor(start_h / bucket_h), math.ceil(end_h / bucket_h)


def _load_before(x: np.ndarray, points: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """sum of w * (x - p) over the points p below each x: machine-hours started before x."""
    order = np.argsort(points, kind="stable")
    p, w = points[order], weights[order]
    idx = np.searchsorted(p, x, side="left")
    cw = np.concatenate(([0.0], np.cumsum(w)))
    cwp = np.concatenate(([0.0], np.cumsum(w * p)))
    return x * cw[idx] - cwp[idx]


def _busy(jobs: Sequence[_PricedJob], pools: Sequence[_Pool], bucket_h: float) -> dict[int, _Busy]:
    """Per pool, the buckets where a row can bind: most demand (every window full) above the limit.

    Other buckets need no row: merging them loses nothing, which keeps the LP small.
    """
    spans: dict[int, tuple[list[float], list[float], list[float]]] = {}
    for job in jobs:
        for p in _pools_of(job.options):
            s, e, w = spans.setdefault(p, ([], [], []))
            s.append(job.start_h)
            e.append(job.windows[p])
            w.append(float(job.nodes))
    out = {}
    for p, (s_list, e_list, w_list) in spans.items():
        s, e, w = np.asarray(s_list), np.asarray(e_list), np.asarray(w_list)
        first, last = math.floor(s.min() / bucket_h), math.ceil(e.max() / bucket_h)
        grid = np.arange(first, last + 1, dtype=np.float64) * bucket_h
        demand = np.diff(_load_before(grid, s, w) - _load_before(grid, e, w))
        flags = demand > pools[p].limit * bucket_h + 1e-9
        out[p] = _Busy(first, flags, np.concatenate(([0], np.cumsum(flags))))
    return out


def _busy_in_window(busy: Mapping[int, _Busy], bucket_h: float, job: _PricedJob, pool: int) -> bool:
    b = busy.get(pool)
    return b is not None and b.count(*_bucket_range(job.start_h, job.windows[pool], bucket_h)) > 0


def _cells(jobs: Sequence[_PricedJob], busy: Mapping[int, _Busy], bucket_h: float) -> int:
    n = 0
    for job in jobs:
        for p in _pools_of(job.options):
            if p in busy:
                n += busy[p].count(*_bucket_range(job.start_h, job.windows[p], bucket_h))
    return n


# --- the linear program ------------------------------------------------------------


class _Columns:
    """A sparse LP built column by column, in the CSC layout HiGHS takes."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.upper: list[float] = []
        self.start: list[int] = [0]
        self.index: list[int] = []
        self.value: list[float] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []

    def row(self, lower: float, upper: float) -> int:
        self.row_lower.append(lower)
        self.row_upper.append(upper)
        return len(self.row_lower) - 1

    def column(self, cost: float, upper: float, entries: Sequence[tuple[int, float]]) -> int:
        self.cost.append(cost)
        self.upper.append(upper)
        for r, v in entries:
            self.index.append(r)
            self.value.append(v)
        self.start.append(len(self.index))
        return len(self.cost) - 1

    def to_lp(self) -> highspy.HighsLp:
        highspy = _highspy()
        lp = highspy.HighsLp()
        lp.num_col_ = len(self.cost)
        lp.num_row_ = len(self.row_lower)
        lp.col_cost_ = np.asarray(self.cost, dtype=np.float64)
        lp.col_lower_ = np.zeros(len(self.cost))
        lp.col_upper_ = np.asarray(self.upper, dtype=np.float64)
        lp.row_lower_ = np.asarray(self.row_lower, dtype=np.float64)
        lp.row_upper_ = np.asarray(self.row_upper, dtype=np.float64)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = np.asarray(self.start, dtype=np.int32)
        lp.a_matrix_.index_ = np.asarray(self.index, dtype=np.int32)
        lp.a_matrix_.value_ = np.asarray(self.value, dtype=np.float64)
        return lp


@dataclass
class _PoolPart:
    """The rows of one job in one pool: its work, and its machines per busy bucket and elsewhere."""

    work: int
    cells: list[tuple[int, int, float]]  # (bucket, cap row, hours of the window in the bucket)
    rest_row: int | None  # cap row for the window's quiet buckets, merged
    rest_hours: float


def _build(jobs: Sequence[_PricedJob], pools: Sequence[_Pool], busy: Mapping[int, _Busy], bucket_h: float
           ) -> tuple[_Columns, list[list[int]]]:
    lp = _Columns()
    x_cols: list[list[int]] = []
    pool_rows: dict[tuple[int, int], int] = {}  # (pool, bucket) -> row
    for job in jobs:
        assign = lp.row(1.0, 1.0)
        parts: dict[int, _PoolPart] = {}
        for p in sorted(_pools_of(job.options)):
            start, end = job.start_h, job.windows[p]
            a, b = _bucket_range(start, end, bucket_h)
            buckets = busy[p].buckets(a, b) if p in busy else []
            if not buckets:
                continue  # the pool cannot run short while this job may use it
            cells = []
            for t in buckets:
                overlap = min(end, (t + 1) * bucket_h) - max(start, t * bucket_h)
                if overlap > 0:
                    cells.append((t, lp.row(-math.inf, 0.0), overlap))
            rest = (end - start) - sum(c[2] for c in cells)
            rest_row = lp.row(-math.inf, 0.0) if rest > 1e-12 else None
            parts[p] = _PoolPart(lp.row(0.0, 0.0), cells, rest_row, rest)
        cols = []
        for c in job.options:
            entries: list[tuple[int, float]] = [(assign, 1.0)]
            part = parts.get(c.pool) if c.pool is not None else None
            if part is not None:
                entries.append((part.work, -c.hours * job.nodes))
                entries.extend((row, -overlap * job.nodes) for _, row, overlap in part.cells)
                if part.rest_row is not None:
                    entries.append((part.rest_row, -part.rest_hours * job.nodes))
            cols.append(lp.column(float(c.cost), 1.0, entries))
        x_cols.append(cols)
        for p, part in parts.items():
            for t, row, overlap in part.cells:
                key = (p, t)
                if key not in pool_rows:
                    pool_rows[key] = lp.row(-math.inf, pools[p].limit * bucket_h)
                lp.column(0.0, overlap * job.nodes, [(part.work, 1.0), (row, 1.0), (pool_rows[key], 1.0)])
            if part.rest_row is not None:
                lp.column(0.0, part.rest_hours * job.nodes, [(part.work, 1.0), (part.rest_row, 1.0)])
    return lp, x_cols


def _hours_since(t: datetime, origin: datetime) -> float:
    return (t - origin).total_seconds() / 3600


def _origin(first: datetime, bucket: timedelta) -> datetime:
    """``first`` rounded down to a whole bucket since the epoch, so buckets fall on clock hours."""
    n = (first.astimezone(timezone.utc) - _EPOCH) // bucket
    return _EPOCH + n * bucket


@contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS prints a banner to file descriptor 1 on its first construction, before any option can stop it;
    a CLI that writes JSON to stdout must not get it."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout to protect
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _highspy() -> ModuleType:
    """The solver's module, imported late: traces and their generator work without it installed."""
    try:
        import highspy
    except ImportError:
        raise UserError("the lower bound needs the HiGHS solver", fix="pip install 'highspy>=1.7'") from None
    return highspy


def _solve(lp: _Columns) -> tuple[str, float, list[float] | None]:
    highspy = _highspy()
    with _quiet_stdout():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.passModel(lp.to_lp())
    h.run()
    status = h.getModelStatus()
    text = h.modelStatusToString(status).lower()
    values = list(h.getSolution().col_value) if status == highspy.HighsModelStatus.kOptimal else None
    return text, float(h.getRunTime()), values


# --- the bound -----------------------------------------------------------------------


def lower_bound(
    entries: Sequence[TraceEntry],
    offers: Sequence[Offer],
    *,
    currency: Currency,
    fx: FxRates,
    capacity_limits: Mapping[str, int] | None = None,
    reserved: Sequence[ReservedCapacity] = (),
    bucket: timedelta = DEFAULT_BUCKET,
    open_window: timedelta = DEFAULT_OPEN_WINDOW,
    max_options: int | None = DEFAULT_MAX_OPTIONS,
    max_cells: int = DEFAULT_MAX_CELLS,
) -> LowerBound:
    """The least the trace could cost on ``offers`` under the capacity limits (see the module text).

    ``capacity_limits`` maps ``Offer.key`` (or ``Offer.key|spot`` / ``|on-demand``) to the most
    machines of that offer running at once; ``reserved`` is owned capacity, free at the margin.
    ``bucket`` doubles until the busy (job, pool, bucket) cells number at most ``max_cells``.
    When the LP is not solved to optimality (``status`` says why: limits no schedule can meet make
    it "infeasible"), ``total`` falls back to the unconstrained total, itself a lower bound.
    """
    if bucket <= timedelta(0):
        raise UserError("the LP's time bucket must be positive", fix="e.g. bucket=timedelta(hours=1)")
    pools = _pools(offers, capacity_limits, reserved)
    market = _Market(offers, currency, fx, pools)
    bucket_h = bucket.total_seconds() / 3600
    origin = _origin(min((e.at for e in entries), default=_EPOCH), bucket)
    open_h = open_window.total_seconds() / 3600

    priced: list[_PricedJob] = []
    results: dict[int, tuple[BoundOption | None, str | None]] = {}
    for i, entry in enumerate(entries):
        options, why = _job_options(entry.job, entry.at, market)
        results[i] = (options[0].option(currency) if options else None, why)
        if options:
            priced.append(_priced(i, entry, options, pools, origin, open_h))

    # Busy buckets from every option first, so pruning knows which pools can run short at all;
    # then again from the options kept, coarsening the buckets while the LP would be too big.
    busy = _busy(priced, pools, bucket_h)
    inexact = 0
    for job in priced:
        job.options, exact = _prune(job.options, partial(_busy_in_window, busy, bucket_h, job), max_options)
        inexact += not exact
    while True:
        busy = _busy(priced, pools, bucket_h)
        if _cells(priced, busy, bucket_h) <= max_cells or bucket_h >= _MAX_BUCKET_H:
            break
        bucket_h *= 2

    lp, x_cols = _build(priced, pools, busy, bucket_h)
    status, seconds, values = _solve(lp) if priced else ("no jobs", 0.0, None)

    shares_of: dict[int, tuple[Share, ...]] = {}
    cost_of: dict[int, Decimal] = {}
    for job, cols in zip(priced, x_cols, strict=True):
        if values is None:  # not solved: each job on its own cheapest option
            shares = [(job.options[0], 1.0)]
        else:
            shares = [(c, min(values[col], 1.0)) for c, col in zip(job.options, cols, strict=True)
                      if values[col] > _SHARE_EPSILON]
        shares_of[job.index] = tuple(Share(option=c.option(currency), fraction=f) for c, f in shares)
        cost_of[job.index] = sum((c.cost * Decimal(repr(f)) for c, f in shares), Decimal(0))

    total = sum(cost_of.values(), Decimal(0))
    unconstrained = sum((job.options[0].cost for job in priced), Decimal(0))
    jobs = tuple(
        JobBound(
            index=i, name=e.job.name, team=e.job.team, submitted_at=e.at, cheapest=results[i][0],
            shares=shares_of.get(i, ()),
            cost=Money(amount=cost_of[i], currency=currency) if i in cost_of else None,
            why_not=results[i][1],
        )
        for i, e in enumerate(entries)
    )
    # Rounding of shares moves the total by far less than a cent; only a real rise counts as binding.
    binding = values is not None and total - unconstrained > Decimal("0.005")
    return LowerBound(
        total=Money(amount=total, currency=currency),
        unconstrained_total=Money(amount=unconstrained, currency=currency),
        priced_jobs=len(priced),
        infeasible_jobs=len(entries) - len(priced),
        status=status,
        solve_seconds=seconds,
        capacity_bound=binding,
        inexact_prunes=inexact,
        variables=len(lp.cost),
        constraints=len(lp.row_lower),
        bucket_hours=bucket_h,
        jobs=jobs,
    )


def _priced(index: int, entry: TraceEntry, options: list[_Candidate], pools: Sequence[_Pool],
            origin: datetime, open_h: float) -> _PricedJob:
    """A job with options, and its window in each pool: submission to deadline, clipped at a reservation's end."""
    start_h = _hours_since(entry.at, origin)
    deadline = entry.job.deadline_at(entry.at)
    if deadline is not None:
        end_h = _hours_since(deadline, origin)
    else:
        end_h = start_h + max(open_h, max(c.hours for c in options))
    windows = {}
    for p in _pools_of(options):
        until = pools[p].until
        windows[p] = end_h if until is None else min(end_h, _hours_since(until, origin))
    return _PricedJob(index, options, start_h, windows, entry.job.resources.nodes)


__all__ = [
    "DEFAULT_BUCKET",
    "DEFAULT_MAX_CELLS",
    "DEFAULT_MAX_OPTIONS",
    "DEFAULT_OPEN_WINDOW",
    "BoundOption",
    "JobBound",
    "JobOptions",
    "LowerBound",
    "PricedCatalog",
    "Share",
    "allowed_capacities",
    "feasible_options",
    "lower_bound",
]
