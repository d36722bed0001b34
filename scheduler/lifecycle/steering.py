"""Mid-job capacity steering: the spot-under-deadline rule applied to running training jobs.

Each tick, every running training job with a deadline (capacity ``auto``) is put
to ``spot_rule.decide`` — the same pure function the trace benchmark replays —
with what the daemon knows: its progress, its deadline, the changeover delay
(boot + restart + half an epoch), the offer's price ratio and how spot has
looked for it so far. When the rule says move (spot -> on-demand because the
job fell behind, or on-demand -> spot because spot has been there long enough
and the slack pays for the trip), the move happens right after a checkpoint:
the machine is released and the job is planned again on the target capacity,
resuming from that checkpoint. A move is not a preemption and does not count
against ``max_restarts``; but no move goes to spot once the planner has taken the
job off it (``planner.spot_allowed``), or the two would pass it back and forth
until its reclaims outran ``max_restarts``, nor any that the planner, asked first,
would not place on spot (the rule weighs slack without the planner's safety margin).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog
from sqlalchemy import select
from sqlalchemy.orm import Session

from providers.base import InstanceRef
from scheduler.accounting import ledger
from scheduler.jobs import perf
from scheduler.lifecycle.context import TickContext, TickReport, cloud_call
from scheduler.lifecycle.transitions import set_instance, set_job
from scheduler.models import Capacity, JobSpec, Kind, Offer, Stock
from scheduler.planner.book import market_for
from scheduler.planner.cost import changeover_hours
from scheduler.planner.inputs import Measured, OwnRates, PlanJob, own_first
from scheduler.planner.plan import plan, spot_allowed
from scheduler.planner.spot_rule import (
    GUARD,
    KEEP_SPOT,
    RuleDecision,
    RuleInput,
    SpotState,
    decide,
    decide_all,
)
from scheduler.states import (
    ATTEMPT_MOVES,
    AttemptState,
    InstanceRowState,
    JobState,
    move,
)
from scheduler.store.database import add_event
from scheduler.store.tables import AttemptRow, InstanceRow, JobRow
from scheduler.times import utc

log = structlog.get_logger("gpusched.steer")


@dataclass
class SpotWatch:
    """How spot has looked for one job's offer since the daemon began watching it."""

    since: datetime
    last: datetime
    available: bool
    seen_h: float = 0.0
    spells: int = 0
    run_h: float = 0.0  # how long the current state (available or not) has lasted
    # The wait until the next decision that a move off spot allowed for (``next_decision_h``).
    left_spot_tick_h: float = 0.0
    # When the rule must be asked about the job again (``look_again_by``) and the attempt that was worked out for:
    # later ticks of that attempt, with less slack left, would put it no sooner, so it stands until it passes.
    look_again_at: tuple[int, datetime] | None = None

    def update(self, now: datetime, available: bool) -> None:
        dt = max(0.0, (now - self.last).total_seconds() / 3600)
        if self.available:
            self.seen_h += dt
        self.run_h = self.run_h + dt if available == self.available else 0.0
        if available and not self.available:
            self.spells += 1
        self.available, self.last = available, now


def next_decision_h(window_h: float, state: SpotState, watch: SpotWatch) -> float:
    """The rule's ``tick_h``: how long until it is asked again, forecast as this tick's window.

    Off spot, never less than the window the job's last move off spot allowed for. Slack does not
    grow off spot, so with the same allowance the rule keeps the job where the move put it; a
    shorter forecast one tick later (ticks come unevenly: the simulator's jump from event to
    event, a daemon that was busy) would lower both floors below the slack and send the job
    straight back to spot, with less slack than the move found too little.
    """
    return window_h if state is SpotState.spot else max(window_h, watch.left_spot_tick_h)


def _window_h(ctx: TickContext, now: datetime) -> float:
    since_last = (now - ctx.last_tick_at).total_seconds() if ctx.last_tick_at else 0.0
    return max(ctx.settings.tick_seconds, since_last) / 3600


def _observe(
    ctx: TickContext, job_id: str, offer: Offer, avoided: frozenset[str], now: datetime
) -> tuple[SpotWatch, bool]:
    """Record how spot looks for the job's offer now (every tick; a second call in a tick adds nothing)."""
    market = offer.spot_stock is not Stock.sold_out and f"{offer.key}|spot" not in avoided
    watch = ctx.spot_watch.get(job_id)
    if watch is None:
        watch = ctx.spot_watch[job_id] = SpotWatch(since=now, last=now, available=market)
    watch.update(now, market)
    return watch, market


def _rule_input(ctx: TickContext, job: JobRow, spec: JobSpec, offer: Offer, state: SpotState,
                avoided: frozenset[str], window_h: float, now: datetime, measured: Measured) -> RuleInput | None:
    """What the daemon knows about one job for ``spot_rule.decide``; None when the rule does not apply.

    ``job`` needs ``id``, ``epochs_done``, ``submitted_at`` and ``deadline_at`` (a row or a result tuple).
    ``measured``: the learned training rates the planner is given (``ctx.rates``). The rule times its
    moves on the same epoch time the planner plans the move with: from the priors alone, a job that
    runs slower than its prior looked to have slack the planner did not see, so the rule asked for
    spot the planner then refused, or moved it to on-demand too late for its deadline. Both read the
    job's own rates first (``planner.inputs.own_first``), where its earlier epochs taught some."""
    if offer.spot is None or offer.on_demand is None or spec.train is None:
        return None
    est = perf.estimate(spec, offer.gpu, offer.gpu_count, offer.vcpus, epochs_done=0, measured=measured)
    if not est.epoch_hours:
        return None
    watch, market = _observe(ctx, job.id, offer, avoided, now)
    fx = ctx.settings.fx
    price_k = float(fx.convert(offer.on_demand.per_hour, "CNY").amount / fx.convert(offer.spot.per_hour, "CNY").amount)
    policy = ctx.planner_policy()
    observed = (now - watch.since).total_seconds() / 3600
    return RuleInput(
        state=state,
        compute_h=spec.train.epochs * est.epoch_hours,
        progress_h=job.epochs_done * est.epoch_hours,
        elapsed_h=max(0.0, (now - utc(job.submitted_at)).total_seconds() / 3600),
        remaining_h=(utc(job.deadline_at) - now).total_seconds() / 3600,
        changeover_h=changeover_hours(policy.boot_hours, policy.restart_hours, est.epoch_hours),
        spot_available=True if state is SpotState.spot else market,
        price_ratio_k=price_k,
        tick_h=next_decision_h(window_h, state, watch),
        observed_h=observed,
        spot_seen_h=min(watch.seen_h, observed),
        spot_spells=watch.spells,
        outage_h=0.0 if market else watch.run_h,
        spell_h=watch.run_h if market else 0.0,
    )


def steered(spec: JobSpec, strategy: str) -> bool:
    """Whether the rule watches this job once it runs (training with a deadline, capacity ``auto``, one node,
    our strategy): the planner may then start it on spot as a stint (``PlanJob.stint``)."""
    return (strategy == "gpusched" and spec.kind is Kind.train and spec.policy.deadline is not None
            and spec.policy.capacity == "auto" and spec.resources.nodes == 1)


def place_waiting(ctx: TickContext, now: datetime, jobs: list) -> dict[str, str]:
    """The rule's call for a training job waiting after a reclaim or a move (state idle):
    returns job id -> "spot" / "on-demand" / "wait: <reason>". Only jobs that already ran, with a
    deadline and capacity auto; the planner places everything else."""
    strategy = ctx.planner_policy().strategy
    if strategy != "gpusched":
        return {}
    offers = ctx.offers.by_key(ctx.providers, now)
    avoided = ctx.offers.avoided(now)
    out: dict[str, str] = {}
    with ctx.store.session(write=False) as s:
        measured = ctx.rates.get(s, now)  # the planner's rates this tick (the same memo)
        for pj in jobs:
            if pj.id in ctx.capacity_override or not steered(pj.spec, strategy):
                continue
            job = s.get(JobRow, pj.id)
            last = s.scalars(select(AttemptRow).where(AttemptRow.job_id == pj.id)
                             .order_by(AttemptRow.number.desc()).limit(1)).first()
            if job is None or last is None or not (job.epochs_done or job.preemptions):
                continue
            if not spot_allowed(job.preemptions, pj.spec.policy.max_restarts, ctx.planner_policy(), job.restarts):
                continue  # reclaimed too often: the planner's on-demand fall-back keeps max_restarts safe
            offer = offers.get(f"{last.provider}/{last.region}/{last.zone}/{last.instance_type}")
            inp = _rule_input(ctx, job, pj.spec, offer, SpotState.idle, avoided, _window_h(ctx, now), now,
                              own_first(measured, pj.own_rates)) if offer is not None else None
            if inp is None or inp.progress_h >= inp.compute_h:
                # Every epoch was checkpointed but the machine went before the exit was reported:
                # the planner relaunches it to finish (final validation), the rule has nothing to weigh.
                continue
            d = decide(inp)
            if d.target is SpotState.on_demand and _planner_takes_spot(ctx, s, job, pj.spec, now, measured, avoided,
                                                                       pj.own_rates):
                # The rule weighed the machine the job was on; another one on spot meets the deadline as a
                # stint the rule watches, so the planner chooses, not a move to on-demand.
                continue
            out[pj.id] = {SpotState.spot: "spot", SpotState.on_demand: "on-demand"}.get(d.target, f"wait: {d.reason}")
    return out


# Asked every tick: built once (``scheduler.store.database``, "Statements built once").
_STEERED = (
    select(JobRow.id, JobRow.spec_json, JobRow.epochs_done, JobRow.submitted_at, JobRow.deadline_at,
           JobRow.updated_at, JobRow.preemptions, JobRow.restarts, AttemptRow.number, AttemptRow.start_epoch,
           InstanceRow.id.label("inst_id"), InstanceRow.provider,
           InstanceRow.region, InstanceRow.zone, InstanceRow.instance_type, InstanceRow.capacity)
    .join(AttemptRow, (AttemptRow.job_id == JobRow.id) & (AttemptRow.number == JobRow.attempt))
    .join(InstanceRow, InstanceRow.id == AttemptRow.instance_id)
    .where(JobRow.state == JobState.running.value, JobRow.kind == Kind.train.value,
           JobRow.deadline_at.is_not(None), AttemptRow.state == AttemptState.running.value,
           InstanceRow.state == InstanceRowState.running.value, InstanceRow.reserved.is_(False))
)


def steer(ctx: TickContext, now: datetime, report: TickReport) -> None:
    ctx.look_again_by = None
    if ctx.planner_policy().strategy != "gpusched":
        return  # the simulator's baselines do not steer
    offers = ctx.offers.by_key(ctx.providers, now)
    avoided = ctx.offers.avoided(now)
    window_h, policy = _window_h(ctx, now), ctx.planner_policy()
    with ctx.store.session(write=False) as s:
        # Columns, not rows: every running training job is looked at on every tick.
        rows = s.execute(_STEERED).all()
        # The planner's rates (the same memo, refreshed on the same terms); read only when a job runs.
        measured = ctx.rates.get(s, now) if rows else {}
        looked_at = []  # (job, spec, offer, on spot, decided on now): the jobs the rule is asked about this tick
        for job in rows:
            spec = ctx.spec_of(job.id, job.spec_json)
            if not steered(spec, policy.strategy):  # training with a deadline, by the query; auto, one node
                continue
            moved = ctx.capacity_moved.get(job.id)
            if moved is not None and moved[0] == job.number and moved[1] != job.capacity:
                continue  # a move the planner could not honour: do not ping-pong, stay put this attempt
            offer = offers.get(f"{job.provider}/{job.region}/{job.zone}/{job.instance_type}")
            if offer is None or offer.spot is None or offer.on_demand is None:
                continue
            watch, _ = _observe(ctx, job.id, offer, avoided, now)
            # A move happens only right after a checkpoint, losing no work: decide then. The others are asked
            # too, for when the rule must look at them again (``look_again_by``), once that time has come.
            decide_now = _just_checkpointed(job, now, window_h)
            if not decide_now and watch.look_again_at is not None:
                attempt, at = watch.look_again_at
                if attempt == job.number and at > now:
                    _ask_again_at(ctx, at)
                    continue
            looked_at.append((job, spec, offer, job.capacity == Capacity.spot.value, decide_now))
        # Their own rates, in one read (from the memo's samples: no query on SQLite): the rule weighs a job on its
        # own epochs where they have timed it, and looks at it again sooner where they have not.
        own_of = ctx.rates.own(s, [job.id for job, *_ in looked_at], now) if looked_at else {}
        asked = []  # (job, spec, on spot, its own rates, the rule's input, offer): decided on together below
        watched = []  # the same for the jobs not decided on this tick: only when to look at them again
        for job, spec, offer, on_spot, decide_now in looked_at:
            own = own_of.get(job.id, ())
            inp = _rule_input(ctx, job, spec, offer, SpotState.spot if on_spot else SpotState.on_demand,
                              avoided, window_h, now, own_first(measured, own))
            if inp is not None:
                (asked if decide_now else watched).append((job, spec, on_spot, own, inp, offer))
        decisions = decide_all([inp for *_, inp, _ in asked])
        for (job, spec, _, own, inp, offer), decision in zip([*asked, *watched],
                                                          [*decisions, *decide_all([inp for *_, inp, _ in watched])],
                                                          strict=True):
            _ask_again(ctx, job, spec, now, inp, decision, speed_known=any(rate[1] == offer.gpu for rate in own),
                       offer=offer, measured=measured)
        moves = []
        for (job, spec, on_spot, own, inp, _), decision in zip(asked, decisions, strict=True):
            target = decision.target
            if target is SpotState.idle:
                target = SpotState.spot  # leave on-demand and wait for spot: the planner waits while it is gone
            if (target is SpotState.spot) == on_spot:
                continue
            if target is SpotState.spot and not spot_allowed(job.preemptions, spec.policy.max_restarts, policy,
                                                             job.restarts):
                continue  # the planner took it off spot to keep max_restarts safe: moving back undoes that
            if target is SpotState.spot and not _planner_takes_spot(ctx, s, job, spec, now, measured, avoided, own):
                continue  # the planner would send it straight back to on-demand: a changeover for nothing
            if on_spot and decision.branch == GUARD.name and _on_time_later_on_demand(
                    ctx, s, job, spec, now, measured, avoided, own, inp):
                continue  # the rule weighed this machine on on-demand; a faster one is on time after another tick
            if on_spot:
                ctx.spot_watch[job.id].left_spot_tick_h = inp.tick_h
            moves.append((job.id, job.inst_id, target, decision.reason))
    for job_id, inst_id, target, reason in moves:
        _move(ctx, now, job_id, inst_id, target, reason, report)


def look_again_by(now: datetime, last_checkpoint: datetime, inp: RuleInput, decision: RuleDecision, epoch_h: float,
                  tick_h: float, *, speed_known: bool) -> datetime:
    """The latest moment the rule must be asked about a job again for its next decision to be the one it would be
    if it were asked every tick (``tick_h``: the daemon's own interval).

    The rule decides right after a checkpoint (a move then loses no work), so by default: when the next one is due
    (the last one and an epoch; once that has passed, for a job slower than its estimate, every tenth of an epoch:
    the daemon sees the checkpoint within a tick, a simulation within that). On spot with room to spare it may wait
    longer: the rule keeps the job there while the slack covers a changeover, the margin and the wait until it is
    asked again, which it forecasts as the wait before (``RuleInput.tick_h``); asked again within half the slack
    beyond the changeover and the margin (a tick less), a job that got nowhere meanwhile (slack spent an hour an
    hour, the worst case) still has the slack for that wait. Only once the job's own epochs have timed it on this
    GPU (``speed_known``: its own rate, from two reports): before that, its next reports replace the estimate the
    slack was worked out on, and a job slower than it has less slack than it seemed (the daemon hears of each epoch
    within a tick; a simulation that jumped an hour heard of eleven in one report, one sample, and timed the job
    only an hour later still). The daemon asks every tick anyway; a simulation, which jumps from event to event,
    must not jump past this."""
    if decision.branch == KEEP_SPOT.name and speed_known:
        free_h = inp.remaining_h - max(inp.compute_h - inp.progress_h, 0.0) - inp.changeover_h - inp.margin_h
        wait_h = (free_h - tick_h) / 2  # a tick short of half: the rule's test is not decided by a rounding
        if wait_h > tick_h:
            return now + timedelta(hours=wait_h)
    due = last_checkpoint + timedelta(hours=epoch_h)
    if due > now:
        return max(now + timedelta(hours=tick_h), due)
    return now + timedelta(hours=max(tick_h, epoch_h / 10))


def _ask_again(ctx: TickContext, job, spec: JobSpec, now: datetime, inp: RuleInput, decision: RuleDecision, *,
               speed_known: bool, offer: Offer, measured: Measured) -> None:
    """The job's ``look_again_by``, kept on its watch and in ``ctx.look_again_by`` where it is the tick's earliest.
    ``spec`` has a ``train`` section: ``_rule_input`` makes no input for a job without one. An attempt that has
    reported no epoch yet checkpoints first after its setup (the image, the data, the weights) and an epoch."""
    assert spec.train is not None
    last = utc(job.updated_at)
    if job.epochs_done <= job.start_epoch:
        last += timedelta(hours=perf.estimate(spec, offer.gpu, offer.gpu_count, offer.vcpus, epochs_done=0,
                                              measured=measured).setup_hours)
    at = look_again_by(now, last, inp, decision, inp.compute_h / spec.train.epochs,
                       ctx.settings.tick_seconds / 3600, speed_known=speed_known)
    ctx.spot_watch[job.id].look_again_at = (job.number, at)
    _ask_again_at(ctx, at)


def _ask_again_at(ctx: TickContext, at: datetime) -> None:
    if ctx.look_again_by is None or at < ctx.look_again_by:
        ctx.look_again_by = at


def _just_checkpointed(job, now: datetime, window_h: float) -> bool:
    """Did the job report an epoch (and so upload its checkpoint) since the last tick?"""
    return (now - utc(job.updated_at)).total_seconds() / 3600 <= window_h


def _planner_takes_spot(ctx: TickContext, s: Session, job, spec: JobSpec, now: datetime,
                        measured: Measured, avoided: frozenset[str], own: OwnRates = ()) -> bool:
    """Whether the planner, asked now, would put the job on spot from its last checkpoint, as a stint the rule
    watches (``PlanJob.stint``: on time through its expected reclaims with room to move to on-demand within
    the margin, or completed by that move to the fastest on-demand machine).

    The rule weighs the slack without the planner's safety margin; a job it moves to spot that the planner
    will not place there is relaunched on on-demand at once, after losing a boot and half an epoch (and once
    a move is not honoured, the rule leaves the job alone for that attempt)."""
    return _planner_launches(ctx, s, job, spec, Capacity.spot, now, now, measured, avoided, own)


def _on_time_later_on_demand(ctx: TickContext, s: Session, job, spec: JobSpec, now: datetime, measured: Measured,
                             avoided: frozenset[str], own: OwnRates, inp: RuleInput) -> bool:
    """Whether the planner, asked after one more decision and a changeover from now (reclaimed at once, the job
    would lose those and no epoch: it just checkpointed), would still launch it on on-demand within the deadline's
    safety margin.

    The rule's guard weighs the machine the job is on, on on-demand; a stint on a slow, cheap spot machine has
    its way out on a faster one (the planner chooses the move's machine), so the guard alone gave up spot
    hours before the deadline needed it. The question is asked only when the guard fires."""
    later = now + timedelta(hours=inp.tick_h + inp.changeover_h - ctx.planner_policy().boot_hours)  # plan adds it
    return _planner_launches(ctx, s, job, spec, Capacity.on_demand, now, later, measured, avoided, own)


def _planner_launches(ctx: TickContext, s: Session, job, spec: JobSpec, capacity: Capacity, now: datetime,
                      at: datetime, measured: Measured, avoided: frozenset[str], own: OwnRates) -> bool:
    """Whether the planner, asked as of ``at`` to place the running job ``job`` (a row's columns) alone on
    ``capacity`` from its last checkpoint, would launch it there (on spot, as a stint). The offers' grouping
    it builds, if any, is kept for the tick's own plan (``ctx.market``)."""
    policy = ctx.planner_policy()
    spent = ledger.spent_by_job(s, [job.id], fx=policy.fx, now=now).get(job.id)
    pj = PlanJob(id=job.id, spec=spec.with_capacity(capacity.value), submitted_at=utc(job.submitted_at),
                 deadline_at=utc(job.deadline_at), epochs_done=job.epochs_done, preemptions=job.preemptions,
                 restarts=job.restarts, avoid=avoided, spent=spent, own_rates=own, stint=capacity is Capacity.spot)
    offers = ctx.offers.offers(ctx.providers, now)
    ctx.market = market_for(offers, policy, ctx.market)
    [d] = plan([pj], offers, [], at, policy, measured=measured, market=ctx.market)
    return d.action == "launch" and d.choice is not None and d.choice.capacity is capacity


def _move(ctx: TickContext, now: datetime, job_id: str, inst_id: str, target: SpotState, reason: str,
          report: TickReport) -> None:
    with ctx.store.session(write=False) as s:
        inst = s.get(InstanceRow, inst_id)
        ref = InstanceRef(provider=inst.provider, region=inst.region, instance_id=inst.cloud_id or "")
    provider = ctx.providers[ref.provider]
    if not cloud_call(ctx, now, report, lambda: provider.terminate(ref), event="steer_release_failed",
                      label=f"steer release {job_id}", logger=log, job=job_id).ok:
        return
    capacity = Capacity.spot if target is SpotState.spot else Capacity.on_demand
    with ctx.store.session() as s:
        job, inst = s.get(JobRow, job_id), s.get(InstanceRow, inst_id)
        attempt = s.scalars(
            select(AttemptRow).where(AttemptRow.job_id == job_id, AttemptRow.number == job.attempt)).one()
        ledger.close_interval(s, inst.id, now)
        set_instance(inst, InstanceRowState.terminating)
        inst.job_id, inst.reason = None, f"released: job moved to {capacity.value}"
        attempt.state = move(ATTEMPT_MOVES, AttemptState(attempt.state), AttemptState.preempted, "attempt")
        attempt.ended_at, attempt.end_epoch = now, job.epochs_done
        attempt.reason = f"moved to {capacity.value}: {reason}"
        set_job(job, JobState.preempted, now)
        set_job(job, JobState.queued, now, f"moving to {capacity.value} at epoch {job.epochs_done}: {reason}")
        add_event(s, now, "capacity_move", f"{attempt.capacity} -> {capacity.value}: {reason}",
                  job_id=job_id, instance_id=inst_id)
    ctx.capacity_override[job_id] = capacity.value

    report.moved += 1
    log.info("capacity_move", job=job_id, to=capacity.value, reason=reason)
