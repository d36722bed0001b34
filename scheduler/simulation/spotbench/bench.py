"""Trace-replay benchmark of the spot rule against the published yardstick ("Beat the published yardstick").

For every trace under a folder: fixed-seed start points, jobs of ``compute_h``
hours with deadlines ``compute_h / ratio`` and changeovers ``d``; each policy of
``spot_rule`` is replayed over every window (``spot_replay``) and compared with
the omniscient optimum (``spot_optimal``). Costs are in spot-price hours, OD
costing ``k`` times spot: ``k`` is the p3.2xlarge on-demand list price over the
trace's recorded spot price where it has one, else over the spot price the
preemption traces recorded. Unitless ratios, so plain floats, not Money.

Ticks: each trace is brought to a tick of at most ``max_tick_s`` (``resample``)
and ``d`` is rounded to whole ticks (at least one) so the optimum is an exact DP;
every policy runs in that same model.

Results are grouped as in the paper's Figure 12: trace availability (at the
job's gang size) at or above 50% or below, x deadline tight (C0/R0 >= 0.85) or
loose. A sanity run repeats the paper's Table 3 setting first. ``run_spot_bench``
is what the CLI calls; ``spot_bench_report`` renders the result.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import Field

from scheduler.clock import Clock, SystemClock
from scheduler.errors import UserError
from scheduler.models import Frozen
from scheduler.planner.spot_rule import POLICIES
from scheduler.simulation.spotbench import MAX_STARTS
from scheduler.simulation.spotbench.optimal import forward_runs, optimal
from scheduler.simulation.spotbench.replay import Lanes, replay
from scheduler.simulation.spotbench.traces import SpotTrace, load_traces, resample

# p3.2xlarge (1 x V100), AWS us-east-1 on-demand list price, USD per hour: the
# instance every published trace is about (the paper's k ~ 3.3).
P3_2XLARGE_ON_DEMAND = 3.06
# The spot price the preemption traces recorded for p3.2xlarge (constant over their
# 7.4 days), used for traces that carry no prices.
P3_2XLARGE_SPOT = 0.918

POLICY_ORDER = ("od-only", "greedy", "uniform-progress", "gpusched", "optimal")
HIGH, LOW = "availability >= 50%", "availability < 50%"
LOOSE, TIGHT = "loose", "tight"
GROUPS = tuple(f"{a}, {t}" for a in (HIGH, LOW) for t in (LOOSE, TIGHT))
ALL = "all windows"
# The paper's Table 3: the 2-week AWS traces of 2022 (p3/p2, us-west-2a/b), C0/R0 = 0.8.
SANITY_COLLECTION = "aws-10-26-2022"
PAPER_SPOT_USE = {"greedy": 0.63, "uniform-progress": 0.84, "optimal": 1.0}


class BenchConfig(Frozen):
    compute_h: float = Field(default=48.0, gt=0)
    ratios: tuple[float, ...] = (0.65, 0.75, 0.85, 0.95)  # C0 / R0
    changeovers_h: tuple[float, ...] = (0.05, 0.2, 0.3)
    starts: int = Field(default=300, ge=1, le=MAX_STARTS)
    seed: int = 0
    max_tick_s: float = Field(default=200.0, gt=0)
    tight_from: float = 0.85  # C0/R0 at or above this is a tight deadline
    first_days: float | None = Field(default=None, gt=0)  # use only the start of each trace
    workers: int = Field(default=0, ge=0)  # processes; 0 = one per CPU, at most 4


@dataclass(frozen=True)
class Shape:
    """One job shape in whole ticks of one trace."""

    ratio: float
    changeover_h: float
    deadline: int
    compute: int
    changeover: int


@dataclass(frozen=True)
class TraceRun:
    """Every window of one trace: per policy, arrays of (shapes, starts)."""

    trace: str
    group: str
    nodes: int
    availability: float
    tick_s: float
    k: float
    shapes: tuple[Shape, ...]
    cost: dict[str, np.ndarray]
    spot_work_h: dict[str, np.ndarray]  # NaN for the optimum unless tracked
    missed: dict[str, np.ndarray]


class PolicyStats(Frozen):
    policy: str
    windows: int
    mean_cost: float  # mean over windows of cost / od-only cost
    p75_cost: float
    gap_to_optimal: float  # mean over windows of (cost - optimal) / od-only cost
    misses: int


class GroupResult(Frozen):
    name: str
    traces: int
    windows: int  # per policy
    policies: tuple[PolicyStats, ...]
    gap_closed: float | None  # share of UP's mean gap to the optimum that gpusched closes

    def stats(self, policy: str) -> PolicyStats:
        return next(p for p in self.policies if p.policy == policy)


class TraceResult(Frozen):
    name: str
    nodes: int
    availability: float
    tick_s: float
    changeover_ticks: tuple[int, ...]
    k: float
    mean_cost: dict[str, float]
    misses: dict[str, int]


class SanityRow(Frozen):
    policy: str
    od_work_h: float
    spot_work_h: float
    spot_use: float  # spot work / the optimum's spot work (means over windows)
    paper_spot_use: float | None


class SanityResult(Frozen):
    traces: tuple[str, ...]
    windows: int
    compute_h: float
    ratio: float
    changeover_h: float
    days: float
    rows: tuple[SanityRow, ...]


class TargetCheck(Frozen):
    misses: int  # gpusched, all windows
    worst_margin_vs_up: float  # max over groups of gpusched mean - UP mean (<= 0 is the target)
    gap_closed: float | None  # over all windows (>= 0.5 is the target); None if UP had no gap

    @property
    def no_misses(self) -> bool:
        return self.misses == 0

    @property
    def at_most_up_everywhere(self) -> bool:
        return self.worst_margin_vs_up <= 0

    @property
    def half_gap_closed(self) -> bool:
        return self.gap_closed is not None and self.gap_closed >= 0.5


class BenchResult(Frozen):
    config: BenchConfig
    elapsed_s: float
    traces: tuple[TraceResult, ...]
    groups: tuple[GroupResult, ...]  # GROUPS, then ALL
    sanity: SanityResult | None
    targets: TargetCheck

    def group(self, name: str) -> GroupResult:
        return next(g for g in self.groups if g.name == name)


# -- one trace --------------------------------------------------------------------------


def price_ratio(trace: SpotTrace) -> float:
    spot = trace.mean_spot_price() or P3_2XLARGE_SPOT
    return P3_2XLARGE_ON_DEMAND / spot


def shapes_for(config: BenchConfig, tick_h: float) -> tuple[Shape, ...]:
    """Every (ratio, d) of the config in whole ticks; refuses a job even OD alone cannot finish."""
    compute = round(config.compute_h / tick_h)
    shapes = tuple(
        Shape(
            ratio=r,
            changeover_h=d,
            deadline=round(config.compute_h / r / tick_h),
            compute=compute,
            changeover=max(1, round(d / tick_h)),
        )
        for r in config.ratios
        for d in config.changeovers_h
    )
    for s in shapes:
        if s.deadline - s.compute < s.changeover:
            raise UserError(
                f"C0 = {config.compute_h:g} h at C0/R0 = {s.ratio:g} leaves {(s.deadline - s.compute) * tick_h:.2f} h "
                f"of slack, less than one changeover ({s.changeover * tick_h:.2f} h): no schedule can finish",
                fix="use a longer compute time, a looser ratio or a shorter changeover",
            )
    return shapes


def start_points(trace_name: str, ticks: int, window: int, count: int, seed: int) -> np.ndarray:
    """``count`` start ticks, the same for every policy and shape, fixed by seed and trace name."""
    if window > ticks:
        raise UserError(
            f"trace {trace_name} spans {ticks} ticks, shorter than the longest window ({window})",
            fix="use a smaller compute_h or a looser ratio, or leave that trace out",
        )
    digest = int.from_bytes(hashlib.sha256(trace_name.encode()).digest()[:8], "big")
    rng = np.random.default_rng([seed, digest])
    return np.sort(rng.integers(0, ticks - window + 1, size=count))


def run_trace(
    trace: SpotTrace,
    config: BenchConfig,
    policies: Sequence[str] = POLICY_ORDER,
    track_optimal_work: bool = False,
) -> TraceRun:
    """Replay every policy (and solve the optimum) over the windows of one trace."""
    available = trace.available()
    if config.first_days is not None:
        available = available[: int(config.first_days * 86400 / trace.gap_s)]
    available, tick_s = resample(available, trace.gap_s, config.max_tick_s)
    tick_h = tick_s / 3600
    k = price_ratio(trace)
    shapes = shapes_for(config, tick_h)
    starts = start_points(trace.name, len(available), max(s.deadline for s in shapes), config.starts, config.seed)
    lanes = Lanes(
        start=np.tile(starts, len(shapes)),
        deadline=np.repeat([s.deadline for s in shapes], len(starts)),
        compute=np.repeat([s.compute for s in shapes], len(starts)),
        changeover=np.repeat([s.changeover for s in shapes], len(starts)),
    )
    grid = (len(shapes), len(starts))
    cost: dict[str, np.ndarray] = {}
    spot_work: dict[str, np.ndarray] = {}
    missed: dict[str, np.ndarray] = {}
    for name in policies:
        if name == "optimal":
            continue
        out = replay(POLICIES[name], available, tick_h, k, lanes)
        cost[name] = out.cost.reshape(grid)
        spot_work[name] = out.spot_work_h.reshape(grid)
        missed[name] = out.missed.reshape(grid)
    if "optimal" in policies:
        runs = forward_runs(available)
        # float32 halves the DP's memory traffic; tracking wants exact ties (float64).
        dtype = np.float64 if track_optimal_work else np.float32
        best = [
            optimal(
                available, tick_h, k, starts, deadline=s.deadline, compute=s.compute,
                changeover=s.changeover, runs=runs, track_spot_work=track_optimal_work, dtype=dtype,
            )
            for s in shapes
        ]  # fmt: skip
        cost["optimal"] = np.stack([b.cost for b in best])
        nan = np.full(len(starts), np.nan)
        spot_work["optimal"] = np.stack([b.spot_work_h if b.spot_work_h is not None else nan for b in best])
        missed["optimal"] = ~np.isfinite(cost["optimal"])
    return TraceRun(
        trace=trace.name,
        group=trace.group,
        nodes=trace.nodes,
        availability=float(available.mean()),
        tick_s=tick_s,
        k=k,
        shapes=shapes,
        cost=cost,
        spot_work_h=spot_work,
        missed=missed,
    )


def run_traces(
    traces: Sequence[SpotTrace],
    config: BenchConfig,
    policies: Sequence[str] = POLICY_ORDER,
    track_optimal_work: bool = False,
) -> list[TraceRun]:
    """``run_trace`` for each trace, in up to ``config.workers`` processes."""
    workers = config.workers or min(4, os.cpu_count() or 1)
    if workers <= 1 or len(traces) <= 1:
        return [run_trace(t, config, policies, track_optimal_work) for t in traces]
    n = len(traces)
    with ProcessPoolExecutor(max_workers=min(workers, n)) as pool:
        return list(pool.map(run_trace, traces, [config] * n, [policies] * n, [track_optimal_work] * n))


# -- aggregation --------------------------------------------------------------------------


def group_of(run: TraceRun, shape: Shape, config: BenchConfig) -> str:
    availability = HIGH if run.availability >= 0.5 else LOW
    deadline = TIGHT if shape.ratio >= config.tight_from - 1e-9 else LOOSE
    return f"{availability}, {deadline}"


def summarize(runs: Sequence[TraceRun], config: BenchConfig) -> tuple[GroupResult, ...]:
    """Per group and over all windows: each policy's cost relative to od-only and gap to the optimum."""
    cells: dict[str, list[tuple[TraceRun, int]]] = {g: [] for g in (*GROUPS, ALL)}
    for run in runs:
        for i, shape in enumerate(run.shapes):
            cells[group_of(run, shape, config)].append((run, i))
            cells[ALL].append((run, i))
    policies = [p for p in POLICY_ORDER if runs and p in runs[0].cost]
    out = []
    for name, members in cells.items():
        if not members:
            continue
        stats = []
        for policy in policies:
            rel = np.concatenate([r.cost[policy][i] / r.cost["od-only"][i] for r, i in members])
            best = np.concatenate([r.cost["optimal"][i] / r.cost["od-only"][i] for r, i in members])
            misses = int(sum(r.missed[policy][i].sum() for r, i in members))
            stats.append(
                PolicyStats(
                    policy=policy,
                    windows=len(rel),
                    mean_cost=float(rel.mean()),
                    p75_cost=float(np.percentile(rel, 75)),
                    gap_to_optimal=float((rel - best).mean()),
                    misses=misses,
                )
            )
        by = {s.policy: s for s in stats}
        closed = None
        if {"uniform-progress", "gpusched", "optimal"} <= by.keys():
            up_gap = by["uniform-progress"].gap_to_optimal
            closed = (up_gap - by["gpusched"].gap_to_optimal) / up_gap if up_gap > 0 else None
        out.append(
            GroupResult(
                name=name,
                traces=len({r.trace for r, _ in members}),
                windows=stats[0].windows,
                policies=tuple(stats),
                gap_closed=closed,
            )
        )
    return tuple(out)


def trace_results(runs: Sequence[TraceRun]) -> tuple[TraceResult, ...]:
    return tuple(
        TraceResult(
            name=r.trace,
            nodes=r.nodes,
            availability=r.availability,
            tick_s=r.tick_s,
            changeover_ticks=tuple(sorted({s.changeover for s in r.shapes})),
            k=r.k,
            mean_cost={p: float((c / r.cost["od-only"]).mean()) for p, c in r.cost.items()},
            misses={p: int(m.sum()) for p, m in r.missed.items()},
        )
        for r in runs
    )


def check_targets(groups: Sequence[GroupResult]) -> TargetCheck:
    everything = next(g for g in groups if g.name == ALL)
    margins = [g.stats("gpusched").mean_cost - g.stats("uniform-progress").mean_cost for g in groups]
    return TargetCheck(
        misses=everything.stats("gpusched").misses,
        worst_margin_vs_up=max(margins),
        gap_closed=everything.gap_closed,
    )


# -- the paper's Table 3 ------------------------------------------------------------------


def sanity_run(traces: Sequence[SpotTrace], config: BenchConfig) -> SanityResult | None:
    """C0 = 48 h, d = 0.2 h, C0/R0 = 0.8 on the first two weeks of the 2022 single-node traces.

    Compute time on spot and on OD per policy (changeovers excluded, as in the
    paper's Table 3) and spot use as a share of the optimum's. None when the
    folder has none of those traces.
    """
    setting = config.model_copy(
        update={"compute_h": 48.0, "ratios": (0.8,), "changeovers_h": (0.2,), "first_days": 14.0}
    )
    window_h = setting.compute_h / 0.8
    chosen = [
        t
        for t in traces
        if t.collection == SANITY_COLLECTION and t.nodes == 1 and t.kind == "availability" and t.hours > window_h
    ]
    if not chosen:
        return None
    runs = run_traces(chosen, setting, track_optimal_work=True)
    spot = {p: float(np.mean([r.spot_work_h[p].mean() for r in runs])) for p in POLICY_ORDER}
    rows = tuple(
        SanityRow(
            policy=p,
            od_work_h=setting.compute_h - spot[p],
            spot_work_h=spot[p],
            spot_use=spot[p] / spot["optimal"] if spot["optimal"] > 0 else float("nan"),
            paper_spot_use=PAPER_SPOT_USE.get(p, 0.0 if p == "od-only" else None),
        )
        for p in POLICY_ORDER
    )
    return SanityResult(
        traces=tuple(r.trace for r in runs),
        windows=setting.starts * len(runs),
        compute_h=setting.compute_h,
        ratio=0.8,
        changeover_h=0.2,
        days=14.0,
        rows=rows,
    )


# -- the entry point ----------------------------------------------------------------------


def run_spot_bench(
    traces_dir: Path,
    *,
    starts: int = 300,
    seed: int = 0,
    compute_h: float = 48.0,
    ratios: Sequence[float] = BenchConfig().ratios,
    changeovers_h: Sequence[float] = BenchConfig().changeovers_h,
    workers: int = 0,
    sanity: bool = True,
    clock: Clock | None = None,
) -> BenchResult:
    """Run the whole benchmark on the traces under ``traces_dir``.

    ``workers`` processes share the traces (0: one per CPU, at most 4). The sanity
    run (the paper's Table 3 setting) needs the 2022 single-node traces and is
    skipped without them. ``report.write_outputs`` writes the result's table, chart
    and JSON. UserError for a missing folder (saying how to get the
    traces), a malformed trace or an impossible job shape.
    """
    clock = clock or SystemClock()
    began = clock.now()
    traces = load_traces(Path(traces_dir))
    config = BenchConfig(
        starts=starts,
        seed=seed,
        compute_h=compute_h,
        ratios=tuple(ratios),
        changeovers_h=tuple(changeovers_h),
        workers=workers,
    )
    sanity_result = sanity_run(traces, config) if sanity else None
    runs = run_traces(traces, config)
    groups = summarize(runs, config)
    result = BenchResult(
        config=config,
        elapsed_s=(clock.now() - began).total_seconds(),
        traces=trace_results(runs),
        groups=groups,
        sanity=sanity_result,
        targets=check_targets(groups),
    )
    return result
