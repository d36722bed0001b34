"""Reconcile: what the clouds say -> the store.

Lists each provider's instances by our cluster tag, matches them to instance rows by
the ``gpusched:instance`` tag, moves rows along with the cloud, requeues the jobs of
machines the cloud took away (spot reclaims), and terminates tagged instances that no
live row owns once they are older than the grace period. A provider that cannot be
listed is skipped for the tick: "could not list" never means "gone".
"""

from __future__ import annotations

from datetime import datetime, timedelta

import structlog
from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from providers.base import (
    TAG_INSTANCE,
    TAG_MANAGED,
    Instance,
    InstanceState,
    Provider,
)
from scheduler.accounting import ledger
from scheduler.lifecycle.billed_stops import bill_stopped
from scheduler.lifecycle.context import TickContext, TickReport, cloud_call
from scheduler.lifecycle.transitions import (
    bills_boot,
    open_billing,
    requeue_after_loss,
    set_instance,
    start_job_on,
)
from scheduler.states import (
    INSTANCE_LIVE,
    AttemptState,
    InstanceRowState,
    JobState,
)
from scheduler.store.database import add_event
from scheduler.store.tables import InstanceRow
from scheduler.times import utc

log = structlog.get_logger("gpusched.tick")

A, I, J = AttemptState, InstanceRowState, JobState

# --- reconcile: what the clouds say -> the store ---------------------------------

# Asked every tick: built once (``scheduler.store.database``, "Statements built once").
_LIVE_ROWS = select(InstanceRow.id, InstanceRow.state, InstanceRow.cloud_id, InstanceRow.provider).where(
    InstanceRow.state.in_([x.value for x in INSTANCE_LIVE]))
_TERMINATED_AMONG = select(InstanceRow.id).where(
    InstanceRow.id.in_(bindparam("ids", expanding=True)), InstanceRow.state == I.terminated.value)
_MARK_SEEN = (update(InstanceRow).where(InstanceRow.id.in_(bindparam("ids", expanding=True)))
              .values(last_seen_at=bindparam("seen", type_=InstanceRow.last_seen_at.type)))


def reconcile(ctx: TickContext, now: datetime, report: TickReport) -> None:
    """Every cloud is listed first, then one transaction moves the rows of all of them, then the
    clouds are called for what that found (billed stops, orphans). A cloud's rows move only with its
    own listing, so one transaction for all of them writes what one per cloud did, in fewer round trips."""
    grace = timedelta(seconds=ctx.settings.launch_grace_seconds)
    listings: dict[str, dict[str | None, Instance]] = {}
    for name, provider in sorted(ctx.providers.items()):
        listed = cloud_call(ctx, now, report, lambda: provider.instances({TAG_MANAGED: ctx.settings.cluster}),
                            event="reconcile_list_failed", label=name)
        if not listed.ok:
            continue  # never treat "could not list" as "gone": skip this provider this tick
        listings[name] = {i.tags.get(TAG_INSTANCE): i for i in listed.value or []}
    if not listings:
        return
    calls: list[tuple[str, list[tuple[str, Instance]], set[str | None], set[str]]] = []
    with ctx.store.session() as s:
        # Three columns per live row first; a whole row only where the cloud says something
        # changed. Most machines are steady most ticks, and loading every row was most of
        # a busy tick's time.
        # By state alone, the providers sorted out here: asked by provider too, SQLite took the provider's
        # index and read every machine that provider ever had.
        live_of: dict[str, list] = {name: [] for name in listings}
        for r in s.execute(_LIVE_ROWS).all():
            if r.provider in live_of:
                live_of[r.provider].append(r)
        _mark_seen(s, [r.id for name, live in live_of.items() for r in live if r.id in listings[name]], now)
        for name, by_row in listings.items():
            live = live_of[name]
            owned = {r.id for r in live}
            billed_stops: list[tuple[str, Instance]] = []
            for row_id, state, cloud_id, _ in live:
                cloud = by_row.get(row_id)
                if cloud is not None and _steady(I(state), cloud_id, cloud):
                    continue
                row = s.get(InstanceRow, row_id)
                if row is None:
                    continue
                if cloud is None:
                    _reconcile_missing(ctx, s, row, now, grace, report)
                elif _reconcile_seen(ctx, s, row, cloud, now, report):
                    billed_stops.append((row_id, cloud))
            # Cloud instances no live row owns, but for those the cloud lists as terminated or terminating:
            # the sweep below passes over them whatever the store says (the clouds list a terminated
            # machine for a while, so most ticks these are all there is).
            strangers = [k for k, i in by_row.items() if k not in owned and i.state not in _GOING]
            # Rows we already count as terminated, for the few cloud instances no live row owns
            # (asked only about those: the table of terminated rows grows all month).
            terminated_ids = set(s.scalars(_TERMINATED_AMONG, {"ids": [k for k in strangers if k]}).all()
                                 ) if strangers else set()
            calls.append((name, billed_stops, owned, terminated_ids))
    for name, billed_stops, owned, terminated_ids in calls:
        provider = ctx.providers[name]
        for row_id, cloud in billed_stops:
            _terminate_billed_stop(ctx, provider, row_id, cloud, now, report)
        for row_id, cloud in sorted(listings[name].items(), key=lambda kv: str(kv[0])):
            if row_id in owned or cloud.state is InstanceState.terminated:
                continue
            if cloud.state is InstanceState.terminating:
                continue
            started = cloud.launched_at or now
            if row_id not in terminated_ids and now - utc(started) < grace:
                continue  # may be a launch whose row is still being written
            _terminate_orphan(ctx, provider, cloud, now, report)


def _reconcile_seen(
    ctx: TickContext, s: Session, row: InstanceRow, cloud: Instance, now: datetime, report: TickReport
) -> bool:
    """Move ``row`` along with what the cloud says; True when its machine is to be terminated because
    a stop did not stop the bill (``billed_stops``)."""
    if row.cloud_id is None:
        row.cloud_id = cloud.ref.instance_id
        add_event(s, now, "instance_found", f"found {cloud.ref.instance_id} by its tags", instance_id=row.id)
    state = I(row.state)
    if cloud.preempted and cloud.state in (InstanceState.pending, InstanceState.running) \
            and state in (I.pending, I.running):
        # Announced, not yet done (Alibaba's Recycling lock): the job is lost, but the machine bills
        # until the cloud releases it, so its hours stay in the ledger until then.
        _reclaim_announced(ctx, s, row, now, reason=cloud.preempt_reason or "spot reclaim announced",
                           report=report)
        return False
    if cloud.preempted or (cloud.state is InstanceState.terminated and state is not I.terminating):
        reason = cloud.preempt_reason or "the cloud terminated it"
        _instance_lost(ctx, s, row, now, reason=reason, preempted=cloud.preempted, report=report)
        return False
    if cloud.state is InstanceState.terminated:
        set_instance(row, I.terminated)
        row.terminated_at = now
        ledger.close_interval(s, row.id, now)
        add_event(s, now, "instance_terminated", "termination confirmed", instance_id=row.id)
        return False
    if cloud.state is InstanceState.running and state in (I.requested, I.pending):
        set_instance(row, I.running)
        row.running_at = now
        # Billing opened at launch where the boot is billed; where it is free (AWS), it opens now.
        if state is I.requested or ledger.open_interval_of(s, row.id) is None:
            open_billing(s, row, now)
        if row.job_id:
            start_job_on(s, row, now)
        return False
    if cloud.state is InstanceState.pending and state is I.requested:
        set_instance(row, I.pending)
        if bills_boot(ctx.providers.get(row.provider)):
            open_billing(s, row, now)
        return False
    if cloud.stop_keeps_billing and state in (I.stopping, I.stopped) and row.job_id is None:
        return bill_stopped(s, row, now)
    idle = row.job_id is None and state in (I.running, I.stopped)
    if idle and (cloud.state is InstanceState.terminating
                 or (cloud.state is InstanceState.stopping and state is I.running)):
        # A stop or terminate sent just before a crash, its answer never stored: the machine is on its way
        # out, and must not be handed to the next job as a warm one (it would be lost under that job).
        leaving = I.stopping if cloud.state is InstanceState.stopping else I.terminating
        set_instance(row, leaving)
        ledger.close_interval(s, row.id, now)
        add_event(s, now, "instance_leaving", f"the cloud is {cloud.state.value} it (a {leaving.value} "
                  "whose answer was not recorded)", instance_id=row.id)
        return False
    if cloud.state is InstanceState.stopped and state in (I.stopping, I.running, I.pending):
        set_instance(row, I.stopped)
        row.stopped_at = now
        ledger.close_interval(s, row.id, now)
        if row.job_id:
            _instance_lost(ctx, s, row, now, reason="the cloud stopped it", preempted=True, report=report)
    return False


def _mark_seen(s: Session, row_ids: list[str], now: datetime) -> None:
    """One UPDATE for every row the cloud listed, not one versioned UPDATE per row: with a
    hundred machines that is most of a steady tick's writes. ``last_seen_at`` is advisory
    (how long a row may go unseen before its machine counts as vanished), so it does not
    bump the row version that guards state changes. Runs before any row is loaded, so the
    rows loaded afterwards carry it."""
    if row_ids:
        s.execute(_MARK_SEEN, {"ids": row_ids, "seen": now}, execution_options={"synchronize_session": False})


# Cloud states the orphan sweep leaves alone: the machine is gone or on its way out.
_GOING = frozenset({InstanceState.terminated, InstanceState.terminating})

# (row state, cloud state) pairs where _reconcile_seen has nothing to do.
_STEADY = frozenset({
    (I.running, InstanceState.running),
    (I.pending, InstanceState.pending),
    (I.stopping, InstanceState.stopping),
    (I.stopped, InstanceState.stopped),
    (I.terminating, InstanceState.terminating),
})


def _steady(state: InstanceRowState, cloud_id: str | None, cloud: Instance) -> bool:
    return (cloud_id is not None and not cloud.preempted and not cloud.stop_keeps_billing
            and (state, cloud.state) in _STEADY)


def _reconcile_missing(
    ctx: TickContext, s: Session, row: InstanceRow, now: datetime, grace: timedelta, report: TickReport
) -> None:
    state = I(row.state)
    if state is I.requested:
        return  # reissue_intents decides: the launch may not have reached the cloud yet
    last = utc(row.last_seen_at or row.created_at)
    if state is I.terminating or now - last >= grace:
        if state is I.terminating:
            set_instance(row, I.terminated)
            row.terminated_at = now
            ledger.close_interval(s, row.id, now)
            add_event(s, now, "instance_terminated", "gone from the cloud's list", instance_id=row.id)
        else:
            _instance_lost(ctx, s, row, now, reason="vanished from the cloud's list", preempted=False, report=report)


def _reclaim_announced(
    ctx: TickContext, s: Session, row: InstanceRow, now: datetime, *, reason: str, report: TickReport
) -> None:
    """The cloud announced a spot reclaim of a machine that still runs: its job is lost now (requeued to
    resume from its last checkpoint, as on the agent's own notice), while the machine, working for
    nobody, bills on as idle time until it is released: ``agent_watch.terminate_reclaimed`` terminates
    it, or the cloud takes it first. Once marked, later sightings of the notice change nothing."""
    if row.preempted and row.job_id is None:
        return
    billing = ledger.close_interval(s, row.id, now) is not None
    row.preempted, row.reason = True, reason
    add_event(s, now, "reclaim_notice", f"{reason}: the cloud takes the machine; its job is requeued",
              instance_id=row.id, job_id=row.job_id)
    requeue_job_of(ctx, s, row, now, reason=reason, report=report)
    if billing or I(row.state) is I.running:
        ledger.open_interval(s, row, kind="idle", job_id=None, team=row.team, project=row.project, at=now)


def _instance_lost(
    ctx: TickContext, s: Session, row: InstanceRow, now: datetime, *, reason: str, preempted: bool, report: TickReport
) -> None:
    """The cloud took the machine away (spot reclaim, or it vanished): requeue its job."""
    ledger.close_interval(s, row.id, now)
    if I(row.state) is not I.stopped:
        set_instance(row, I.terminated)
        row.terminated_at = now
    row.preempted = row.preempted or preempted
    row.reason = reason
    add_event(s, now, "instance_lost", reason, instance_id=row.id, job_id=row.job_id)
    requeue_job_of(ctx, s, row, now, reason=reason, report=report)


def requeue_job_of(
    ctx: TickContext, s: Session, row: InstanceRow, now: datetime, *, reason: str, report: TickReport
) -> None:
    """The machine ``row`` is lost to its job (reclaimed, vanished, or its agent went silent): the
    job's attempt ends as preempted, the job counts one restart against ``max_restarts`` and goes back
    to the queue to resume from its last checkpoint (or fails past ``max_restarts``). The row is
    detached from the job; what becomes of the machine is the caller's business. A row already
    detached (its agent reported the reclaim notice first: ``agent_reports.report_reclaiming``) counts
    nothing a second time."""
    where = f"{row.provider}/{row.region}/{row.zone}/{row.instance_type}|{row.capacity}"
    job = requeue_after_loss(s, row, now, reason=reason, resume=ctx.resume_after_preemption)
    if job is None:
        return
    report.preempted += 1
    if not ctx.resume_after_preemption and J(job.state) is J.queued:
        ctx.offers.avoid_key(where, now)


def _terminate_billed_stop(ctx: TickContext, provider: Provider, row_id: str, cloud: Instance, now: datetime,
                           report: TickReport) -> None:
    """An idle machine whose stop did not stop the bill: terminate it (its hours stay in the ledger until then)."""
    if not cloud_call(ctx, now, report, lambda: provider.terminate(cloud.ref), event="billed_stop_terminate_failed",
                      label=f"billed stop {row_id}", instance=row_id).ok:
        return  # the next tick tries again; the open interval keeps counting
    with ctx.store.session() as s:
        row = s.get(InstanceRow, row_id)
        if row is not None and row.job_id is None and I(row.state) in (I.stopping, I.stopped):
            set_instance(row, I.terminating)
            add_event(s, now, "billed_stop_terminated", "stopped but still billed: terminated", instance_id=row.id)
    log.info("billed_stop_terminated", provider=provider.name, instance=row_id)


def _terminate_orphan(ctx: TickContext, provider: Provider, cloud: Instance, now: datetime, report: TickReport) -> None:
    if not cloud_call(ctx, now, report, lambda: provider.terminate(cloud.ref), event="orphan_terminate_failed",
                      label=f"orphan {cloud.ref.instance_id}", level="error", instance=cloud.ref.instance_id).ok:
        return
    report.orphans_terminated += 1
    log.warning("orphan_terminated", provider=provider.name, instance=cloud.ref.instance_id,
                tags=dict(cloud.tags))
    with ctx.store.session() as s:
        add_event(s, now, "orphan_terminated",
                  f"{provider.name} {cloud.ref.instance_id} carried our tags but no live record owned it")
