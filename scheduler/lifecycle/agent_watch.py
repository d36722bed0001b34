"""The silence watch: a running machine whose agent stopped talking is lost, even if the cloud says it runs.

Every call of a machine's agent (hello, asking for work, its heartbeat, a report) stamps the
instance's ``last_heartbeat_at`` (``agent_reports.report_heartbeat``). A machine that runs but whose
agent has been silent ``agent_silence_minutes`` (a hung or crashed machine, a lost network), or that
has run that long after boot without its agent ever saying hello (a broken image, an install that
failed), does no work while it bills. Its job's attempt ends like a preemption (requeued to resume
from its last checkpoint, one restart counted against ``max_restarts``, as a reclaim is) and the
machine is terminated through the usual cloud call, with an ``agent_silent`` event saying why.

The cloud call comes first: the job is requeued only once the machine is being terminated, so a
machine that is merely cut off from the daemon can never train on beside the job's next attempt.
A failed call leaves everything as it was for the next tick. The simulated agents
(``scheduler/simulation/simagent.py``) stamp the heartbeat of every machine they run on, so this
only fires in a simulation whose agents go silent.

``terminate_reclaimed`` is the tick's half of a spot reclaim notice, passed on by the machine's agent
(``agent_reports.report_reclaiming``) or announced by the cloud (``reconcile``, Alibaba's Recycling lock):
the job is requeued at once, and the machine, which bills until it is released, terminated here.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import structlog
from sqlalchemy import bindparam, or_, select

from providers.base import InstanceRef
from scheduler.accounting import ledger
from scheduler.lifecycle.context import TickContext, TickReport, cloud_call
from scheduler.lifecycle.reconcile import requeue_job_of
from scheduler.lifecycle.transitions import set_instance
from scheduler.states import InstanceRowState
from scheduler.store.database import add_event
from scheduler.store.tables import InstanceRow
from scheduler.times import utc

log = structlog.get_logger("gpusched.tick")

I = InstanceRowState


def silence(last_heard: datetime | None, running_at: datetime, now: datetime, window: timedelta) -> str | None:
    """Why a machine running since ``running_at`` counts as lost at ``now``, or None while its agent is fine."""
    if last_heard is not None and last_heard >= running_at:
        quiet = now - last_heard
        return f"its agent has been silent for {_minutes(quiet)} min" if quiet >= window else None
    up = now - running_at
    return f"its agent never said hello in {_minutes(up)} min after boot" if up >= window else None


def _minutes(span: timedelta) -> int:
    return int(span.total_seconds() // 60)


# Asked every tick: built once (``scheduler.store.database``, "Statements built once").
_SILENT_SINCE = (
    select(InstanceRow.id, InstanceRow.provider, InstanceRow.region, InstanceRow.cloud_id,
           InstanceRow.last_heartbeat_at, InstanceRow.running_at)
    .where(InstanceRow.state == I.running.value, InstanceRow.running_at <= bindparam("cutoff"),
           or_(InstanceRow.last_heartbeat_at.is_(None), InstanceRow.last_heartbeat_at <= bindparam("cutoff")))
    .order_by(InstanceRow.id)
)
_RECLAIM_NOTICED = (
    select(InstanceRow.id, InstanceRow.provider, InstanceRow.region, InstanceRow.cloud_id, InstanceRow.job_id)
    .where(InstanceRow.state.in_((I.running.value, I.pending.value)), InstanceRow.preempted.is_(True))
    .order_by(InstanceRow.id)
)


def watch_agents(ctx: TickContext, now: datetime, report: TickReport) -> None:
    """Terminate running machines whose agents are silent, requeueing their jobs (see the module doc)."""
    minutes = ctx.settings.agent_silence_minutes
    if not minutes:
        return
    window = timedelta(minutes=minutes)
    cutoff = now - window
    with ctx.store.session(write=False) as s:
        # Only machines silent for the whole window since they ran: one indexed query, no rows loaded.
        candidates = s.execute(_SILENT_SINCE, {"cutoff": cutoff}).all()
    for row_id, prov, region, cloud_id, heard, running_at in candidates:
        why = silence(utc(heard) if heard else None, utc(running_at), now, window)
        provider = ctx.providers.get(prov)
        if why is None or provider is None or cloud_id is None:
            continue
        ref = InstanceRef(provider=prov, region=region, instance_id=cloud_id)
        if not cloud_call(ctx, now, report, lambda ref=ref: provider.terminate(ref), event="silent_terminate_failed",
                          label=f"silent agent {row_id}", instance=row_id).ok:
            continue
        with ctx.store.session() as s:
            row = s.get(InstanceRow, row_id)
            if row is None or I(row.state) is not I.running:
                continue  # the cloud's own news got there first (reconcile); nothing more to do
            ledger.close_interval(s, row.id, now)
            set_instance(row, I.terminating)
            row.reason = why
            add_event(s, now, "agent_silent", f"{why}: machine terminated"
                      + (", its job requeued" if row.job_id else ""), instance_id=row.id, job_id=row.job_id)
            job_id = row.job_id
            requeue_job_of(ctx, s, row, now, reason=why, report=report)
        report.agents_silent += 1
        log.warning("agent_silent", instance=row_id, cloud_id=cloud_id, job=job_id, why=why)


def terminate_reclaimed(ctx: TickContext, now: datetime, report: TickReport) -> None:
    """Terminate the machines whose agents passed on a spot reclaim notice (``agent_reports.report_reclaiming``):
    their jobs are requeued already; the cloud takes them anyway, but one told to stop (AWS's "stop"
    action) would wait stopped, so the daemon terminates them itself. A failed call is tried again
    next tick; a machine the cloud took first is settled by reconcile, which counts nothing twice."""
    with ctx.store.session(write=False) as s:
        # Busy ones are passed over here, not in SQL: asked there, SQLite looked the rows up by ``job_id``
        # IS NULL, which every machine ever terminated matches, instead of by state.
        marked = [r for r in s.execute(_RECLAIM_NOTICED) if r.job_id is None]
    for row_id, prov, region, cloud_id, _ in marked:
        provider = ctx.providers.get(prov)
        if provider is None or cloud_id is None:
            continue
        ref = InstanceRef(provider=prov, region=region, instance_id=cloud_id)
        if not cloud_call(ctx, now, report, lambda ref=ref: provider.terminate(ref), event="reclaim_terminate_failed",
                          label=f"reclaimed {row_id}", instance=row_id).ok:
            continue
        with ctx.store.session() as s:
            row = s.get(InstanceRow, row_id)
            if row is None or I(row.state) not in (I.running, I.pending) or row.job_id is not None:
                continue
            ledger.close_interval(s, row.id, now)
            set_instance(row, I.terminating)
            add_event(s, now, "reclaim_terminate", f"{row.reason or 'spot reclaim notice'}: machine terminated",
                      instance_id=row.id)
        log.info("reclaimed_terminated", instance=row_id, cloud_id=cloud_id)
