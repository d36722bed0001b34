"""What a workload trace would cost at the very least: a linear program solved with HiGHS.

The bound is what every job would cost on its cheapest *allowed* capacity if
nothing ever went wrong: no spot interruptions, no boot, no idle machines, no
safety margins, only the hours ``perf.estimate`` gives for the GPU setup. The
simulator reports it beside the cost a policy actually ran up; the gap is what
any scheduler could still save, at most.

Three modules, one job each: ``lower_bound_options`` (the market: which options
each job may use, and what each costs), ``lower_bound_lp`` (the linear program
that shares capacity limits and reservations among the jobs, how it is kept
small, and HiGHS), and this one (the bound and its report).

Jobs that nothing can run are left out and counted in ``infeasible_jobs``,
never priced at zero.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from pydantic import Field

from scheduler.errors import UserError
from scheduler.models import Frozen, Offer, ReservedCapacity
from scheduler.money import Currency, FxRates, Money
from scheduler.simulation.lower_bound_lp import (
    EPOCH,
    MAX_BUCKET_H,
    PricedJob,
    bucket_origin,
    build,
    busy_buckets,
    busy_in_window,
    count_cells,
    priced_job,
    prune,
    solve,
)
from scheduler.simulation.lower_bound_options import BoundOption, Candidate, PricedCatalog, make_pools

if TYPE_CHECKING:
    from scheduler.simulation.trace_file import TraceEntry

DEFAULT_MAX_OPTIONS = 20
DEFAULT_BUCKET = timedelta(hours=1)
DEFAULT_OPEN_WINDOW = timedelta(days=7)
DEFAULT_MAX_CELLS = 400_000
_SHARE_EPSILON = 1e-9  # solver noise below this is not a share of a job


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
    speed: Callable[[int, str], float] | None = None,
    reclaims: bool = False,
    on_time: bool = False,
) -> LowerBound:
    """The least the trace could cost on ``offers`` under the capacity limits (see the module text).

    ``capacity_limits`` maps ``Offer.key`` (or ``Offer.key|spot`` / ``|on-demand``) to the most
    machines of that offer running at once; ``reserved`` is owned capacity, free at the margin.
    ``bucket`` doubles until the busy (job, pool, bucket) cells number at most ``max_cells``.
    When the LP is not solved to optimality (``status`` says why: limits no schedule can meet make
    it "infeasible"), ``total`` falls back to the unconstrained total, itself a lower bound.

    ``speed(i, gpu)``: how much longer (>1) or shorter than estimated entry ``i`` really runs on that GPU
    model, where a simulation knows it (``SimAgents.true_factor``): the bound at the jobs' true speeds.
    None prices the estimate's hours.

    ``reclaims``: spot priced at the hours its expected reclaims take at each offer's rate
    (``PricedCatalog.candidates``): what a policy pays there on average at best, not a bound on one run.

    ``on_time`` (with ``reclaims``): each job must also finish by its deadline on average, so a job whose cheap
    spot option takes longer through its expected reclaims than the deadline allows pays for the faster hours
    it needs (``lower_bound_lp``'s clock row): the least a schedule that is always on time pays on average. A
    job no option can finish in time on average is priced as without it (no such schedule exists).
    """
    if bucket <= timedelta(0):
        raise UserError("the LP's time bucket must be positive", fix="e.g. bucket=timedelta(hours=1)")
    if on_time and not reclaims:
        raise UserError("on_time asks for the deadline on average, which only reclaims make differ",
                        fix="pass reclaims=True with on_time=True")
    pools = make_pools(offers, capacity_limits, reserved)
    catalog = PricedCatalog(offers, currency=currency, fx=fx, pools=pools)
    bucket_h = bucket.total_seconds() / 3600
    origin = bucket_origin(min((e.at for e in entries), default=EPOCH), bucket)
    open_h = open_window.total_seconds() / 3600

    priced: list[PricedJob] = []
    results: dict[int, tuple[BoundOption | None, str | None]] = {}
    for i, entry in enumerate(entries):
        options, why = catalog.candidates(entry.job, entry.at, None if speed is None else partial(speed, i),
                                          reclaims=reclaims)
        results[i] = (options[0].option(currency) if options else None, why)
        if options:
            priced.append(priced_job(i, entry, options, pools, origin, open_h, on_time=on_time))

    # Busy buckets from every option first, so pruning knows which pools can run short at all;
    # then again from the options kept, coarsening the buckets while the LP would be too big.
    busy = busy_buckets(priced, pools, bucket_h)
    inexact = 0
    for job in priced:
        job.options, exact = prune(job.options, partial(busy_in_window, busy, bucket_h, job), max_options,
                                   on_the_clock=job.clock_limit is not None)
        inexact += not exact
        if job.clock_limit is not None and min(c.elapsed for c in job.options) > job.clock_limit:
            job.clock_limit = None  # the cap cut every option on time: priced as without the row, the LP solvable
    while True:
        busy = busy_buckets(priced, pools, bucket_h)
        if count_cells(priced, busy, bucket_h) <= max_cells or bucket_h >= MAX_BUCKET_H:
            break
        bucket_h *= 2

    lp, x_cols = build(priced, pools, busy, bucket_h)
    status, seconds, values = solve(lp) if priced else ("no jobs", 0.0, None)

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
    unconstrained = sum((_least_alone(job.options, job.clock_limit) for job in priced), Decimal(0))
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


def _least_alone(options: Sequence[Candidate], limit: float | None) -> Decimal:
    """The least a job pays on ``options`` (cheapest first) ignoring every capacity limit: its cheapest, or with a
    clock ``limit``, on time on average: one option that is, or two mixed (a cheap slow one and a fast one) so
    that their average hours meet it; an optimum of the job's two rows (it runs once; its hours on the clock) is
    found on at most two options."""
    if limit is None:
        return options[0].cost
    best: Decimal | None = None
    for fast in options:
        if fast.elapsed > limit:
            continue
        if best is None or fast.cost < best:
            best = fast.cost
        for slow in options:
            if slow.elapsed > limit and slow.cost < fast.cost:
                share = Decimal(repr((limit - fast.elapsed) / (slow.elapsed - fast.elapsed)))
                mixed = slow.cost * share + fast.cost * (1 - share)
                best = mixed if mixed < best else best
    if best is None:
        raise ValueError("no option meets the limit: the clock row is set only where one does")
    return best


__all__ = [
    "DEFAULT_BUCKET",
    "DEFAULT_MAX_CELLS",
    "DEFAULT_MAX_OPTIONS",
    "DEFAULT_OPEN_WINDOW",
    "JobBound",
    "LowerBound",
    "Share",
    "lower_bound",
]
