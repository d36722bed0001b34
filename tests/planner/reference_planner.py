"""A slow, obviously-right planner, written from the rules ``scheduler/planner/plan.py`` documents.

Tests only (``test_reference_planner`` checks the real planner against it). It
depends on the planner's public inputs and on the physics the planner uses
(``perf.figures``, ``FxRates``, ``Money``), never on its ranking code: every
candidate is built, priced and checked one by one, put in one list, and sorted
by one key. No heaps, no groups of offers that share a price, no caches, no
laziness. Where the rule comes from, a comment says so: "plan.py" is the module
docstring of ``scheduler/planner/plan.py`` unless a function is named (its cost
model section moves, in the same words, to ``scheduler/planner/cost.py``'s
docstring in the planner refactor); "rank.py" is the module docstring of
``scheduler/planner/rank.py`` (the ranking order and its tie-breaks).

What it returns is plain data (``RefOption``, ``RefDecision``), not ``Option`` /
``Decision`` (the texts of reasons are not reproduced; the blockers are, by kind).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

from scheduler.errors import UserError
from scheduler.jobs.perf import figures
from scheduler.models import Capacity, Kind, Offer, Stock
from scheduler.money import Money
from scheduler.planner.cost import stint_leg
from scheduler.planner.inputs import FleetSlot, Measured, PlanJob, PlannerPolicy, TeamBudget
from scheduler.planner.plan import MAX_ALTERNATIVES, SPARE_RESTARTS

CENT = Decimal("0.01")
TRANSIENT = ("stock", "avoid", "taken")  # plan.py: waiting may clear these; every other blocker is structural
SPOT, ON_DEMAND, RESERVED = Capacity.spot, Capacity.on_demand, Capacity.reserved


@dataclass
class RefOption:
    """One candidate for one job: an offer with a capacity, or one fleet slot."""

    provider: str
    region: str
    zone: str
    instance_type: str
    gpu: str
    gpu_count: int
    capacity: Capacity
    source: str  # "new", "warm" or "reserved"
    instance_id: str | None
    seq: int  # input order, the last tie-break (rank.py: "offers, then canonical fleet slots")
    slot: int | None  # index into the canonical fleet; None for a new machine
    offer: Offer = field(repr=False, compare=False)  # the offer, or the slot's offer
    est_hours: float = 0.0  # rounded to 4 places, as an Option shows them
    expected_interruptions: float = 0.0  # rounded to 4 places
    price_per_hour: Money | None = None  # all nodes, policy currency
    est_cost: Money | None = None  # policy currency, to the cent
    finish_by: datetime | None = None
    worst_finish: datetime | None = None  # spot: the finish of a bad run (see ``score``)
    way_out: datetime | None = None  # a spot stint: the uninterrupted finish plus a move to on-demand
    moved: bool = False  # a spot stint late on its own setup, completed by a move to on-demand (priced with it)
    physical_batch: int | None = None
    blockers: list[str] = field(default_factory=list)  # kinds, in no particular order
    held_by: str | None = None  # the job a held fleet slot went to

    @property
    def rank(self) -> int:
        """rank.py: 0 feasible, 1 only transient blockers, 2 other blockers, 3 memory / estimate blockers."""
        if "memory" in self.blockers or "estimate" in self.blockers:
            return 3
        if any(b not in TRANSIENT for b in self.blockers):
            return 2
        if self.blockers:
            return 1
        return 0

    @property
    def feasible(self) -> bool:
        return not self.blockers

    @property
    def shape(self) -> tuple:
        """What runners-up show once (plan.plan: "one zone per instance type and capacity")."""
        return (self.provider, self.region, self.instance_type, self.capacity, self.source, self.instance_id)

    def sort_key(self) -> tuple:
        """plan.py, "Choice": reserved capacity first, then the lowest expected cost, a warm machine winning
        a tie, then the earliest finish. rank.py spells out the rest: feasibility rank first, then the
        candidate's identity (provider, region, zone, type, capacity, source, instance, gpu, count), then
        input order for exact ties."""
        assert self.est_cost is not None
        return (
            self.rank,
            self.capacity is not RESERVED,
            self.est_cost.amount,
            self.source != "warm",
            self.finish_by,
            self.provider,
            self.region,
            self.zone,
            self.instance_type,
            self.capacity.value,
            self.source,
            self.instance_id or "",
            self.gpu,
            self.gpu_count,
            self.seq,
        )


@dataclass
class RefDecision:
    job_id: str
    action: str  # launch, reuse, wait, refuse
    choice: RefOption | None
    alternatives: list[RefOption]
    options: list[RefOption]  # every candidate, best first
    team_blocked: bool = False  # the team's monthly budget turned a launch / reuse into a wait or a refusal


# --- which capacities a job may use ----------------------------------------------------------


def may_use_spot(preemptions: int, max_restarts: int, policy: PlannerPolicy) -> bool:
    """plan.py: "A job leaves spot when one more reclaim would leave it no restart to spare under its
    max_restarts, or once it has been preempted max_preemptions_before_on_demand times where that cap is
    set" (plan.spot_allowed: SPARE_RESTARTS restarts are kept spare)."""
    cap = policy.max_preemptions_before_on_demand
    if cap is not None and preemptions >= cap:
        return False
    restarts_left_after_one_more_reclaim = max_restarts - (preemptions + 1)
    return restarts_left_after_one_more_reclaim >= SPARE_RESTARTS


def allowed_capacities(job: PlanJob, policy: PlannerPolicy) -> set[Capacity]:
    """The capacities the job's file and the strategy allow.

    inputs.PlannerPolicy.strategy: the "on-demand" baseline runs everything on-demand; "spot-greedy" and
    "skypilot-like" take spot, whatever the job file says. plan.py: a spot-only job keeps spot after
    preemptions ("unless its job file asks for spot only: that choice stands")."""
    if policy.strategy == "on-demand":
        return {ON_DEMAND}
    if policy.strategy in ("spot-greedy", "skypilot-like"):
        return {SPOT}
    wanted = job.spec.policy.capacity
    if wanted == "spot":
        return {SPOT}
    if wanted == "on-demand":
        return {ON_DEMAND}
    if wanted == "reserved":
        return {RESERVED}
    if may_use_spot(job.preemptions, job.spec.policy.max_restarts, policy):
        return {SPOT, ON_DEMAND, RESERVED}
    return {ON_DEMAND, RESERVED}


def job_allows(job: PlanJob, offer: Offer, capacity: Capacity, allowed: set[Capacity]) -> bool:
    """plan.py: "every candidate ... that the job's own filters allow" (GPU models, GPU count exactly,
    providers, regions, capacity)."""
    res, where = job.spec.resources, job.spec.where
    return (
        capacity in allowed
        and (res.gpus is None or offer.gpu in res.gpus)
        and offer.gpu_count == res.gpu_count
        and (where.providers is None or offer.provider in where.providers)
        and (where.regions is None or offer.region in where.regions)
    )


# --- the candidates ---------------------------------------------------------------------------


def canonical_fleet(fleet: Sequence[FleetSlot]) -> list[FleetSlot]:
    """Fleet slots in a fixed order, so that the input order never matters (plan.py: "The same inputs give
    the same output, whatever order the jobs, offers and fleet slots come in"); identical slots that differ
    only in their commitment's end go earliest end first."""
    def order(s: FleetSlot) -> tuple:
        return (s.kind, s.instance_id or "", s.offer.key, s.capacity.value, s.until.isoformat() if s.until else "")

    return sorted(fleet, key=order)


def candidates(job: PlanJob, offers: Sequence[Offer], fleet: list[FleetSlot],
               policy: PlannerPolicy) -> list[RefOption]:
    """Every (offer x capacity) and every fleet slot the job's filters allow, with no numbers yet."""
    allowed = allowed_capacities(job, policy)
    out = []
    for i, offer in enumerate(offers):
        for j, capacity in enumerate((SPOT, ON_DEMAND)):
            if offer.price(capacity) is None:
                continue  # not sold that way
            if job_allows(job, offer, capacity, allowed):
                out.append(new_option(offer, capacity, "new", None, seq=2 * i + j, slot=None))
    if job.spec.resources.nodes == 1:  # a gang of nodes is launched fresh: fleet slots are single machines
        for i, slot in enumerate(fleet):
            if slot.capacity is not RESERVED and slot.offer.price(slot.capacity) is None:
                continue  # a warm machine we cannot price cannot be compared
            if job_allows(job, slot.offer, slot.capacity, allowed):
                out.append(new_option(slot.offer, slot.capacity, slot.kind, slot.instance_id,
                                   seq=2 * len(offers) + i, slot=i))
    return out


def new_option(offer: Offer, capacity: Capacity, source: str, instance_id: str | None, *, seq: int,
               slot: int | None) -> RefOption:
    return RefOption(offer.provider, offer.region, offer.zone, offer.instance_type, offer.gpu, offer.gpu_count,
                     capacity, source, instance_id, seq, slot, offer)


# --- the numbers of one candidate -----------------------------------------------------------------


def score(o: RefOption, job: PlanJob, slot: FleetSlot | None, now: datetime, policy: PlannerPolicy,
          measured: Measured | None, held_by: str | None, target: tuple[float, Decimal] | None = None) -> None:
    """Fill in ``o``'s hours, cost, finish and blockers (plan.py, the cost model and "Deadlines"); ``target``:
    the hours and hourly price of the job's fastest new on-demand machine (``fastest_on_demand``)."""
    spec, nodes, offer = job.spec, job.spec.resources.nodes, o.offer
    # A warm instance needs no boot; new machines and reserved units do.
    start = now if o.source == "warm" else now + timedelta(hours=policy.boot_hours)

    # Price: all nodes, in the policy's currency; reserved capacity is already paid for.
    price = offer.price(o.capacity)
    if price is None:
        o.price_per_hour = Money.zero(policy.currency)
    else:
        o.price_per_hour = policy.fx.convert(price.per_hour, policy.currency) * nodes

    # Transient blockers: waiting may clear them.
    if o.source == "new":
        if offer.stock(o.capacity) is Stock.sold_out:
            o.blockers.append("stock")
        if f"{offer.key}|{o.capacity.value}" in job.avoid:
            o.blockers.append("avoid")
    if held_by is not None:
        o.blockers.append("taken")
        o.held_by = held_by

    # Hours from the performance model.
    try:
        est = figures(spec, o.gpu, o.gpu_count, offer.vcpus, epochs_done=job.epochs_done, nodes=nodes,
                      measured=measured)
    except UserError:  # an unknown GPU, or a job file the model cannot size
        o.blockers.append("estimate")
        o.est_cost, o.finish_by = Money(amount=Decimal(0).quantize(CENT), currency=policy.currency), start
        return
    o.physical_batch = est.physical_batch
    if not est.fits or not math.isfinite(est.hours):
        o.blockers.append("memory")
        o.est_cost, o.finish_by = Money(amount=Decimal(0).quantize(CENT), currency=policy.currency), start
        return

    h = est.hours
    expected, interruptions, worst_finish = h, 0.0, None
    if o.capacity is SPOT:
        # The spot baselines are blind to reclaims (inputs.PlannerPolicy.strategy): no interruptions priced.
        rate = 0.0 if policy.naive_spot else offer.spot_interruptions_per_hour
        interruptions = rate * nodes * h  # any node's reclaim stops a gang job
        if spec.kind in (Kind.train, Kind.infer):
            lost = est.epoch_hours / 2  # half an epoch (train) or half a shard (infer)
        else:
            lost = h / 2  # val / export restart from scratch
        restart = policy.restart_hours
        # expected hours = h + n x restart + min(n x lost, h) (summed in this order, as the planner does)
        expected = h + (interruptions * restart + min(interruptions * lost, h))
        # The bad case (rank.Scorer._time): 1.5 x the expected interruptions, plus one more.
        bad = 1.5 * interruptions + 1
        worst_finish = start + timedelta(hours=h + (bad * restart + min(bad * lost, h)))
        o.worst_finish = worst_finish
    o.est_hours, o.expected_interruptions = round(expected, 4), round(interruptions, 4)
    o.finish_by = start + timedelta(hours=expected)
    cost = (o.price_per_hour.amount * Decimal(repr(expected))).quantize(CENT, ROUND_HALF_EVEN)
    o.est_cost = Money(amount=cost, currency=policy.currency)

    # Structural blockers: waiting never clears them.
    deadline = job.deadline_at
    if deadline is not None:
        # The expected finish must leave deadline_safety of the remaining time to spare...
        spare = policy.deadline_safety * max(deadline - now, timedelta(0))
        if job.stint and o.capacity is SPOT and spec.kind is Kind.train:
            # inputs.PlanJob.stint: a training job the steering rule watches must finish on spot by the deadline
            # in expectation and leave room, within the margin, for a move to on-demand after its uninterrupted
            # hours (a boot, a restart, half an epoch).
            o.worst_finish = None
            o.way_out = start + timedelta(hours=h + (policy.boot_hours + policy.restart_hours + est.epoch_hours / 2))
            if o.finish_by > deadline or o.way_out > deadline - spare:  # on time in expectation, room to move
                # Late on this setup: the rule's move to the fastest on-demand setup (``target``) may complete
                # it; it pays spot until the move and on-demand after it (never less than all of it on spot).
                leg = None if target is None else stint_leg(
                    (start - now).total_seconds() / 3600, expected, (deadline - spare - now).total_seconds() / 3600,
                    target[0], policy.boot_hours, policy.restart_hours, est.epoch_hours)
                if leg is None:
                    o.blockers.append("deadline")
                elif leg.leg_hours > 0:
                    leg_cost = (target[1] * Decimal(repr(leg.leg_hours))).quantize(CENT, ROUND_HALF_EVEN)
                    spot_part = (o.price_per_hour.amount * Decimal(repr(leg.spot_hours))).quantize(
                        CENT, ROUND_HALF_EVEN)
                    o.est_cost = Money(amount=max(cost, spot_part + leg_cost), currency=policy.currency)
                    o.finish_by = now + timedelta(hours=leg.finish_hours)
                    o.moved = True
        elif o.finish_by > deadline - spare:
            o.blockers.append("deadline")
        # ... and spot must also survive a bad run by the deadline itself (not for the blind baselines).
        elif worst_finish is not None and not policy.naive_spot and worst_finish > deadline:
            o.blockers.append("spot_risk")
    if slot is not None and slot.until is not None and o.finish_by > slot.until:
        o.blockers.append("reservation")  # the commitment ends before the job would
    budget = spec.policy.budget
    if budget is not None:
        # "Budgets count PlanJob.spent as well", each converted into the budget's currency.
        total = policy.fx.convert(o.est_cost, budget.currency).amount
        if job.spent is not None:
            total += policy.fx.convert(job.spent, budget.currency).amount
        if total > budget.amount:
            o.blockers.append("budget")


def fastest_on_demand(job: PlanJob, offers: Sequence[Offer], policy: PlannerPolicy,
                      measured: Measured | None) -> tuple[float, Decimal] | None:
    """Where the steering rule's move would take a stint: of the new on-demand machines the job file allows
    (sold out or not; whatever capacity its file asks for: a stint's flag says the rule watches it), the one
    with the fewest estimated hours, then the cheapest; its hours and hourly price (all nodes, the policy's
    currency)."""
    spec, nodes, best = job.spec, job.spec.resources.nodes, None
    for offer in offers:
        price = offer.price(ON_DEMAND)
        if price is None or not job_allows(job, offer, ON_DEMAND, {ON_DEMAND}):
            continue
        try:
            est = figures(spec, offer.gpu, offer.gpu_count, offer.vcpus, epochs_done=job.epochs_done, nodes=nodes,
                          measured=measured)
        except UserError:
            continue
        if not est.fits or not math.isfinite(est.hours):
            continue
        hourly = (policy.fx.convert(price.per_hour, policy.currency) * nodes).amount
        if best is None or (est.hours, hourly) < best:
            best = (est.hours, hourly)
    return best


def ranked_options(job: PlanJob, offers: Sequence[Offer], fleet: list[FleetSlot], now: datetime,
                   policy: PlannerPolicy, measured: Measured | None,
                   held: Mapping[int, str] | None = None) -> list[RefOption]:
    """Every candidate of ``job``, scored, best first. ``fleet`` is canonical; ``held``: slot -> job."""
    held = held or {}
    out = candidates(job, offers, fleet, policy)
    target = fastest_on_demand(job, offers, policy, measured) if job.stint and job.deadline_at is not None else None
    for o in out:
        slot = fleet[o.slot] if o.slot is not None else None
        score(o, job, slot, now, policy, measured, held.get(o.slot) if o.slot is not None else None, target)
    out.sort(key=RefOption.sort_key)
    return out


# --- public: the reference plan -------------------------------------------------------------------


def planning_order(job: PlanJob) -> tuple:
    """plan.py: "Jobs are planned by priority, deadline, submission and id" (plan.plan: priority desc,
    deadline asc, submitted asc, id); a job without a deadline comes after those with one."""
    has_no_deadline = job.deadline_at is None
    return (-job.spec.policy.priority, has_no_deadline, job.deadline_at or job.submitted_at, job.submitted_at,
            job.id)


def runners_up(ranked: list[RefOption], choice: RefOption | None, limit: int) -> list[RefOption]:
    """plan.plan: up to ``limit`` runners-up, best first, one per (cloud, region, type, capacity, source,
    instance): other zones of a type add nothing."""
    seen = {choice.shape} if choice is not None else set()
    out = []
    for o in ranked:
        if len(out) >= limit:
            break
        if o is choice or o.shape in seen:
            continue
        seen.add(o.shape)
        out.append(o)
    return out


def reference_options(job: PlanJob, offers: Sequence[Offer], fleet: Sequence[FleetSlot], now: datetime,
                      policy: PlannerPolicy, *, measured: Measured | None = None) -> list[RefOption]:
    """``plan.options_for``: every candidate, best first, no slot held."""
    return ranked_options(job, offers, canonical_fleet(fleet), now, policy, measured)


def reference_plan(jobs: Sequence[PlanJob], offers: Sequence[Offer], fleet: Sequence[FleetSlot], now: datetime,
                   policy: PlannerPolicy, *, measured: Measured | None = None,
                   team_budgets: Mapping[str, TeamBudget] | None = None,
                   alternatives: int = MAX_ALTERNATIVES) -> list[RefDecision]:
    """``plan.plan``, slowly: one decision per job, in planning order."""
    slots = canonical_fleet(fleet)
    held: dict[int, str] = {}  # plan.py: "each fleet slot goes to one job" (the first in planning order)
    team_left = {team: b.left for team, b in (team_budgets or {}).items()}
    decisions = []
    for job in sorted(jobs, key=planning_order):
        ranked = ranked_options(job, offers, slots, now, policy, measured, held)
        d = decide(job, ranked, alternatives)
        budget = (team_budgets or {}).get(job.spec.team)
        if budget is not None and d.action in ("launch", "reuse"):
            d = within_team_budget(d, job.spec.team, budget, team_left, policy)
        if d.action in ("launch", "reuse") and d.choice is not None and d.choice.slot is not None:
            held[d.choice.slot] = job.id
        decisions.append(d)
    return decisions


def decide(job: PlanJob, ranked: list[RefOption], limit: int) -> RefDecision:
    """plan.py: "The best feasible option wins; with none, a job waits when only transient blockers stand
    in the way, and is refused otherwise"."""
    if not ranked:
        # plan._decide: a reserved-only job waits for a unit to free up; any other job with nothing that
        # matches it is refused.
        action = "wait" if job.spec.policy.capacity == "reserved" else "refuse"
        return RefDecision(job.id, action, None, [], ranked)
    feasible = [o for o in ranked if o.feasible]
    if feasible:
        choice = feasible[0]  # ranked is best first, and feasible options come first
        action = "launch" if choice.source == "new" else "reuse"
        return RefDecision(job.id, action, choice, runners_up(ranked, choice, limit), ranked)
    only_transient = [o for o in ranked if o.blockers and all(b in TRANSIENT for b in o.blockers)]
    action = "wait" if only_transient else "refuse"
    return RefDecision(job.id, action, None, runners_up(ranked, None, limit), ranked)


def within_team_budget(d: RefDecision, team: str, budget: TeamBudget, left: dict[str, Money],
                       policy: PlannerPolicy) -> RefDecision:
    """plan.plan: "a job whose expected cost does not fit what is left of its team's month waits (or is
    refused when it would not fit even a whole month); jobs planned earlier in the same call count against
    the team first"."""
    assert d.choice is not None and d.choice.est_cost is not None
    cost = policy.fx.convert(d.choice.est_cost, budget.left.currency)
    if cost <= left[team]:
        left[team] = left[team] - cost
        return d
    action = "refuse" if cost > budget.monthly else "wait"
    return RefDecision(d.job_id, action, None, d.alternatives, d.options, team_blocked=True)
