"""The lower bound's linear program: time buckets, rows and columns, solved with HiGHS.

With ``x[j, k]`` the share of job ``j`` run on option ``k``::

    minimise   sum_jk cost[j, k] x[j, k]
    subject to sum_k x[j, k] = 1                        every priced job runs once

Capacity limits (at most ``n`` machines of one offer at a time, from
``capacity_limits``) and reserved units (``count`` machines until ``until``)
are pools (``lower_bound_options.Pool``). A job may run its machine-hours on a
pool's machines anywhere inside its window: from submission to its deadline (a
job without a deadline gets ``open_window``), clipped at a reservation's end.
With ``y[j, p, t]`` the machine-hours job ``j`` spends in pool ``p`` during time
bucket ``t``::

    sum_t y[j, p, t] = sum_{k in p} hours[j, k] x[j, k] nodes[j]     its work, all of it
    y[j, p, t] <= overlap(t, window_j) nodes[j] sum_{k in p} x[j, k]  one gang at a time
    sum_j y[j, p, t] <= limit[p] bucket_hours                        the pool's machines

Every schedule that meets the deadlines satisfies these, so the optimum is a
lower bound: it is a relaxation twice over. Jobs are split fractionally across
options, and a job may spread its work over its window (preemptively) instead
of running in one piece. Coarser buckets make it weaker but smaller, never
wrong. Without pools the LP is the sum of every job's cheapest option.

With ``lower_bound(..., on_time=True)`` (spot priced through its expected reclaims), a job some option
of which takes longer on average than its deadline allows gets one row more::

    sum_k elapsed[j, k] x[j, k] <= deadline[j] - submitted[j]        on time on average

A schedule that is always on time is on time on average, and with reclaims that come at random each unit
of work on spot takes the same expected hours however the schedule got there, so every such schedule's
expected shares satisfy it: the optimum is then a lower bound on what those schedules pay on average.

Size, for 10,000 jobs x hundreds of offers:

* each job keeps its options cheapest first up to and including its cheapest
  free one (outside every pool, or in a pool that cannot run short during the
  job's window): that one dominates every dearer option, since the job can
  always move there and free capacity. At most ``max_options`` per capacity are
  kept (default 20). The first rule loses nothing; the second only bites when
  a job has more than 20 pooled options cheaper than its cheapest free one, and
  ``inexact_prunes`` counts those jobs (there the bound holds for the pruned
  problem only) (``prune``);
* a bucket where even every window at full use cannot exceed a pool's limit
  gets no row, and a job's quiet buckets in a pool are merged into one
  variable: both lose nothing (``busy_buckets``);
* while more than ``max_cells`` (job, pool, bucket) cells remain, the buckets
  double (``bucket_hours`` reports the size used).
"""

from __future__ import annotations

import math
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence

import numpy as np

from scheduler.errors import UserError
from scheduler.models import Capacity
from scheduler.simulation.lower_bound_options import Candidate, Pool

if TYPE_CHECKING:
    import highspy

    from scheduler.simulation.trace_file import TraceEntry

MAX_BUCKET_H = 24 * 7.0
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


# --- options kept -------------------------------------------------------------------


def prune(options: list[Candidate], binds: Callable[[int], bool], max_options: int | None,
          *, on_the_clock: bool = False) -> tuple[list[Candidate], bool]:
    """Cheapest first, up to the first option no busy pool limits, at most ``max_options`` per capacity.

    ``on_the_clock``: the job has a row on its hours on the clock (``PricedJob.clock_limit``), where a dearer but
    faster option can pay in a mix with a cheaper slow one; past the first free option, each option faster than
    every free one before it is kept too (any other is dominated by a free one: cheaper, no slower, no limit).

    Returns the kept options and whether the cut was exact (a free option kept, or nothing cut).
    """
    kept: list[Candidate] = []
    per_cap: dict[Capacity, int] = {}
    fastest_free: float | None = None  # the least ``elapsed`` of the free options kept
    for c in options:
        if fastest_free is not None:
            if c.elapsed < fastest_free:
                kept.append(c)
                if c.pool is None or not binds(c.pool):
                    fastest_free = c.elapsed
            continue
        n = per_cap.get(c.capacity, 0)
        if max_options is not None and n >= max_options:
            continue
        per_cap[c.capacity] = n + 1
        kept.append(c)
        if c.pool is None or not binds(c.pool):
            if not on_the_clock:
                return kept, True
            fastest_free = c.elapsed
    return kept, fastest_free is not None or len(kept) == len(options)


# --- time buckets ------------------------------------------------------------------


@dataclass
class PricedJob:
    index: int  # position in the trace
    options: list[Candidate]  # cheapest first
    start_h: float  # submission, hours after the bucket origin
    windows: dict[int, float]  # pool -> end of the job's window in it, hours after the origin
    nodes: int
    # The hours from submission to the deadline, where the job must also be on time on average and some option
    # would not be (``lower_bound(..., on_time=True)``): sum_k elapsed[j, k] x[j, k] <= clock_limit[j].
    clock_limit: float | None = None


@dataclass(frozen=True)
class Busy:
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


def pools_of(options: Sequence[Candidate]) -> set[int]:
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


def busy_buckets(jobs: Sequence[PricedJob], pools: Sequence[Pool], bucket_h: float) -> dict[int, Busy]:
    """Per pool, the buckets where a row can bind: most demand (every window full) above the limit.

    Other buckets need no row: merging them loses nothing, which keeps the LP small.
    """
    spans: dict[int, tuple[list[float], list[float], list[float]]] = {}
    for job in jobs:
        for p in pools_of(job.options):
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
        out[p] = Busy(first, flags, np.concatenate(([0], np.cumsum(flags))))
    return out


def busy_in_window(busy: Mapping[int, Busy], bucket_h: float, job: PricedJob, pool: int) -> bool:
    b = busy.get(pool)
    return b is not None and b.count(*_bucket_range(job.start_h, job.windows[pool], bucket_h)) > 0


def count_cells(jobs: Sequence[PricedJob], busy: Mapping[int, Busy], bucket_h: float) -> int:
    n = 0
    for job in jobs:
        for p in pools_of(job.options):
            if p in busy:
                n += busy[p].count(*_bucket_range(job.start_h, job.windows[p], bucket_h))
    return n


# --- the linear program ------------------------------------------------------------


class Columns:
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
class PoolPart:
    """The rows of one job in one pool: its work, and its machines per busy bucket and elsewhere."""

    work: int
    cells: list[tuple[int, int, float]]  # (bucket, cap row, hours of the window in the bucket)
    rest_row: int | None  # cap row for the window's quiet buckets, merged
    rest_hours: float


def build(jobs: Sequence[PricedJob], pools: Sequence[Pool], busy: Mapping[int, Busy], bucket_h: float
           ) -> tuple[Columns, list[list[int]]]:
    lp = Columns()
    x_cols: list[list[int]] = []
    pool_rows: dict[tuple[int, int], int] = {}  # (pool, bucket) -> row
    for job in jobs:
        assign = lp.row(1.0, 1.0)
        parts: dict[int, PoolPart] = {}
        for p in sorted(pools_of(job.options)):
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
            parts[p] = PoolPart(lp.row(0.0, 0.0), cells, rest_row, rest)
        clock = lp.row(-math.inf, job.clock_limit) if job.clock_limit is not None else None
        cols = []
        for c in job.options:
            entries: list[tuple[int, float]] = [(assign, 1.0)]
            if clock is not None:
                entries.append((clock, c.elapsed))
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


def hours_since(t: datetime, origin: datetime) -> float:
    return (t - origin).total_seconds() / 3600


def bucket_origin(first: datetime, bucket: timedelta) -> datetime:
    """``first`` rounded down to a whole bucket since the epoch, so buckets fall on clock hours."""
    n = (first.astimezone(timezone.utc) - EPOCH) // bucket
    return EPOCH + n * bucket


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


def solve(lp: Columns) -> tuple[str, float, list[float] | None]:
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


def priced_job(index: int, entry: TraceEntry, options: list[Candidate], pools: Sequence[Pool],
               origin: datetime, open_h: float, *, on_time: bool = False) -> PricedJob:
    """A job with options, and its window in each pool: submission to deadline, clipped at a reservation's end.
    ``on_time``: its ``clock_limit`` where some option is on time on average and some is not."""
    start_h = hours_since(entry.at, origin)
    deadline = entry.job.deadline_at(entry.at)
    clock_limit = None
    if deadline is not None:
        end_h = hours_since(deadline, origin)
        if on_time and min(c.elapsed for c in options) <= end_h - start_h < max(c.elapsed for c in options):
            clock_limit = end_h - start_h
    else:
        end_h = start_h + max(open_h, max(c.hours for c in options))
    windows = {}
    for p in pools_of(options):
        until = pools[p].until
        windows[p] = end_h if until is None else min(end_h, hours_since(until, origin))
    return PricedJob(index, options, start_h, windows, entry.job.resources.nodes, clock_limit)
