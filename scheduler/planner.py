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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import ROUND_CEILING, Decimal
from typing import Literal, Sequence

from scheduler.models import Capacity, Frozen, JobSpec, Kind, Offer, Stock
from scheduler.money import FxRates, Money
from scheduler.perf import Estimate, estimate

MAX_ALTERNATIVES = 8

Source = Literal["new", "warm", "reserved"]
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
    currency: str = "CNY"  # all costs compared in this currency
    fx: FxRates = FxRates()
    boot_hours: float = 0.05  # launch -> running
    restart_hours: float = 0.15  # after a spot interruption: boot + image pull + data/checkpoint download
    deadline_safety: float = 0.1  # finish with this fraction of the remaining time to spare
    max_preemptions_before_on_demand: int = 3


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

_TRANSIENT = frozenset({"stock", "avoid", "taken"})


@dataclass(frozen=True)
class _Blocker:
    kind: Literal["stock", "avoid", "taken", "memory", "deadline", "spot_risk", "budget", "reservation"]
    text: str

    @property
    def transient(self) -> bool:
        return self.kind in _TRANSIENT


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


def _score(job: PlanJob, cand: _Candidate, est: Estimate, now: datetime, policy: PlannerPolicy,
           taken: dict[int, str]) -> _Scored:
    spec, offer = job.spec, cand.offer
    blockers: list[_Blocker] = []
    if cand.source == "new":
        if offer.stock(cand.capacity) is Stock.sold_out:
            blockers.append(_Blocker("stock", "sold out"))
        if f"{offer.key}|{cand.capacity.value}" in job.avoid:
            blockers.append(_Blocker("avoid", "recently out of capacity"))
    if cand.slot is not None and cand.slot in taken:
        blockers.append(_Blocker("taken", f"held for higher-priority job {taken[cand.slot]}"))

    fits = est.fits and math.isfinite(est.hours)
    timing = _timing(spec, est, cand.capacity, offer.spot_interruptions_per_hour, policy) if fits \
        else _Timing(0.0, 0.0, 0.0)
    start = now if cand.source == "warm" else now + _hours_td(policy.boot_hours)
    finish = start + _hours_td(timing.hours)
    hourly = _hourly(cand, spec.resources.nodes, policy)
    cost = (hourly * Decimal(repr(timing.hours))).quantize()

    needed: datetime | None = None
    budget_total: Money | None = None
    if not fits:
        blockers.append(_Blocker("memory", est.why_not or f"does not fit in {offer.gpu} memory"))
    else:
        needed = _needed_deadline(now, finish, start + _hours_td(timing.worst_hours), cand.capacity, policy)
        blockers.extend(_deadline_blockers(job.deadline_at, now, finish, start, timing, cand.capacity, policy))
        if cand.until is not None and finish > cand.until:
            blockers.append(_Blocker("reservation", f"reservation ends {_fmt_time(cand.until)}, before the job would"))
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
        physical_batch=est.physical_batch, feasible=not blockers,
        why="; ".join(b.text for b in blockers) if blockers else _feasible_why(cand, job.deadline_at, finish),
    )
    return _Scored(option, cand.slot, tuple(blockers), needed, budget_total)


def _deadline_blockers(deadline: datetime | None, now: datetime, finish: datetime, start: datetime,
                       timing: _Timing, capacity: Capacity, policy: PlannerPolicy) -> list[_Blocker]:
    """Expected finish must leave ``deadline_safety`` of the remaining time to spare.

    Spot must also survive its bad case: if it is interrupted 1.5 x as often as
    expected plus once more late in the run, and the rest runs on-demand (same
    type, same speed), it must still finish by the deadline itself. The safety
    margin covers estimate error; this net covers interruption bad luck.
    """
    if deadline is None:
        return []
    margin = policy.deadline_safety * max(deadline - now, timedelta(0))
    if finish > deadline - margin:
        if finish > deadline:
            text = f"misses deadline by {_hours(finish - deadline)}"
        else:
            text = f"finishes {_hours(deadline - finish)} before the deadline, inside the {_hours(margin)} safety margin"
        return [_Blocker("deadline", text)]
    if capacity is Capacity.spot:
        worst = start + _hours_td(timing.worst_hours)
        if worst > deadline:
            return [_Blocker("spot_risk", f"too risky on spot: a late interruption would miss the deadline by "
                                          f"{_hours(worst - deadline)}")]
    return []


def _needed_deadline(now: datetime, finish: datetime, worst: datetime, capacity: Capacity,
                     policy: PlannerPolicy) -> datetime:
    """The earliest deadline this option would meet (inverse of ``_deadline_blockers``)."""
    need = now + (finish - now) / (1 - policy.deadline_safety)
    if capacity is Capacity.spot:
        need = max(need, worst)
    return need


def _feasible_why(cand: _Candidate, deadline: datetime | None, finish: datetime) -> str:
    if cand.capacity is Capacity.reserved:
        head = "reserved capacity, already paid"
    elif cand.source == "warm":
        head = "warm instance, no boot"
    else:
        head = "meets the deadline" if deadline is not None else "no deadline"
    if deadline is not None:
        return f"{head}; {_hours(deadline - finish)} to spare"
    return head


def _sort_key(s: _Scored) -> tuple:
    o = s.option
    if s.feasible:
        rank = 0
    elif s.only_transient:
        rank = 1
    elif s.has("memory"):
        rank = 3
    else:
        rank = 2
    return (rank, o.capacity is not Capacity.reserved, o.est_cost.amount, o.source != "warm", o.finish_by,
            o.provider, o.region, o.zone, o.instance_type, o.capacity.value, o.source, o.instance_id or "",
            o.gpu, o.gpu_count)


def _score_all(job: PlanJob, offers: Sequence[Offer], slots: Sequence[FleetSlot], now: datetime,
               policy: PlannerPolicy, taken: dict[int, str]) -> list[_Scored]:
    estimates: dict[tuple[str, int, int], Estimate] = {}
    scored = []
    for cand in _candidates(job, offers, slots, policy):
        k = (cand.offer.gpu, cand.offer.gpu_count, cand.offer.vcpus)
        if k not in estimates:
            estimates[k] = estimate(job.spec, cand.offer.gpu, cand.offer.gpu_count, cand.offer.vcpus,
                                    epochs_done=job.epochs_done, nodes=job.spec.resources.nodes)
        scored.append(_score(job, cand, estimates[k], now, policy, taken))
    scored.sort(key=_sort_key)
    return scored


# --- public API -------------------------------------------------------------------


def options_for(job: PlanJob, offers: Sequence[Offer], fleet: Sequence[FleetSlot], now: datetime,
                policy: PlannerPolicy) -> list[Option]:
    """Every candidate the job's filters allow, with feasibility and why, best first."""
    return [s.option for s in _score_all(job, offers, _canonical_fleet(fleet), now, policy, {})]


def plan(jobs: Sequence[PlanJob], offers: Sequence[Offer], fleet: Sequence[FleetSlot], now: datetime,
         policy: PlannerPolicy) -> list[Decision]:
    """One decision per job, in planning order (priority desc, deadline asc, submitted asc, id).

    Each fleet slot goes to at most one job: the first job in planning order that
    chooses it; later jobs see it as held.
    """
    slots = _canonical_fleet(fleet)
    taken: dict[int, str] = {}
    decisions = []
    for job in sorted(jobs, key=_planning_order):
        scored = _score_all(job, offers, slots, now, policy, taken)
        decision, slot = _decide(job, scored, offers, slots, now, policy, taken)
        if slot is not None:
            taken[slot] = job.id
        decisions.append(decision)
    return decisions


def _planning_order(job: PlanJob) -> tuple:
    deadline = job.deadline_at
    return (-job.spec.policy.priority, deadline is None, deadline or job.submitted_at, job.submitted_at, job.id)


# --- decisions --------------------------------------------------------------------


def _decide(job: PlanJob, scored: list[_Scored], offers: Sequence[Offer], slots: Sequence[FleetSlot],
            now: datetime, policy: PlannerPolicy, taken: dict[int, str]) -> tuple[Decision, int | None]:
    feasible = [s for s in scored if s.feasible]
    if feasible:
        best = feasible[0]
        choice = best.option.model_copy(update={"why": _choice_why(best.option, job)})
        rest = [_vs_choice(s.option, choice) for s in scored if s is not best][:MAX_ALTERNATIVES]
        action: Action = "launch" if best.option.source == "new" else "reuse"
        return Decision(job_id=job.id, action=action, choice=choice, alternatives=tuple(rest),
                        reason=_choice_reason(choice, job)), best.slot
    alternatives = tuple(s.option for s in scored[:MAX_ALTERNATIVES])
    waiting = [s for s in scored if s.only_transient]
    if waiting:
        return Decision(job_id=job.id, action="wait", choice=None, alternatives=alternatives,
                        reason=_wait_reason(waiting)), None
    if not scored and job.spec.policy.capacity == "reserved":
        # Free reserved units come and go as other jobs finish: wait rather than refuse.
        return Decision(job_id=job.id, action="wait", choice=None, alternatives=(),
                        reason="no free reserved capacity matches the job; waiting for a unit to free up "
                               "(or set policy.capacity: auto)"), None
    reason = _refusal(job, scored, offers, slots, now, policy, taken)
    return Decision(job_id=job.id, action="refuse", choice=None, alternatives=alternatives, reason=reason), None


def _choice_why(o: Option, job: PlanJob) -> str:
    if o.capacity is Capacity.reserved:
        return "reserved capacity, already paid"
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
    if o.capacity is not Capacity.reserved and o.expected_interruptions > 0:
        plan_text += f", {o.expected_interruptions:.1f} spot interruptions expected"
    if o.source == "warm":
        return f"reusing warm instance {o.instance_id} ({_label(o)}), no boot: {plan_text}"
    if o.capacity is Capacity.reserved:
        return f"using reserved capacity {_label(o)}, already paid for: {plan_text}"
    goal = "the cheapest option that meets the deadline" if job.deadline_at is not None else "the cheapest option"
    return f"{_label(o)} is {goal}: {plan_text}"


def _wait_reason(waiting: list[_Scored]) -> str:
    counts = {kind: sum(1 for s in waiting if s.has(kind)) for kind in ("stock", "avoid", "taken")}
    parts = []
    if counts["stock"]:
        parts.append(f"sold out ({counts['stock']})")
    if counts["avoid"]:
        parts.append(f"recently out of capacity ({counts['avoid']})")
    if counts["taken"]:
        holders = sorted({b.text.rsplit(" ", 1)[-1] for s in waiting for b in s.blockers if b.kind == "taken"})
        parts.append(f"held for higher-priority job {', '.join(holders)}")
    best = waiting[0].option
    return (f"waiting: every option that meets the deadline and budget is {' or '.join(parts)}; "
            f"best when free: {_label(best)}, ~{best.est_cost}")


# --- refusals ---------------------------------------------------------------------


def _refusal(job: PlanJob, scored: list[_Scored], offers: Sequence[Offer], slots: Sequence[FleetSlot],
             now: datetime, policy: PlannerPolicy, taken: dict[int, str]) -> str:
    """Why nothing can work even once stock returns, and what in the job file to change."""
    spec = job.spec
    if not scored:
        return _no_match_reason(job, offers, slots, policy)
    fitting = [s for s in scored if not s.has("memory")]
    if not fitting:
        why = next(b.text for b in scored[0].blockers if b.kind == "memory")
        fix = _relaxation_hints(job, offers, slots, now, policy, taken) or ["use a smaller model or img_size"]
        return f"{spec.model} does not fit in the memory of any allowed GPU ({why}): {' or '.join(fix)}"
    on_time = [s for s in fitting if not (s.has("deadline") or s.has("spot_risk") or s.has("reservation"))]
    if not on_time:
        fastest = min(fitting, key=lambda s: (s.needed_deadline, _sort_key(s)))
        assert job.deadline_at is not None and fastest.needed_deadline is not None
        o, deadline = fastest.option, job.deadline_at
        if o.finish_by > deadline:
            when = f"{_hours(o.finish_by - deadline)} after the deadline"
        else:
            when = f"inside the {policy.deadline_safety:.0%} safety margin before the deadline"
        fix = [f"move the deadline to {_fmt_time(_ceil_minute(fastest.needed_deadline))} or later",
               *_relaxation_hints(job, offers, slots, now, policy, taken)]
        return f"fastest option ({_label(o)}) finishes {_fmt_time(o.finish_by)}, {when}: {' or '.join(fix)}"
    over = [s for s in on_time if s.has("budget")]
    if over and spec.policy.budget is not None:
        cheapest = min(over, key=lambda s: (s.budget_total.amount if s.budget_total else Decimal(0), _sort_key(s)))
        budget = spec.policy.budget
        assert cheapest.budget_total is not None
        cost = policy.fx.convert(cheapest.option.est_cost, budget.currency)
        spent = f" plus {policy.fx.convert(job.spent, budget.currency)} already spent" if job.spent else ""
        need = Money(amount=cheapest.budget_total.amount.to_integral_value(rounding=ROUND_CEILING),
                     currency=budget.currency)
        fix = [f"raise policy.budget to at least {need.amount} {need.currency}",
               *_relaxation_hints(job, offers, slots, now, policy, taken)]
        return (f"cheapest option meeting the deadline costs {cost}{spent}, over the {budget} budget: "
                f"{' or '.join(fix)}")
    return f"no option is feasible; the best one: {scored[0].option.why}"


def _no_match_reason(job: PlanJob, offers: Sequence[Offer], slots: Sequence[FleetSlot],
                     policy: PlannerPolicy) -> str:
    spec = job.spec
    wanted = [f"{spec.resources.gpu_count} x {'/'.join(spec.resources.gpus) if spec.resources.gpus else 'any GPU'}"]
    if spec.where.providers:
        wanted.append(f"on {'/'.join(spec.where.providers)}")
    if spec.where.regions:
        wanted.append(f"in {'/'.join(spec.where.regions)}")
    if spec.policy.capacity != "auto":
        wanted.append(f"as {spec.policy.capacity}")
    fixes = []
    for relaxed, describe in _relaxations(job):
        cands = _candidates(relaxed, offers, slots, policy)
        if cands:
            first = min(cands, key=lambda c: (c.offer.key, c.capacity.value))
            fixes.append(describe(first.offer, first.capacity))
    if not fixes:
        fixes = [f"no offer anywhere has {spec.resources.gpu_count} GPU(s) per machine: change resources.gpu_count"]
    return f"no offer matches the job ({' '.join(wanted)}): {' or '.join(fixes)}"


def _relaxations(job: PlanJob) -> list[tuple[PlanJob, object]]:
    """The job with one of its own filters lifted, and how to tell the user to lift it."""
    spec = job.spec
    out: list[tuple[PlanJob, object]] = []

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


def _relaxation_hints(job: PlanJob, offers: Sequence[Offer], slots: Sequence[FleetSlot], now: datetime,
                      policy: PlannerPolicy, taken: dict[int, str]) -> list[str]:
    """For each filter of the job that, lifted alone, yields an option (stock permitting), say how."""
    hints = []
    for relaxed, describe in _relaxations(job):
        usable = [s for s in _score_all(relaxed, offers, slots, now, policy, taken)
                  if s.feasible or s.only_transient]
        if usable:
            hint = describe(usable[0].option, usable[0].option.capacity)  # type: ignore[operator]
            if hint not in hints:
                hints.append(hint)
    return hints


# --- formatting -------------------------------------------------------------------


def _label(o: Option) -> str:
    nodes = ""
    return f"{o.provider} {o.instance_type}{nodes} {o.capacity.value} in {o.zone}"


def _hours(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 3600:.1f} h"


def _fmt_time(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _ceil_minute(dt: datetime) -> datetime:
    floored = dt.replace(second=0, microsecond=0)
    return floored if floored == dt else floored + timedelta(minutes=1)
