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

The expected cost of a candidate (spot reclaims, restart overhead, lost work,
warm reuse, reserved capacity at zero marginal cost), and why spot wins when it
does: ``planner.cost``.

Deadlines (``rank.Scorer._time``): the expected finish must leave
``deadline_safety`` of the remaining time to spare, and spot must also survive
a bad run (see there). Budgets count ``PlanJob.spent`` as well.

What a job may use: what its job file allows (``planner.allowed``: its offer
filters and ``policy.capacity``), narrowed by the planner (``_planner_capacities``).

Choice: reserved capacity first (no marginal cost), then the lowest expected
cost, a warm machine winning a tie, then the earliest finish. Jobs are planned
by priority, deadline, submission and id; each fleet slot goes to one job.
A job leaves spot (``spot_allowed``) when one more loss without progress (in a row) would leave it no
restart to spare under its ``max_restarts`` (the job fails past that), or once
it has been preempted ``max_preemptions_before_on_demand`` times where that cap
is set; unless its job file asks for spot only: that choice stands. The job's own
``max_restarts`` is the bound by default, not a flat cap: a job that would have
finished on spot stays there.

Speed (``planner.rank`` and ``planner.heap``): candidates that share every number (same cloud,
region, GPU setup, price, reclaim rate; other zones and instance types) are
priced once per job as a group, ``perf.figures_for`` reads a job once for all
its GPU setups, and a heap yields candidates best first, timing and pricing a
bundle of groups only when the ranking reaches it, so mostly only what a
decision shows is computed. Every option is made by ``_Planning.option``; options
and decisions are built from fields the planner typed itself, without validating
them again (``built``). Reasons read
the candidates' numbers, not built options. The ranking is exactly the
per-candidate one. A caller that plans the same offers again (the tick) passes
the ``book.Market`` that grouped them, and the cyclic garbage collector is
paused for the call (``collector_paused``).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from decimal import ROUND_CEILING
from typing import Literal, TypedDict, TypeVar, Unpack

from scheduler.models import Capacity, Frozen, Offer
from scheduler.money import FxRates, Money
from scheduler.planner.allowed import OfferFilter, job_capacities
from scheduler.planner.book import CandidateBook, Filter, Group, Market, Member, Rank, Rows
from scheduler.planner.heap import need_tolerance, ranking
from scheduler.planner.inputs import FleetSlot, Measured, PlanJob, PlannerPolicy, Source, TeamBudget
from scheduler.planner.rank import Pick, Scored, Scorer, Timing
from scheduler.planner.rank import fmt_hours as _hours
from scheduler.planner.rank import fmt_time as _fmt_time

# Runners-up a decision keeps (the daemon stores them with the job: ``GET /jobs/{id}``; ``gpusched
# plan`` lists every option). Each costs an ``Option`` and a comparison sentence, a large share of
# planning a big queue, and finding more distinct ones walks deeper into the ranking.
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
_T = TypeVar("_T")
_new, _set = object.__new__, object.__setattr__
_new_tuple = tuple.__new__


def built(cls: type[_M], fields: dict) -> _M:
    """``cls.model_validate(fields)`` for fields the planner made itself, already of the field types, in
    field order: what ``model_construct`` does, without its per-field loop (``test_planner`` checks that
    each one built equals its validated copy). Every field is set, so all share one set of field names, as
    ``model_construct(_fields_set=...)`` allows: the models are frozen and ``model_copy`` copies the set.
    Validating a job's options costs more than ranking them, and each decision's options outlive the
    call: one object less each leaves the garbage collector less to go through."""
    m = _new(cls)
    _set(m, "__dict__", fields)
    _set(m, "__pydantic_fields_set__", _ALL_SET[cls])
    _set(m, "__pydantic_extra__", None)
    _set(m, "__pydantic_private__", None)
    return m


# Never changed (see ``built``).
_ALL_SET: dict[type[Frozen], set[str]] = {cls: set(cls.model_fields) for cls in (Option, Decision)}


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for one planner call, as it was after.

    The planner makes no reference cycles: what it allocates is freed by reference counting as it
    goes, or returned. Yet the ~11 objects each decision keeps alive set off collections of the whole
    process heap while a big queue is planned (2 full ones in 9,820 jobs, ~0.46 s of the call's
    ~1.9 s), which found nothing to free. Paused, the decisions are looked at once, by the young
    collection the return sets off (0.06-0.14 s for 9,820 on a busy machine); a caller that keeps them
    long may see them in one full collection later, as it would have anyway. Only the collector's
    timing changes, never a result; a caller that had it off keeps it off.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


# --- candidates -------------------------------------------------------------------


_SPOT, _ON_DEMAND = frozenset({Capacity.spot}), frozenset({Capacity.on_demand})
# Read once: an enum member is slow to look up.
_FEASIBLE, _WAITING, _CANNOT_RUN = Rank.FEASIBLE, Rank.WAITING, Rank.CANNOT_RUN


def spot_allowed(preemptions: int, max_restarts: int, policy: PlannerPolicy, restarts: int | None = None) -> bool:
    """May a job of capacity ``auto`` go (back) on spot? Not when a reclaim would leave fewer than
    ``SPARE_RESTARTS`` of its ``max_restarts`` (``restarts``: the losses in a row that spent it, by default
    every preemption; a job whose losses outrun ``max_restarts`` fails, and on-demand machines are lost too,
    if rarely), nor once it has been reclaimed
    ``max_preemptions_before_on_demand`` times where the policy sets that. The steering rule asks the
    same before a move to spot, so the two never pass a job back and forth."""
    if policy.strategy != "gpusched":
        return policy.naive_spot
    cap = policy.max_preemptions_before_on_demand
    spent = preemptions if restarts is None else restarts
    return (cap is None or preemptions < cap) and max_restarts - (spent + 1) >= SPARE_RESTARTS


SPARE_RESTARTS = 1  # restarts kept for losses that are not reclaims (see ``spot_allowed``)


def _planner_capacities(wanted: str, preemptions: int, max_restarts: int,
                        policy: PlannerPolicy, restarts: int | None = None) -> frozenset[Capacity]:
    """The capacities the planner lets a job use whose ``policy.capacity`` is ``wanted``: what its job file
    allows (``allowed.job_capacities``), less spot for ``auto`` once ``spot_allowed`` says no. The
    simulator's baselines replace it: on-demand for everything, or spot for everything."""
    if policy.strategy == "on-demand":
        return _ON_DEMAND
    if policy.naive_spot:
        return _SPOT
    allowed = job_capacities(wanted)
    # A job that asked for spot only keeps it even after preemptions (max_restarts bounds the retries
    # elsewhere): only ``auto`` leaves spot.
    if wanted == "auto" and not spot_allowed(preemptions, max_restarts, policy, restarts):
        return allowed - _SPOT
    return allowed


def _filter(job: PlanJob, policy: PlannerPolicy) -> Filter:
    spec = job.spec
    capacities = _planner_capacities(spec.policy.capacity, job.preemptions, spec.policy.max_restarts, policy,
                                     job.restarts)
    return _new_tuple(Filter, (OfferFilter.of(spec), capacities, spec.resources.nodes == 1))  # Filter(...), faster


def _rows(job: PlanJob, book: CandidateBook, by_gpu: int) -> Rows:
    """``book.rows(_filter(job, book.policy), nodes, by_gpu)``, kept in the book by every field of the job
    that ``_filter`` reads: jobs of one filter and kind share it."""
    spec = job.spec
    res, where, policy = spec.resources, spec.where, spec.policy
    key = (res.gpus, res.gpu_count, where.providers, where.regions, res.nodes, policy.capacity, policy.max_restarts,
           job.preemptions, job.restarts, by_gpu)
    got = book.by_job.get(key)
    if got is None:
        got = book.by_job[key] = book.rows(_filter(job, book.policy), res.nodes, by_gpu)
    return got


def _canonical_fleet(fleet: Sequence[FleetSlot]) -> list[FleetSlot]:
    return sorted(
        fleet,
        key=lambda s: (s.kind, s.instance_id or "", s.offer.key, s.capacity.value,
                       s.until.isoformat() if s.until else ""),
    )


class _Planning:
    """One job being planned: its groups scored once (relaxed filters reuse them), and its ranking."""

    __slots__ = ("job", "book", "scorer", "ranking")

    def __init__(self, job: PlanJob, book: CandidateBook, deadline: datetime | None = None) -> None:
        """``deadline``: the job's in ``now``'s zone object (``CandidateBook.in_now_zone``), when the caller has it."""
        self.job, self.book = job, book
        self.scorer = Scorer(book, job, deadline)
        self.ranking = ranking(self.scorer, _rows(job, book, self.scorer._by_gpu))

    def option(self, pick: Pick, choice: Pick | None = None) -> Option:
        """The ``Option`` a candidate makes: every option the planner shows is made here.

        Its ``why``: for ``choice`` itself, why it was chosen; for a feasible runner-up, how it
        compares with ``choice``; otherwise its blockers ("feasible" when there are none).
        """
        s, mem, rank = pick
        t, feasible = s.timing, rank is _FEASIBLE
        if feasible and choice is not None:
            why = _choice_why(s, self.job) if pick is choice else self._versus(s, choice.scored)
        elif s.late_only and not mem.sold_out:  # most blocked options: just late (a job past its deadline)
            sc = self.scorer  # the one blocker ``Scored.blockers`` lists, without the list
            why = t.late_text(sc.deadline, sc.margin)  # type: ignore[arg-type]  # late: a deadline
        else:
            blockers = s.blockers(mem, self.scorer)
            why = "; ".join(b.text for b in blockers) if blockers else "feasible"
        # The member's fields, then the rest in field order (item by item: faster than ``{**fields, ...}``).
        hours, interruptions = t.shown
        fields = mem.option_fields.copy()
        fields["est_hours"] = hours
        fields["price_per_hour"] = s.hourly
        fields["est_cost"] = self.book.money_of(s.prefix.cents, s)
        fields["finish_by"] = t.finish
        fields["expected_interruptions"] = interruptions
        fields["physical_batch"] = t.physical_batch
        fields["feasible"] = feasible
        fields["why"] = why
        return built(Option, fields)

    def _versus(self, s: Scored, best: Scored) -> str:
        """A feasible runner-up's why: what it costs more than the choice, or when it finishes."""
        extra = s.prefix.cents - best.prefix.cents
        if extra > 0:
            return self.book.more(extra, s, best)
        later = (s.timing.finish - best.timing.finish).total_seconds() / 3600
        return "feasible; same cost, finishes %.1f h %s" % (abs(later), "later" if later >= 0 else "earlier")


# --- public API -------------------------------------------------------------------


def options_for(job: PlanJob, offers: Sequence[Offer], fleet: Sequence[FleetSlot], now: datetime,
                policy: PlannerPolicy, *, measured: Measured | None = None) -> list[Option]:
    """Every candidate the job's filters allow, with feasibility and why, best first.

    When the job has a feasible option, the first one here equals the choice
    ``plan`` makes for this job alone.
    """
    with collector_paused():
        p = _Planning(job, CandidateBook(offers, _canonical_fleet(fleet), now, policy, measured))
        picks = list(p.ranking.picks())
        choice = picks[0] if picks and picks[0].rank is Rank.FEASIBLE else None
        return [p.option(pick, choice) for pick in picks]


def plan(jobs: Sequence[PlanJob], offers: Sequence[Offer], fleet: Sequence[FleetSlot], now: datetime,
         policy: PlannerPolicy, *, measured: Measured | None = None,
         team_budgets: Mapping[str, TeamBudget] | None = None,
         alternatives: int = MAX_ALTERNATIVES, market: Market | None = None) -> list[Decision]:
    """One decision per job, in planning order (priority desc, deadline asc, submitted asc, id),
    each with up to ``alternatives`` runners-up (one zone per instance type and capacity).

    Each fleet slot goes to at most one job: the first in planning order that
    chooses it; later jobs see it as held. ``measured`` passes learned training
    rates on to ``perf.estimate``. ``team_budgets``: a job whose expected cost
    does not fit what is left of its team's month waits (or is refused when it
    would not fit even a whole month); jobs planned earlier in the same call
    count against the team first. ``market``: the offers grouped by an earlier call
    (``book.market_for``), used when it is these offers under this policy; the
    decisions are the same with it or without.
    """
    with collector_paused():
        return _plan(jobs, offers, fleet, now, policy, measured, team_budgets, alternatives, market)


def _plan(jobs: Sequence[PlanJob], offers: Sequence[Offer], fleet: Sequence[FleetSlot], now: datetime,
          policy: PlannerPolicy, measured: Measured | None, team_budgets: Mapping[str, TeamBudget] | None,
          alternatives: int, market: Market | None) -> list[Decision]:
    book = CandidateBook(offers, _canonical_fleet(fleet), now, policy, measured, market)
    budgets = team_budgets or {}
    left = {team: b.left for team, b in budgets.items()}
    decisions = []
    zone = book.in_now_zone
    keys = [_planning_order(job, zone) for job in jobs]
    for i in sorted(range(len(keys)), key=keys.__getitem__):  # as sorted(jobs, key=...): stable
        job, key = jobs[i], keys[i]
        decision, slot = _decide(_Planning(job, book, None if key[1] else key[2]), alternatives)
        budget = budgets.get(job.spec.team) if budgets else None
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


def _planning_order(job: PlanJob, zone: Callable[[datetime], datetime]) -> tuple:
    """``zone``: ``CandidateBook.in_now_zone``, the same instants, compared faster (``_plan`` hands the
    deadline so moved, the third item, on to the job's ``Scorer``)."""
    deadline, submitted = job.deadline_at, zone(job.submitted_at)
    return (-job.spec.policy.priority, deadline is None, submitted if deadline is None else zone(deadline), submitted,
            job.id)


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
    if first.rank is _FEASIBLE:
        choice = p.option(first, first)
        action: Action = "launch" if choice.source == "new" else "reuse"
        runners_up = p.ranking.distinct({first.member.shape}, limit)
        alternatives = tuple(p.option(pick, first) for pick in runners_up)
        cost = p.book.money_text(first.scored.prefix.cents, choice.est_cost)
        return (_decision(job, action, choice, alternatives, _choice_reason(choice, job, first.scored.timing, cost)),
                first.scored.group.slot)
    alternatives = tuple(p.option(pick) for pick in p.ranking.distinct(set(), limit))
    if first.rank is _WAITING:  # only transient blockers stand in the way of the best
        return _decision(job, "wait", None, alternatives, _wait_reason(p, first)), None
    return _decision(job, "refuse", None, alternatives, _refusal(p, first)), None


def _decision(job: PlanJob, action: Action, choice: Option | None, alternatives: tuple[Option, ...],
              reason: str) -> Decision:
    return built(Decision, {"job_id": job.id, "action": action, "choice": choice, "alternatives": alternatives,
                            "reason": reason})


def _choice_why(s: Scored, job: PlanJob) -> str:
    g = s.group
    if g.capacity is Capacity.reserved:
        what = "reserved capacity, already paid"
    else:
        what = "cheapest meeting the deadline" if job.deadline_at is not None else "cheapest"
    return f"{what}; warm, no boot" if g.source == "warm" else what


def _choice_reason(o: Option, job: PlanJob, t: Timing, cost: str) -> str:
    """``cost``: ``str(o.est_cost)`` (``CandidateBook.money_text``)."""
    plan_text = "~%.1f h, ~%s, done by %s" % (o.est_hours, cost, _fmt_time(o.finish_by))  # as rank.fmt_time's
    if o.expected_interruptions >= 0.05:
        plan_text += ", ~%.1f spot interruptions expected" % o.expected_interruptions
    if o.source == "warm":
        return f"reusing warm instance {o.instance_id} ({_label(o)}), no boot: {plan_text}"
    if o.capacity is Capacity.reserved:
        return f"using reserved capacity {_label(o)}, already paid for: {plan_text}"
    goal = "the cheapest option that meets the deadline" if job.deadline_at is not None else "the cheapest option"
    target = t.target
    if target is not None:  # a stint with a move (``Timing.leg``)
        plan_text += (f"; spot until about {_fmt_time(t.move)} (expected), then on-demand on {target.provider} "
                      f"{target.gpu_count}x {target.gpu}, as reclaims will leave too little time on spot")
    elif job.as_stint and o.capacity is Capacity.spot:
        plan_text += "; it moves to on-demand if reclaims leave too little time"  # ``PlanJob.stint``
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
            f"best when free: {_pick_label(first.scored.group, first.member)}, ~{p.book.money(first.scored.cost)}")


# --- refusals ---------------------------------------------------------------------


def _refusal(p: _Planning, first: Pick) -> str:
    """Why nothing can work even once stock returns, and what in the job file to change."""
    job = p.job
    if first.rank is _CANNOT_RUN:  # the best cannot run, so nothing fits or can be estimated
        scored = p.ranking.scored
        too_long = [b for s in scored if (b := s.timing.est_blocker) and b.kind == "too_long"]
        if too_long:  # it fits somewhere, but runs too long everywhere it fits
            fastest = min(too_long, key=lambda b: b.hours or 0.0)
            fix = ["use fewer epochs or images, a smaller img_size, or more GPUs or nodes", *_relaxation_hints(p)]
            return f"the job {fastest.text}: {' or '.join(fix)}"
        if not any(s.timing.est_blocker and s.timing.est_blocker.kind == "memory" for s in scored):
            return f"cannot estimate the job: {first.scored.blockers(first.member, p.scorer)[-1].text}"
        memory = next(b.text for s, _, _ in p.ranking.picks() if (b := s.timing.est_blocker) and b.kind == "memory")
        fix = _relaxation_hints(p) or ["use a smaller model or img_size"]
        return f"the job fits no allowed GPU ({memory}): {' or '.join(fix)}"
    if p.scorer.past_deadline:  # whatever can run is late, without timing every bundle to see it
        return _deadline_refusal(p)
    on_time = [groups for t, groups in p.ranking.bundles if t.est_blocker is None and t.late is None]
    if not on_time and job.deadline_at is not None:
        return _deadline_refusal(p)
    over = [s for groups in on_time for s in map(p.scorer.scored, groups) if s.over_budget]
    if over:
        return _budget_refusal(p, over)
    return f"no option is feasible; the best one: {p.option(first).why}"


def _deadline_refusal(p: _Planning) -> str:
    policy, timing = p.book.policy, p.scorer.timing
    soonest, fastest = _soonest(p.ranking.needs(1 / (1 - policy.deadline_safety)), p.book.now,
                                policy.deadline_safety, lambda timed: timing(timed.group))
    g, mem, t = p.ranking.fastest(fastest)
    deadline = p.scorer.deadline
    assert deadline is not None
    finish = t.finish
    if finish > deadline:
        when = f"{_hours(finish - deadline)} after the deadline"
    else:
        when = f"inside the {p.book.policy.deadline_safety:.0%} safety margin before the deadline"
    fix = [f"move the deadline to {_fmt_time(_ceil_minute(soonest))} or later", *_relaxation_hints(p)]
    return f"fastest option ({_pick_label(g, mem)}) finishes {_fmt_time(finish)}, {when}: {' or '.join(fix)}"


def _soonest(needs: Sequence[tuple[float, _T]], now: datetime, safety: float,
             timing: Callable[[_T], Timing]) -> tuple[datetime, list[tuple[Timing, _T]]]:
    """The earliest deadline any timing meets (``Timing.needed``), and the timings that meet it, each with what
    it was made from (``heap.Ranking.fastest`` reads their bundles there).

    ``needs``: per timing that may be the fastest, its ``needed`` in hours after ``now`` as floats compute
    it (``heap.Ranking.needs``), and what ``timing`` makes it from. Only the timings whose float is within
    ``heap.need_tolerance`` of the least are made and their ``needed`` computed exactly (a timedelta divided
    by a float, the slow part of a refusal): the others' cannot be the least, nor tie with it."""
    least = min(need for need, _ in needs)
    cutoff = least + need_tolerance(least, 1 / (1 - safety))
    soonest: datetime | None = None
    fastest: list[tuple[Timing, _T]] = []
    for approx, x in needs:
        if approx > cutoff:
            continue
        t = timing(x)
        need = t.needed(now, safety)
        if soonest is None or need < soonest:
            soonest, fastest = need, [(t, x)]
        elif need == soonest:
            fastest.append((t, x))
    assert soonest is not None  # a deadline refusal has a timing that can run
    return soonest, fastest


def _budget_refusal(p: _Planning, over: list[Scored]) -> str:
    job, fx = p.job, p.book.policy.fx
    budget = job.spec.policy.budget
    assert budget is not None
    total, _key, (s, _mem, _rank) = min((p.scorer.budget_total(s), *s.best()) for s in over)
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
            _, _, _, mem, g = min((m.offer.key, g.capacity.value, m.tail.seq, m, g) for g in groups for m in g.members)
            fixes.append(describe(mem.offer, g.capacity))
    if not fixes:
        fixes = [f"no offer has {spec.resources.gpu_count} GPU(s) per machine: change resources.gpu_count"]
    return f"no offer matches the job ({' '.join(wanted)}): {' or '.join(fixes)}"


_Hint = Callable[["Offer | Group", Capacity], str]  # both carry gpu, region and provider


class _Lifted(TypedDict, total=False):
    """The offer filters ``_relaxations`` lifts (None: any)."""

    gpus: None
    providers: None
    regions: None


def _relaxations(job: PlanJob, policy: PlannerPolicy) -> list[tuple[Filter, _Hint]]:
    """The job's filter with one of its own filters lifted, and how to tell the user to lift it."""
    spec = job.spec
    f = _filter(job, policy)

    def lifted(**offer_filters: Unpack[_Lifted]) -> Filter:
        return f._replace(offers=f.offers._replace(**offer_filters))

    out: list[tuple[Filter, _Hint]] = []
    if spec.resources.gpus is not None:
        out.append((lifted(gpus=None), lambda o, c: f"allow {o.gpu}"))
    if spec.policy.capacity != "auto":
        out.append((f._replace(
                        capacities=_planner_capacities("auto", job.preemptions, spec.policy.max_restarts, policy)),
                    lambda o, c: f"allow {c.value}"))
    if spec.where.regions is not None:
        out.append((lifted(regions=None), lambda o, c: f"allow region {o.region}"))
    if spec.where.providers is not None:
        out.append((lifted(providers=None), lambda o, c: f"allow {o.provider}"))
    return out


def _relaxation_hints(p: _Planning) -> list[str]:
    """For each filter of the job that, lifted alone, yields a usable option (stock permitting), say how."""
    if p.scorer.past_deadline:
        return []  # lifting a filter cannot bring back a deadline that has passed
    hints: list[str] = []
    for relaxed, describe in _relaxations(p.job, p.book.policy):
        first = p.scorer.first_usable(relaxed)  # feasible, or only waiting on stock
        if first is not None:
            hint = describe(first.scored.group, first.scored.group.capacity)
            if hint not in hints:
                hints.append(hint)
    return hints


# --- formatting -------------------------------------------------------------------


def _label(o: Option) -> str:
    # A capacity prints as its value (a ``StrEnum``), without ``Enum.value``'s Python-level property.
    return "%s %s %s in %s" % (o.provider, o.instance_type, o.capacity, o.zone)


def _pick_label(g: Group, mem: Member) -> str:
    """``_label`` of the option a candidate would make, without making it."""
    offer = mem.offer
    return "%s %s %s in %s" % (offer.provider, offer.instance_type, g.capacity, offer.zone)


def _ceil_minute(dt: datetime) -> datetime:
    """``dt`` rounded up to the minute: ``dt.replace(second=0, microsecond=0)`` plus a minute where that is
    earlier, by one addition (wall-clock arithmetic as that addition's, without ``replace``'s keywords)."""
    second, micro = dt.second, dt.microsecond
    return dt + timedelta(0, 60 - second, -micro) if second or micro else dt
