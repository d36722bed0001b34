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

The cost model (``planner_rank.Scorer._timing``):

* hours ``h`` come from ``perf.estimate`` for the GPU, count, vCPUs and nodes.
* spot: ``n = rate x nodes x h`` expected interruptions (any node's reclaim
  stops a gang job). Each costs ``restart_hours`` plus lost work: half an epoch
  for training (it resumes from ``last.pt``), half a shard for inference (it
  resumes at its first unfinished shard, ``infer_shards``), half the job for val /
  export (they restart from scratch). Lost work in total is capped at ``h``:
  past that the linear model stops meaning anything, and spot has lost anyway.
* expected hours = ``h + n x restart + min(n x lost, h)``; cost = expected
  hours x hourly price x nodes, converted into ``policy.currency``.
* reserved capacity costs nothing more (already paid); a warm instance costs
  its capacity's hourly price and needs no boot.

Deadlines (``planner_rank.Scorer._timing``): the expected finish must leave
``deadline_safety`` of the remaining time to spare, and spot must also survive
a bad run (see there). Budgets count ``PlanJob.spent`` as well.

Choice: reserved capacity first (no marginal cost), then the lowest expected
cost, a warm machine winning a tie, then the earliest finish. Jobs are planned
by priority, deadline, submission and id; each fleet slot goes to one job.
A job leaves spot (``spot_allowed``) when one more reclaim would leave it no
restart to spare under its ``max_restarts`` (the job fails past that), or once
it has been preempted ``max_preemptions_before_on_demand`` times where that cap
is set; unless its job file asks for spot only: that choice stands. The job's own
``max_restarts`` is the bound by default: a flat cap of 6 cost 5% more on the
month trace (jobs that would have finished on spot finished on on-demand).

Speed (``planner_rank``): candidates that share every number (same cloud,
region, GPU setup, price, reclaim rate; other zones and instance types) are
priced once per job as a group, ``perf.figures_for`` reads a job once for all
its GPU setups, and a heap yields candidates best first, timing and pricing a
bundle of groups only when the ranking reaches it, so mostly only what a
decision shows is computed. Options and decisions are built from fields the
planner typed itself, without validating them again (``built``). Reasons read
the candidates' numbers, not built options. The ranking is exactly the
per-candidate one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from decimal import ROUND_CEILING
from typing import Literal, TypeVar

from scheduler.models import Capacity, Frozen, Offer
from scheduler.money import FxRates, Money
from scheduler.planner.inputs import FleetSlot, Measured, PlanJob, PlannerPolicy, Source, TeamBudget
from scheduler.planner.rank import Book, Filter, Group, Member, Pick, Scored, Scorer
from scheduler.planner.rank import fmt_hours as _hours
from scheduler.planner.rank import fmt_time as _fmt_time

# Runners-up a decision keeps (the daemon stores them with the job: ``GET /jobs/{id}``; ``gpusched
# plan`` lists every option). Each costs an ``Option`` and a comparison sentence: eight of them were
# 40% of a 10,000-job plan (BENCHMARKS.md, planner v5).
MAX_ALTERNATIVES = 3

Action = Literal["launch", "reuse", "wait", "refuse"]


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


_M = TypeVar("_M", bound=Frozen)
_new, _set = object.__new__, object.__setattr__


def built(cls: type[_M], fields: dict) -> _M:
    """``cls.model_validate(fields)`` for fields the planner made itself, already of the field types, in
    field order: what ``model_construct`` does, without its per-field loop (``test_planner`` checks that
    each one built equals its validated copy). Every field is set, so all share one set of field names, as
    ``model_construct(_fields_set=...)`` allows: the models are frozen and ``model_copy`` copies the set.
    Validating ~10 options a job cost more than ranking them, and each decision's options outlive the
    call: one object less each is a third fewer for the garbage collector to go through."""
    m = _new(cls)
    _set(m, "__dict__", fields)
    _set(m, "__pydantic_fields_set__", _ALL_SET[cls])
    _set(m, "__pydantic_extra__", None)
    _set(m, "__pydantic_private__", None)
    return m


_ALL_SET = {cls: set(cls.model_fields) for cls in (Option, Decision)}  # never changed (see ``built``)
_OPTION_FIELDS = _ALL_SET[Option]


# --- candidates -------------------------------------------------------------------


_SPOT, _ON_DEMAND, _RESERVED = (frozenset({c}) for c in (Capacity.spot, Capacity.on_demand, Capacity.reserved))
_OFF_SPOT, _ANY = frozenset({Capacity.on_demand, Capacity.reserved}), frozenset(Capacity)


def spot_allowed(preemptions: int, max_restarts: int, policy: PlannerPolicy) -> bool:
    """May a job of capacity ``auto`` go (back) on spot? Not when a reclaim would leave fewer than
    ``SPARE_RESTARTS`` of its ``max_restarts`` (a job lost more than ``max_restarts`` times fails, and
    on-demand machines are lost too, if rarely), nor once it has been reclaimed
    ``max_preemptions_before_on_demand`` times where the policy sets that. The steering rule asks the
    same before a move to spot, so the two never pass a job back and forth."""
    if policy.strategy != "gpusched":
        return policy.naive_spot
    cap = policy.max_preemptions_before_on_demand
    return (cap is None or preemptions < cap) and max_restarts - (preemptions + 1) >= SPARE_RESTARTS


SPARE_RESTARTS = 1  # restarts kept for losses that are not reclaims (see ``spot_allowed``)


def _allowed_capacities(wanted: str, preemptions: int, max_restarts: int,
                        policy: PlannerPolicy) -> frozenset[Capacity]:
    if policy.strategy == "on-demand":
        return _ON_DEMAND
    if policy.naive_spot:
        return _SPOT
    if wanted == "spot":
        # The user asked for spot only; their choice stands even after preemptions
        # (max_restarts bounds the retries elsewhere).
        return _SPOT
    if wanted == "on-demand":
        return _ON_DEMAND
    if wanted == "reserved":
        return _RESERVED
    return _ANY if spot_allowed(preemptions, max_restarts, policy) else _OFF_SPOT


def _filter(job: PlanJob, policy: PlannerPolicy) -> Filter:
    spec = job.spec
    res, where = spec.resources, spec.where
    return Filter(res.gpus, res.gpu_count, where.providers, where.regions,
                  _allowed_capacities(spec.policy.capacity, job.preemptions, spec.policy.max_restarts, policy),
                  res.nodes == 1)


def _canonical_fleet(fleet: Sequence[FleetSlot]) -> list[FleetSlot]:
    return sorted(
        fleet,
        key=lambda s: (s.kind, s.instance_id or "", s.offer.key, s.capacity.value,
                       s.until.isoformat() if s.until else ""),
    )


class _Planning:
    """One job being planned: its groups scored once (relaxed filters reuse them), and its ranking."""

    def __init__(self, job: PlanJob, book: Book) -> None:
        self.job, self.book = job, book
        self.scorer = Scorer(book, job)
        self.ranking = self.scorer.rank(_filter(job, book.policy))

    def option(self, pick: Pick, why: str | None = None) -> Option:
        """The ``Option`` a candidate makes (built from fields of the right types: see ``built``)."""
        s, mem, rank = pick
        t = s.timing
        if why is None:
            blockers = s.blockers(mem, self.job, self.book)
            why = "; ".join(b.text for b in blockers) if blockers else "feasible"
        hours, interruptions = t.shown
        o = _new(Option)  # built(Option, ...), inlined: ~9 a job
        _set(o, "__dict__", {**mem.fields, "est_hours": hours, "price_per_hour": s.hourly,
                             "est_cost": self.book.money(s.cost), "finish_by": t.finish,
                             "expected_interruptions": interruptions, "physical_batch": t.physical_batch,
                             "feasible": rank == 0, "why": why})
        _set(o, "__pydantic_fields_set__", _OPTION_FIELDS)
        _set(o, "__pydantic_extra__", None)
        _set(o, "__pydantic_private__", None)
        return o

    def versus(self, pick: Pick, choice: Pick) -> Option:
        """A runner-up; a feasible one says how it compares with the choice."""
        if pick[2] != 0:
            return self.option(pick)
        s, best = pick[0], choice[0]
        extra = s.cost - best.cost
        if extra > 0:
            why = self.book.more(extra)
        else:
            later = (s.timing.finish - best.timing.finish).total_seconds() / 3600
            why = f"feasible; same cost, finishes {abs(later):.1f} h {'later' if later >= 0 else 'earlier'}"
        return self.option(pick, why)


# --- public API -------------------------------------------------------------------


def options_for(job: PlanJob, offers: Sequence[Offer], fleet: Sequence[FleetSlot], now: datetime,
                policy: PlannerPolicy, *, measured: Measured | None = None) -> list[Option]:
    """Every candidate the job's filters allow, with feasibility and why, best first.

    When the job has a feasible option, the first one here equals the choice
    ``plan`` makes for this job alone.
    """
    p = _Planning(job, Book(offers, _canonical_fleet(fleet), now, policy, measured))
    picks = list(p.ranking.picks())
    if not picks or picks[0][2] != 0:
        return [p.option(pick) for pick in picks]
    choice = p.option(picks[0], _choice_why(picks[0], job))
    return [choice, *(p.versus(pick, picks[0]) for pick in picks[1:])]


def plan(jobs: Sequence[PlanJob], offers: Sequence[Offer], fleet: Sequence[FleetSlot], now: datetime,
         policy: PlannerPolicy, *, measured: Measured | None = None,
         team_budgets: Mapping[str, TeamBudget] | None = None,
         alternatives: int = MAX_ALTERNATIVES) -> list[Decision]:
    """One decision per job, in planning order (priority desc, deadline asc, submitted asc, id),
    each with up to ``alternatives`` runners-up (one zone per instance type and capacity).

    Each fleet slot goes to at most one job: the first in planning order that
    chooses it; later jobs see it as held. ``measured`` passes learned training
    rates on to ``perf.estimate``. ``team_budgets``: a job whose expected cost
    does not fit what is left of its team's month waits (or is refused when it
    would not fit even a whole month); jobs planned earlier in the same call
    count against the team first.
    """
    book = Book(offers, _canonical_fleet(fleet), now, policy, measured)
    left = {team: b.left for team, b in (team_budgets or {}).items()}
    decisions = []
    for job in sorted(jobs, key=_planning_order):
        decision, slot = _decide(_Planning(job, book), alternatives)
        budget = (team_budgets or {}).get(job.spec.team)
        if budget is not None and decision.choice is not None and decision.action in ("launch", "reuse"):
            decision, fits = _within_team_budget(decision, job.spec.team, budget, left, policy.fx)
            if not fits:
                slot = None
        if slot is not None:
            book.taken[slot] = job.id
        decisions.append(decision)
    return decisions


def _within_team_budget(d: Decision, team: str, budget: TeamBudget, left: dict[str, Money],
                        fx: FxRates) -> tuple[Decision, bool]:
    assert d.choice is not None
    cost = fx.convert(d.choice.est_cost, budget.left.currency)
    if cost <= left[team]:
        left[team] = left[team] - cost
        return d, True
    if cost > budget.monthly:
        reason = (f"team {team}'s monthly budget is {budget.monthly.quantize()} and this job alone is expected to "
                  f"cost {cost.quantize()}: raise the team budget (GPUSCHED_TEAM_BUDGETS) or make the job cheaper")
        return d.model_copy(update={"action": "refuse", "choice": None, "reason": reason}), False
    reason = (f"team {team} has {max(left[team], Money.zero(cost.currency)).quantize()} left of its "
              f"{budget.monthly.quantize()} monthly budget and this job is expected to cost {cost.quantize()}: "
              "it waits for budget (next month, or a raised GPUSCHED_TEAM_BUDGETS)")
    return d.model_copy(update={"action": "wait", "choice": None, "reason": reason}), False


def _planning_order(job: PlanJob) -> tuple:
    deadline = job.deadline_at
    return (-job.spec.policy.priority, deadline is None, deadline or job.submitted_at, job.submitted_at, job.id)


# --- decisions --------------------------------------------------------------------


def _decide(p: _Planning, limit: int) -> tuple[Decision, int | None]:
    job = p.job
    first = p.ranking.first()
    if first is None:
        if job.spec.policy.capacity == "reserved":
            # Units of reserved capacity free up as other jobs finish: wait rather than refuse.
            return _decision(job, "wait", None, (), "waiting: no free reserved capacity matches the job "
                                                   "(set policy.capacity: auto to use spot or on-demand)"), None
        return _decision(job, "refuse", None, (), _no_match_reason(p)), None
    if first[2] == 0:
        choice = p.option(first, _choice_why(first, job))
        action: Action = "launch" if choice.source == "new" else "reuse"
        runners_up = p.ranking.distinct({first[1].shape}, limit)
        alternatives = tuple(p.versus(pick, first) for pick in runners_up)
        return _decision(job, action, choice, alternatives, _choice_reason(choice, job)), first[0].group.slot
    alternatives = tuple(p.option(pick) for pick in p.ranking.distinct(set(), limit))
    if first[2] == 1:  # only transient blockers stand in the way of the best
        return _decision(job, "wait", None, alternatives, _wait_reason(p, first)), None
    return _decision(job, "refuse", None, alternatives, _refusal(p, first)), None


def _decision(job: PlanJob, action: Action, choice: Option | None, alternatives: tuple[Option, ...],
              reason: str) -> Decision:
    return built(Decision, {"job_id": job.id, "action": action, "choice": choice, "alternatives": alternatives,
                            "reason": reason})


def _choice_why(pick: Pick, job: PlanJob) -> str:
    g = pick[0].group
    if g.capacity is Capacity.reserved:
        what = "reserved capacity, already paid"
    else:
        what = "cheapest meeting the deadline" if job.deadline_at is not None else "cheapest"
    return f"{what}; warm, no boot" if g.source == "warm" else what


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


def _wait_reason(p: _Planning, first: Pick) -> str:
    """``first``: the best candidate, blocked by stock, recent capacity errors or a held slot only."""
    counts = {"stock": 0, "avoid": 0}
    holders = set()
    for s in p.ranking.scored:
        if s.structural:
            continue
        if s.taken_by is not None:
            holders.add(s.taken_by)
        for mem in s.group.members:
            counts["stock"] += mem.sold_out
            counts["avoid"] += mem in s.avoided
    parts = [f"{text} ({counts[kind]})" for kind, text in (("stock", "sold out"),
                                                            ("avoid", "recently out of capacity")) if counts[kind]]
    if holders:
        parts.append(f"held for higher-priority job {', '.join(sorted(holders))}")
    return (f"waiting: every option that meets the deadline and budget is {' or '.join(parts)}; "
            f"best when free: {_pick_label(first[0], first[1])}, ~{p.book.money(first[0].cost)}")


# --- refusals ---------------------------------------------------------------------


def _refusal(p: _Planning, first: Pick) -> str:
    """Why nothing can work even once stock returns, and what in the job file to change."""
    job, bundles = p.job, p.ranking.bundles
    if all(t.est_blocker is not None for t, _ in bundles):  # nothing fits or can be estimated
        scored = p.ranking.scored
        if not any(s.timing.est_blocker and s.timing.est_blocker.kind == "memory" for s in scored):
            return f"cannot estimate the job: {first[0].blockers(first[1], job, p.book)[-1].text}"
        memory = next(b.text for s, _, _ in p.ranking.picks() if (b := s.timing.est_blocker) and b.kind == "memory")
        fix = _relaxation_hints(p) or ["use a smaller model or img_size"]
        return f"the job fits no allowed GPU ({memory}): {' or '.join(fix)}"
    on_time = [groups for t, groups in bundles if t.est_blocker is None and t.late is None]
    if not on_time and job.deadline_at is not None:
        return _deadline_refusal(p)
    over = [s for groups in on_time for s in map(p.scorer.scored, groups) if s.over_budget]
    if over:
        return _budget_refusal(p, over)
    return f"no option is feasible; the best one: {p.option(first).why}"


def _deadline_refusal(p: _Planning) -> str:
    now, safety = p.book.now, p.book.policy.deadline_safety
    soonest = min(t.needed(now, safety) for t, _ in p.ranking.bundles if t.est_blocker is None)
    s, mem, _ = p.ranking.best(lambda t: t.est_blocker is None and t.needed(now, safety) == soonest)
    job = p.job
    assert job.deadline_at is not None
    finish, deadline = s.timing.finish, job.deadline_at
    if finish > deadline:
        when = f"{_hours(finish - deadline)} after the deadline"
    else:
        when = f"inside the {p.book.policy.deadline_safety:.0%} safety margin before the deadline"
    fix = [f"move the deadline to {_fmt_time(_ceil_minute(soonest))} or later", *_relaxation_hints(p)]
    return f"fastest option ({_pick_label(s, mem)}) finishes {_fmt_time(finish)}, {when}: {' or '.join(fix)}"


def _budget_refusal(p: _Planning, over: list[Scored]) -> str:
    job, fx = p.job, p.book.policy.fx
    budget = job.spec.policy.budget
    assert budget is not None
    total, _key, _mem, _rank, s = min((s.budget_total, *s.best(), s) for s in over)
    assert total is not None
    cost = fx.convert(p.book.money(s.cost), budget.currency)
    spent = f" plus {fx.convert(job.spent, budget.currency)} already spent" if job.spent else ""
    need = total.to_integral_value(rounding=ROUND_CEILING)
    fix = [f"raise policy.budget to at least {need} {budget.currency}", *_relaxation_hints(p)]
    what = "cheapest option meeting the deadline" if job.deadline_at is not None else "cheapest option"
    return f"{what} costs {cost}{spent}, over the {budget} budget: {' or '.join(fix)}"


def _no_match_reason(p: _Planning) -> str:
    spec = p.job.spec
    gpus = "/".join(spec.resources.gpus) if spec.resources.gpus else "any GPU"
    wanted = [f"{spec.resources.gpu_count} x {gpus}"]
    if spec.where.providers:
        wanted.append(f"on {'/'.join(spec.where.providers)}")
    if spec.where.regions:
        wanted.append(f"in {'/'.join(spec.where.regions)}")
    if spec.policy.capacity != "auto":
        wanted.append(f"as {spec.policy.capacity}")
    fixes = []
    for relaxed, describe in _relaxations(p.job, p.book.policy):
        groups = [g for bundle in p.book.matching(relaxed) for g in bundle]
        if groups:  # the first candidate by offer key and capacity, in input order on a tie
            _, _, _, mem, g = min((m.offer.key, g.capacity.value, m.tail[-1], m, g) for g in groups for m in g.members)
            fixes.append(describe(mem.offer, g.capacity))
    if not fixes:
        fixes = [f"no offer has {spec.resources.gpu_count} GPU(s) per machine: change resources.gpu_count"]
    return f"no offer matches the job ({' '.join(wanted)}): {' or '.join(fixes)}"


_Hint = Callable[["Offer | Group", Capacity], str]  # both carry gpu, region and provider


def _relaxations(job: PlanJob, policy: PlannerPolicy) -> list[tuple[Filter, _Hint]]:
    """The job's filter with one of its own filters lifted, and how to tell the user to lift it."""
    spec = job.spec
    f = _filter(job, policy)
    out: list[tuple[Filter, _Hint]] = []
    if spec.resources.gpus is not None:
        out.append((f._replace(gpus=None), lambda o, c: f"allow {o.gpu}"))
    if spec.policy.capacity != "auto":
        out.append((f._replace(
                        capacities=_allowed_capacities("auto", job.preemptions, spec.policy.max_restarts, policy)),
                    lambda o, c: f"allow {c.value}"))
    if spec.where.regions is not None:
        out.append((f._replace(regions=None), lambda o, c: f"allow region {o.region}"))
    if spec.where.providers is not None:
        out.append((f._replace(providers=None), lambda o, c: f"allow {o.provider}"))
    return out


def _relaxation_hints(p: _Planning) -> list[str]:
    """For each filter of the job that, lifted alone, yields a usable option (stock permitting), say how."""
    if p.scorer.past_deadline:
        return []  # lifting a filter cannot bring back a deadline that has passed
    hints: list[str] = []
    for relaxed, describe in _relaxations(p.job, p.book.policy):
        first = p.scorer.first_usable(relaxed)  # feasible, or only waiting on stock
        if first is not None:
            hint = describe(first[0].group, first[0].group.capacity)
            if hint not in hints:
                hints.append(hint)
    return hints


# --- formatting -------------------------------------------------------------------


def _label(o: Option) -> str:
    return f"{o.provider} {o.instance_type} {o.capacity.value} in {o.zone}"


def _pick_label(s: Scored, mem: Member) -> str:
    """``_label`` of the option a candidate would make, without making it."""
    offer = mem.offer
    return f"{offer.provider} {offer.instance_type} {s.group.capacity.value} in {offer.zone}"


def _ceil_minute(dt: datetime) -> datetime:
    floored = dt.replace(second=0, microsecond=0)
    return floored if floored == dt else floored + timedelta(minutes=1)
