"""The planner: queued jobs x offers x our fleet -> one decision per job, with reasons.

Pure: no I/O, no clock reads, no globals. The same inputs give the same output,
whatever order the jobs, offers and fleet slots come in.

For each job every candidate (offer x capacity, plus each free fleet slot) that
the job's own filters allow becomes an ``Option`` with an expected duration,
cost and finish time from the performance model, and a list of blockers.
Blockers are *transient* (sold out, recently out of capacity, slot held for a
higher-priority job: waiting may clear them) or *structural* (memory, deadline,
budget: waiting never helps). The best feasible option wins; with none, a job
waits when only transient blockers stand in the way, and is refused otherwise,
with a reason that says what to change.

The cost model (``_Timing``):

* hours ``h`` come from ``perf.estimate`` for the GPU, count, vCPUs and nodes.
* spot: ``n = rate x nodes x h`` expected interruptions (any node's reclaim
  stops a gang job). Each costs ``restart_hours`` plus lost work: half an epoch
  for training (it resumes from ``last.pt``), half the job for infer / val /
  export (they restart from scratch). Lost work in total is capped at ``h``:
  past that the linear model stops meaning anything, and spot has lost anyway.
* expected hours = ``h + n x restart + min(n x lost, h)``; cost = expected
  hours x hourly price x nodes, converted into ``policy.currency``.
* reserved capacity costs nothing more (already paid); a warm instance costs
  its capacity's hourly price and needs no boot.

Deadlines (``_deadline_blockers``): the expected finish must leave
``deadline_safety`` of the remaining time to spare, and spot must also survive
a bad run (see there). Budgets count ``PlanJob.spent`` as well.

Choice: reserved capacity first (no marginal cost), then the lowest expected
cost, a warm machine winning a tie, then the earliest finish. Jobs are planned
by priority, deadline, submission and id; each fleet slot goes to one job.
A job preempted ``max_preemptions_before_on_demand`` times leaves spot, unless
its job file asks for spot only (its ``max_restarts`` bounds that elsewhere).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import ROUND_CEILING, Decimal
from typing import Callable, Literal, Mapping, Sequence

from pydantic import Field

from scheduler.errors import UserError
from scheduler.models import Capacity, Frozen, JobSpec, Kind, Offer, Stock
from scheduler.money import Currency, FxRates, Money
from scheduler.perf import Estimate, estimate

MAX_ALTERNATIVES = 8

Source = Literal["new", "warm", "reserved"]
Measured = Mapping[tuple[str, str, int], float]  # perf.estimate's measured rates: (model, gpu, img_size) -> img/s
Action = Literal["launch", "reuse", "wait", "refuse"]


class PlanJob(Frozen):
    id: str
    spec: JobSpec
    submitted_at: datetime
    deadline_at: datetime | None  # resolved absolute deadline
    epochs_done: int = 0  # resume point for train jobs
    preemptions: int = 0
    avoid: frozenset[str] = frozenset()  # "Offer.key|capacity" that recently raised NoCapacity
    spent: Money | None = None  # already spent on earlier attempts; counts against the budget


class FleetSlot(Frozen):
    """Capacity we already hold: a warm idle instance of ours, or a free unit of owned reserved capacity."""

    kind: Literal["warm", "reserved"]
    instance_id: str | None  # warm: our instance id; reserved: None until launched
    offer: Offer
    capacity: Capacity  # warm: what it was launched with; reserved: Capacity.reserved
    until: datetime | None = None  # reserved: the commitment's end


class PlannerPolicy(Frozen):
    currency: Currency = "CNY"  # all costs compared in this currency
    fx: FxRates = FxRates()
    boot_hours: float = Field(default=0.05, ge=0)  # launch -> running
    restart_hours: float = Field(default=0.15, ge=0)  # after a spot reclaim: boot + image pull + data/checkpoint
    deadline_safety: float = Field(default=0.1, ge=0, lt=1)  # finish with this share of the remaining time spare
    max_preemptions_before_on_demand: int = Field(default=6, ge=0)
    # Baselines for `gpusched simulate`: "on-demand" (everything on-demand, cheapest fitting),
    # "spot-greedy" / "skypilot-like" (cheapest spot list price, blind to interruptions).
    strategy: Literal["gpusched", "on-demand", "spot-greedy", "skypilot-like"] = "gpusched"

    @property
    def naive_spot(self) -> bool:
        return self.strategy in ("spot-greedy", "skypilot-like")


class Option(Frozen):
    provider: str
    region: str
    zone: str
    instance_type: str
    gpu: str
    gpu_count: int
    capacity: Capacity
    source: Source
    instance_id: str | None
    est_hours: float  # expected hours incl. expected interruption overhead
    price_per_hour: Money  # all nodes together, in policy.currency (0 for reserved)
    est_cost: Money  # expected cost in policy.currency
    finish_by: datetime  # expected finish
    expected_interruptions: float
    physical_batch: int | None
    feasible: bool  # meets deadline, budget, stock and the capacity policy
    why: str


class Decision(Frozen):
    job_id: str
    action: Action  # reuse = put it on a warm or reserved slot
    choice: Option | None
    alternatives: tuple[Option, ...]  # runners-up, best first (feasible, then infeasible)
    reason: str  # one sentence a user can act on


# --- blockers ---------------------------------------------------------------------

BlockerKind = Literal["stock", "avoid", "taken", "estimate", "memory", "deadline", "spot_risk", "budget",
                      "reservation"]
_TRANSIENT = frozenset({"stock", "avoid", "taken"})  # waiting can clear these; the rest it cannot


@dataclass(frozen=True)
class _Blocker:
    kind: BlockerKind
    text: str
    holder: str | None = None  # "taken": the job the slot went to

    @property
    def transient(self) -> bool:
        return self.kind in _TRANSIENT


@dataclass(frozen=True)
class _Market:
    """Everything a plan() call sees besides the job, and the slots already handed out."""

    offers: Sequence[Offer]
    slots: Sequence[FleetSlot]  # canonical order: a slot's index is its identity
    now: datetime
    policy: PlannerPolicy
    measured: Measured | None
    taken: dict[int, str]  # slot index -> the job it went to


@dataclass(frozen=True)
class _Candidate:
    offer: Offer
    capacity: Capacity
    source: Source
    slot: int | None  # index into the canonical fleet
    instance_id: str | None
    until: datetime | None


@dataclass(frozen=True)
class _Scored:
    option: Option
    slot: int | None
    blockers: tuple[_Blocker, ...]
    needed_deadline: datetime | None  # earliest deadline this option would meet
    budget_total: Money | None  # est_cost + spent, in the budget's currency

    @property
    def feasible(self) -> bool:
        return not self.blockers

    @property
    def only_transient(self) -> bool:
        return bool(self.blockers) and all(b.transient for b in self.blockers)

    def has(self, kind: str) -> bool:
        return any(b.kind == kind for b in self.blockers)


# --- candidates -------------------------------------------------------------------


def _allowed_capacities(job: PlanJob, policy: PlannerPolicy) -> frozenset[Capacity]:
    if policy.strategy == "on-demand":
        return frozenset({Capacity.on_demand})
    if policy.naive_spot:
        return frozenset({Capacity.spot})
    wanted = job.spec.policy.capacity
    if wanted == "spot":
        # The user asked for spot only; their choice stands even after preemptions
        # (max_restarts bounds the retries elsewhere).
        return frozenset({Capacity.spot})
    if wanted == "on-demand":
        return frozenset({Capacity.on_demand})
    if wanted == "reserved":
        return frozenset({Capacity.reserved})
    if job.preemptions >= policy.max_preemptions_before_on_demand:
        return frozenset({Capacity.on_demand, Capacity.reserved})
    return frozenset(Capacity)


def _offer_matches(spec: JobSpec, offer: Offer) -> bool:
    res, where = spec.resources, spec.where
    return (
        (res.gpus is None or offer.gpu in res.gpus)
        and offer.gpu_count == res.gpu_count
        and (where.providers is None or offer.provider in where.providers)
        and (where.regions is None or offer.region in where.regions)
    )


def _canonical_fleet(fleet: Sequence[FleetSlot]) -> list[FleetSlot]:
    return sorted(
        fleet,
        key=lambda s: (s.kind, s.instance_id or "", s.offer.key, s.capacity.value,
                       s.until.isoformat() if s.until else ""),
    )


def _candidates(job: PlanJob, offers: Sequence[Offer], slots: Sequence[FleetSlot],
                policy: PlannerPolicy) -> list[_Candidate]:
    allowed = _allowed_capacities(job, policy)
    out: list[_Candidate] = []
    for offer in offers:
        if not _offer_matches(job.spec, offer):
            continue
        for cap in (Capacity.spot, Capacity.on_demand):
            if cap in allowed and offer.price(cap) is not None:
                out.append(_Candidate(offer, cap, "new", None, None, None))
    if job.spec.resources.nodes > 1:
        return out  # a gang of nodes is launched fresh in one zone; fleet slots are single machines
    for i, slot in enumerate(slots):
        if slot.capacity not in allowed or not _offer_matches(job.spec, slot.offer):
            continue
        if slot.capacity is not Capacity.reserved and slot.offer.price(slot.capacity) is None:
            continue  # a warm machine we cannot price cannot be compared
        out.append(_Candidate(slot.offer, slot.capacity, slot.kind, i, slot.instance_id, slot.until))
    return out


# --- timing and cost --------------------------------------------------------------


@dataclass(frozen=True)
class _Timing:
    hours: float  # expected, including interruption overhead
    worst_hours: float  # spot safety net: 1.5 x expected interruptions + 1
    interruptions: float


def _timing(spec: JobSpec, est: Estimate, capacity: Capacity, rate: float, policy: PlannerPolicy) -> _Timing:
    h = est.hours
    if capacity is not Capacity.spot:
        return _Timing(h, h, 0.0)
    n = rate * spec.resources.nodes * h
    if spec.kind is Kind.train and est.epoch_hours is not None:
        lost = est.epoch_hours / 2  # resumes from the last epoch's checkpoint
    else:
        lost = h / 2  # no checkpoint: on average half the work is redone

    def overhead(k: float) -> float:
        return k * policy.restart_hours + min(k * lost, h)

    return _Timing(h + overhead(n), h + overhead(1.5 * n + 1), n)


def _hourly(cand: _Candidate, nodes: int, policy: PlannerPolicy) -> Money:
    if cand.capacity is Capacity.reserved:
        return Money.zero(policy.currency)
    price = cand.offer.price(cand.capacity)
    assert price is not None  # _candidates only keeps priced ones
    return policy.fx.convert(price.per_hour, policy.currency) * nodes


def _hours_td(hours: float) -> timedelta:
    return timedelta(hours=hours)


# --- scoring ----------------------------------------------------------------------


def _score(job: PlanJob, cand: _Candidate, est: Estimate | str, m: _Market) -> _Scored:
    """One candidate as an Option with its blockers. ``est`` is a message when it cannot be estimated."""
    spec, offer, policy, now = job.spec, cand.offer, m.policy, m.now
    blockers: list[_Blocker] = []
    if cand.source == "new":
        if offer.stock(cand.capacity) is Stock.sold_out:
            blockers.append(_Blocker("stock", "sold out"))
        if f"{offer.key}|{cand.capacity.value}" in job.avoid:
            blockers.append(_Blocker("avoid", "recently out of capacity"))
    if cand.slot is not None and cand.slot in m.taken:
        holder = m.taken[cand.slot]
        blockers.append(_Blocker("taken", f"held for higher-priority job {holder}", holder))

    if isinstance(est, str):
        blockers.append(_Blocker("estimate", est))
    elif not est.fits or not math.isfinite(est.hours):
        blockers.append(_Blocker("memory", est.why_not or f"does not fit in {offer.gpu} memory"))
    usable = isinstance(est, Estimate) and not any(b.kind in ("estimate", "memory") for b in blockers)
    rate = 0.0 if policy.naive_spot else offer.spot_interruptions_per_hour
    timing = _timing(spec, est, cand.capacity, rate, policy) \
        if usable and isinstance(est, Estimate) else _Timing(0.0, 0.0, 0.0)
    start = now if cand.source == "warm" else now + _hours_td(policy.boot_hours)
    finish = start + _hours_td(timing.hours)
    hourly = _hourly(cand, spec.resources.nodes, policy)
    cost = (hourly * Decimal(repr(timing.hours))).quantize()

    needed: datetime | None = None
    budget_total: Money | None = None
    if usable:
        needed = _needed_deadline(now, finish, start + _hours_td(timing.worst_hours), cand.capacity, policy)
        blockers.extend(_deadline_blockers(job.deadline_at, now, finish, start, timing, cand.capacity, policy))
        if cand.until is not None and finish > cand.until:
            blockers.append(_Blocker("reservation", f"reservation ends {_fmt_time(cand.until)}, "
                                                    "before the expected finish"))
        budget = spec.policy.budget
        if budget is not None:
            budget_total = policy.fx.convert(cost, budget.currency)
            if job.spent is not None:
                budget_total = budget_total + policy.fx.convert(job.spent, budget.currency)
            if budget_total > budget:
                blockers.append(_Blocker("budget", f"over budget ({budget_total} > {budget})"))

    option = Option(
        provider=offer.provider, region=offer.region, zone=offer.zone, instance_type=offer.instance_type,
        gpu=offer.gpu, gpu_count=offer.gpu_count, capacity=cand.capacity, source=cand.source,
        instance_id=cand.instance_id, est_hours=round(timing.hours, 4), price_per_hour=hourly,
        est_cost=cost, finish_by=finish, expected_interruptions=round(timing.interruptions, 4),
        physical_batch=est.physical_batch if isinstance(est, Estimate) else None, feasible=not blockers,
        why="; ".join(b.text for b in blockers) if blockers else "feasible",
    )
    return _Scored(option, cand.slot, tuple(blockers), needed, budget_total)


def _deadline_blockers(deadline: datetime | None, now: datetime, finish: datetime, start: datetime,
                       timing: _Timing, capacity: Capacity, policy: PlannerPolicy) -> list[_Blocker]:
    """Expected finish must leave ``deadline_safety`` of the remaining time to spare.

    Spot must also survive its bad case: interrupted 1.5 x as often as expected,
    plus once more late in the run, with the rest then run on-demand (same type,
    same speed), it must still finish by the deadline itself. The safety margin
    covers estimate error; this net covers interruption bad luck.
    """
    if deadline is None:
        return []
    margin = policy.deadline_safety * max(deadline - now, timedelta(0))
    if finish > deadline - margin:
        if finish > deadline:
            text = f"misses deadline by {_hours(finish - deadline)}"
        else:
            text = (f"finishes {_hours(deadline - finish)} before the deadline, "
                    f"inside the {_hours(margin)} safety margin")
        return [_Blocker("deadline", text)]
    if capacity is Capacity.spot and not policy.naive_spot:
        worst = start + _hours_td(timing.worst_hours)
        if worst > deadline:
            return [_Blocker("spot_risk", "too risky on spot: a late interruption would miss the deadline by "
                                          f"{_hours(worst - deadline)}")]
    return []


def _needed_deadline(now: datetime, finish: datetime, worst: datetime, capacity: Capacity,
                     policy: PlannerPolicy) -> datetime:
    """The earliest deadline this option would meet (the inverse of ``_deadline_blockers``)."""
    need = now + (finish - now) / (1 - policy.deadline_safety)
    return max(need, worst) if capacity is Capacity.spot else need


def _sort_key(s: _Scored) -> tuple:
    """Feasible first, then waiting on stock, then the rest; within each: reserved, cost, warm, finish."""
    o = s.option
    if s.feasible:
        rank = 0
    elif s.only_transient:
        rank = 1
    elif s.has("memory") or s.has("estimate"):
        rank = 3
    else:
        rank = 2
    return (rank, o.capacity is not Capacity.reserved, o.est_cost.amount, o.source != "warm", o.finish_by,
            o.provider, o.region, o.zone, o.instance_type, o.capacity.value, o.source, o.instance_id or "",
            o.gpu, o.gpu_count)


def _score_all(job: PlanJob, m: _Market) -> list[_Scored]:
    estimates: dict[tuple[str, int, int], Estimate | str] = {}
    scored = []
    for cand in _candidates(job, m.offers, m.slots, m.policy):
        k = (cand.offer.gpu, cand.offer.gpu_count, cand.offer.vcpus)
        if k not in estimates:
            try:
                estimates[k] = estimate(job.spec, cand.offer.gpu, cand.offer.gpu_count, cand.offer.vcpus,
                                        epochs_done=job.epochs_done, nodes=job.spec.resources.nodes,
                                        measured=m.measured)
            except UserError as exc:  # an unknown GPU, or a job file the model cannot size
                estimates[k] = str(exc).replace("\n  fix:", ":")
        scored.append(_score(job, cand, estimates[k], m))
    scored.sort(key=_sort_key)
    return scored


# --- public API -------------------------------------------------------------------


def options_for(job: PlanJob, offers: Sequence[Offer], fleet: Sequence[FleetSlot], now: datetime,
                policy: PlannerPolicy, *, measured: Measured | None = None) -> list[Option]:
    """Every candidate the job's filters allow, with feasibility and why, best first.

    When the job has a feasible option, the first one here equals the choice
    ``plan`` makes for this job alone.
    """
    m = _Market(offers, _canonical_fleet(fleet), now, policy, measured, {})
    return _ranked_options(job, _score_all(job, m))


def plan(jobs: Sequence[PlanJob], offers: Sequence[Offer], fleet: Sequence[FleetSlot], now: datetime,
         policy: PlannerPolicy, *, measured: Measured | None = None) -> list[Decision]:
    """One decision per job, in planning order (priority desc, deadline asc, submitted asc, id).

    Each fleet slot goes to at most one job: the first in planning order that
    chooses it; later jobs see it as held. ``measured`` passes learned training
    rates on to ``perf.estimate``.
    """
    m = _Market(offers, _canonical_fleet(fleet), now, policy, measured, {})
    decisions = []
    for job in sorted(jobs, key=_planning_order):
        decision, slot = _decide(job, _score_all(job, m), m)
        if slot is not None:
            m.taken[slot] = job.id
        decisions.append(decision)
    return decisions


def _planning_order(job: PlanJob) -> tuple:
    deadline = job.deadline_at
    return (-job.spec.policy.priority, deadline is None, deadline or job.submitted_at, job.submitted_at, job.id)


# --- decisions --------------------------------------------------------------------


def _decide(job: PlanJob, scored: list[_Scored], m: _Market) -> tuple[Decision, int | None]:
    options = _ranked_options(job, scored)
    if scored and scored[0].feasible:
        choice = options[0]
        action: Action = "launch" if choice.source == "new" else "reuse"
        return Decision(job_id=job.id, action=action, choice=choice, alternatives=_runners_up(options[1:], choice),
                        reason=_choice_reason(choice, job)), scored[0].slot
    alternatives = _runners_up(options, None)
    waiting = [s for s in scored if s.only_transient]
    if waiting:
        return Decision(job_id=job.id, action="wait", choice=None, alternatives=alternatives,
                        reason=_wait_reason(waiting)), None
    if not scored and job.spec.policy.capacity == "reserved":
        # Units of reserved capacity free up as other jobs finish: wait rather than refuse.
        return Decision(job_id=job.id, action="wait", choice=None, alternatives=(),
                        reason="waiting: no free reserved capacity matches the job "
                               "(set policy.capacity: auto to use spot or on-demand)"), None
    return Decision(job_id=job.id, action="refuse", choice=None, alternatives=alternatives,
                    reason=_refusal(job, scored, m)), None


def _runners_up(options: list[Option], choice: Option | None) -> tuple[Option, ...]:
    """The best few, one per cloud, region, type and capacity: other zones of the same type add nothing."""
    seen = set() if choice is None else {_shape(choice)}
    out: list[Option] = []
    for o in options:
        if _shape(o) not in seen:
            seen.add(_shape(o))
            out.append(o)
            if len(out) == MAX_ALTERNATIVES:
                break
    return tuple(out)


def _shape(o: Option) -> tuple[str, ...]:
    return (o.provider, o.region, o.instance_type, o.capacity.value, o.source, o.instance_id or "")


def _ranked_options(job: PlanJob, scored: list[_Scored]) -> list[Option]:
    """The options best first; feasible ones say why they won, or how they compare with the winner."""
    if not scored or not scored[0].feasible:
        return [s.option for s in scored]
    choice = scored[0].option
    choice = choice.model_copy(update={"why": _choice_why(choice, job)})
    return [choice, *(_vs_choice(s.option, choice) for s in scored[1:])]


def _choice_why(o: Option, job: PlanJob) -> str:
    if o.capacity is Capacity.reserved:
        what = "reserved capacity, already paid"
    else:
        what = "cheapest meeting the deadline" if job.deadline_at is not None else "cheapest"
    return f"{what}; warm, no boot" if o.source == "warm" else what


def _vs_choice(o: Option, choice: Option) -> Option:
    if not o.feasible:
        return o
    extra = o.est_cost - choice.est_cost
    if extra.amount > 0:
        why = f"feasible; {extra} more"
    else:
        later = (o.finish_by - choice.finish_by).total_seconds() / 3600
        why = f"feasible; same cost, finishes {abs(later):.1f} h {'later' if later >= 0 else 'earlier'}"
    return o.model_copy(update={"why": why})


def _choice_reason(o: Option, job: PlanJob) -> str:
    plan_text = f"~{o.est_hours:.1f} h, ~{o.est_cost}, done by {_fmt_time(o.finish_by)}"
    if o.expected_interruptions >= 0.05:
        plan_text += f", ~{o.expected_interruptions:.1f} spot interruptions expected"
    if o.source == "warm":
        return f"reusing warm instance {o.instance_id} ({_label(o)}), no boot: {plan_text}"
    if o.capacity is Capacity.reserved:
        return f"using reserved capacity {_label(o)}, already paid for: {plan_text}"
    goal = "the cheapest option that meets the deadline" if job.deadline_at is not None else "the cheapest option"
    return f"{_label(o)} is {goal}: {plan_text}"


def _wait_reason(waiting: list[_Scored]) -> str:
    parts = []
    for kind, text in (("stock", "sold out"), ("avoid", "recently out of capacity")):
        count = sum(1 for s in waiting if s.has(kind))
        if count:
            parts.append(f"{text} ({count})")
    holders = sorted({b.holder for s in waiting for b in s.blockers if b.holder is not None})
    if holders:
        parts.append(f"held for higher-priority job {', '.join(holders)}")
    best = waiting[0].option
    return (f"waiting: every option that meets the deadline and budget is {' or '.join(parts)}; "
            f"best when free: {_label(best)}, ~{best.est_cost}")


# --- refusals ---------------------------------------------------------------------


def _refusal(job: PlanJob, scored: list[_Scored], m: _Market) -> str:
    """Why nothing can work even once stock returns, and what in the job file to change."""
    if not scored:
        return _no_match_reason(job, m)
    fitting = [s for s in scored if not (s.has("memory") or s.has("estimate"))]
    if not fitting:
        memory = [b.text for s in scored for b in s.blockers if b.kind == "memory"]
        if not memory:
            return f"cannot estimate the job: {scored[0].blockers[-1].text}"
        fix = _relaxation_hints(job, m) or ["use a smaller model or img_size"]
        return f"the job fits no allowed GPU ({memory[0]}): {' or '.join(fix)}"
    on_time = [s for s in fitting if not (s.has("deadline") or s.has("spot_risk"))]
    if not on_time and job.deadline_at is not None:
        return _deadline_refusal(job, fitting, m)
    over = [s for s in on_time if s.has("budget") and s.budget_total is not None]
    if over:
        return _budget_refusal(job, over, m)
    return f"no option is feasible; the best one: {scored[0].option.why}"


def _deadline_refusal(job: PlanJob, fitting: list[_Scored], m: _Market) -> str:
    fastest = min(fitting, key=lambda s: (s.needed_deadline or m.now, _sort_key(s)))
    assert job.deadline_at is not None and fastest.needed_deadline is not None
    o, deadline = fastest.option, job.deadline_at
    if o.finish_by > deadline:
        when = f"{_hours(o.finish_by - deadline)} after the deadline"
    else:
        when = f"inside the {m.policy.deadline_safety:.0%} safety margin before the deadline"
    fix = [f"move the deadline to {_fmt_time(_ceil_minute(fastest.needed_deadline))} or later",
           *_relaxation_hints(job, m)]
    return f"fastest option ({_label(o)}) finishes {_fmt_time(o.finish_by)}, {when}: {' or '.join(fix)}"


def _budget_refusal(job: PlanJob, over: list[_Scored], m: _Market) -> str:
    budget = job.spec.policy.budget
    assert budget is not None
    cheapest = min(over, key=lambda s: (s.budget_total.amount if s.budget_total else Decimal(0), _sort_key(s)))
    assert cheapest.budget_total is not None
    cost = m.policy.fx.convert(cheapest.option.est_cost, budget.currency)
    spent = f" plus {m.policy.fx.convert(job.spent, budget.currency)} already spent" if job.spent else ""
    need = cheapest.budget_total.amount.to_integral_value(rounding=ROUND_CEILING)
    fix = [f"raise policy.budget to at least {need} {budget.currency}", *_relaxation_hints(job, m)]
    what = "cheapest option meeting the deadline" if job.deadline_at is not None else "cheapest option"
    return f"{what} costs {cost}{spent}, over the {budget} budget: {' or '.join(fix)}"


def _no_match_reason(job: PlanJob, m: _Market) -> str:
    spec = job.spec
    gpus = "/".join(spec.resources.gpus) if spec.resources.gpus else "any GPU"
    wanted = [f"{spec.resources.gpu_count} x {gpus}"]
    if spec.where.providers:
        wanted.append(f"on {'/'.join(spec.where.providers)}")
    if spec.where.regions:
        wanted.append(f"in {'/'.join(spec.where.regions)}")
    if spec.policy.capacity != "auto":
        wanted.append(f"as {spec.policy.capacity}")
    fixes = []
    for relaxed, describe in _relaxations(job):
        cands = _candidates(relaxed, m.offers, m.slots, m.policy)
        if cands:
            first = min(cands, key=lambda c: (c.offer.key, c.capacity.value))
            fixes.append(describe(first.offer, first.capacity))
    if not fixes:
        fixes = [f"no offer has {spec.resources.gpu_count} GPU(s) per machine: change resources.gpu_count"]
    return f"no offer matches the job ({' '.join(wanted)}): {' or '.join(fixes)}"


_Hint = Callable[["Offer | Option", Capacity], str]  # both carry gpu, region and provider


def _relaxations(job: PlanJob) -> list[tuple[PlanJob, _Hint]]:
    """The job with one of its own filters lifted, and how to tell the user to lift it."""
    spec = job.spec
    out: list[tuple[PlanJob, _Hint]] = []

    def with_spec(**update: object) -> PlanJob:
        return job.model_copy(update={"spec": spec.model_copy(update=update)})

    if spec.resources.gpus is not None:
        out.append((with_spec(resources=spec.resources.model_copy(update={"gpus": None})),
                    lambda o, c: f"allow {o.gpu}"))
    if spec.policy.capacity != "auto":
        out.append((with_spec(policy=spec.policy.model_copy(update={"capacity": "auto"})),
                    lambda o, c: f"allow {c.value}"))
    if spec.where.regions is not None:
        out.append((with_spec(where=spec.where.model_copy(update={"regions": None})),
                    lambda o, c: f"allow region {o.region}"))
    if spec.where.providers is not None:
        out.append((with_spec(where=spec.where.model_copy(update={"providers": None})),
                    lambda o, c: f"allow {o.provider}"))
    return out


def _relaxation_hints(job: PlanJob, m: _Market) -> list[str]:
    """For each filter of the job that, lifted alone, yields a usable option (stock permitting), say how."""
    hints: list[str] = []
    for relaxed, describe in _relaxations(job):
        usable = [s.option for s in _score_all(relaxed, m) if s.feasible or s.only_transient]
        if usable:
            hint = describe(usable[0], usable[0].capacity)
            if hint not in hints:
                hints.append(hint)
    return hints


# --- formatting -------------------------------------------------------------------


def _label(o: Option) -> str:
    return f"{o.provider} {o.instance_type} {o.capacity.value} in {o.zone}"


def _hours(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 3600:.1f} h"


def _fmt_time(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _ceil_minute(dt: datetime) -> datetime:
    floored = dt.replace(second=0, microsecond=0)
    return floored if floored == dt else floored + timedelta(minutes=1)
