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
  finished epochs kept (attempt n+1 resumes from the last checkpoint). So does
  the job of a machine whose agent went silent (``agent_watch``, right after
  reconcile), and that machine is terminated.
* One bad job stops nobody: a job whose stored file cannot be read, or that cannot be planned,
  priced or written, is set aside with its reason (``set_aside``) and the tick goes on.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Literal

import structlog
from sqlalchemy import select
from sqlalchemy.orm import Session

from providers.base import (
    TAG_ATTEMPT,
    TAG_INSTANCE,
    TAG_JOB,
    TAG_MANAGED,
    TAG_TEAM,
    BillingStopped,
    InstanceRef,
    InstanceRequest,
    InstanceState,
    InvalidRequest,
    NoCapacity,
    QuotaExceeded,
)
from scheduler.accounting import ledger
from scheduler.agent.bootstrap import user_data_for
from scheduler.agent.package import WHEEL_FIX, boots_real_machines
from scheduler.errors import LeadershipLost, SettingsError
from scheduler.lifecycle import gang
from scheduler.lifecycle.agent_reports import report_finished, report_progress
from scheduler.lifecycle.agent_watch import terminate_reclaimed, watch_agents
from scheduler.lifecycle.budget_stop import stop_at_budget
from scheduler.lifecycle.context import SimulatedCrash, TickContext, TickReport, cloud_call
from scheduler.lifecycle.fleet import fleet_slots
from scheduler.lifecycle.reaper import reap_idle
from scheduler.lifecycle.reconcile import reconcile
from scheduler.lifecycle.set_aside import describe, screen_stored_specs, set_aside
from scheduler.lifecycle.steering import place_waiting, steer, steered
from scheduler.lifecycle.transitions import (
    bills_boot,
    current_attempt,
    make_idle,
    open_billing,
    release_nodes,
    set_instance,
    set_job,
    start_job_on,
)
from scheduler.models import Capacity, JobSpec, Offer
from scheduler.money import Money
from scheduler.planner.book import market_for
from scheduler.planner.fallback import fall_back
from scheduler.planner.inputs import PlanJob, TeamBudget
from scheduler.planner.plan import Decision, plan
from scheduler.states import (
    ATTEMPT_MOVES,
    INSTANCE_LIVE,
    JOB_TERMINAL,
    AttemptState,
    InstanceRowState,
    JobState,
    move,
)
from scheduler.store.database import add_event, new_id
from scheduler.store.tables import AttemptRow, InstanceRow, JobRow
from scheduler.times import utc

log = structlog.get_logger("gpusched.tick")

# What one launch call came to; a gang stops launching at the first node that did not launch.
Outcome = Literal["launched", "refused", "uncertain", "skipped"]

A, I, J = AttemptState, InstanceRowState, JobState

__all__ = ["SimulatedCrash", "TickContext", "TickReport", "client_token", "plan_and_act", "reconcile",
           "reap_idle", "report_finished", "report_progress", "tick"]


def client_token(job_id: str, attempt: int) -> str:
    """Deterministic per (job, attempt): the cloud dedupes a retried or re-issued launch."""
    return f"gs-{job_id}-a{attempt}"


def _request_token(row: InstanceRow) -> str:
    """The token sent with a launch: always the one written ahead with the intent."""
    return row.client_token


# --- the tick ------------------------------------------------------------------


def tick(ctx: TickContext) -> TickReport:
    """One round. On a store fenced by the leader lease (the daemon's), a round that finds this daemon
    deposed stops where it is: the transaction that found it rolled back, and nothing after it runs."""
    now = ctx.clock.now()
    report = TickReport(at=now)
    try:
        _tick(ctx, now, report)
    except LeadershipLost as lost:
        report.led = False
        log.warning("tick_abandoned", why=lost.message)
    return report


def _tick(ctx: TickContext, now: datetime, report: TickReport) -> None:
    # The advisory lock is a second fence beside the lease: while a tick's connection lives, no other
    # daemon's tick runs, even one that took the lease from a leader paused mid-tick.
    with ctx.store.held_lock("gpusched-tick") as got:
        if not got:
            log.info("tick_skipped", why="another daemon holds the tick lock")
            return
        report.led = True
        screen_stored_specs(ctx, now, report)
        reconcile(ctx, now, report)
        watch_agents(ctx, now, report)
        terminate_reclaimed(ctx, now, report)
        steer(ctx, now, report)
        stop_at_budget(ctx, now, report)
        release_cancelled(ctx, now)
        reissue_intents(ctx, now, report)
        plan_and_act(ctx, now, report)
        reap_idle(ctx, now, report)
        with ctx.store.session() as s:
            report.cost_records = ledger.account(s, now)
        ctx.last_tick_at = now


# --- jobs whose machine is freed: cancelled ---------------------------------------

# Asked every tick: built once (``scheduler.store.database``, "Statements built once").
_BUSY_WITH_ENDED_JOB = (
    select(InstanceRow)
    .outerjoin(JobRow, JobRow.id == InstanceRow.job_id)
    .where(
        InstanceRow.job_id.is_not(None),
        InstanceRow.state.in_([x.value for x in INSTANCE_LIVE]),
        JobRow.id.is_(None) | JobRow.state.in_([x.value for x in JOB_TERMINAL]),
    )
)
_REQUESTED_ROWS = select(InstanceRow).where(InstanceRow.state == I.requested.value)
_QUEUED_JOBS = select(JobRow).where(JobRow.state == J.queued.value)


def release_cancelled(ctx: TickContext, now: datetime) -> None:
    """An instance busy with a job that ended (cancelled, failed) becomes idle and reusable."""
    with ctx.store.session() as s:
        # Only rows whose job is gone or ended: asking for every busy row and its job each
        # tick loaded (and JSON-decoded) the whole running fleet's jobs for nothing.
        ended = s.scalars(_BUSY_WITH_ENDED_JOB).all()
        for row in ended:
            attempt = current_attempt(s, row.job_id) if row.job_id else None
            if attempt is not None and A(attempt.state) in (A.launching, A.running):
                attempt.state = move(ATTEMPT_MOVES, A(attempt.state), A.cancelled, "attempt")
                attempt.ended_at = now
            make_idle(s, row, now)


# --- write-ahead launches whose outcome is unknown ---------------------------------


def reissue_intents(ctx: TickContext, now: datetime, report: TickReport) -> None:
    """Rows still ``requested`` after a crash or a transient error: launch again, same token."""
    grace = timedelta(seconds=ctx.settings.launch_grace_seconds)
    with ctx.store.session() as s:
        rows = s.scalars(_REQUESTED_ROWS).all()
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
                    set_instance(row, I.terminated)
                    row.terminated_at = now
                    add_event(s, now, "intent_dropped", "job ended before its launch was confirmed",
                              instance_id=row.id, job_id=job_id)
                continue
            attempt = current_attempt(s, job.id)
        if attempt is None:
            continue
        _launch(ctx, now, row_id, report)


# --- plan and act ----------------------------------------------------------------


def plan_and_act(ctx: TickContext, now: datetime, report: TickReport) -> list[Decision]:
    with ctx.store.session() as s:
        queued = s.scalars(_QUEUED_JOBS).all()
        if not queued:
            return []
        spent = ledger.spent_by_job(s, [j.id for j in queued], fx=ctx.planner_policy().fx, now=now)
        own = ctx.rates.own(s, [j.id for j in queued if j.epochs_done or j.preemptions], now)  # a job that ran
        avoid = ctx.offers.avoided(now)
        jobs, unreadable = [], []
        strategy = ctx.planner_policy().strategy
        for j in queued:
            try:
                spec = ctx.spec_of(j.id, j.spec_json)
                jobs.append(PlanJob(
                    id=j.id,
                    spec=_with_override(ctx, j.id, spec),
                    submitted_at=utc(j.submitted_at),
                    deadline_at=utc(j.deadline_at) if j.deadline_at else None,
                    epochs_done=j.epochs_done,
                    preemptions=j.preemptions,
                    restarts=j.restarts,
                    avoid=avoid,
                    spent=spent.get(j.id),
                    own_rates=own.get(j.id, ()),
                    # A job the rule will watch may run on spot as a stint (``PlanJob.stint``).
                    stint=steered(spec, strategy),
                ))
            except Exception as exc:  # noqa: BLE001 - one job's bad row stays with that job
                unreadable.append((j.id, exc))
        fleet = fleet_slots(ctx, s, now)
        measured = ctx.rates.get(s, now)  # observed epoch times replace the priors where we have them
        budgets = _team_budgets(ctx, s, now, {j.spec.team for j in jobs})
    for job_id, exc in unreadable:
        set_aside(ctx, now, report, job_id, f"its stored row cannot be read ({describe(exc)}); submit the job again",
                  fail=True, exc=exc)
    jobs = _rule_placements(ctx, now, jobs)
    offers = ctx.offers.offers(ctx.providers, now)
    try:
        ctx.market = market_for(offers, ctx.planner_policy(), ctx.market)
    except Exception:  # noqa: BLE001 - offers the planner cannot group fail inside plan() too, isolated there
        ctx.market = None
    decisions = _plan_isolated(ctx, now, report, jobs, offers, fleet, measured, budgets)
    by_id = {j.id: j for j in jobs}  # not a scan of the queue per decision: quadratic in a long queue
    for d in decisions:
        try:
            # A job refused by its deadline runs on on-demand where that can still help.
            d = fall_back(d, by_id[d.job_id], offers, now, ctx.planner_policy(), measured=measured,
                          team_budgets=budgets, market=ctx.market)
            _act(ctx, now, d, report)
        except Exception as exc:  # noqa: BLE001 - SimulatedCrash is a BaseException and still goes through
            set_aside(ctx, now, report, d.job_id, f"its plan could not be carried out ({describe(exc)})",
                      fail=False, exc=exc)
    return decisions


def _plan_isolated(ctx: TickContext, now: datetime, report: TickReport, jobs: list[PlanJob], offers: list,
                   fleet: list, measured: dict, budgets: dict[str, TeamBudget]) -> list[Decision]:
    """The planner's decisions for ``jobs``; when it fails, each job alone finds the ones it fails on.

    Those are held with the planner's error and the others are planned together again (they compete
    for the same machines, so they are planned as one batch, not one by one).
    """
    policy = ctx.planner_policy()
    try:
        return plan(jobs, offers, fleet, now, policy, measured=measured, team_budgets=budgets, market=ctx.market)
    except Exception:  # noqa: BLE001 - find the job it is about
        log.warning("plan_failed_isolating", jobs=len(jobs), exc_info=True)
    good = []
    for job in jobs:
        try:
            plan([job], offers, fleet, now, policy, measured=measured, team_budgets=budgets, market=ctx.market)
        except Exception as exc:  # noqa: BLE001
            set_aside(ctx, now, report, job.id, f"it could not be planned or priced ({describe(exc)})",
                      fail=False, exc=exc)
        else:
            good.append(job)
    return plan(good, offers, fleet, now, policy, measured=measured, team_budgets=budgets,
                market=ctx.market) if good else []


def _rule_placements(ctx: TickContext, now: datetime, jobs: list[PlanJob]) -> list[PlanJob]:
    """Training jobs waiting after a reclaim or a move: spot_rule says spot, on-demand or wait."""
    calls = place_waiting(ctx, now, jobs)
    if not calls:
        return jobs
    out = []
    for job in jobs:
        call = calls.get(job.id)
        if call is None:
            out.append(job)
        elif call.startswith("wait: "):
            with ctx.store.session() as s:
                row = s.get(JobRow, job.id)
                if row is not None and row.reason != call[6:]:
                    row.reason = call[6:]
                    add_event(s, now, "job_waiting", call[6:], job_id=job.id)
        else:
            out.append(job.model_copy(update={"spec": job.spec.with_capacity(call)}))
    return out


def _with_override(ctx: TickContext, job_id: str, spec: JobSpec) -> JobSpec:
    """A job the steering rule moved is planned on the capacity it was moved to."""
    capacity = ctx.capacity_override.get(job_id)
    if capacity is None:
        return spec
    return spec.with_capacity(capacity)


def _team_budgets(ctx: TickContext, s: Session, now: datetime, teams: set[str]) -> dict[str, TeamBudget]:
    """What is left of each queued team's monthly budget: the month's spend so far (running machines included)."""
    wanted = {t: b for t, b in ctx.settings.team_budgets.items() if t in teams}
    if not wanted:
        return {}
    spent: dict[str, Money] = {t: Money.zero(b.currency) for t, b in wanted.items()}
    for line in ledger.cost_lines(s, now.strftime("%Y-%m"), now):
        if line.team in spent:
            spent[line.team] = spent[line.team] + ctx.settings.fx.convert(
                Money(amount=line.amount, currency=line.currency), spent[line.team].currency)
    return {t: TeamBudget(monthly=b, left=b - spent[t]) for t, b in wanted.items()}


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
            set_job(job, J.failed, now, f"refused: {d.reason}")
            job.finished_at = now
            add_event(s, now, "job_refused", d.reason, job_id=job.id)
            log.info("job_refused", job=job.id, reason=d.reason)
            return
        choice = d.choice
        assert choice is not None
        job.attempt += 1
        target = ctx.capacity_override.pop(job.id, None)  # the move is made: later plans are free again
        if target is not None:
            ctx.capacity_moved[job.id] = (job.attempt, target)
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
        set_job(job, J.planned, now, d.reason)
        if choice.instance_id is not None:
            # Reuse a warm (or reserved, already running) machine: no boot, no image pull.
            row = s.get(InstanceRow, choice.instance_id)
            if row is None or I(row.state) is not I.running or row.job_id is not None:
                set_job(job, J.queued, now, "the warm machine chosen was taken; planning again")
                job.attempt -= 1
                s.expunge(attempt)
                return
            attempt.instance_id = row.id
            ledger.close_interval(s, row.id, now)
            row.job_id, row.idle_since = job.id, None
            row.team, row.project = job.team, job.project
            ledger.open_interval(s, row, kind="busy", job_id=job.id, team=job.team, project=job.project, at=now)
            set_job(job, J.provisioning, now)
            start_job_on(s, row, now)
            report.reused += 1
            add_event(s, now, "job_reused_instance", f"on warm {row.provider} {row.instance_type} {row.id}",
                      job_id=job.id, instance_id=row.id)
            return
        offer = _find_offer(ctx, now, offer_key)
        if offer is None:
            set_job(job, J.queued, now, f"offer {offer_key} disappeared; planning again")
            job.attempt -= 1
            s.expunge(attempt)
            return
        spec = JobSpec.model_validate(job.spec_json)
        reserved = choice.capacity is Capacity.reserved
        launch_cap = Capacity.on_demand if reserved else choice.capacity
        price = offer.price(launch_cap)
        od = offer.on_demand or price
        assert price is not None and od is not None
        # One intent per node, all in this offer (one zone): a gang is launched whole or not at all.
        # Node 0 carries the attempt's token, so a single-node job writes exactly what it always did.
        rows = [
            InstanceRow(
                id=new_id("inst", ctx.ids),
                provider=offer.provider,
                region=offer.region,
                zone=offer.zone,
                instance_type=offer.instance_type,
                gpu=offer.gpu,
                gpu_count=offer.gpu_count,
                capacity=launch_cap.value,
                reserved=reserved,
                client_token=gang.node_token(job.id, job.attempt, node),
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
                idle_window="learned" if spec.policy.idle_stop_minutes is None
                and ctx.settings.idle_warm == "learned" else "fixed",
                created_at=now,
            )
            for node in range(spec.resources.nodes)
        ]
        assert rows[0].client_token == attempt.client_token
        s.add_all(rows)
        s.flush()
        attempt.instance_id = rows[0].id  # node 0: rank 0, the node that reports progress
        set_job(job, J.provisioning, now)
        for row in rows:
            add_event(s, now, "launch_intent", f"{launch_cap.value}{' (reserved)' if reserved else ''} "
                      f"{offer.key} token {row.client_token}", job_id=job.id, instance_id=row.id)
        row_ids = [row.id for row in rows]
    ctx.crashpoint("after_intent")
    for row_id in row_ids:
        if _launch(ctx, now, row_id, report) != "launched":
            break  # refused: the gang was given up; uncertain: the next tick re-issues the rest


def _user_data(ctx: TickContext, row: InstanceRow, attempt: AttemptRow, offer: Offer) -> str:
    """Bootstrap for the machine's long-lived agent, with a token for this instance row. Issued as
    of the attempt's creation, so a re-issued launch sends byte-identical parameters (clouds
    reject a reused client token with different ones). Without an API token (demo, tests) there
    is no agent API. The agent asks the daemon for its work (a gang node learns its rank there),
    so a warm machine's next job needs none of this again. A machine that runs a real agent installs
    the daemon's own wheel (``ctx.agent_package``); the daemon does not start without one."""
    token = ctx.settings.api_token
    if token is None:
        return ""
    if ctx.agent_package is None and boots_real_machines(ctx.settings):
        raise SettingsError("no agent wheel is configured: a machine launched now could not install gpusched",
                            fix=WHEEL_FIX)
    return user_data_for(ctx.settings.agent_api_url or ctx.settings.base_url, token.get_secret_value(), row.id,
                         utc(attempt.created_at), attempt.est_hours or 1.0, package=ctx.agent_package,
                         gpu=offer.gpu, gpu_count=offer.gpu_count, cloud=offer.provider)


def _find_offer(ctx: TickContext, now: datetime, key: str) -> Offer | None:
    return ctx.offers.find(ctx.providers, now, key)


# The cloud said no and created nothing: give the offer up for a while and plan again.
_REFUSED = (NoCapacity, QuotaExceeded, BillingStopped, InvalidRequest)


def _launch(ctx: TickContext, now: datetime, row_id: str, report: TickReport) -> Outcome:
    """Call the cloud for a committed intent; record the outcome."""
    with ctx.store.session() as s:
        row = s.get(InstanceRow, row_id)
        assert row is not None
        job = s.get(JobRow, row.job_id) if row.job_id else None
        attempt = current_attempt(s, row.job_id) if row.job_id else None
        offer = _find_offer(ctx, now, f"{row.provider}/{row.region}/{row.zone}/{row.instance_type}")
        if offer is None or job is None or attempt is None:
            return "skipped"
        node = gang.node_of(row.client_token)
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
            name=f"gpusched-{job.name}-a{attempt.number}{f'-n{node}' if node else ''}"[:63],
            user_data=_user_data(ctx, row, attempt, offer),
            # The intent's own time, stored with its token: a re-issued launch sends what the first did.
            requested_at=utc(row.created_at),
        )
    provider = ctx.providers[row.provider]
    try:
        launched = cloud_call(ctx, now, report, lambda: provider.launch(request), event="launch_uncertain",
                              label=f"launch {row_id}", refused=_REFUSED, instance=row_id)
    except _REFUSED as exc:
        # The cloud refused: nothing was created. Avoid this offer for a while; plan again.
        ctx.offers.avoid(offer, request.capacity, now)
        report.launch_failures += 1
        log.info("launch_refused", instance=row_id, offer=offer.key, capacity=request.capacity.value,
                 **exc.log_fields())
        with ctx.store.session() as s:
            row = s.get(InstanceRow, row_id)
            job = s.get(JobRow, row.job_id)
            attempt = current_attempt(s, job.id)
            set_instance(row, I.terminated)
            row.terminated_at, row.job_id, row.reason = now, None, f"launch refused: {exc.message}"
            attempt.state = move(ATTEMPT_MOVES, A(attempt.state), A.launch_failed, "attempt")
            attempt.ended_at, attempt.reason = now, exc.message
            if J(job.state) is J.provisioning:
                set_job(job, J.queued, now,
                         f"{offer.provider} {offer.zone} {offer.instance_type} {request.capacity.value}: "
                         f"{type(exc).__name__} ({exc.code or exc.message}); trying the next offer")
            add_event(s, now, "launch_refused", f"{type(exc).__name__}: {exc.message}",
                      job_id=job.id, instance_id=row_id)
            # All or none: the gang's other nodes are let go in this same transaction (idle,
            # so even a crash right after leaves them to the reaper), then terminated below.
            released = [(r.id, r.cloud_id) for r in release_nodes(s, job, attempt, now)]
        _terminate_released(ctx, now, row.provider, row.region, released, report)
        return "refused"
    if not launched.ok:
        return "uncertain"  # outcome unknown (throttled, unreachable): keep the intent; the next tick re-issues it
    inst = launched.value
    assert inst is not None
    ctx.crashpoint("after_launch")
    with ctx.store.session() as s:
        row = s.get(InstanceRow, row_id)
        row.cloud_id = inst.ref.instance_id
        # When the answer came, not when the tick began: a long tick's late launches reach the cloud's
        # listings that much later, and the grace before "vanished" must not have run out by then.
        row.last_seen_at = ctx.clock.now()
        if I(row.state) is I.requested:
            target = I.running if inst.state is InstanceState.running else I.pending
            set_instance(row, target)
            if target is I.running or bills_boot(ctx.providers.get(row.provider)):
                open_billing(s, row, now)  # else when reconcile first sees it running: the boot is free
            if target is I.running:
                row.running_at = now
                start_job_on(s, row, now)
        add_event(s, now, "launched", f"{row.provider} {inst.ref.instance_id} ({row.capacity})",
                  job_id=row.job_id, instance_id=row.id)
    report.launched += 1
    log.info("launched", instance=row_id, cloud_id=inst.ref.instance_id, provider=row.provider,
             type=row.instance_type, capacity=row.capacity)
    return "launched"


def _terminate_released(ctx: TickContext, now: datetime, provider_name: str, region: str,
                        released: list[tuple[str, str | None]], report: TickReport) -> None:
    """Terminate the nodes of a gang that could not be launched whole.

    The rows are already idle. One whose launch never got an answer (no cloud id yet) stays
    so: found by its tags it is an idle machine the reaper stops, and otherwise the
    write-ahead sweep drops it. A failed terminate leaves the node idle for the reaper too.
    The row turns ``terminated`` only when reconcile sees the cloud confirm it.
    """
    provider = ctx.providers[provider_name]
    for row_id, cloud_id in released:
        if cloud_id is None:
            continue
        ref = InstanceRef(provider=provider_name, region=region, instance_id=cloud_id)
        if not cloud_call(ctx, now, report, lambda ref=ref: provider.terminate(ref), event="gang_release_failed",
                          label=f"gang release {row_id}", instance=row_id).ok:
            continue
        with ctx.store.session() as s:
            row = s.get(InstanceRow, row_id)
            if row is None or row.job_id is not None or I(row.state) not in (I.pending, I.running, I.requested):
                continue  # taken or gone meanwhile
            ledger.close_interval(s, row.id, now)
            set_instance(row, I.terminating)
            row.reason = "released: another node of its gang could not be launched"
            add_event(s, now, "gang_released", row.reason, instance_id=row.id)
        log.info("gang_node_terminated", instance=row_id, cloud_id=cloud_id)
