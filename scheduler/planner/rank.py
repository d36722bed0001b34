"""Scoring one job's candidates for ``planner.plan``, fast: score groups, not candidates.

A ``plan()`` call builds one ``book.CandidateBook``: its offers and fleet slots
folded into ``Group``s of candidates that share every number the planner
computes (cloud, region, GPU setup, vCPUs, capacity, price, reclaim rate, fleet
slot) and differ only in zone, instance type and stock. For a job, ``Scorer``
prices each matching group at most once (``perf.figures_for`` once per GPU setup,
or once per GPU for inference and export, which read nothing else of the setup;
hours, finish and deadline once per setup x capacity x reclaim rate x start;
cost and budget once per group), and ``planner.heap`` merges the groups' members
with a heap into the planner's order, lazily (``heap.Ranking``: a decision needs
the best few only, and most groups never get a full ``Scored``; its text says how).
What a candidate costs is ``planner.cost``'s formula; this module only times,
checks and orders.

A job whose deadline has passed skips the relaxed-filter hints (nothing can be
on time, ``Scorer.past_deadline``). A refusal at a deadline reads ``Timing.needed``
only for the timings ``heap.Ranking.needs`` screens in floats.

The order, as if every candidate were scored and sorted: ``Rank`` (feasible, only
transient blockers, other blockers, memory / estimate blockers), reserved capacity
first, expected cost (as whole cents, ``Prefix.cents``: an int compares faster, and
floats settle most without the Decimal formula, ``float_cents``), warm first, finish,
then the candidate's identity (provider, region, zone, type, capacity, source,
instance, gpu, count, sold out last), then input order (offers, then canonical
fleet slots) for exact ties: a ``SortKey``, ``(rank, Prefix, book.Tail)``;
``heap.Entry`` and ``heap.Placeholder`` begin with the same three fields.

Everything here lives for one ``plan()`` call: no module-level state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Literal, NamedTuple

from scheduler.errors import UserError
from scheduler.jobs.infer_shards import RESUMABLE_KINDS
from scheduler.jobs.perf import GPU_ONLY_KINDS, Figures, OnSetup, figures_for
from scheduler.limits import MAX_RUN_HOURS, run_too_long
from scheduler.models import Capacity
from scheduler.money import Money
from scheduler.planner import cost
from scheduler.planner.allowed import OfferFilter
from scheduler.planner.book import CandidateBook, Filter, Group, Line, Member, Rank, RankedLines, Tail
from scheduler.planner.inputs import PlanJob, own_first

BlockerKind = Literal["stock", "avoid", "taken", "estimate", "memory", "too_long", "deadline", "spot_risk",
                      "budget", "reservation"]
_TRANSIENT = frozenset({"stock", "avoid", "taken"})  # waiting can clear these; the rest it cannot
_ZERO_HOURS = Decimal(repr(0.0))  # Timing.hours_dec of no hours
_HUNDRED = Decimal(100)  # a cost to the cent x 100: its whole number of cents (``Prefix.cents``)
# ``Scorer.cents`` from floats: a price and hours as floats are within 2^-53 of the Decimals the cost formula
# reads (the hours' repr is the nearest decimal that reads back as the float), and two float products add
# two roundings of 2^-53: the float cents are within 4.5e-16 of the exact product x 100, relatively (the
# Decimal product's own rounding, at 28 digits, is far less). Rounding to the cent is then settled unless
# the float is within that of a half cent; ``_SCREEN_ERROR`` is twice it. Below ``_SCREEN_MAX`` every
# whole number of cents is a float exactly, and ``int(v + 0.5)`` is ``v``'s nearest whole number or, at a
# half, not settled anyway. ``test_fast_paths`` checks it against the Decimal cost.
_SCREEN_ERROR = 1e-15
_NOTHING_AVOIDED: frozenset = frozenset()  # ``Scored.avoided``'s default
_SCREEN_MAX = 1e15
_isfinite = math.isfinite
_on_spot = cost.on_spot
# ``timedelta(hours=h)`` is ``_td(0, 0, 0, 0, 0, h)`` (days, seconds, microseconds, milliseconds, minutes, hours),
# to the microsecond: the zeros add nothing to what the hours leave over for rounding. Positional arguments
# take half the time of the keyword, and a job's timings make two each.
_td = timedelta
# Enum members read once: looking one up on its class costs ~0.2 us, and the hot paths below ask often.
_SPOT = Capacity.spot
_ON_DEMAND_ONLY = frozenset({Capacity.on_demand})


@dataclass(frozen=True, slots=True)
class Blocker:
    kind: BlockerKind
    text: str
    holder: str | None = None  # "taken": the job the slot went to
    hours: float | None = None  # "too_long": the estimate's hours

    @property
    def transient(self) -> bool:
        return self.kind in _TRANSIENT


# --- the planner's order -------------------------------------------------------------

_new = tuple.__new__  # ``_new(Prefix, (...))`` is ``Prefix(...)`` without NamedTuple's Python-level ``__new__``
# (``planner.heap`` makes its entries the same way: tens of thousands a call).


class Prefix(NamedTuple):
    """A group's sort key between the rank and a member's ``Tail``, shared by its members."""

    not_reserved: bool  # reserved capacity first: it costs nothing more
    # The expected cost (``cost.expected_cost``, to the cent) in whole cents: the cost is its cents, so
    # the same order, and an int compares in a tenth of the time (a heap compares often). ``Scored.cost``
    # is the Decimal, made only for a group scored in full (``Scorer.cost_of``).
    cents: int
    not_warm: bool  # a warm machine wins a cost tie: no boot
    finish: datetime
    provider: str
    region: str


class SortKey(NamedTuple):
    """One candidate's place in the planner's order (heap entries carry the same three fields first)."""

    rank: Rank
    prefix: Prefix
    tail: Tail


class Pick(NamedTuple):
    """A candidate: its group's score, which member, its rank."""

    scored: Scored
    member: Member
    rank: Rank


# --- scoring one job ------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class Timing:
    """One GPU setup x capacity x reclaim rate x start for one job: hours, finish and deadline."""

    capacity: Capacity
    est_blocker: Blocker | None  # estimate / memory: the job cannot run here at all
    hours: float  # expected, including interruption overhead (0 when est_blocker)
    interruptions: float
    _hours_dec: Decimal | None  # ``hours_dec``, once made
    start: datetime
    finish: datetime
    late: Literal["deadline", "spot_risk"] | None  # the deadline blocker, if any (its text on demand)
    worst: datetime | None  # spot with a deadline: the finish of the bad case (``cost.on_spot``)
    physical_batch: int | None
    # A spot stint (``PlanJob.stint``) with a deadline: the uninterrupted finish plus a move to on-demand, which
    # its deadline check holds to the margin instead of ``finish`` (held to the deadline itself) and ``worst``.
    way_out: datetime | None = None
    # A stint its expected reclaims make late, completed by the rule's move to on-demand (``cost.stint_leg``):
    # the hours on spot before the move, the on-demand leg's cost (policy currency), which ``cost.stint_cost``
    # adds, and the on-demand group priced (the fastest setup). None otherwise.
    spot_hours: float = 0.0
    leg: Decimal | None = None
    target: Group | None = None
    _late_text: str | None = None
    _needed: datetime | None = None
    _shown: tuple[float, float] | None = None

    @property
    def hours_dec(self) -> Decimal:
        """``hours`` as the cost formula reads them (``Decimal(repr(...))``). Spot's are made when first read:
        a refusal times every bundle of a job, and costs few."""
        d = self._hours_dec
        if d is None:
            d = self._hours_dec = Decimal(repr(self.hours))
        return d

    @property
    def move(self) -> datetime:
        """When a stint with a move (``leg``) is expected to leave spot."""
        return self.start + _td(0, 0, 0, 0, 0, self.spot_hours)

    @property
    def shown(self) -> tuple[float, float]:
        """Hours and interruptions as an ``Option`` shows them (rounded once, not once per option)."""
        if self._shown is None:
            self._shown = (round(self.hours, 4), round(self.interruptions, 4))
        return self._shown

    def needed(self, now: datetime, safety: float) -> datetime:
        """The earliest deadline this would meet (the inverse of the deadline check); when usable."""
        if self._needed is None:
            if self.way_out is not None:  # a stint: room for the move, and on time through its expected reclaims
                self._needed = max(now + (self.way_out - now) / (1 - safety), self.finish)
                return self._needed
            need = now + (self.finish - now) / (1 - safety)
            if self.capacity is _SPOT:
                assert self.worst is not None  # a job with a deadline
                need = max(need, self.worst)
            self._needed = need
        return self._needed

    def late_blocker(self, deadline: datetime, margin: timedelta) -> Blocker:
        """The deadline blocker; ``margin``: the deadline's safety margin (``CandidateBook.margin``)."""
        assert self.late is not None
        return Blocker(self.late, self.late_text(deadline, margin))

    def late_text(self, deadline: datetime, margin: timedelta) -> str:
        """``late_blocker``'s text, made once (formatting is the slow part, so only for options shown; a just-late
        option's why is this text alone, without a ``Blocker``)."""
        text = self._late_text
        if text is None:
            if self.way_out is not None and self.finish > deadline:
                text = f"misses deadline by {fmt_hours(self.finish - deadline)}"
            elif self.way_out is not None:
                text = ("on spot with a move to on-demand: "
                        + (f"misses deadline by {fmt_hours(self.way_out - deadline)}" if self.way_out > deadline else
                           f"finishes {fmt_hours(deadline - self.way_out)} before the deadline, inside the "
                           f"{fmt_hours(margin)} safety margin"))
            elif self.late == "spot_risk":
                assert self.worst is not None
                text = ("too risky on spot: a late interruption would miss the deadline by "
                        f"{fmt_hours(self.worst - deadline)}")
            elif self.finish > deadline:
                text = f"misses deadline by {fmt_hours(self.finish - deadline)}"
            else:
                text = (f"finishes {fmt_hours(deadline - self.finish)} before the deadline, "
                        f"inside the {fmt_hours(margin)} safety margin")
            self._late_text = text
        return text


@dataclass(eq=False, slots=True)
class Scored:
    """One group for one job."""

    group: Group
    timing: Timing
    hourly: Money
    prefix: Prefix
    # Most groups of most jobs keep these defaults (``Scorer._score`` sets the rest).
    reservation: bool = False  # the reservation ends before the expected finish
    over_budget: bool = False  # its cost plus what the job spent is over the job's budget (``Scorer.budget_total``)
    structural: bool = False  # a blocker waiting cannot clear
    avoided: frozenset[Member] = frozenset()  # members the job avoids (recently out of capacity)
    taken_by: str | None = None  # fleet slot held for another job
    runs: RankedLines = ()  # the members by rank
    late_only: bool = False  # the timing's deadline blocker is the group's only one (a member may be sold out)

    @property
    def cost(self) -> Decimal:
        """Expected cost, policy currency, to the cent: ``cost.expected_cost``, whose cents the prefix has. Made
        when read (most options show an amount the book has already made, ``CandidateBook.money_of``): the
        Decimal of those cents where price and hours are positive (then the cost is, and a cost to the cent
        is its cents); otherwise (reserved capacity, a zero or negative price a direct caller of plan()
        could pass) the formula, which keeps the sign of a zero."""
        t, amount = self.timing, self.hourly.amount
        if (t.hours > 0.0 and amount > 0) or t.leg is not None:  # a leg's cents are made from the Decimals
            return Decimal(self.prefix.cents).scaleb(-2)
        return cost.expected_cost(amount, t.hours_dec)

    def blockers(self, mem: Member, sc: Scorer) -> list[Blocker]:
        """In the order the planner has always listed them (they join into ``Option.why``); ``sc``: the job's."""
        out: list[Blocker] = []
        if mem.sold_out:
            out.append(Blocker("stock", "sold out"))
        if mem in self.avoided:
            out.append(Blocker("avoid", "recently out of capacity"))
        if self.taken_by is not None:
            out.append(Blocker("taken", f"held for higher-priority job {self.taken_by}", self.taken_by))
        t = self.timing
        if t.est_blocker is not None:
            out.append(t.est_blocker)
            return out
        if t.late is not None:
            assert sc.deadline is not None and sc.margin is not None
            out.append(t.late_blocker(sc.deadline, sc.margin))
        if self.reservation:
            assert self.group.until is not None
            out.append(Blocker("reservation", f"reservation ends {fmt_time(self.group.until)}, "
                                              "before the expected finish"))
        budget = sc.job.spec.policy.budget
        if self.over_budget:
            assert budget is not None
            total = Money(amount=sc.budget_total(self), currency=budget.currency)
            out.append(Blocker("budget", f"over budget ({total} > {budget})"))
        return out

    def _runs(self) -> RankedLines:
        runs = self.group.runs
        if self.timing.est_blocker is not None:
            return runs.cannot_run
        if self.structural:
            return runs.blocked
        if self.taken_by is not None:
            return runs.held
        if not self.avoided:
            return runs.open
        members = self.group.members
        clean = Line.of([mem for mem in members if not mem.sold_out and mem not in self.avoided])
        blocked = Line.of([mem for mem in members if mem.sold_out or mem in self.avoided])
        return tuple((r, line) for r, line in ((Rank.FEASIBLE, clean), (Rank.WAITING, blocked)) if line.members)

    def best(self) -> tuple[SortKey, Pick]:
        """This group's first member in planner order, and its sort key."""
        return min((SortKey(r, self.prefix, line.members[0].tail), Pick(self, line.members[0], r))
                   for r, line in self.runs)


class Scorer:
    """One job's groups, each scored once and shared by every filter the planner tries for it."""

    # Slots: one a job, made and read in the planner's hottest paths.
    __slots__ = ("book", "job", "_estimates", "_base", "_figures", "_timings", "_scored", "deadline", "margin",
                 "_cutoff", "past_deadline", "_resumes", "_restart_hours", "_spot_risk", "_by_gpu", "_nodes", "_budget",
                 "_budget_rate", "_spent", "_within_at", "_over_at", "_stint", "_boot_hours", "_target")

    def __init__(self, book: CandidateBook, job: PlanJob, deadline: datetime | None = None) -> None:
        """``deadline``: ``book.in_now_zone(job.deadline_at)`` when the caller has it."""
        self.book, self.job = book, job
        self._estimates: dict[int, Figures | str] = {}
        self._base: dict[int, float | None] = {}  # est key -> _base_hours
        self._figures: OnSetup | None = None  # perf.figures_for this job, once it is needed
        self._timings: dict[int, Timing] = {}
        self._scored: dict[int, Scored] = {}  # by Group.index (a dict: most jobs score a few of ~260 groups)
        # The job's deadline (in the zone object ``now`` has, ``CandidateBook.in_now_zone``), its safety
        # margin, and the cutoff: a finish after it leaves less than deadline_safety of the remaining time spare.
        self.deadline = self.margin = self._cutoff = None
        # Whatever can run is late: every start is at or after now and takes some time (4 minutes or more).
        self.past_deadline = False
        if job.deadline_at is not None:
            deadline = self.deadline = deadline or book.in_now_zone(job.deadline_at)
            self.margin = book.margin(deadline)
            cutoff = self._cutoff = deadline - self.margin
            self.past_deadline = cutoff <= book.now
        self._resumes = job.spec.kind in RESUMABLE_KINDS  # from its last checkpoint (epoch or shard), after a reclaim
        policy = book.policy
        # Read once per job, not per timing.
        self._restart_hours, self._spot_risk = policy.restart_hours, book.spot_risk
        spec = job.spec
        self._stint = job.as_stint
        self._target: Group | Literal[False] | None = None  # ``_fastest_on_demand``, once asked
        self._boot_hours = policy.boot_hours
        self._by_gpu = int(spec.kind in GPU_ONLY_KINDS)  # which of Group.est_keys / timing_keys
        self._nodes, self._budget = spec.resources.nodes, spec.policy.budget
        self._budget_rate = self._spent = None  # policy currency -> budget currency; spent, in the budget's
        self._within_at, self._over_at = -math.inf, math.inf  # ``over_budget``'s screen: none by default
        if self._budget is not None:
            self._budget_rate = book.rate(book.policy.currency, self._budget.currency)
            if job.spent is not None:
                self._spent = job.spent.amount * book.rate(job.spent.currency, self._budget.currency)
            self._budget_screen()

    def _budget_screen(self) -> None:
        """``over_budget``'s screen: the cents a cost may have, at most, to be within the budget, in floats
        (budget less spent, over the rate), give or take a part in 1e9 of what they are made from, which is
        far more than the floats' error (a few parts in 1e16 each, and the Decimals' own at 28 digits)."""
        rate, spent = float(self._budget_rate), float(self._spent or 0)  # type: ignore[arg-type]  # set: a budget
        budget = float(self._budget.amount)  # type: ignore[union-attr]
        if rate > 0.0 and _isfinite(rate) and _isfinite(spent) and _isfinite(budget):
            limit = (budget - spent) / rate * 100.0
            slack = 1e-9 * (abs(budget) + abs(spent)) / rate * 100.0 + 1e-6
            if _isfinite(limit) and _isfinite(slack):
                self._within_at, self._over_at = limit - slack, limit + slack

    def scored(self, g: Group, t: Timing | None = None, prefix: Prefix | None = None) -> Scored:
        """``g`` scored in full (once); ``prefix``, when the caller has it (a heap entry's), is ``g``'s."""
        s = self._scored.get(g.index)
        if s is None:
            s = self._scored[g.index] = self._score(g, self.timing(g) if t is None else t, prefix)
        return s

    def first_usable(self, f: Filter) -> Pick | None:
        """``heap.ranking`` of ``f``'s rows, then its ``first()``, when that is feasible or only waits on stock,
        else None, scoring fewer groups."""
        if self.past_deadline:
            return None  # no need to estimate what the relaxed filter adds
        heads: list[tuple[SortKey, Pick]] = []
        for bundle in self.book.matching(f):
            t = self.timing(bundle[0])
            if t.est_blocker is not None or t.late is not None:
                continue  # BLOCKED or CANNOT_RUN whatever it costs
            for g in bundle:
                s = self.scored(g, t)
                if not s.structural:
                    heads.extend((SortKey(r, s.prefix, line.members[0].tail), Pick(s, line.members[0], r))
                                 for r, line in s.runs)
        return min(heads)[1] if heads else None

    def _base_hours(self, g: Group) -> float | None:
        """The estimate's hours (before interruptions), when it fits."""
        key = g.est_keys[self._by_gpu]
        got: float | Literal[False] | None = self._base.get(key, False)
        return self._fit_hours(g, key) if got is False else got

    def _fit_hours(self, g: Group, key: int) -> float | None:
        """``_base_hours`` not read yet (``key``: ``g``'s est key)."""
        est = self._estimates.get(key) or self._new_estimate(g, key)
        fits = type(est) is Figures and est.fits and math.isfinite(est.hours)
        got = self._base[key] = est.hours if fits else None  # type: ignore[union-attr]
        return got

    def _estimate(self, g: Group, key: int | None = None) -> Figures | str:
        """``perf``'s figures for ``g``'s setup (``key``: its est key, when the caller has read it)."""
        if key is None:
            key = g.est_keys[self._by_gpu]
        return self._estimates.get(key) or self._new_estimate(g, key)

    def _new_estimate(self, g: Group, key: int) -> Figures | str:
        """``_estimate`` not made yet."""
        figures = self._figures or self._figures_for()
        try:
            est: Figures | str = figures(g.gpu, g.gpu_count, g.vcpus)
        except UserError as exc:
            est = _unsized(exc)
        else:
            if type(est) is Figures and est.fits and est.hours > MAX_RUN_HOURS:
                est = _TooLong(est.hours, run_too_long(est.hours, g.gpu, g.gpu_count, self._nodes))
        self._estimates[key] = est
        return est

    def _figures_for(self) -> OnSetup:
        job = self.job
        self._figures = figures_for(job.spec, epochs_done=job.epochs_done, nodes=self._nodes,
                                    measured=own_first(self.book.measured, job.own_rates))
        return self._figures

    def timing(self, g: Group) -> Timing:
        """Expected hours (spot: with interruptions), finish and the deadline check, once per timing key."""
        key = g.timing_keys[self._by_gpu]
        t = self._timings.get(key)
        if t is None:
            t = self._timings[key] = self._time(g)
        return t

    def spot_need_hours(self, g: Group, base: float, start: float, stretch: float) -> float:
        """For a job with a deadline, on spot: ``g``'s timing's ``Timing.needed``, in hours after now, as
        floats compute it (within ``heap.need_tolerance``), without making the ``Timing``: the later of the
        finish stretched by the safety margin and the bad case. ``base``: the estimate's hours (it fits);
        ``start``: hours after now; ``stretch``: 1 / (1 - deadline_safety). By ``_time``'s arithmetic."""
        est = self._estimates[g.est_keys[self._by_gpu]]
        checkpoint = est.epoch_hours if self._resumes else None  # type: ignore[union-attr]  # it fits
        _, h, bad = _on_spot(base, g.rate, self._nodes, checkpoint, self._restart_hours)
        if self._stint:
            return max((start + base + self._move_hours(est)) * stretch, start + h)  # type: ignore[arg-type]
        return max((start + h) * stretch, start + bad)

    def _move_hours(self, est: Figures) -> float:
        """A stint's move to on-demand: the steering rule's changeover (``cost.changeover_hours``)."""
        return cost.changeover_hours(self._boot_hours, self._restart_hours, est.epoch_hours or 0.0)

    def _time(self, g: Group) -> Timing:
        key = g.est_keys[self._by_gpu]
        base = self._base.get(key, False)  # the estimate's hours where it fits (``_fit_hours``)
        if base is False:
            base = self._fit_hours(g, key)
        est = self._estimates[key]
        book = self.book
        start = book.start_new if g.not_warm else book.now  # cost.start
        if base is None:
            return self._cannot_run(g, est, start)
        assert type(est) is Figures
        deadline = self.deadline
        h = base
        n = 0.0
        worst_at = way_out = None  # only a deadline reads spot's bad case or way out (below, and Timing.needed)
        if g.capacity is _SPOT:
            checkpoint = est.epoch_hours if self._resumes else None  # else it restarts from scratch
            n, h, bad = _on_spot(base, g.rate, self._nodes, checkpoint, self._restart_hours)
            if self._stint:
                way_out = start + _td(0, 0, 0, 0, 0, base + self._move_hours(est))
            elif deadline is not None:
                worst_at = start + _td(0, 0, 0, 0, 0, bad)
        finish = start + _td(0, 0, 0, 0, 0, h)  # timedelta(hours=h), in half the time
        late: Literal["deadline", "spot_risk"] | None = None
        if way_out is not None:
            # A stint is expected to finish on spot by the deadline itself; the margin and the bad case are
            # the steering rule's to keep: it moves the job to on-demand while that move fits before the cutoff.
            if finish > deadline or way_out > self._cutoff:  # type: ignore[operator]  # set with the deadline
                # Late on this setup: the rule's move to the fastest on-demand setup may still complete it.
                leg = self._stint_leg(start, h, est)
                if leg is None:
                    late = "deadline"
                elif leg.leg_hours > 0.0:
                    target = self._target
                    assert target  # a leg has one
                    return Timing(g.capacity, None, h, n, None, start, book.now + _td(0, 0, 0, 0, 0, leg.finish_hours),
                                  None, None, est.physical_batch, way_out=way_out, spot_hours=leg.spot_hours,
                                  leg=cost.expected_cost(self._hourly(target), Decimal(repr(leg.leg_hours))),
                                  target=target)
        elif deadline is not None:
            # Spot must also survive its bad case (``cost.on_spot``: interrupted more often than expected,
            # plus once more late in the run) by the deadline itself. The safety margin covers estimate
            # error; this net covers interruption bad luck.
            if finish > self._cutoff:  # type: ignore[operator]  # set whenever the deadline is
                late = "deadline"
            elif worst_at is not None and self._spot_risk and worst_at > deadline:
                late = "spot_risk"
        # Decimal hours are made when a cost is (``Timing.hours_dec``): a refusal times every bundle, costs few.
        return Timing(g.capacity, None, h, n, None, start, finish, late, worst_at, est.physical_batch, way_out=way_out)

    def _stint_leg(self, start: datetime, hours: float, est: Figures) -> cost.StintLeg | None:
        """``cost.stint_leg`` for a spot stint late on its own setup (``hours``: expected, with reclaims), moved to
        the job's fastest on-demand setup (``_target``)."""
        if self._target is None:
            self._target = self._fastest_on_demand()
        target = self._target
        if target is False:
            return None
        now = self.book.now
        return cost.stint_leg((start - now).total_seconds() / 3600, hours,
                              (self._cutoff - now).total_seconds() / 3600,  # type: ignore[operator]  # a deadline
                              self._base[target.est_keys[self._by_gpu]], self._boot_hours,  # type: ignore[arg-type]
                              self._restart_hours, est.epoch_hours or 0.0)

    def _fastest_on_demand(self) -> Group | Literal[False]:
        """Where the steering rule's move would go: the new on-demand machine the job's file allows with the
        fewest estimated hours, the cheapest of those (stock aside: the move comes later). False when there is
        none. The capacity the job file asks for is not read: the rule
        watches jobs of capacity ``auto`` only (a stint's flag says it does), and steering asks about one of
        them with its capacity set to spot (``steering._planner_launches``)."""
        best: tuple[float, Decimal, Group] | None = None
        f = Filter(OfferFilter.of(self.job.spec), _ON_DEMAND_ONLY, False)
        for bundle in self.book.matching(f):
            hours = self._base_hours(bundle[0])  # a bundle shares its setup, so its hours
            if hours is None:
                continue
            for g in bundle:
                hourly = self._hourly(g)
                if best is None or (hours, hourly) < best[:2]:
                    best = (hours, hourly, g)
        return False if best is None else best[2]

    def _hourly(self, g: Group) -> Decimal:
        """``g``'s hourly price for the job's nodes (policy currency)."""
        return (g.hourly.get(self._nodes) or self.book.hourly(g, self._nodes)).amount

    def _cannot_run(self, g: Group, est: Figures | str, start: datetime) -> Timing:
        """The timing of a setup the job cannot run on (unknown GPU, does not fit): no hours, no deadline check."""
        if isinstance(est, _TooLong):
            blocker = Blocker("too_long", str(est), hours=est.hours)
        elif isinstance(est, str):
            blocker = Blocker("estimate", est)
        else:
            blocker = Blocker("memory", est.why_not or f"does not fit in {g.gpu} memory")
        return Timing(g.capacity, blocker, 0.0, 0.0, _ZERO_HOURS, start, start, None, None,
                      est.physical_batch if isinstance(est, Figures) else None)

    def cents(self, g: Group, t: Timing) -> int:
        """``g``'s expected cost on ``t`` in whole cents (``cost_of``'s, x 100), from floats where they
        settle it (``heap._add_entries`` inlines the same)."""
        if t.leg is not None:
            return self.exact_cents(g, t)
        nodes = self._nodes
        k = float_cents((g.hourly_f.get(nodes) or self.book.hourly_f(g, nodes)) * (t.hours * 100.0))
        return self.exact_cents(g, t) if k is None else k

    def exact_cents(self, g: Group, t: Timing) -> int:
        """``cents`` where its floats do not settle it: from the Decimal cost."""
        return int(self.exact_cost(g, t) * _HUNDRED)

    def exact_cost(self, g: Group, t: Timing) -> Decimal:
        """``cost.expected_cost`` of ``g``'s price for the job's nodes on ``t``'s hours."""
        hourly = self._hourly(g)
        if t.leg is not None:
            return cost.stint_cost(hourly, t.hours_dec, t.spot_hours, t.leg)
        return cost.expected_cost(hourly, t.hours_dec)

    def cost_of(self, g: Group, t: Timing, cents: int) -> Decimal:
        """``exact_cost(g, t)``, whose cents are ``cents``, as ``Scored.cost`` makes it (a budget reads it)."""
        hourly = self._hourly(g)
        if (t.hours > 0.0 and hourly > 0) or t.leg is not None:  # a leg's cents are made from the Decimals
            return Decimal(cents).scaleb(-2)
        return cost.expected_cost(hourly, t.hours_dec)

    def over_budget(self, g: Group, t: Timing, cents: int) -> bool:
        """``_budget_total(cost_of(g, t, cents)) > budget``, for a job with a budget: settled by the cents alone
        where they are clearly within or over it (``_budget_screen``), else by the Decimals."""
        if cents < self._within_at:
            return False
        if cents > self._over_at:
            return True
        return self._budget_total(self.cost_of(g, t, cents)) > self._budget.amount  # type: ignore[union-attr]

    def _budget_total(self, c: Decimal) -> Decimal:
        """Cost ``c`` plus what the job has spent, in the budget's currency."""
        total = c * self._budget_rate  # type: ignore[operator]  # set in __init__ whenever _budget is (only then called)
        return total if self._spent is None else total + self._spent

    def budget_total(self, s: Scored) -> Decimal:
        """``s``'s cost plus what the job has spent, in the budget's currency (for a job with a budget): made only
        for a text that shows it, as ``over_budget`` settles most groups from their cents."""
        return self._budget_total(s.cost)

    def _score(self, g: Group, t: Timing, prefix: Prefix | None = None) -> Scored:
        """A group's cost and blockers, in full."""
        if prefix is None:
            prefix = _new(Prefix, (g.not_reserved, self.cents(g, t), g.not_warm, t.finish, g.provider, g.region))
        hourly = g.hourly.get(self._nodes) or self.book.hourly(g, self._nodes)
        if g.slot is None and t.est_blocker is None and g.until is None and not self.job.avoid:
            # A new machine for a job that avoids nothing (most groups scored): late, over budget (its cents,
            # as ``heap._add_entries`` reads them) or neither, what the steps below set, in one go.
            late = t.late is not None
            over = self._budget is not None and self.over_budget(g, t, prefix.cents)
            blocked = late or over
            return Scored(g, t, hourly, prefix, False, over, blocked, _NOTHING_AVOIDED, None,
                          g.runs.blocked if blocked else g.runs.open, late and not over)
        s = Scored(g, t, hourly, prefix)
        if t.est_blocker is not None:
            s.structural = True
        else:
            s.reservation = g.until is not None and t.finish > g.until
            if self._budget is not None:
                s.over_budget = self.over_budget(g, t, prefix.cents)
            s.structural = t.late is not None or s.reservation or s.over_budget
            s.late_only = t.late is not None and not s.reservation and not s.over_budget
        if g.slot is not None:
            s.taken_by = self.book.taken.get(g.slot)
            s.late_only = s.late_only and s.taken_by is None
        elif self.job.avoid:
            s.avoided = frozenset(mem for mem in g.members if mem.avoid_key in self.job.avoid)
            s.late_only = s.late_only and not s.avoided
        s.runs = s._runs()
        return s


def float_cents(v: float) -> int | None:
    """A cost's whole cents from ``v``, its price x (hours x 100) in floats; None where ``v`` does not settle
    them (``_SCREEN_ERROR``) and the Decimal formula must."""
    if 0.0 < v < _SCREEN_MAX:
        k = int(v + 0.5)
        m = 0.5 - _SCREEN_ERROR * v
        if -m < v - k < m:
            return k
    return None


class _TooLong(str):
    """An estimate past ``limits.MAX_RUN`` (``limits.run_too_long``'s words, and its ``hours``): no option, as a
    setup the job does not fit, since its finish, with spot's reclaims and a deadline's bad case on top, could pass
    the last time the clock holds."""

    hours: float

    def __new__(cls, hours: float, text: str) -> _TooLong:
        self = super().__new__(cls, text)
        self.hours = hours
        return self



def _unsized(exc: UserError) -> str:
    """What an estimate that failed says: an unknown GPU, or a job file the model cannot size."""
    return str(exc).replace("\n  fix:", ":")


# The planner's texts format numbers with ``%``: the same text as an f-string's format spec (``%.1f`` and
# ``.1f`` share CPython's float formatting; ``%02d`` pads an int as ``02d``), in two thirds of the time.


def fmt_hours(delta: timedelta) -> str:
    return "%.1f h" % (delta.total_seconds() / 3600)


def fmt_time(dt: datetime) -> str:
    """``dt`` in UTC to the minute, as ``strftime("%Y-%m-%d %H:%M UTC")`` writes it, in a third of its time."""
    u = dt if dt.tzinfo is UTC else dt.astimezone(UTC)
    return "%d-%02d-%02d %02d:%02d UTC" % (u.year, u.month, u.day, u.hour, u.minute)
