"""The idle reaper: machines nobody uses are stopped (stop-charging) or terminated.

A machine whose job ended stays warm ``idle_stop_minutes`` for reuse, or, when its
job left that to the daemon (``GPUSCHED_IDLE_WARM=learned``), only where recent
history says the wait pays (``idle_window``). Prepaid
reserved machines are left alone (stopping saves nothing), and a stopped machine is
terminated after ``stopped_retention_hours`` (its disk still bills).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import structlog
from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from providers.base import (
    Capability,
    InstanceRef,
    InvalidRequest,
)
from scheduler.accounting import ledger
from scheduler.lifecycle.context import TickContext, TickReport, cloud_call
from scheduler.lifecycle.transitions import set_instance
from scheduler.models import Capacity
from scheduler.states import (
    InstanceRowState,
)
from scheduler.store.database import add_event
from scheduler.store.tables import InstanceRow
from scheduler.times import utc

log = structlog.get_logger("gpusched.tick")

I = InstanceRowState


# --- the idle reaper -----------------------------------------------------------------


# Asked every tick: built once (``scheduler.store.database``, "Statements built once").
_IDLE_RUNNING = select(InstanceRow).where(
    InstanceRow.state == I.running.value,
    InstanceRow.job_id.is_(None),
    InstanceRow.idle_since.is_not(None),
).order_by(InstanceRow.id)
_STOPPED_BY = (
    select(InstanceRow.id, InstanceRow.provider, InstanceRow.region, InstanceRow.cloud_id)
    .where(InstanceRow.state == I.stopped.value,
           func.coalesce(InstanceRow.stopped_at, InstanceRow.created_at)
           <= bindparam("by", type_=InstanceRow.stopped_at.type))
    .order_by(InstanceRow.id)
)


def reap_idle(ctx: TickContext, now: datetime, report: TickReport) -> None:
    """Stop (stop-charging) or terminate machines idle longer than their idle_stop_minutes."""
    reserved_until = {(r.provider, r.region, r.instance_type): utc(r.until) for r in ctx.settings.reserved}
    with ctx.store.session() as s:
        idle = s.scalars(_IDLE_RUNNING).all()
        due = []
        for row in idle:
            until = reserved_until.get((row.provider, row.region, row.instance_type))
            if row.reserved and until is not None and until > now:
                continue  # prepaid: stopping it saves nothing, keeping it warm saves a boot
            why = _why_stop(ctx, s, row, now)
            if why is not None:
                due.append((row.id, row.provider, row.region, row.cloud_id, row.capacity, why))
    for row_id, prov, region, cloud_id, capacity, why in due:
        provider = ctx.providers.get(prov)
        if provider is None or cloud_id is None:
            continue
        ref = InstanceRef(provider=prov, region=region, instance_id=cloud_id)
        can_stop = Capability.stop_charging in provider.capabilities and (
            capacity != Capacity.spot.value or Capability.spot_stop in provider.capabilities
        )
        if can_stop:
            try:
                stopped = cloud_call(ctx, now, report, lambda: provider.stop(ref), event="idle_stop_failed",
                                     label=f"idle stop {row_id}", refused=(InvalidRequest,), instance=row_id).ok
            except InvalidRequest as exc:
                # The cloud will not stop this machine (or not without charging on: CVM's
                # StoppedModeStopCharging): an idle machine that cannot stop billing is terminated.
                log.info("idle_stop_refused", instance=row_id, then="terminate", **exc.log_fields())
                can_stop = False
            else:
                if not stopped:
                    continue
        if not can_stop and not cloud_call(ctx, now, report, lambda: provider.terminate(ref),
                                           event="idle_stop_failed", label=f"idle stop {row_id}",
                                           instance=row_id).ok:
            continue
        action = "stopped" if can_stop else "terminated"
        with ctx.store.session() as s:
            row = s.get(InstanceRow, row_id)
            if row is None or row.job_id is not None:
                continue
            set_instance(row, I.stopping if can_stop else I.terminating)
            ledger.close_interval(s, row.id, now)
            ledger.record_idle_stop(s, row, now, action)
            add_event(s, now, "idle_stop", f"{why}: {action}", instance_id=row.id)
        report.idle_stopped += 1
        log.info("idle_stop", instance=row_id, action=action, why=why)
    retire_stopped(ctx, now, report)


def _why_stop(ctx: TickContext, s: Session, row: InstanceRow, now: datetime) -> str | None:
    """Why an idle machine is stopped now, or None while it stays warm."""
    window = timedelta(minutes=row.idle_stop_minutes)
    idle_for = now - utc(row.idle_since)
    if idle_for >= window:
        return f"idle {row.idle_stop_minutes} min"
    if row.idle_window != "learned":
        return None
    kind = (row.provider, row.region, row.instance_type, row.capacity)
    verdict = ctx.warm.get(s, kind, now, window, ctx.planner_policy().restart_hours)
    return None if verdict.keep_warm else f"not kept warm ({verdict.why(window)})"


def retire_stopped(ctx: TickContext, now: datetime, report: TickReport) -> None:
    """Terminate machines stopped longer than ``stopped_retention_hours``: their disks still bill."""
    keep = timedelta(hours=ctx.settings.stopped_retention_hours)
    with ctx.store.session(write=False) as s:
        # Columns, not rows: a month of simulation keeps hundreds of machines stopped at once, and
        # loading each whole row every tick to read two times was most of the reaper's time.
        # Only those stopped long enough: the database compares the times.
        stopped = s.execute(_STOPPED_BY, {"by": now - keep}).all()
        due = [(r.id, r.provider, r.region, r.cloud_id) for r in stopped if r.cloud_id]
    for row_id, prov, region, cloud_id in due:
        provider = ctx.providers.get(prov)
        if provider is None:
            continue
        ref = InstanceRef(provider=prov, region=region, instance_id=cloud_id)
        if not cloud_call(ctx, now, report, lambda: provider.terminate(ref), event="retire_stopped_failed",
                          label=f"retire {row_id}", instance=row_id).ok:
            continue
        with ctx.store.session() as s:
            row = s.get(InstanceRow, row_id)
            if row is not None and I(row.state) is I.stopped:
                set_instance(row, I.terminating)
                add_event(s, now, "stopped_retired", f"stopped {keep} ago: terminated", instance_id=row.id)
