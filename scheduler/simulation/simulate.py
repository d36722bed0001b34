"""`gpusched simulate`: the daemon's own tick over a workload trace, in simulated time.

The same ``lifecycle.tick`` the daemon runs drives seeded sandbox clouds (posing
as AWS, Alibaba Cloud and Tencent Cloud with the bundled catalog's prices and
spot reclaim rates) over a month of jobs. Time jumps from event to event (a
submission, a boot, a job's end, a reclaim, an idle machine's stop time) instead
of ticking through quiet hours, but never sooner than the daemon's own tick
interval (``tick_seconds``) after the last tick: events closer together are handled
in one tick, as the daemon would. Nor past the moment the last tick asked to be
followed by another (``TickContext.look_again_by``: the steering rule, which weighs
a job's slack against its wait until the next decision, and must not be handed the
length of a jump the daemon would never make). The tick itself is unchanged. Policies
are planner strategies, so every policy shares one code path:

* ``gpusched``: ours (the planner's own strategy, and warm time learned per kind of machine).
* ``on-demand``: everything on-demand, cheapest fitting offer.

The baselines keep every idle machine warm for the configured ``idle_stop_minutes``.
* ``spot-greedy``: cheapest spot, blind to interruptions; a preempted job resumes.
* ``skypilot-like``: cheapest spot list price; after a preemption the job starts
  over from scratch elsewhere (what SkyPilot does for code that does not checkpoint).
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

from pydantic import Field
from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from providers.catalog import load_catalog
from providers.registry import build_sandbox
from scheduler.accounting.reservations import pools_for
from scheduler.clock import SimClock
from scheduler.errors import JobFileError
from scheduler.lifecycle import service
from scheduler.lifecycle import tick as lifecycle
from scheduler.lifecycle.context import TickContext
from scheduler.models import Frozen, JobSpec
from scheduler.money import Money
from scheduler.settings import WHAT_IF_SETTINGS, Settings
from scheduler.simulation.fair_score import Bills, FairScore, JobResult, bills, fair_score, work_gpu_hours
from scheduler.simulation.gaps import JobGap, job_gaps
from scheduler.simulation.lower_bound import LowerBound
from scheduler.simulation.market import MarketSpec
from scheduler.simulation.simagent import SimAgents
from scheduler.states import INSTANCE_AWAKE, JOB_OPEN, InstanceRowState
from scheduler.store.database import Store
from scheduler.store.tables import AttemptRow, InstanceRow, JobRow
from scheduler.times import utc

POLICIES = ("gpusched", "on-demand", "spot-greedy", "skypilot-like")
REPLAN = timedelta(minutes=1)  # how soon a waiting job is planned again
MAX_JUMP = timedelta(hours=6)


@dataclass(frozen=True)
class Progress:
    """Where a run stands after a tick, for a progress display (the CLI's bar): the simulated time,
    the jobs submitted so far out of the trace's, and the ticks run."""

    now: datetime
    submitted: int
    jobs: int
    ticks: int


@dataclass(frozen=True)
class Submission:
    at: datetime
    job: JobSpec
    source: str


class SimSummary(Frozen):
    policy: str
    seed: int
    jobs: int
    rejected: int
    succeeded: int
    failed: int
    unfinished: int
    currency: str
    total_cost: Decimal
    on_demand_equivalent_cost: Decimal
    lower_bound_cost: Decimal | None
    # The bound again at the jobs' simulated true speeds (``simulate(true_speed_bound=...)``), and the jobs
    # nothing could run in time at them; None when not asked.
    lower_bound_true_speed_cost: Decimal | None = None
    true_speed_infeasible_jobs: int | None = None
    # At the same true speeds, the least a schedule that is always on time pays on average through the market's
    # expected reclaims (``simulate(true_speed_floor=...)``, ``lower_bound(..., reclaims=True, on_time=True)``):
    # not a bound on one draw (a lucky one pays less); None when not asked.
    floor_true_speed_cost: Decimal | None = None
    deadline_misses: int
    interruptions: int
    lost_gpu_hours: Decimal
    idle_hours: Decimal
    cost_by_capacity: dict[str, Decimal]
    # The reservations' fees (``settings.reserved``) amortized over the simulated span, as the monthly report
    # amortizes them: not in ``total_cost``, which prices a reserved hour at zero as the ledger does (the fee is
    # paid whatever the scheduler does); ``amortized_cost`` = both, what the span cost with the reservations
    # bought, the figure to set against a run without them.
    reserved_fees: Decimal
    amortized_cost: Decimal
    fair_score: FairScore
    simulated_days: float
    ticks: int
    wall_seconds: float
    # The ``WHAT_IF_SETTINGS`` the run had away from their defaults (from --set or GPUSCHED_*), as JSON text.
    settings: dict[str, str] = {}
    # Every failed, late or unfinished job with its cause (``--explain``): not in the summary JSON.
    explained: tuple[JobResult, ...] = Field(default=(), exclude=True, repr=False)
    # Every job's bill beside its share of the lower bound (``--gaps``), when a bound was given: not in the JSON.
    gaps: tuple[JobGap, ...] = Field(default=(), exclude=True, repr=False)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True)


def simulate(submissions: Sequence[Submission], *, policy: str, seed: int, work_dir: Path | None = None,
             settings: Settings | None = None, lower_bound: Money | None = None, bound: LowerBound | None = None,
             horizon: timedelta = timedelta(days=14),
             progress: Callable[[Progress], None] | None = None, market: MarketSpec | None = None,
             true_speed_bound: Callable[[Callable[[int, str], float]], LowerBound] | None = None,
             true_speed_floor: Callable[[Callable[[int, str], float]], LowerBound] | None = None) -> SimSummary:
    """Run one policy over the submissions; ``horizon`` past the last submission bounds the run.

    ``progress`` is called after every tick (it only reads: the run is the same with or without it).
    ``market``: the spot reclaim rates per market (the trace's first line); None is the catalog's.

    ``bound``: the lower bound solved over the same entries in the same order (``bound.jobs[i]`` is
    ``submissions[i]``): its total is ``lower_bound_cost`` and its verdicts tell unavoidable misses apart.

    ``true_speed_bound``: solves that bound again given ``speed(i, gpu)``, how much slower than estimated
    ``submissions[i]`` really runs on a GPU model (``lower_bound(..., speed=...)``). Called once the run is
    over with the simulated agents' own draws (``SimAgents.true_factor``), which no policy sees: its total is
    ``lower_bound_true_speed_cost``, and its verdicts, not the estimate's, tell the misses no schedule could
    avoid apart (a job drawn slower than estimated may be late on every option).

    ``true_speed_floor``: likewise, given the same ``speed``, the floor on what an always-on-time schedule pays on
    average (``floor_true_speed_cost``; with ``true_speed_bound``).
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if bound is not None and len(bound.jobs) != len(submissions):
        raise ValueError(f"the bound has {len(bound.jobs)} jobs for {len(submissions)} submissions")
    wall0 = time.perf_counter()
    order = sorted(range(len(submissions)), key=lambda k: submissions[k].at)
    subs = [submissions[k] for k in order]
    if not subs:
        raise ValueError("the trace has no jobs")
    if bound is not None and lower_bound is None:
        lower_bound = bound.total
    with tempfile.TemporaryDirectory() as tmp:
        base = work_dir or Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        # Learning when a warm machine pays (idle_window.py) is ours; the baselines keep machines
        # warm for the configured minutes, as the tools and habits they stand for do.
        settings = (settings or Settings(_env_file=None, cluster="sim", sandbox_seed=seed)).model_copy(
            update={"data_dir": base, "idle_warm": "learned" if policy == "gpusched" else "fixed"})
        clock = SimClock(subs[0].at)
        store = Store(f"sqlite:///{base / f'sim-{policy}.db'}", durable=False)
        store.migrate()
        providers, clouds = build_sandbox(settings, clock, catalog=(
            None if market is None or market.is_catalog else market.scaled(load_catalog())))
        ctx = TickContext.build(store, providers, clock, settings, seed=seed, strategy=policy)
        agents = SimAgents(store, providers, settings.cluster, seed=seed,
                           ended_at=lambda prov, cid: clouds[prov].ended_at(cid))
        job_ids = random.Random(seed + 1)
        end = subs[-1].at + horizon
        cadence = timedelta(seconds=settings.tick_seconds)
        retire = timedelta(hours=settings.stopped_retention_hours)  # as the reaper's retire_stopped
        i, ticks, rejected = 0, 0, 0
        line_of: dict[str, int] = {}  # job id -> its place in ``submissions``
        while clock.now() < end:
            now = clock.now()
            while i < len(subs) and subs[i].at <= now:
                try:
                    view = service.submit(store, clock, subs[i].job, source=subs[i].source, ids=job_ids)
                    line_of[view.id] = order[i]
                except JobFileError:
                    rejected += 1
                i += 1
            agents.step(now)
            lifecycle.tick(ctx)
            agents.step_started(now)  # learn the finish times of attempts this tick started
            ticks += 1
            if progress is not None:
                progress(Progress(now, i, len(subs), ticks))
            with store.session(write=False) as s:  # one read transaction for both questions
                if i >= len(subs) and not any(open_work(s)):
                    break
                nxt = _next_event(now, subs[i].at if i < len(subs) else None, clouds, agents, s, retire,
                                  ctx.look_again_by)
            clock.set(min(max(nxt, now + cadence), end))
        work = work_gpu_hours([(x.job, x.at) for x in submissions], load_catalog(),
                              currency=settings.report_currency, fx=settings.fx)
        true_bound = floor = None
        if true_speed_bound is not None:
            id_of = {line: job_id for job_id, line in line_of.items()}  # a job refused at submission never ran

            def speed(i: int, gpu: str) -> float:
                return agents.true_factor(id_of[i], gpu) if i in id_of else 1.0

            true_bound = true_speed_bound(speed)
            floor = true_speed_floor(speed) if true_speed_floor is not None else None
        verdicts = true_bound if true_bound is not None else bound
        infeasible = [j.why_not for j in verdicts.jobs] if verdicts is not None else None
        with store.session(write=False) as s:
            billed = bills(s, currency=settings.report_currency, fx=settings.fx)
            score, explained = fair_score(s, line_of, work, infeasible, currency=settings.report_currency,
                                          fx=settings.fx, billed=billed)
            gaps = (job_gaps(s, line_of, bound.jobs, billed, true_factor=agents.true_factor,
                             true_speed_bound=true_bound.jobs if true_bound is not None else None,
                             floor=floor.jobs if floor is not None else None)
                    if bound is not None else [])
        summary = _summarise(store, settings, policy, seed, len(subs), rejected, subs[0].at,
                             clock.now() - subs[0].at, ticks, time.perf_counter() - wall0, lower_bound,
                             true_bound, agents, ctx, score, explained, gaps, billed, floor)
        store.dispose()
    return summary


def open_work(s: Session) -> tuple[int, int]:
    """The jobs not yet ended and the machines still awake (neither stopped nor terminated; reserved ones aside):
    while either is not zero, a simulation (and the demo) has something left to happen."""
    open_jobs = s.scalar(_OPEN_JOBS) or 0
    awake = s.scalar(_AWAKE_MACHINES) or 0
    return open_jobs, awake


def _next_event(now: datetime, next_submission: datetime | None, clouds: dict, agents: SimAgents,
                s: Session, retire: timedelta, look_again_by: datetime | None) -> datetime:
    times = [now + MAX_JUMP]
    if next_submission is not None:
        times.append(next_submission)
    if look_again_by is not None:  # the tick asked for another by then (the steering rule)
        times.append(look_again_by)
    for cloud in clouds.values():
        t = cloud.next_event_after(now)
        if t is not None:
            times.append(t)
    t = agents.next_event_after(now)
    if t is not None:
        times.append(t)
    waiting = s.scalar(_ANY_QUEUED) is not None
    # The machines that make an event: intents not yet launched (planned again soon), idle running ones
    # (their stop time) and the first stopped one to retire (``retire`` after its stop; only the first counts,
    # and a busy month keeps a hundred or more stopped machines, so SQL finds it rather than all of them).
    requested = False
    for state, idle_since, minutes in s.execute(_INTENTS_AND_IDLE):
        if state == _RUNNING:
            times.append(utc(idle_since) + timedelta(minutes=minutes))
        else:
            requested = True
    first_stop = s.scalar(_FIRST_STOP_AFTER, {"after": now - retire})
    if first_stop is not None:
        times.append(utc(first_stop) + retire)
    if waiting or requested:
        times.append(now + REPLAN)
    return min(t for t in times if t > now) if any(t > now for t in times) else now + REPLAN


_RUNNING, _STOPPED = InstanceRowState.running.value, InstanceRowState.stopped.value
_REQUESTED = InstanceRowState.requested.value

# Asked every tick: built once (``scheduler.store.database``, "Statements built once").
_OPEN_JOBS = select(func.count()).select_from(JobRow).where(JobRow.state.in_(JOB_OPEN))
_AWAKE_MACHINES = select(func.count()).select_from(InstanceRow).where(
    InstanceRow.state.in_(INSTANCE_AWAKE), InstanceRow.reserved.is_(False))
_ANY_QUEUED = select(JobRow.id).where(JobRow.state == "queued").limit(1)
_INTENTS_AND_IDLE = select(InstanceRow.state, InstanceRow.idle_since, InstanceRow.idle_stop_minutes).where(
    (InstanceRow.state == _REQUESTED)
    | ((InstanceRow.state == _RUNNING) & InstanceRow.job_id.is_(None) & InstanceRow.idle_since.is_not(None)))
_FIRST_STOP_AFTER = select(func.min(InstanceRow.stopped_at)).where(
    InstanceRow.state == _STOPPED, InstanceRow.stopped_at > bindparam("after"))


def _summarise(store: Store, settings: Settings, policy: str, seed: int, n: int, rejected: int,
               start: datetime, span: timedelta, ticks: int, wall: float, lower_bound: Money | None,
               true_bound: LowerBound | None, agents: SimAgents,
               ctx: TickContext, score: FairScore, explained: Sequence[JobResult],
               gaps: Sequence[JobGap], billed: Bills, floor: LowerBound | None = None) -> SimSummary:
    """Columns streamed, not ORM rows loaded: a month's rows as objects were half the run's peak memory. The
    bill's figures are ``billed``'s (``fair_score.bills``), the one read of the cost records."""
    cur = settings.report_currency
    total = _cents(cur, sum(billed.by_capacity.values(), Decimal(0)))
    fees = reserved_fees(settings, start, start + span)
    with store.session(write=False) as s:
        states: dict[str, int] = {}
        misses = interruptions = 0
        jobs = select(JobRow.state, JobRow.deadline_at, JobRow.finished_at, JobRow.preemptions)
        for state, deadline_at, finished_at, preemptions in _streamed(s, jobs):
            states[state] = states.get(state, 0) + 1
            interruptions += preemptions
            misses += deadline_at is not None and (
                state != "succeeded" or finished_at is None or utc(finished_at) > utc(deadline_at))
        lost = _lost_gpu_hours(s, agents, ctx)
    return SimSummary(
        policy=policy, seed=seed, jobs=n, rejected=rejected,
        succeeded=states.get("succeeded", 0), failed=states.get("failed", 0),
        unfinished=sum(k for state, k in states.items() if state not in ("succeeded", "failed", "cancelled")),
        currency=cur, total_cost=total, reserved_fees=fees, amortized_cost=total + fees,
        on_demand_equivalent_cost=_cents(cur, billed.on_demand_equivalent),
        lower_bound_cost=lower_bound.quantize().amount if lower_bound is not None else None,
        lower_bound_true_speed_cost=true_bound.total.quantize().amount if true_bound is not None else None,
        true_speed_infeasible_jobs=true_bound.infeasible_jobs if true_bound is not None else None,
        floor_true_speed_cost=floor.total.quantize().amount if floor is not None else None,
        deadline_misses=misses, interruptions=interruptions,
        lost_gpu_hours=lost.quantize(Decimal("0.01")), idle_hours=billed.idle_hours.quantize(Decimal("0.01")),
        cost_by_capacity={cap: _cents(cur, amount) for cap, amount in billed.by_capacity.items()},
        fair_score=score, explained=tuple(explained), gaps=tuple(gaps),
        simulated_days=round(span.total_seconds() / 86400, 2), ticks=ticks, wall_seconds=round(wall, 2),
        settings=changed_settings(settings),
    )


def reserved_fees(settings: Settings, start: datetime, end: datetime) -> Decimal:
    """The fees of ``settings.reserved`` amortized over [start, end), in the report currency, to the cent (the
    monthly report's rule, ``accounting.reservations``: an upfront fee spread over its term's hours, a monthly
    fee over its month's); zero where no reservation has a fee."""
    pools = pools_for(settings.reserved, start, end, settings.report_currency, settings.fx)
    return _cents(settings.report_currency, sum((pool.fee for pool in pools.values()), Decimal(0)))


def changed_settings(settings: Settings) -> dict[str, str]:
    """The ``WHAT_IF_SETTINGS`` that are not at their defaults, each as the JSON of its value."""
    fields = Settings.model_fields
    changed = [name for name in WHAT_IF_SETTINGS
               if getattr(settings, name) != fields[name].get_default(call_default_factory=True)]
    values = settings.model_dump(mode="json", include=set(changed))
    return {name: json.dumps(values[name]) for name in changed}


def _streamed(s, stmt):
    return s.execute(stmt.execution_options(yield_per=5000))


def _cents(currency: str, amount: Decimal) -> Decimal:
    return Money(amount=amount, currency=currency).quantize().amount


def _lost_gpu_hours(s, agents: SimAgents, ctx: TickContext) -> Decimal:
    """GPU-hours of reclaimed attempts that no checkpoint kept (epochs or shards finished count as kept),
    on every node of a multi-node attempt (the attempt row names node 0's machine)."""
    lost = Decimal(0)
    preempted = (
        select(AttemptRow.started_at, AttemptRow.ended_at, AttemptRow.start_epoch, AttemptRow.end_epoch,
               InstanceRow.provider, InstanceRow.instance_type, InstanceRow.gpu, InstanceRow.gpu_count,
               JobRow.id, JobRow.kind)
        .join(InstanceRow, InstanceRow.id == AttemptRow.instance_id)
        .join(JobRow, JobRow.id == AttemptRow.job_id)
        .where(AttemptRow.state == "preempted")
    )
    for started, ended, start_epoch, end_epoch, provider, itype, gpu, gpu_count, job_id, kind in \
            s.execute(preempted).all():  # tuples: small, and the loop below may query
        if started is None or ended is None:
            continue
        ran_h = (utc(ended) - utc(started)).total_seconds() / 3600
        kept_h = 0.0
        spec = agents._spec(job_id, None, s)  # cached: the agents read every running job's spec
        if ctx.resume_after_preemption and kind in ("train", "infer") and end_epoch is not None:
            est = agents._estimate_for(spec, job_id, provider, itype, gpu, gpu_count, start_epoch)
            if est.epoch_hours:
                kept_h = (end_epoch - start_epoch) * est.epoch_hours * agents.true_factor(job_id, gpu)
        lost += Decimal(repr(max(0.0, ran_h - kept_h) * gpu_count * spec.resources.nodes))
    return lost
