"""The tick: reconcile -> plan -> act -> account. The one scheduling code path.

The daemon calls ``tick`` from APScheduler in real time; the demo, the simulator
and the tests call it on a SimClock. Invariants it keeps:

* Write ahead, then call: an instance row (state ``requested``, with its client
  token) and its attempt are committed before ``Provider.launch``. A crash after
  that is repaired by the next tick, which re-issues the launch with the same
  token (the cloud dedupes it) or finds the instance by its tags.
* No leak: every instance we launch carries ``TAG_MANAGED`` and ``TAG_INSTANCE``;
  a tagged instance that no live row owns is terminated once older than the
  grace period. A row is marked terminated only when the cloud confirms it.
* No lost job: a job whose instance vanished goes back to the queue with its
  finished epochs kept (attempt n+1 resumes from the last checkpoint).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

import structlog
from sqlalchemy import select
from sqlalchemy.orm import Session

from providers.base import (
    CAP_SPOT_STOP,
    CAP_STOP_CHARGING,
    TAG_ATTEMPT,
    TAG_INSTANCE,
    TAG_JOB,
    TAG_MANAGED,
    TAG_TEAM,
    Instance,
    InstanceRef,
    InstanceRequest,
    InstanceState,
    InvalidRequest,
    NoCapacity,
    Provider,
    ProviderError,
    QuotaExceeded,
)
from providers.retry import call_with_retry
from scheduler import ledger
from scheduler.clock import Clock, utc
from scheduler.models import Capacity, JobSpec, Offer
from scheduler.offerbook import OfferBook
from scheduler.planner import Decision, FleetSlot, PlanJob, PlannerPolicy, plan
from scheduler.settings import Settings
from scheduler.states import (
    ATTEMPT_MOVES,
    INSTANCE_LIVE,
    INSTANCE_MOVES,
    JOB_MOVES,
    JOB_TERMINAL,
    AttemptState,
    InstanceRowState,
    JobState,
    move,
)
from scheduler.store import Store, add_event, new_id
from scheduler.tables import AttemptRow, InstanceRow, JobRow

log = structlog.get_logger("gpusched.tick")

A, I, J = AttemptState, InstanceRowState, JobState


class SimulatedCrash(BaseException):
    """Raised at a named crash point in tests: the process 'dies' there."""


@dataclass
class TickContext:
    store: Store
    providers: Mapping[str, Provider]
    clock: Clock
    settings: Settings
    offers: OfferBook = field(default_factory=OfferBook)
    policy: PlannerPolicy | None = None
    # Tests set this to kill the tick at a named point (FoundationDB's BUGGIFY idea).
    crashpoint: Callable[[str], None] = lambda name: None
    rng_seed: int = 0
    # Repeatable instance ids for simulations; None in the daemon.
    ids: random.Random | None = None

    def planner_policy(self) -> PlannerPolicy:
        if self.policy is None:
            self.policy = PlannerPolicy(currency=self.settings.report_currency, fx=self.settings.fx)
        return self.policy


@dataclass
class TickReport:
    at: datetime
    launched: int = 0
    reused: int = 0
    preempted: int = 0
    finished: int = 0
    idle_stopped: int = 0
    orphans_terminated: int = 0
    launch_failures: int = 0
    cost_records: int = 0
    errors: list[str] = field(default_factory=list)


def client_token(job_id: str, attempt: int) -> str:
    """Deterministic per (job, attempt): the cloud dedupes a retried or re-issued launch."""
    return f"gs-{job_id}-a{attempt}"


def _request_token(row: InstanceRow) -> str:
    """The token sent with a launch: always the one written ahead with the intent."""
    return row.client_token


# --- the tick ------------------------------------------------------------------


def tick(ctx: TickContext) -> TickReport:
    now = ctx.clock.now()
    report = TickReport(at=now)
    with ctx.store.session() as s:
        if not ctx.store.try_lock(s, "gpusched-tick"):
            log.info("tick_skipped", why="another daemon holds the tick lock")
            return report
    reconcile(ctx, now, report)
    release_cancelled(ctx, now)
    reissue_intents(ctx, now, report)
    plan_and_act(ctx, now, report)
    reap_idle(ctx, now, report)
    with ctx.store.session() as s:
        report.cost_records = ledger.account(s, now)
    return report


# --- reconcile: what the clouds say -> the store ---------------------------------


def reconcile(ctx: TickContext, now: datetime, report: TickReport) -> None:
    grace = timedelta(seconds=ctx.settings.launch_grace_seconds)
    for name, provider in sorted(ctx.providers.items()):
        try:
            seen = call_with_retry(
                lambda: provider.instances({TAG_MANAGED: ctx.settings.cluster}),
                clock=ctx.clock,
                rng=_rng(ctx, now),
            )
        except ProviderError as exc:
            # Never treat "could not list" as "gone": skip this provider this tick.
            log.warning("reconcile_list_failed", **exc.log_fields())
            report.errors.append(f"{name}: {exc.message}")
            continue
        by_row = {i.tags.get(TAG_INSTANCE): i for i in seen}
        with ctx.store.session() as s:
            rows = s.scalars(
                select(InstanceRow).where(
                    InstanceRow.provider == name, InstanceRow.state.in_([x.value for x in INSTANCE_LIVE])
                )
            ).all()
            owned = set()
            for row in rows:
                owned.add(row.id)
                cloud = by_row.get(row.id)
                if cloud is None:
                    _reconcile_missing(ctx, s, row, now, grace, report)
                else:
                    _reconcile_seen(ctx, s, row, cloud, now, report)
            terminated_ids = set(
                s.scalars(
                    select(InstanceRow.id).where(
                        InstanceRow.provider == name, InstanceRow.state == I.terminated.value
                    )
                ).all()
            )
        for row_id, cloud in sorted(by_row.items(), key=lambda kv: str(kv[0])):
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
) -> None:
    row.last_seen_at = now
    if row.cloud_id is None:
        row.cloud_id = cloud.ref.instance_id
        add_event(s, now, "instance_found", f"found {cloud.ref.instance_id} by its tags", instance_id=row.id)
    state = I(row.state)
    if cloud.preempted or (cloud.state is InstanceState.terminated and state is not I.terminating):
        reason = cloud.preempt_reason or "the cloud terminated it"
        _instance_lost(ctx, s, row, now, reason=reason, preempted=cloud.preempted, report=report)
        return
    if cloud.state is InstanceState.terminated:
        _set_instance(row, I.terminated)
        row.terminated_at = now
        ledger.close_interval(s, row.id, now)
        add_event(s, now, "instance_terminated", "termination confirmed", instance_id=row.id)
        return
    if cloud.state is InstanceState.running and state in (I.requested, I.pending):
        _set_instance(row, I.running)
        row.running_at = now
        if state is I.requested:
            _open_billing(s, row, now)
        if row.job_id:
            _start_job_on(s, row, now)
        return
    if cloud.state is InstanceState.pending and state is I.requested:
        _set_instance(row, I.pending)
        _open_billing(s, row, now)
        return
    if cloud.state is InstanceState.stopped and state in (I.stopping, I.running, I.pending):
        _set_instance(row, I.stopped)
        row.stopped_at = now
        ledger.close_interval(s, row.id, now)
        if row.job_id:
            _instance_lost(ctx, s, row, now, reason="the cloud stopped it", preempted=True, report=report)


def _reconcile_missing(
    ctx: TickContext, s: Session, row: InstanceRow, now: datetime, grace: timedelta, report: TickReport
) -> None:
    state = I(row.state)
    if state is I.requested:
        return  # reissue_intents decides: the launch may not have reached the cloud yet
    last = utc(row.last_seen_at or row.created_at)
    if state is I.terminating or now - last >= grace:
        if state is I.terminating:
            _set_instance(row, I.terminated)
            row.terminated_at = now
            ledger.close_interval(s, row.id, now)
            add_event(s, now, "instance_terminated", "gone from the cloud's list", instance_id=row.id)
        else:
            _instance_lost(ctx, s, row, now, reason="vanished from the cloud's list", preempted=False, report=report)


def _instance_lost(
    ctx: TickContext, s: Session, row: InstanceRow, now: datetime, *, reason: str, preempted: bool, report: TickReport
) -> None:
    """The cloud took the machine away (spot reclaim, or it vanished): requeue its job."""
    ledger.close_interval(s, row.id, now)
    if I(row.state) is not I.stopped:
        _set_instance(row, I.terminated)
        row.terminated_at = now
    row.preempted = row.preempted or preempted
    row.reason = reason
    add_event(s, now, "instance_lost", reason, instance_id=row.id, job_id=row.job_id)
    job_id, row.job_id = row.job_id, None
    if not job_id:
        return
    job = s.get(JobRow, job_id)
    attempt = _current_attempt(s, job_id)
    if job is None or attempt is None or J(job.state) in JOB_TERMINAL:
        return
    attempt.state = move(ATTEMPT_MOVES, A(attempt.state), A.preempted, "attempt")
    attempt.ended_at = now
    attempt.end_epoch = job.epochs_done
    attempt.reason = reason
    job.preemptions += 1
    report.preempted += 1
    spec = JobSpec.model_validate(job.spec_json)
    _set_job(job, J.preempted, now)
    if job.preemptions > spec.policy.max_restarts:
        _set_job(job, J.failed, now, f"lost its machine {job.preemptions} times (max_restarts {spec.policy.max_restarts})")
        job.finished_at = now
    else:
        resume = f"; resumes from epoch {job.epochs_done}" if job.kind == "train" else ""
        _set_job(job, J.queued, now, f"{reason} on {row.provider} {row.zone} {row.instance_type}{resume}")
    add_event(s, now, "job_preempted", job.reason or reason, job_id=job.id, instance_id=row.id)
    log.info("job_preempted", job=job.id, attempt=attempt.number, instance=row.id, reason=reason,
             epochs_done=job.epochs_done)


def _terminate_orphan(ctx: TickContext, provider: Provider, cloud: Instance, now: datetime, report: TickReport) -> None:
    try:
        call_with_retry(lambda: provider.terminate(cloud.ref), clock=ctx.clock, rng=_rng(ctx, now))
    except ProviderError as exc:
        log.error("orphan_terminate_failed", instance=cloud.ref.instance_id, **exc.log_fields())
        report.errors.append(f"orphan {cloud.ref.instance_id}: {exc.message}")
        return
    report.orphans_terminated += 1
    log.warning("orphan_terminated", provider=provider.name, instance=cloud.ref.instance_id,
                tags=dict(cloud.tags))
    with ctx.store.session() as s:
        add_event(s, now, "orphan_terminated",
                  f"{provider.name} {cloud.ref.instance_id} carried our tags but no live record owned it")


# --- jobs whose machine is freed: cancelled ---------------------------------------


def release_cancelled(ctx: TickContext, now: datetime) -> None:
    """An instance busy with a job that ended (cancelled, failed) becomes idle and reusable."""
    with ctx.store.session() as s:
        busy = s.scalars(
            select(InstanceRow).where(
                InstanceRow.job_id.is_not(None), InstanceRow.state.in_([x.value for x in INSTANCE_LIVE])
            )
        ).all()
        for row in busy:
            job = s.get(JobRow, row.job_id)
            if job is None or J(job.state) in JOB_TERMINAL:
                attempt = _current_attempt(s, row.job_id) if row.job_id else None
                if attempt is not None and A(attempt.state) in (A.launching, A.running):
                    attempt.state = move(ATTEMPT_MOVES, A(attempt.state), A.cancelled, "attempt")
                    attempt.ended_at = now
                _make_idle(s, row, now)


# --- write-ahead launches whose outcome is unknown ---------------------------------


def reissue_intents(ctx: TickContext, now: datetime, report: TickReport) -> None:
    """Rows still ``requested`` after a crash or a transient error: launch again, same token."""
    grace = timedelta(seconds=ctx.settings.launch_grace_seconds)
    with ctx.store.session() as s:
        rows = s.scalars(select(InstanceRow).where(InstanceRow.state == I.requested.value)).all()
        pending = [(r.id, r.job_id) for r in rows]
    for row_id, job_id in pending:
        with ctx.store.session() as s:
            row = s.get(InstanceRow, row_id)
            job = s.get(JobRow, job_id) if job_id else None
            if row is None or I(row.state) is not I.requested:
                continue
            if job is None or J(job.state) in JOB_TERMINAL:
                # Nobody wants it any more. If the launch did reach the cloud, the orphan
                # sweep terminates it after the grace period; mark the row only then.
                if now - utc(row.created_at) >= grace * 2:
                    _set_instance(row, I.terminated)
                    row.terminated_at = now
                    add_event(s, now, "intent_dropped", "job ended before its launch was confirmed",
                              instance_id=row.id, job_id=job_id)
                continue
            attempt = _current_attempt(s, job.id)
        if attempt is None:
            continue
        _launch(ctx, now, row_id, report)


# --- plan and act ----------------------------------------------------------------


def plan_and_act(ctx: TickContext, now: datetime, report: TickReport) -> list[Decision]:
    with ctx.store.session() as s:
        queued = s.scalars(select(JobRow).where(JobRow.state == J.queued.value)).all()
        if not queued:
            return []
        spent = ledger.spent_by_job(s, [j.id for j in queued], fx=ctx.planner_policy().fx, now=now)
        avoid = ctx.offers.avoided(now)
        jobs = [
            PlanJob(
                id=j.id,
                spec=JobSpec.model_validate(j.spec_json),
                submitted_at=utc(j.submitted_at),
                deadline_at=utc(j.deadline_at) if j.deadline_at else None,
                epochs_done=j.epochs_done,
                preemptions=j.preemptions,
                avoid=avoid,
                spent=spent.get(j.id),
            )
            for j in queued
        ]
        fleet = _fleet(ctx, s, now)
    offers = ctx.offers.offers(ctx.providers, now)
    decisions = plan(jobs, offers, fleet, now, ctx.planner_policy())
    for d in decisions:
        _act(ctx, now, d, report)
    return decisions


def _fleet(ctx: TickContext, s: Session, now: datetime) -> list[FleetSlot]:
    """Warm idle instances we hold, plus free units of owned reserved capacity."""
    offers = {o.key: o for o in ctx.offers.offers(ctx.providers, now)}
    slots: list[FleetSlot] = []
    idle = s.scalars(
        select(InstanceRow)
        .where(InstanceRow.state == I.running.value, InstanceRow.job_id.is_(None))
        .order_by(InstanceRow.id)
    ).all()
    for row in idle:
        offer = offers.get(f"{row.provider}/{row.region}/{row.zone}/{row.instance_type}")
        if offer is None:
            continue
        cap = Capacity.reserved if row.reserved else Capacity(row.capacity)
        slots.append(FleetSlot(kind="warm", instance_id=row.id, offer=offer, capacity=cap))
    for res in ctx.settings.reserved:
        if utc(res.until) <= now:
            continue
        live = s.scalars(
            select(InstanceRow).where(
                InstanceRow.reserved.is_(True),
                InstanceRow.provider == res.provider,
                InstanceRow.region == res.region,
                InstanceRow.instance_type == res.instance_type,
                InstanceRow.state.in_([x.value for x in INSTANCE_LIVE]),
            )
        ).all()
        free = res.count - len(live)
        matches = sorted(
            (o for o in offers.values()
             if o.provider == res.provider and o.region == res.region
             and o.instance_type == res.instance_type and (res.zone is None or o.zone == res.zone)),
            key=lambda o: o.zone,
        )
        if not matches:
            continue
        for _ in range(max(free, 0)):
            slots.append(FleetSlot(kind="reserved", instance_id=None, offer=matches[0],
                                   capacity=Capacity.reserved, until=utc(res.until)))
    return slots


def _act(ctx: TickContext, now: datetime, d: Decision, report: TickReport) -> None:
    with ctx.store.session() as s:
        job = s.get(JobRow, d.job_id)
        if job is None or J(job.state) is not J.queued:
            return  # cancelled while we planned
        job.plan_json = d.model_dump(mode="json")
        if d.action == "wait":
            if job.reason != d.reason:
                job.reason = d.reason
                add_event(s, now, "job_waiting", d.reason, job_id=job.id)
            return
        if d.action == "refuse":
            _set_job(job, J.failed, now, f"refused: {d.reason}")
            job.finished_at = now
            add_event(s, now, "job_refused", d.reason, job_id=job.id)
            log.info("job_refused", job=job.id, reason=d.reason)
            return
        choice = d.choice
        assert choice is not None
        job.attempt += 1
        offer_key = f"{choice.provider}/{choice.region}/{choice.zone}/{choice.instance_type}"
        attempt = AttemptRow(
            job_id=job.id,
            number=job.attempt,
            state=A.launching.value,
            client_token=client_token(job.id, job.attempt),
            provider=choice.provider,
            region=choice.region,
            zone=choice.zone,
            instance_type=choice.instance_type,
            capacity=choice.capacity.value,
            start_epoch=job.epochs_done,
            est_hours=choice.est_hours,
            est_cost_amount=choice.est_cost.amount,
            est_cost_currency=choice.est_cost.currency,
            created_at=now,
        )
        s.add(attempt)
        _set_job(job, J.planned, now, d.reason)
        if choice.instance_id is not None:
            # Reuse a warm (or reserved, already running) machine: no boot, no image pull.
            row = s.get(InstanceRow, choice.instance_id)
            if row is None or I(row.state) is not I.running or row.job_id is not None:
                _set_job(job, J.queued, now, "the warm machine chosen was taken; planning again")
                job.attempt -= 1
                s.expunge(attempt)
                return
            attempt.instance_id = row.id
            ledger.close_interval(s, row.id, now)
            row.job_id, row.idle_since = job.id, None
            row.team, row.project = job.team, job.project
            ledger.open_interval(s, row, kind="busy", job_id=job.id, team=job.team, project=job.project, at=now)
            _set_job(job, J.provisioning, now)
            _start_job_on(s, row, now)
            report.reused += 1
            add_event(s, now, "job_reused_instance", f"on warm {row.provider} {row.instance_type} {row.id}",
                      job_id=job.id, instance_id=row.id)
            return
        offer = _find_offer(ctx, now, offer_key)
        if offer is None:
            _set_job(job, J.queued, now, f"offer {offer_key} disappeared; planning again")
            job.attempt -= 1
            s.expunge(attempt)
            return
        spec = JobSpec.model_validate(job.spec_json)
        reserved = choice.capacity is Capacity.reserved
        launch_cap = Capacity.on_demand if reserved else choice.capacity
        price = offer.price(launch_cap)
        od = offer.on_demand or price
        assert price is not None and od is not None
        row = InstanceRow(
            id=new_id("inst", ctx.ids),
            provider=offer.provider,
            region=offer.region,
            zone=offer.zone,
            instance_type=offer.instance_type,
            gpu=offer.gpu,
            gpu_count=offer.gpu_count,
            capacity=launch_cap.value,
            reserved=reserved,
            client_token=attempt.client_token,
            state=I.requested.value,
            job_id=job.id,
            team=job.team,
            project=job.project,
            price_amount=Decimal(0) if reserved else price.per_hour.amount,
            price_currency=price.per_hour.currency,
            on_demand_amount=od.per_hour.amount,
            idle_stop_minutes=spec.policy.idle_stop_minutes
            if spec.policy.idle_stop_minutes is not None
            else ctx.settings.idle_stop_minutes,
            created_at=now,
        )
        s.add(row)
        s.flush()
        attempt.instance_id = row.id
        _set_job(job, J.provisioning, now)
        add_event(s, now, "launch_intent", f"{launch_cap.value}{' (reserved)' if reserved else ''} "
                  f"{offer.key} token {attempt.client_token}", job_id=job.id, instance_id=row.id)
        row_id = row.id
    ctx.crashpoint("after_intent")
    _launch(ctx, now, row_id, report)


def _find_offer(ctx: TickContext, now: datetime, key: str) -> Offer | None:
    for o in ctx.offers.offers(ctx.providers, now):
        if o.key == key:
            return o
    return None


def _launch(ctx: TickContext, now: datetime, row_id: str, report: TickReport) -> None:
    """Call the cloud for a committed intent; record the outcome."""
    with ctx.store.session() as s:
        row = s.get(InstanceRow, row_id)
        assert row is not None
        job = s.get(JobRow, row.job_id) if row.job_id else None
        attempt = _current_attempt(s, row.job_id) if row.job_id else None
        offer = _find_offer(ctx, now, f"{row.provider}/{row.region}/{row.zone}/{row.instance_type}")
        if offer is None or job is None or attempt is None:
            return
        request = InstanceRequest(
            offer=offer,
            capacity=Capacity(row.capacity),
            client_token=_request_token(row),
            tags={
                TAG_MANAGED: ctx.settings.cluster,
                TAG_INSTANCE: row.id,
                TAG_JOB: job.id,
                TAG_ATTEMPT: str(attempt.number),
                TAG_TEAM: job.team,
            },
            name=f"gpusched-{job.name}-a{attempt.number}"[:63],
        )
    provider = ctx.providers[row.provider]
    try:
        inst = call_with_retry(lambda: provider.launch(request), clock=ctx.clock, rng=_rng(ctx, now))
    except (NoCapacity, QuotaExceeded, InvalidRequest) as exc:
        # The cloud refused: nothing was created. Avoid this offer for a while; plan again.
        ctx.offers.avoid(offer, request.capacity, now)
        report.launch_failures += 1
        log.info("launch_refused", instance=row_id, offer=offer.key, capacity=request.capacity.value,
                 **exc.log_fields())
        with ctx.store.session() as s:
            row = s.get(InstanceRow, row_id)
            job = s.get(JobRow, row.job_id)
            attempt = _current_attempt(s, job.id)
            _set_instance(row, I.terminated)
            row.terminated_at, row.job_id, row.reason = now, None, f"launch refused: {exc.message}"
            attempt.state = move(ATTEMPT_MOVES, A(attempt.state), A.launch_failed, "attempt")
            attempt.ended_at, attempt.reason = now, exc.message
            if J(job.state) is J.provisioning:
                _set_job(job, J.queued, now,
                         f"{offer.provider} {offer.zone} {offer.instance_type} {request.capacity.value}: "
                         f"{type(exc).__name__} ({exc.code or exc.message}); trying the next offer")
            add_event(s, now, "launch_refused", f"{type(exc).__name__}: {exc.message}",
                      job_id=job.id, instance_id=row_id)
        return
    except ProviderError as exc:
        # Outcome unknown (throttled, unreachable): keep the intent; the next tick re-issues it.
        log.warning("launch_uncertain", instance=row_id, **exc.log_fields())
        report.errors.append(f"launch {row_id}: {exc.message}")
        return
    ctx.crashpoint("after_launch")
    with ctx.store.session() as s:
        row = s.get(InstanceRow, row_id)
        row.cloud_id = inst.ref.instance_id
        row.last_seen_at = now
        if I(row.state) is I.requested:
            target = I.running if inst.state is InstanceState.running else I.pending
            _set_instance(row, target)
            _open_billing(s, row, now)
            if target is I.running:
                row.running_at = now
                _start_job_on(s, row, now)
        add_event(s, now, "launched", f"{row.provider} {inst.ref.instance_id} ({row.capacity})",
                  job_id=row.job_id, instance_id=row.id)
    report.launched += 1
    log.info("launched", instance=row_id, cloud_id=inst.ref.instance_id, provider=row.provider,
             type=row.instance_type, capacity=row.capacity)


def _open_billing(s: Session, row: InstanceRow, now: datetime) -> None:
    kind = "busy" if row.job_id else "idle"
    ledger.open_interval(s, row, kind=kind, job_id=row.job_id, team=row.team, project=row.project, at=now)


def _start_job_on(s: Session, row: InstanceRow, now: datetime) -> None:
    """The machine is up: the job's attempt starts (the on-instance agent picks it up)."""
    job = s.get(JobRow, row.job_id)
    attempt = _current_attempt(s, row.job_id)
    if job is None or attempt is None:
        return
    if J(job.state) in (J.planned, J.provisioning):
        _set_job(job, J.running, now, None)
    if A(attempt.state) is A.launching:
        attempt.state = move(ATTEMPT_MOVES, A.launching, A.running, "attempt")
        attempt.started_at = now
        add_event(s, now, "job_started", f"attempt {attempt.number} from epoch {attempt.start_epoch}",
                  job_id=job.id, instance_id=row.id)


# --- reports from the on-instance agent ---------------------------------------------


def report_progress(s: Session, job_id: str, attempt_no: int, epochs_done: int, checkpoint_uri: str | None,
                    now: datetime) -> None:
    """The agent finished an epoch and uploaded ``last.pt``: that is the new resume point."""
    job = s.get(JobRow, job_id)
    attempt = _current_attempt(s, job_id)
    if job is None or attempt is None or attempt.number != attempt_no or A(attempt.state) is not A.running:
        return  # a stale report from an older attempt: fenced off
    if epochs_done > job.epochs_done:
        job.epochs_done = epochs_done
        job.checkpoint_uri = checkpoint_uri
        job.updated_at = now


def report_finished(s: Session, job_id: str, attempt_no: int, ok: bool, now: datetime, message: str = "") -> None:
    """The agent says the job's process exited; its machine becomes idle and warm."""
    job = s.get(JobRow, job_id)
    attempt = _current_attempt(s, job_id)
    if job is None or attempt is None or attempt.number != attempt_no or A(attempt.state) is not A.running:
        return
    attempt.state = move(ATTEMPT_MOVES, A.running, A.succeeded if ok else A.failed, "attempt")
    attempt.ended_at = now
    attempt.end_epoch = job.epochs_done
    attempt.reason = message or None
    if J(job.state) is J.running:
        _set_job(job, J.succeeded if ok else J.failed, now, message or None)
        job.finished_at = now
    add_event(s, now, "job_finished", f"{'succeeded' if ok else 'failed'} {message}".strip(), job_id=job.id)
    if attempt.instance_id:
        row = s.get(InstanceRow, attempt.instance_id)
        if row is not None and row.job_id == job.id:
            _make_idle(s, row, now)


def _make_idle(s: Session, row: InstanceRow, now: datetime) -> None:
    ledger.close_interval(s, row.id, now)
    row.job_id = None
    row.idle_since = now
    if I(row.state) in (I.running, I.pending):
        ledger.open_interval(s, row, kind="idle", job_id=None, team=row.team, project=row.project, at=now)


# --- the idle reaper -----------------------------------------------------------------


def reap_idle(ctx: TickContext, now: datetime, report: TickReport) -> None:
    """Stop (stop-charging) or terminate machines idle longer than their idle_stop_minutes."""
    reserved_until = {(r.provider, r.region, r.instance_type): utc(r.until) for r in ctx.settings.reserved}
    with ctx.store.session() as s:
        idle = s.scalars(
            select(InstanceRow).where(
                InstanceRow.state == I.running.value,
                InstanceRow.job_id.is_(None),
                InstanceRow.idle_since.is_not(None),
            ).order_by(InstanceRow.id)
        ).all()
        due = []
        for row in idle:
            if now - utc(row.idle_since) < timedelta(minutes=row.idle_stop_minutes):
                continue
            until = reserved_until.get((row.provider, row.region, row.instance_type))
            if row.reserved and until is not None and until > now:
                continue  # prepaid: stopping it saves nothing, keeping it warm saves a boot
            due.append((row.id, row.provider, row.region, row.cloud_id, row.capacity))
    for row_id, prov, region, cloud_id, capacity in due:
        provider = ctx.providers.get(prov)
        if provider is None or cloud_id is None:
            continue
        ref = InstanceRef(provider=prov, region=region, instance_id=cloud_id)
        can_stop = CAP_STOP_CHARGING in provider.capabilities and (
            capacity != Capacity.spot.value or CAP_SPOT_STOP in provider.capabilities
        )
        action = "stopped" if can_stop else "terminated"
        try:
            if can_stop:
                call_with_retry(lambda: provider.stop(ref), clock=ctx.clock, rng=_rng(ctx, now))
            else:
                call_with_retry(lambda: provider.terminate(ref), clock=ctx.clock, rng=_rng(ctx, now))
        except ProviderError as exc:
            log.warning("idle_stop_failed", instance=row_id, **exc.log_fields())
            report.errors.append(f"idle stop {row_id}: {exc.message}")
            continue
        with ctx.store.session() as s:
            row = s.get(InstanceRow, row_id)
            if row is None or row.job_id is not None:
                continue
            _set_instance(row, I.stopping if can_stop else I.terminating)
            ledger.close_interval(s, row.id, now)
            ledger.record_idle_stop(s, row, now, action)
            add_event(s, now, "idle_stop", f"idle {row.idle_stop_minutes} min: {action}", instance_id=row.id)
        report.idle_stopped += 1
        log.info("idle_stop", instance=row_id, action=action)


# --- small helpers -----------------------------------------------------------------


def _current_attempt(s: Session, job_id: str) -> AttemptRow | None:
    return s.scalars(
        select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.number.desc()).limit(1)
    ).first()


def _set_job(job: JobRow, state: JobState, now: datetime, reason: str | None = "") -> None:
    job.state = move(JOB_MOVES, J(job.state), state, "job")
    job.updated_at = now
    if reason != "":
        job.reason = reason


def _set_instance(row: InstanceRow, state: InstanceRowState) -> None:
    row.state = move(INSTANCE_MOVES, I(row.state), state, "instance")


def _rng(ctx: TickContext, now: datetime) -> random.Random:
    """Jitter for back-off: seeded from the tick time so a simulated run repeats exactly."""
    return random.Random(ctx.rng_seed * 1_000_003 + int(now.timestamp()))
