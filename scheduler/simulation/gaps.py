"""Where the money went against the lower bound: each job's bill beside its share of the bound.

``gpusched simulate --gaps gaps.csv`` writes one row per job, the dearest gap first. The lower bound
(``lower_bound.py``) runs every job uninterrupted, with no boot, on the cheapest capacity its window
allows, for the hours the performance model estimates. So a job costs more than its share for reasons
these columns set side by side: hours billed at on-demand prices, spot reclaims (each loses a boot and
the epoch or shard in progress) and, in a simulation, a job that really ran slower than the estimate
(``true_speed``: the simulated agents' speed per job and GPU, ``SimAgents.true_factor``), which the
estimate's bound cannot see and no schedule can avoid; where the run solved the bound again at those
speeds, ``true_speed_gap`` is what is left once they are priced in, and ``floor_gap`` what is left once
the reclaims every schedule on spot pays for on average, and the deadline, are priced in too (the job's
share of the on-time floor, ``lower_bound(..., reclaims=True, on_time=True)``; one draw, so a job's bill may
be below it). Idle machines bill no job; the summary's ``cost_idle`` has them.

Sessions diagnosing a month wrote this table by hand each time (BENCHMARKS.md, issue 17): it is how a
gap is told apart into a decision to fix and luck to report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.simulation.csv_file import write_rows
from scheduler.simulation.fair_score import Bills
from scheduler.simulation.lower_bound import JobBound
from scheduler.simulation.outcomes import outcome_of
from scheduler.store.tables import AttemptRow, InstanceRow, JobRow
from scheduler.times import utc

CENT = Decimal("0.01")
SLOW = 1.1  # a job that ran this much slower than estimated on a GPU counts as slow in ``GapTotals``

# (job id, GPU) -> how much slower (> 1) or faster (< 1) the job really ran there than estimated.
TrueFactor = Callable[[str, str], float]


@dataclass(frozen=True)
class JobGap:
    """One job of the trace: a row of ``--gaps``."""

    trace_line: int  # 1-based line of the trace (0: a job not from it)
    job_id: str
    name: str
    team: str
    kind: str
    outcome: str  # outcomes.outcome_of: on-time, late, failed, unfinished, cancelled
    cost: Decimal  # what the job was billed (busy hours), in the report currency
    on_demand_cost: Decimal  # the part billed at on-demand prices
    bound_cost: Decimal | None  # the job's share of the lower bound; None where nothing can run it
    bound_setup: str  # what the bound runs it on: "spot 1x A100-80G", shares joined by " + "
    gap: Decimal | None  # cost - bound_cost
    preemptions: int
    attempts: int
    true_speed: str  # per GPU it ran on, its simulated time over the estimate: "A100-80G x1.26"
    slowest: float | None  # the largest of those factors (None: it never ran, or no simulated speeds)
    # Its share of the bound at the jobs' true speeds (``simulate(true_speed_bound=...)``), and the gap to it:
    # what is left of the gap once the true speeds, which no schedule could know, are priced in.
    true_speed_bound_cost: Decimal | None = None
    true_speed_gap: Decimal | None = None
    # Its share of the on-time floor at those speeds (``simulate(true_speed_floor=...)``), what the floor runs it
    # on (shares of spot and faster hours where its deadline needs both), and the gap to it.
    floor_cost: Decimal | None = None
    floor_setup: str = ""
    floor_gap: Decimal | None = None


@dataclass(frozen=True)
class GapTotals:
    """The jobs' gaps over their bound shares, in all and on three kinds of job (a job may be of several)."""

    over_share: Decimal  # the positive gaps, summed
    reclaimed: Decimal  # of it, on jobs reclaimed at least once
    slow: Decimal  # on jobs that ran more than ``SLOW`` times slower than estimated on a GPU they used
    on_demand: Decimal  # on jobs billed mostly at on-demand prices
    over_true_speed_share: Decimal | None = None  # the positive gaps to the bound at true speeds, summed


def totals(gaps: Sequence[JobGap]) -> GapTotals:
    over = [g for g in gaps if g.gap is not None and g.gap > 0]

    def of(keep: Callable[[JobGap], bool]) -> Decimal:
        return sum((g.gap or Decimal(0) for g in over if keep(g)), Decimal(0))

    true_gaps = [g.true_speed_gap for g in gaps if g.true_speed_gap is not None]
    return GapTotals(over_share=of(lambda g: True), reclaimed=of(lambda g: g.preemptions > 0),
                     slow=of(lambda g: g.slowest is not None and g.slowest > SLOW),
                     on_demand=of(lambda g: g.on_demand_cost * 2 > g.cost),
                     over_true_speed_share=sum((x for x in true_gaps if x > 0), Decimal(0)) if true_gaps else None)


def job_gaps(s: Session, trace_line_of: Mapping[str, int], bound: Sequence[JobBound], billed: Bills, *,
             true_factor: TrueFactor | None = None,
             true_speed_bound: Sequence[JobBound] | None = None,
             floor: Sequence[JobBound] | None = None) -> list[JobGap]:
    """Every job of the run in ``s`` against its bound share, the largest gap first (jobs without one last).

    ``trace_line_of`` maps a job id to its 0-based place in the trace, which indexes ``bound`` (and
    ``true_speed_bound``, the bound at the simulated true speeds, and ``floor``, the on-time floor at them,
    where solved); ``billed``: the run's ``fair_score.bills``."""
    attempts: dict[str, int] = {}
    gpus: dict[str, list[str]] = {}  # the GPUs each job ran on, in the order it first did
    ran = select(AttemptRow.job_id, InstanceRow.gpu).join(InstanceRow, InstanceRow.id == AttemptRow.instance_id) \
        .order_by(AttemptRow.job_id, AttemptRow.number)
    for job_id, gpu in s.execute(ran.execution_options(yield_per=5000)):
        attempts[job_id] = attempts.get(job_id, 0) + 1
        seen = gpus.setdefault(job_id, [])
        if gpu not in seen:
            seen.append(gpu)

    out = []
    jobs = select(JobRow.id, JobRow.name, JobRow.team, JobRow.kind, JobRow.state, JobRow.deadline_at,
                  JobRow.finished_at, JobRow.preemptions)
    for job_id, name, team, kind, state, deadline, finished, preemptions in \
            s.execute(jobs.execution_options(yield_per=5000)):
        line = trace_line_of.get(job_id)
        priced = _entry(bound, line)
        cost = billed.by_job.get(job_id, Decimal(0)).quantize(CENT)
        bound_cost = _cost(priced)
        true_cost = _cost(_entry(true_speed_bound, line)) if true_speed_bound is not None else None
        floored = _entry(floor, line) if floor is not None else None
        floor_cost = _cost(floored)
        factors = [(gpu, true_factor(job_id, gpu)) for gpu in gpus.get(job_id, ())] if true_factor else []
        out.append(JobGap(
            trace_line=line + 1 if line is not None else 0, job_id=job_id, name=name, team=team, kind=kind,
            outcome=outcome_of(state, utc(deadline) if deadline else None, utc(finished) if finished else None),
            cost=cost, on_demand_cost=billed.on_demand_by_job.get(job_id, Decimal(0)).quantize(CENT),
            bound_cost=bound_cost, bound_setup=_setup(priced),
            gap=cost - bound_cost if bound_cost is not None else None,
            preemptions=preemptions, attempts=attempts.get(job_id, 0),
            true_speed=", ".join(f"{gpu} x{f:.2f}" for gpu, f in factors),
            slowest=round(max(f for _, f in factors), 4) if factors else None,
            true_speed_bound_cost=true_cost, true_speed_gap=cost - true_cost if true_cost is not None else None,
            floor_cost=floor_cost, floor_setup=_setup(floored),
            floor_gap=cost - floor_cost if floor_cost is not None else None))
    out.sort(key=lambda g: (g.gap is None, -(g.gap or 0), g.trace_line, g.name))
    return out


def _entry(bound: Sequence[JobBound], line: int | None) -> JobBound | None:
    return bound[line] if line is not None and line < len(bound) else None


def _cost(priced: JobBound | None) -> Decimal | None:
    """The job's share of the bound, to the cent; None where nothing can run it (or it is not in the bound)."""
    return priced.cost.amount.quantize(CENT) if priced is not None and priced.cost is not None else None


def _setup(priced: JobBound | None) -> str:
    if priced is None or not priced.shares:
        return ""
    parts = []
    for s in priced.shares:
        o = s.option
        text = f"{o.capacity.value} {o.gpu_count}x {o.gpu}"
        parts.append(text if s.fraction >= 0.9995 else f"{s.fraction:.2f} {text}")
    return " + ".join(parts)


GAPS_COLUMNS = tuple(JobGap.__dataclass_fields__)


def write_gaps_csv(gaps: Sequence[JobGap], path: Path) -> None:
    """One CSV row per job, the dearest gap first (an empty cell where the bound has no share)."""
    write_rows(path, GAPS_COLUMNS, gaps)  # csv writes None as an empty cell
