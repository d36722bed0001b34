"""A fair score for a simulated policy: what its money bought, on the same footing for every policy.

A policy's total cost alone flatters one that fails jobs: a failed job stops paying. So the bill
is split three ways, by the job each cost record was billed to: the work completed on time, the
work that failed, finished late or never finished (money spent and lost), and idle machines. The
work itself is measured once per job, the same for every policy: the GPU-hours the job needs,
uninterrupted, on the cheapest setup its job file allows (``lower_bound_options``, with the
deadline and budget lifted so that every job has a size). Cost per completed GPU-hour is the
whole bill over the GPU-hours of the jobs done on time: what on-time work really cost.

Misses and failures are split by the lower bound's verdict: a job no schedule can finish in time
and on budget (``JobBound.why_not``) counts as unavoidable for every policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.models import Frozen, JobSpec, Offer
from scheduler.money import FxRates, Money
from scheduler.simulation.csv_file import write_rows
from scheduler.simulation.lower_bound_options import PricedCatalog
from scheduler.simulation.outcomes import Attempt, Event, JobHistory, count_reasons, missed, outcome_of, why
from scheduler.store.tables import AttemptRow, CostRecordRow, EventRow, JobRow
from scheduler.times import utc

_CHUNK = 500  # job ids per IN (...) when reading events: SQLite's limit on variables is far above


class FairScore(Frozen):
    work_gpu_hours: Decimal  # the whole trace's work: the same for every policy
    completed_gpu_hours: Decimal  # the work of jobs that succeeded on time (or had no deadline)
    cost_completed_on_time: Decimal
    cost_failed_or_late: Decimal  # spent on jobs that failed, finished late or never finished
    cost_idle: Decimal  # machines billed with no job on them
    cost_per_completed_gpu_hour: Decimal | None  # the whole bill / completed_gpu_hours
    infeasible_jobs: int | None  # the lower bound's count; None when no bound was solved
    misses_unavoidable: int | None  # deadline misses of jobs the bound calls infeasible
    misses_avoidable: int | None
    failed_unavoidable: int | None
    why_failed_or_late: dict[str, int]  # failed, late and unfinished jobs per cause (outcomes.REASONS)


@dataclass(frozen=True)
class JobResult:
    """One job of the trace as a policy left it: a row of ``--explain``."""

    trace_line: int
    job_id: str
    name: str
    team: str
    kind: str
    outcome: str
    reason: str
    unavoidable: bool
    cost: Decimal
    work_gpu_hours: float
    preemptions: int
    submitted_at: datetime
    deadline_at: datetime | None
    finished_at: datetime | None
    detail: str


def work_gpu_hours(jobs: Sequence[tuple[JobSpec, datetime]], offers: Sequence[Offer], *, currency: str,
                   fx: FxRates) -> list[float | None]:
    """Each job's GPU-hours on the cheapest setup it allows, uninterrupted; None when nothing fits it."""
    catalog = PricedCatalog(offers, currency=currency, fx=fx)
    out: list[float | None] = []
    for spec, at in jobs:
        # Deadline, budget and capacity say how the work may be run, not how much there is.
        policy = spec.policy.model_copy(update={"deadline": None, "budget": None, "capacity": "auto"})
        options, _ = catalog.candidates(spec.model_copy(update={"policy": policy}), at)
        if not options:
            out.append(None)
            continue
        best = options[0]
        out.append(best.hours * best.listing.offer.gpu_count * spec.resources.nodes)
    return out


@dataclass(frozen=True)
class Bills:
    """A run's cost records summed (report currency), read once for the summary, ``fair_score`` and ``gaps``."""

    by_job: dict[str, Decimal]  # each job's busy hours
    on_demand_by_job: dict[str, Decimal]  # of those, billed at on-demand prices
    idle: Decimal  # machines billed with no job on them
    idle_hours: Decimal
    by_capacity: dict[str, Decimal]  # spot, on-demand, reserved: the whole bill
    on_demand_equivalent: Decimal  # the same hours at on-demand prices


def bills(s: Session, *, currency: str, fx: FxRates) -> Bills:
    """Every cost record of the run in ``s``, read once, converted to ``currency``."""
    by_job: dict[str, Decimal] = {}
    on_demand: dict[str, Decimal] = {}
    by_capacity = {capacity: Decimal(0) for capacity in ("spot", "on-demand", "reserved")}
    idle = idle_hours = equivalent = Decimal(0)

    def value(amount: Decimal, cur: str) -> Decimal:
        money = Money(amount=amount, currency=cur)
        return (money if cur == currency else fx.convert(money, currency)).amount

    costs = select(CostRecordRow.job_id, CostRecordRow.kind, CostRecordRow.capacity, CostRecordRow.amount,
                   CostRecordRow.on_demand_amount, CostRecordRow.currency, CostRecordRow.hours)
    for job_id, kind, capacity, amount, od_amount, cur, hours in s.execute(costs.execution_options(yield_per=5000)):
        paid = value(amount, cur)
        by_capacity[capacity] += paid
        equivalent += value(od_amount, cur)
        if kind == "idle" or job_id is None:
            idle += paid
            idle_hours += hours if kind == "idle" else 0
            continue
        by_job[job_id] = by_job.get(job_id, Decimal(0)) + paid
        if capacity == "on-demand":
            on_demand[job_id] = on_demand.get(job_id, Decimal(0)) + paid
    return Bills(by_job, on_demand, idle, idle_hours, by_capacity, equivalent)


def fair_score(s: Session, trace_line_of: Mapping[str, int], work: Sequence[float | None],
               infeasible: Sequence[str | None] | None, *, currency: str,
               fx: FxRates, billed: Bills | None = None) -> tuple[FairScore, list[JobResult]]:
    """The score of the run in ``s``, and every failed, late or unfinished job with its cause.

    ``trace_line_of`` maps a job id to its 0-based place in the trace; ``work`` and ``infeasible``
    (the bound's ``why_not`` per job, None: no bound) are indexed by that place. ``billed``: the run's
    ``bills``, when the caller has read them already.
    """
    if billed is None:
        billed = bills(s, currency=currency, fx=fx)
    idle = billed.idle

    on_time_cost = lost_cost = Decimal(0)
    completed = 0.0
    misses_unavoidable = misses_avoidable = failed_unavoidable = 0
    bad: dict[str, tuple] = {}
    jobs = select(JobRow.id, JobRow.name, JobRow.team, JobRow.kind, JobRow.state, JobRow.submitted_at,
                  JobRow.deadline_at, JobRow.finished_at, JobRow.preemptions)
    for job_id, name, team, kind, state, submitted, deadline, finished, preemptions in \
            s.execute(jobs.execution_options(yield_per=5000)):
        deadline, finished = _utc(deadline), _utc(finished)
        outcome = outcome_of(state, deadline, finished)
        line = trace_line_of.get(job_id)
        cost = billed.by_job.get(job_id, Decimal(0))
        unavoidable = line is not None and infeasible is not None and infeasible[line] is not None
        if outcome == "on-time":
            on_time_cost += cost
            completed += (work[line] or 0.0) if line is not None else 0.0
            continue
        lost_cost += cost
        if missed(deadline, outcome):
            misses_unavoidable += unavoidable
            misses_avoidable += not unavoidable
        if outcome == "failed":
            failed_unavoidable += unavoidable
        if outcome != "cancelled":
            bad[job_id] = (line, name, team, kind, state, utc(submitted), deadline, finished, preemptions, cost,
                           unavoidable)

    results = []
    histories = _histories(s, bad)
    for job_id, (line, name, team, kind, state, submitted, deadline, finished, preemptions, cost,
                 unavoidable) in bad.items():
        cause = why(histories[job_id], infeasible[line] if unavoidable and infeasible and line is not None else None)
        assert cause is not None  # every job in ``bad`` failed, was late or is unfinished
        results.append(JobResult(
            trace_line=(line + 1) if line is not None else 0, job_id=job_id, name=name, team=team, kind=kind,
            outcome=outcome_of(state, deadline, finished), reason=cause.reason, unavoidable=unavoidable,
            cost=cost.quantize(Decimal("0.01")),
            work_gpu_hours=round(work[line] or 0.0, 3) if line is not None else 0.0,
            preemptions=preemptions, submitted_at=submitted, deadline_at=deadline, finished_at=finished,
            detail=cause.detail))
    results.sort(key=lambda r: (r.trace_line, r.job_id))

    total = on_time_cost + lost_cost + idle
    completed_d = Decimal(repr(round(completed, 2)))
    solved = infeasible is not None
    score = FairScore(
        work_gpu_hours=Decimal(repr(round(sum(w or 0.0 for w in work), 2))),
        completed_gpu_hours=completed_d,
        cost_completed_on_time=on_time_cost.quantize(Decimal("0.01")),
        cost_failed_or_late=lost_cost.quantize(Decimal("0.01")),
        cost_idle=idle.quantize(Decimal("0.01")),
        cost_per_completed_gpu_hour=(total / completed_d).quantize(Decimal("0.0001")) if completed_d else None,
        infeasible_jobs=sum(x is not None for x in infeasible) if infeasible is not None else None,
        misses_unavoidable=misses_unavoidable if solved else None,
        misses_avoidable=misses_avoidable if solved else None,
        failed_unavoidable=failed_unavoidable if solved else None,
        why_failed_or_late=count_reasons(r.reason for r in results),
    )
    return score, results


def _utc(at: datetime | None) -> datetime | None:
    return utc(at) if at is not None else None


def _histories(s: Session, jobs: Mapping[str, tuple]) -> dict[str, JobHistory]:
    """The events and attempts of ``jobs`` (a few, as a rule: the failed and the late), read in chunks."""
    events: dict[str, list[Event]] = {j: [] for j in jobs}
    attempts: dict[str, list[Attempt]] = {j: [] for j in jobs}
    ids = list(jobs)
    for i in range(0, len(ids), _CHUNK):
        chunk = ids[i:i + _CHUNK]
        for job_id, at, kind, message in s.execute(
                select(EventRow.job_id, EventRow.at, EventRow.kind, EventRow.message)
                .where(EventRow.job_id.in_(chunk)).order_by(EventRow.id)):
            events[job_id].append(Event(utc(at), kind, message))
        for job_id, number, state, started, ended, est in s.execute(
                select(AttemptRow.job_id, AttemptRow.number, AttemptRow.state, AttemptRow.started_at,
                       AttemptRow.ended_at, AttemptRow.est_hours)
                .where(AttemptRow.job_id.in_(chunk)).order_by(AttemptRow.number)):
            attempts[job_id].append(Attempt(number, state, _utc(started), _utc(ended), est))
    out = {}
    for job_id, row in jobs.items():
        _line, _name, _team, _kind, state, _sub, deadline, finished, preemptions, _cost, _u = row
        out[job_id] = JobHistory(state=state, deadline_at=deadline, finished_at=finished, preemptions=preemptions,
                                 events=tuple(events[job_id]), attempts=tuple(attempts[job_id]))
    return out


EXPLAIN_COLUMNS = tuple(JobResult.__dataclass_fields__)


def write_explain_csv(results: Sequence[JobResult], path: Path) -> None:
    """Every failed, late or unfinished job, one CSV row each, with its cause."""
    write_rows(path, EXPLAIN_COLUMNS, results, lambda v: v.isoformat() if isinstance(v, datetime) else v)
