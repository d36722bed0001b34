"""At 100% of a team's monthly budget, with ``GPUSCHED_BUDGET_AT_LIMIT=stop``: its running jobs stop at
their next checkpoint.

"Next checkpoint": the first epoch (training) or shard (inference) the job reports after the tick that
first saw its team at the limit, so the stop loses no finished work. The job's machine is released (as
a capacity move releases it, ``steering._move``), its attempt ends, and the job goes back to the queue
where the planner holds it like any new job of the team: it waits for next month or a raised budget,
and resumes from that checkpoint. Not stopped: validation and export jobs (short, no checkpoint), jobs
on reserved machines (they cost nothing at the margin) and multi-node jobs (their gang is released by
the reconciler's own path when a node goes; stopping one by hand is not done here).
"""

from __future__ import annotations

from datetime import datetime

import structlog
from sqlalchemy import select

from providers.base import InstanceRef
from scheduler.accounting import ledger
from scheduler.lifecycle.context import TickContext, TickReport, cloud_call
from scheduler.lifecycle.transitions import set_instance, set_job
from scheduler.models import Kind
from scheduler.money import Money
from scheduler.states import ATTEMPT_MOVES, AttemptState, InstanceRowState, JobState, move
from scheduler.store.database import add_event
from scheduler.store.tables import AttemptRow, InstanceRow, JobRow

log = structlog.get_logger("gpusched.budget")

__all__ = ["stop_at_budget"]


def _teams_at_limit(ctx: TickContext, now: datetime) -> dict[str, tuple[Money, Money]]:
    """Teams whose billed spend this month reached their budget: team -> (spent, budget)."""
    budgets = ctx.settings.team_budgets
    spent = {t: Money.zero(b.currency) for t, b in budgets.items()}
    with ctx.store.session(write=False) as s:
        for line in ledger.cost_lines(s, now.strftime("%Y-%m"), now):
            if line.team in spent:
                spent[line.team] = spent[line.team] + ctx.settings.fx.convert(
                    Money(amount=line.amount, currency=line.currency), spent[line.team].currency)
    return {t: (spent[t], b) for t, b in budgets.items() if spent[t] >= b}


def stop_at_budget(ctx: TickContext, now: datetime, report: TickReport) -> None:
    """Stop the running jobs of teams at their budget, each right after its next checkpoint."""
    seen = ctx.budget_stop_seen
    if ctx.settings.budget_at_limit != "stop" or not ctx.settings.team_budgets:
        return
    at_limit = _teams_at_limit(ctx, now)
    if not at_limit:
        seen.clear()  # a new month or a raised budget: nothing waits to stop
        return
    with ctx.store.session(write=False) as s:
        rows = s.execute(
            select(JobRow.id, JobRow.team, JobRow.epochs_done, JobRow.attempt, JobRow.spec_json,
                   InstanceRow.id.label("inst_id"))
            .join(AttemptRow, (AttemptRow.job_id == JobRow.id) & (AttemptRow.number == JobRow.attempt))
            .join(InstanceRow, InstanceRow.id == AttemptRow.instance_id)
            .where(JobRow.state == JobState.running.value, JobRow.team.in_(sorted(at_limit)),
                   JobRow.kind.in_([Kind.train.value, Kind.infer.value]),
                   AttemptRow.state == AttemptState.running.value,
                   InstanceRow.state == InstanceRowState.running.value, InstanceRow.reserved.is_(False))
        ).all()
    stops = []
    for job in rows:
        if ctx.spec_of(job.id, job.spec_json).resources.nodes > 1:
            continue
        key = (job.id, job.attempt)
        if key not in seen:
            seen[key] = job.epochs_done  # the team reached its limit while this one ran: stop at its next checkpoint
        elif job.epochs_done > seen[key]:
            stops.append(job)
    for job in stops:
        spent, budget = at_limit[job.team]
        _stop(ctx, now, job.id, job.inst_id, report,
              f"team {job.team} has spent {spent.quantize()} of its {budget.quantize()} monthly budget "
              "(GPUSCHED_BUDGET_AT_LIMIT=stop)")
        seen.pop((job.id, job.attempt), None)


def _stop(ctx: TickContext, now: datetime, job_id: str, inst_id: str, report: TickReport, why: str) -> None:
    with ctx.store.session(write=False) as s:
        inst = s.get(InstanceRow, inst_id)
        ref = InstanceRef(provider=inst.provider, region=inst.region, instance_id=inst.cloud_id or "")
    provider = ctx.providers[ref.provider]
    if not cloud_call(ctx, now, report, lambda: provider.terminate(ref), event="budget_release_failed",
                      label=f"budget stop {job_id}", logger=log, job=job_id).ok:
        return  # tried again at the next tick: the job is still past its checkpoint
    with ctx.store.session() as s:
        job, inst = s.get(JobRow, job_id), s.get(InstanceRow, inst_id)
        attempt = s.scalars(
            select(AttemptRow).where(AttemptRow.job_id == job_id, AttemptRow.number == job.attempt)).one()
        ledger.close_interval(s, inst.id, now)
        set_instance(inst, InstanceRowState.terminating)
        inst.job_id, inst.reason = None, "released: its job stopped at the team's budget"
        attempt.state = move(ATTEMPT_MOVES, AttemptState(attempt.state), AttemptState.preempted, "attempt")
        attempt.ended_at, attempt.end_epoch = now, job.epochs_done
        attempt.reason = f"stopped at its checkpoint: {why}"
        set_job(job, JobState.preempted, now)
        set_job(job, JobState.queued, now, f"stopped at checkpoint {job.epochs_done}: {why}; it resumes there "
                                           "when the budget allows")
        add_event(s, now, "budget_stop", f"stopped at checkpoint {job.epochs_done}: {why}", job_id=job_id,
                  instance_id=inst_id)
    log.info("budget_stop", job=job_id, reason=why)
