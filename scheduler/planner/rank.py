"""Ranking one job's candidates for ``planner.plan``, fast: score groups, not candidates.

A ``plan()`` call builds one ``book.CandidateBook``: its offers and fleet slots
folded into ``Group``s of candidates that share every number the planner
computes (cloud, region, GPU setup, vCPUs, capacity, price, reclaim rate, fleet
slot) and differ only in zone, instance type and stock. For a job, ``Scorer``
prices each matching group at most once (``perf.figures_for`` once per GPU setup,
or once per GPU for inference and export, which read nothing else of the setup;
hours, finish and deadline once per setup x capacity x reclaim rate x start;
cost and budget once per group), and ``Ranking`` merges the groups' members with
a heap into the planner's order, lazily: a decision needs the best few only.
What a candidate costs is ``planner.cost``'s formula; this module only times,
checks and orders.

Laziness: a bundle of new machines (the groups that share a timing) enters the
heap as one ``Placeholder``, floored from the estimate's hours in float arithmetic
(``_floor_cents``: no Decimal for a bundle never reached; spot's with its
reclaims' restarts added), and is timed and priced group by group only when the
ranking reaches it (``Ranking._expand``); most bundles of most jobs never are.
What ``rank`` reads of a bundle is read once per call (``CandidateBook.rows``).
Only the few candidates a decision shows get a full ``Scored`` (new machines for
a job that avoids nothing rank from their cost alone, ``Scorer._add_entries``).
A job whose deadline has passed skips the relaxed-filter hints (nothing can be
on time, ``Scorer.past_deadline``). A refusal at a deadline screens the timings
by their ``Timing.needed`` worked out in floats (``Ranking.needs``), makes only
those that may be the fastest, and costs only the cheapest groups of their
bundles (``Ranking.fastest``).

The order, as if every candidate were scored and sorted: ``Rank`` (feasible, only
transient blockers, other blockers, memory / estimate blockers), reserved capacity
first, expected cost (its whole cents first: ``Prefix.cents``, an int compares
faster), warm first, finish, then the candidate's identity (provider,
region, zone, type, capacity, source, instance, gpu, count, sold out last), then input order
(offers, then canonical fleet slots) for exact ties: a ``SortKey``, ``(rank,
Prefix, book.Tail)``.

Everything here lives for one ``plan()`` call: no module-level state.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Literal, NamedTuple, final

from scheduler.errors import UserError
from scheduler.jobs.infer_shards import RESUMABLE_KINDS
from scheduler.jobs.perf import GPU_ONLY_KINDS, Figures, OnSetup, figures_for
from scheduler.models import Capacity
from scheduler.money import Money
from scheduler.planner import cost
from scheduler.planner.book import CandidateBook, Filter, Group, Line, Member, Rank, RankedLines, Tail, Timed
from scheduler.planner.inputs import PlanJob

BlockerKind = Literal["stock", "avoid", "taken", "estimate", "memory", "deadline", "spot_risk", "budget",
                      "reservation"]
_TRANSIENT = frozenset({"stock", "avoid", "taken"})  # waiting can clear these; the rest it cannot
_ZERO_HOURS = Decimal(repr(0.0))  # Timing.hours_dec of no hours
_HUNDRED = Decimal(100)  # a cost to the cent x 100: its whole number of cents (``Prefix.cents``)
_isfinite = math.isfinite
_on_spot = cost.on_spot
# ``timedelta(hours=h)`` is ``_td(0, 0, 0, 0, 0, h)`` (days, seconds, microseconds, milliseconds, minutes, hours),
# to the microsecond: the zeros add nothing to what the hours leave over for rounding. Positional arguments
# take half the time of the keyword, and a job's timings make two each.
_td = timedelta
# Enum members read once: looking one up on its class costs ~0.2 us, and the hot paths below ask often.
_SPOT = Capacity.spot
_FEASIBLE, _BLOCKED = Rank.FEASIBLE, Rank.BLOCKED


@dataclass(frozen=True, slots=True)
class Blocker:
    kind: BlockerKind
    text: str
    holder: str | None = None  # "taken": the job the slot went to

    @property
    def transient(self) -> bool:
        return self.kind in _TRANSIENT


# --- the planner's order -------------------------------------------------------------

_new = tuple.__new__  # ``_new(Entry, (...))`` is ``Entry(...)`` without NamedTuple's Python-level ``__new__``:
# the hot loops below make a heap entry per line of candidates, tens of thousands a call.


class Prefix(NamedTuple):
    """A group's sort key between the rank and a member's ``Tail``, shared by its members."""

    not_reserved: bool  # reserved capacity first: it costs nothing more
    cents: int  # ``cost`` in cents: the same order, compared in a tenth of the time (a heap compares often)
    cost: Decimal  # expected cost, policy currency, to the cent (``cost.expected_cost``)
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
    _late_blocker: Blocker | None = None
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
    def shown(self) -> tuple[float, float]:
        """Hours and interruptions as an ``Option`` shows them (rounded once, not once per option)."""
        if self._shown is None:
            self._shown = (round(self.hours, 4), round(self.interruptions, 4))
        return self._shown

    def needed(self, now: datetime, safety: float) -> datetime:
        """The earliest deadline this would meet (the inverse of the deadline check); when usable."""
        if self._needed is None:
            need = now + (self.finish - now) / (1 - safety)
            if self.capacity is _SPOT:
                assert self.worst is not None  # a job with a deadline
                need = max(need, self.worst)
            self._needed = need
        return self._needed

    def late_blocker(self, deadline: datetime, margin: timedelta) -> Blocker:
        """The deadline blocker's text (formatting is the slow part, so only for options shown); ``margin``:
        the deadline's safety margin (``CandidateBook.margin``)."""
        if self._late_blocker is None:
            if self.late == "spot_risk":
                assert self.worst is not None
                text = ("too risky on spot: a late interruption would miss the deadline by "
                        f"{fmt_hours(self.worst - deadline)}")
            elif self.finish > deadline:
                text = f"misses deadline by {fmt_hours(self.finish - deadline)}"
            else:
                text = (f"finishes {fmt_hours(deadline - self.finish)} before the deadline, "
                        f"inside the {fmt_hours(margin)} safety margin")
            assert self.late is not None
            self._late_blocker = Blocker(self.late, text)
        return self._late_blocker


@dataclass(eq=False, slots=True)
class Scored:
    """One group for one job."""

    group: Group
    timing: Timing
    hourly: Money
    cost: Decimal  # expected cost, policy currency, to the cent
    prefix: Prefix
    # Most groups of most jobs keep these defaults (``Scorer._score`` sets the rest).
    reservation: bool = False  # the reservation ends before the expected finish
    budget_total: Decimal | None = None  # cost + spent, budget currency (when the job has a budget)
    over_budget: bool = False
    structural: bool = False  # a blocker waiting cannot clear
    avoided: frozenset[Member] = frozenset()  # members the job avoids (recently out of capacity)
    taken_by: str | None = None  # fleet slot held for another job
    runs: RankedLines = ()  # the members by rank
    late_only: bool = False  # the timing's deadline blocker is the group's only one (a member may be sold out)

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
            assert budget is not None and self.budget_total is not None
            total = Money(amount=self.budget_total, currency=budget.currency)
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
                 "_budget_rate", "_spent")

    def __init__(self, book: CandidateBook, job: PlanJob) -> None:
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
            deadline = self.deadline = book.in_now_zone(job.deadline_at)
            self.margin = book.margin(deadline)
            cutoff = self._cutoff = deadline - self.margin
            self.past_deadline = cutoff <= book.now
        self._resumes = job.spec.kind in RESUMABLE_KINDS  # from its last checkpoint (epoch or shard), after a reclaim
        policy = book.policy
        # Read once per job, not per timing.
        self._restart_hours, self._spot_risk = policy.restart_hours, book.spot_risk
        spec = job.spec
        self._by_gpu = int(spec.kind in GPU_ONLY_KINDS)  # which of Group.est_keys / timing_keys
        self._nodes, self._budget = spec.resources.nodes, spec.policy.budget
        self._budget_rate = self._spent = None  # policy currency -> budget currency; spent, in the budget's
        if self._budget is not None:
            self._budget_rate = book.rate(book.policy.currency, self._budget.currency)
            if job.spent is not None:
                self._spent = job.spent.amount * book.rate(job.spent.currency, self._budget.currency)

    def rank(self, f: Filter) -> Ranking:
        """Every candidate ``f`` lets through, in a heap; most groups get no ``Scored`` (see ``_enter``),
        and a bundle of new machines enters as one ``Placeholder`` until the ranking reaches it."""
        heap: list[Entry | Placeholder]
        book = self.book
        matching, rows, timings = book.rows(f, self._nodes, self._by_gpu)
        heap = []
        floor, below = _math_floor, _CENTS_UNDER
        base, nodes, restart = self._base, self._nodes, self._restart_hours  # read once: this loop runs for every
        # bundle of every job
        best = _BLOCKED if self.past_deadline else _FEASIBLE  # the best rank a placeholder's candidates have
        lazy = not self.job.avoid  # an avoiding job scores every group in full (``Scored.avoided``)
        for key, hourly, spot_rate, order, bundle in rows:
            if lazy and hourly is not None:
                hours: float | Literal[False] | None = base.get(key, False)
                if hours is False:
                    hours = self._fit_hours(bundle[0], key)
                if hours is not None:
                    if spot_rate:
                        # At or below spot's expected hours (``cost.on_spot``: the same n x restart_hours, to
                        # the bit, and lost work only adds): a floor nearer the cost, reached later.
                        hours = hours + hours * (spot_rate * nodes) * restart
                    least: Floor = (True, floor(hourly * hours * below))  # new machines: ``_floor_cents``, inline
                    heap.append(_new(Placeholder, (best, least, (), order, bundle)))
                    continue
            t = self.timing(bundle[0])
            for g in bundle:
                self._enter(g, t, heap)
        heapq.heapify(heap)
        return Ranking(self, matching, timings, heap)

    def scored(self, g: Group, t: Timing | None = None, prefix: Prefix | None = None) -> Scored:
        """``g`` scored in full (once); ``prefix``, when the caller has it (a heap entry's), is ``g``'s."""
        s = self._scored.get(g.index)
        if s is None:
            s = self._scored[g.index] = self._score(g, self.timing(g) if t is None else t, prefix)
        return s

    def first_usable(self, f: Filter) -> Pick | None:
        """``rank(f).first()`` when that is feasible or only waits on stock, else None, scoring fewer groups."""
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
        """``_base_hours`` not read yet (``key``: ``g``'s est key). Nearly every estimate is first asked for
        here, so ``_estimate``'s work is inlined: a call less for each."""
        est = self._estimates.get(key)
        if est is None:
            figures = self._figures or self._figures_for()
            try:
                est = figures(g.gpu, g.gpu_count, g.vcpus)
            except UserError as exc:
                est = _unsized(exc)
            self._estimates[key] = est
        fits = type(est) is Figures and est.fits and math.isfinite(est.hours)
        got = self._base[key] = est.hours if fits else None  # type: ignore[union-attr]
        return got

    def _estimate(self, g: Group, key: int | None = None) -> Figures | str:
        """``perf``'s figures for ``g``'s setup (``key``: its est key, when the caller has read it)."""
        if key is None:
            key = g.est_keys[self._by_gpu]
        est = self._estimates.get(key)
        if est is None:
            figures = self._figures or self._figures_for()
            try:
                est = figures(g.gpu, g.gpu_count, g.vcpus)
            except UserError as exc:
                est = _unsized(exc)
            self._estimates[key] = est
        return est

    def _figures_for(self) -> OnSetup:
        job = self.job
        self._figures = figures_for(job.spec, epochs_done=job.epochs_done, nodes=self._nodes,
                                    measured=self.book.measured)
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
        floats compute it (within ``need_tolerance``), without making the ``Timing``: the later of the
        finish stretched by the safety margin and the bad case. ``base``: the estimate's hours (it fits);
        ``start``: hours after now; ``stretch``: 1 / (1 - deadline_safety). By ``_time``'s arithmetic."""
        est = self._estimates[g.est_keys[self._by_gpu]]
        checkpoint = est.epoch_hours if self._resumes else None  # type: ignore[union-attr]  # it fits
        _, h, bad = _on_spot(base, g.rate, self._nodes, checkpoint, self._restart_hours)
        return max((start + h) * stretch, start + bad)

    def _time(self, g: Group) -> Timing:
        key = g.est_keys[self._by_gpu]
        est = self._estimates.get(key) or self._estimate(g, key)
        book = self.book
        start = book.start_new if g.not_warm else book.now  # cost.start
        if type(est) is str or not est.fits or not _isfinite(est.hours):  # type: ignore[union-attr]
            return self._cannot_run(g, est, start)
        assert type(est) is Figures
        deadline = self.deadline
        h = base = est.hours
        n = 0.0
        worst_at = None  # only a deadline reads spot's bad case (below, and Timing.needed)
        if g.capacity is _SPOT:
            checkpoint = est.epoch_hours if self._resumes else None  # else it restarts from scratch
            n, h, bad = _on_spot(base, g.rate, self._nodes, checkpoint, self._restart_hours)
            if deadline is not None:
                worst_at = start + _td(0, 0, 0, 0, 0, bad)
        finish = start + _td(0, 0, 0, 0, 0, h)  # timedelta(hours=h), in half the time
        late: Literal["deadline", "spot_risk"] | None = None
        if deadline is not None:
            # Spot must also survive its bad case (``cost.on_spot``: interrupted more often than expected,
            # plus once more late in the run) by the deadline itself. The safety margin covers estimate
            # error; this net covers interruption bad luck.
            if finish > self._cutoff:  # type: ignore[operator]  # set whenever the deadline is
                late = "deadline"
            elif worst_at is not None and self._spot_risk and worst_at > deadline:
                late = "spot_risk"
        # Decimal hours are made when a cost is (``Timing.hours_dec``): a refusal times every bundle, costs few.
        return Timing(g.capacity, None, h, n, None, start, finish, late, worst_at, est.physical_batch)

    def _cannot_run(self, g: Group, est: Figures | str, start: datetime) -> Timing:
        """The timing of a setup the job cannot run on (unknown GPU, does not fit): no hours, no deadline check."""
        if isinstance(est, str):
            blocker = Blocker("estimate", est)
        else:
            blocker = Blocker("memory", est.why_not or f"does not fit in {g.gpu} memory")
        return Timing(g.capacity, blocker, 0.0, 0.0, _ZERO_HOURS, start, start, None, None,
                      est.physical_batch if isinstance(est, Figures) else None)

    def _enter(self, g: Group, t: Timing, heap: list[Entry | Placeholder]) -> None:
        """Add an ``Entry`` per line of ``g``'s candidates to ``heap``.

        The hot loop of planning. A new machine for a job that avoids nothing (nearly every group) needs
        only its cost and the rank ``Scored._runs`` would give it; a ``Scored`` is made later for the few
        candidates a decision shows. Fleet slots and avoiding jobs score in full.
        """
        s = self._scored.get(g.index)
        if s is None and g.slot is None and not self.job.avoid:
            self._add_entries(heap, (g,), t)
            return
        s = s or self.scored(g, t)
        for r, line in s.runs:
            heap.append(_new(Entry, (r, s.prefix, line.members[0].tail, 0, line, g, t)))

    def _add_entries(self, out: list[Entry] | list[Entry | Placeholder], groups: Sequence[Group],
                     t: Timing) -> None:
        """The heap entries of new machines for a job that avoids nothing, ``groups`` sharing ``t``: the
        rank ``Scored._runs`` would give each line follows from the timing and the cost alone. One loop
        for a bundle, as this runs for every group a ranking reaches."""
        blocked, late, budget = t.est_blocker is not None, t.late is not None, self._budget
        hours, nodes, finish = t.hours_dec, self._nodes, t.finish
        expected_cost = cost.expected_cost
        for g in groups:
            hourly = g.hourly.get(nodes) or self.book.hourly(g, nodes)
            c = expected_cost(hourly.amount, hours)
            if blocked:
                runs = g.runs.cannot_run
            elif late or (budget is not None and self._budget_total(c) > budget.amount):
                runs = g.runs.blocked  # late or over budget (a new machine has no reservation to outlast)
            else:
                runs = g.runs.open
            prefix = _new(Prefix, (g.not_reserved, int(c * _HUNDRED), c, g.not_warm, finish, g.provider,
                                   g.region))  # as _score's
            for r, line in runs:
                out.append(_new(Entry, (r, prefix, line.members[0].tail, 0, line, g, t)))

    def _add_cheapest_late(self, out: list[Entry], groups: Sequence[Group], t: Timing) -> None:
        """The entries ``_add_entries`` would add for the groups of a bundle that can hold its best
        candidate, when its timing ``t`` is late: then every line of it is BLOCKED whatever it costs, and
        ``groups`` (a bundle, sorted by price) have costs that never fall, so only the groups at the
        first one's cost can come first (the rest of the key breaks ties among them). A refusal past the
        deadline looks for the fastest option this way without costing every group of its bundle."""
        hours, nodes, finish = t.hours_dec, self._nodes, t.finish
        expected_cost, cheapest = cost.expected_cost, None
        for g in groups:
            hourly = g.hourly.get(nodes) or self.book.hourly(g, nodes)
            c = expected_cost(hourly.amount, hours)
            if cheapest is None:
                cheapest = c
            elif c > cheapest:
                break
            prefix = _new(Prefix, (g.not_reserved, int(c * _HUNDRED), c, g.not_warm, finish, g.provider,
                                   g.region))  # as _score's
            for r, line in g.runs.blocked:
                out.append(_new(Entry, (r, prefix, line.members[0].tail, 0, line, g, t)))

    def _cost(self, g: Group, t: Timing) -> Decimal:
        hourly = g.hourly.get(self._nodes) or self.book.hourly(g, self._nodes)
        return cost.expected_cost(hourly.amount, t.hours_dec)

    def _budget_total(self, c: Decimal) -> Decimal:
        """Cost ``c`` plus what the job has spent, in the budget's currency."""
        total = c * self._budget_rate  # type: ignore[operator]  # set in __init__ whenever _budget is (only then called)
        return total if self._spent is None else total + self._spent

    def _score(self, g: Group, t: Timing, prefix: Prefix | None = None) -> Scored:
        """A group's cost and blockers, in full."""
        if prefix is None:
            c = self._cost(g, t)
            prefix = _new(Prefix, (g.not_reserved, int(c * _HUNDRED), c, g.not_warm, t.finish, g.provider, g.region))
        c = prefix.cost
        s = Scored(g, t, g.hourly.get(self._nodes) or self.book.hourly(g, self._nodes), c, prefix)
        if t.est_blocker is not None:
            s.structural = True
        else:
            s.reservation = g.until is not None and t.finish > g.until
            if self._budget is not None:
                s.budget_total = self._budget_total(c)
                s.over_budget = s.budget_total > self._budget.amount
            s.structural = t.late is not None or s.reservation or s.over_budget
            s.late_only = t.late is not None and not s.reservation and not s.over_budget
        if g.slot is not None:
            s.taken_by = self.book.taken.get(g.slot)
            s.late_only = s.late_only and s.taken_by is None
        elif self.job.avoid:
            s.avoided = frozenset(mem for mem in g.members if mem.avoid_key in self.job.avoid)
            s.late_only = s.late_only and not s.avoided
        elif not s.structural:
            s.runs = g.runs.open  # what ``_runs`` gives a new machine with no blocker: most groups scored
            return s
        elif t.est_blocker is None:
            s.runs = g.runs.blocked  # what ``_runs`` gives a new machine with a blocker: most of the rest
            return s
        s.runs = s._runs()
        return s


def _unsized(exc: UserError) -> str:
    """What an estimate that failed says: an unknown GPU, or a job file the model cannot size."""
    return str(exc).replace("\n  fix:", ":")


# --- the heap ------------------------------------------------------------------------


class Entry(NamedTuple):
    """A line of candidates in a ranking's heap, keyed by its member at ``pos`` (a ``SortKey``, then
    ``pos``). Members' tails differ, so two entries never tie on the key, and neither does an entry and
    a ``Placeholder``; the fields after ``pos`` are never compared."""

    rank: Rank
    prefix: Prefix
    tail: Tail  # of the member at ``pos``
    pos: int  # into the list walked (``Line.members``, or ``Line.firsts`` for runners-up); 0 in the heap
    line: Line
    group: Group
    timing: Timing


# A placeholder's prefix, (not_reserved, cents): True (new machines) and a whole number of cents at or below
# the cheapest group's cost on the estimate's hours, which reclaims only add to (``_floor_cents``). No
# candidate of its bundle sorts before it: at an equal number of cents it still sorts first, as a tuple
# sorts before the longer ones it begins. (A plain tuple: nothing reads its fields, and the heap gets one
# per bundle.)
Floor = tuple[bool, int]


def _floor_cents(hourly: float, hours: float) -> int:
    """Cents at or below ``cost.expected_cost`` of a price and hours, from their floats, without a Decimal.

    The exact cost is the price x ``Decimal(repr(hours))`` rounded to the cent, at or above the whole cents
    below the product. ``hourly`` and ``hours`` are the floats nearest those, so the float product (x 100) is
    within 1e-15 of the exact one, relatively: 1e-12 less is below it, and so are its whole cents. A
    placeholder only needs a lower bound (it is expanded a little early at worst), and most never are."""
    return _math_floor(hourly * hours * _CENTS_UNDER)


_CENTS_UNDER = 100.0 * (1 - 1e-12)  # x 100 (cents), less 1e-12 (``_floor_cents``)
_math_floor = math.floor


@final  # never subclassed: ``type(x) is Placeholder`` tells it from an ``Entry`` (and lets mypy narrow both ways)
class Placeholder(NamedTuple):
    """A bundle of new machines (groups sharing a timing) for one job, not timed nor costed until the ranking
    reaches it (``Ranking._expand``): most decisions show a few cheap bundles, and never read the others'
    numbers.

    It sorts before every candidate of its bundle: the rank they can have at best and whole cents at or below
    the cheapest group's cost (``CandidateBook.matching`` sorts a bundle by price) on the estimate's hours,
    which reclaims only add to (``_floor_cents``); each step of ``cost.expected_cost`` keeps that order. A
    floor below a candidate's cost only expands the bundle earlier: the order of candidates is the same. Its
    order is negative, below every ``Entry.pos``, and distinct per placeholder, so keys never tie and
    ``bundle`` is never compared.
    """

    rank: Rank  # the best its candidates can have: FEASIBLE, or BLOCKED once the deadline has passed
    prefix: Floor
    tail: tuple[()]
    order: int  # -1 - the bundle's first group's index
    bundle: list[Group]


class Ranking:
    """The candidates one filter lets through, best first; a group is scored in full when a caller needs it.

    The heap holds an ``Entry`` per line of candidates, and a ``Placeholder`` per bundle not reached yet.
    Nothing here refers back to the ranking: no reference cycles for the collector to find.
    """

    __slots__ = ("scorer", "_matching", "_timed", "_bundles", "_heap", "_expanded")  # one a job

    def __init__(self, scorer: Scorer, matching: list[list[Group]], timings: list[Timed],
                 heap: list[Entry | Placeholder]) -> None:
        self.scorer = scorer
        self._matching, self._timed = matching, timings  # the bundles; by timing (``CandidateBook.rows``)
        self._bundles: list[tuple[Timing, list[Group]]] | None = None
        self._heap = heap  # heapified
        self._expanded: dict[int, list[Entry]] = {}  # Placeholder.order -> its bundle's entries

    def _expand(self, p: Placeholder) -> list[Entry]:
        """A placeholder's candidates: its bundle timed, and its groups' heap entries (made once)."""
        entries = self._expanded.get(p.order)
        if entries is None:
            entries = self._expanded[p.order] = []
            sc = self.scorer
            sc._add_entries(entries, p.bundle, sc.timing(p.bundle[0]))
        return entries

    def _settle(self, heap: list[Entry | Placeholder]) -> None:
        """Expand placeholders at the top of ``heap`` until a candidate's line is there (or nothing is)."""
        while heap and type(top := heap[0]) is Placeholder:
            heapq.heappop(heap)  # returns top
            for entry in self._expand(top):
                heapq.heappush(heap, entry)

    @property
    def bundles(self) -> list[tuple[Timing, list[Group]]]:
        """Per timing: the groups that share it (every bundle timed)."""
        if self._bundles is None:
            timing, timings, by_gpu = self.scorer.timing, self.scorer._timings, self.scorer._by_gpu
            self._bundles = [(timings.get(groups[0].timing_keys[by_gpu]) or timing(groups[0]), groups)
                             for groups in self._matching]
        return self._bundles

    def needs(self, boot: float, stretch: float) -> list[tuple[float, Group]]:
        """For a job with a deadline, per timing it can run on that may be the fastest: its ``Timing.needed``
        in hours after now as floats compute it, and a group that has it (``plan._soonest`` makes those
        within ``need_tolerance`` of the least). ``boot``: a new machine's hours to start; ``stretch``:
        1 / (1 - deadline_safety).

        Off spot, the finish is the start plus the estimate's hours, stretched. On spot, interruptions only
        add to the hours and the bad case has at least one restart more, so spot's is at least the larger of
        the same stretched (its setup's off spot) and the start plus the hours plus ``restart_hours``: a spot
        timing whose bound is past what the others allow is left out without working out its interruptions."""
        sc = self.scorer
        base_of, restart = sc._base, sc._restart_hours
        out: list[tuple[float, Group]] = []
        spot: list[tuple[float, float, float, Group]] = []
        least = math.inf
        for row, _ in self._timed:
            g = row.bundle[0]
            base = base_of.get(row.est_key, False)
            if base is False:
                base = sc._fit_hours(g, row.est_key)
            if base is None:
                continue  # the job cannot run there
            start = boot if g.not_warm else 0.0  # as _time's
            if g.capacity is _SPOT:
                spot.append((max((start + base) * stretch, start + (base + restart)), base, start, g))
            else:
                need = (start + base) * stretch
                out.append((need, g))
                if need < least:
                    least = need
        cutoff = least + need_tolerance(least, stretch)
        for bound, base, start, g in spot:
            if bound <= cutoff:
                out.append((sc.spot_need_hours(g, base, start, stretch), g))
        return out

    @property
    def scored(self) -> list[Scored]:
        """Every group, scored in full."""
        return [self.scorer.scored(g, t) for t, groups in self.bundles for g in groups]

    def _walk(self) -> list[Entry | Placeholder]:
        """A copy of the heap to walk, a candidate on top."""
        self._settle(self._heap)  # the same candidates: placeholders at the top expanded for every walk
        return self._heap[:]

    def picks(self) -> Iterator[Pick]:
        """Every candidate, best first (a fresh iteration each call)."""
        heap, sc = self._walk(), self.scorer
        while heap:
            # _walk, then _settle, leave a line on top (no ``cast``: a call each candidate walked)
            r, prefix, _, i, line, g, t = heap[0]  # type: ignore[misc]
            ms = line.members
            yield _new(Pick, (sc.scored(g, t, prefix), ms[i], r))
            i += 1
            if i < len(ms):
                heapq.heapreplace(heap, _new(Entry, (r, prefix, ms[i].tail, i, line, g, t)))
            else:
                heapq.heappop(heap)
            self._settle(heap)

    def distinct(self, seen: set[int], limit: int) -> list[Pick]:
        """The best ``limit`` candidates, skipping any whose ``Member.shape`` is in ``seen``; adds theirs.
        (The runners-up: one per cloud, region, type and capacity, as other zones of a type add nothing.)

        Only the first member of each shape in a line can come out (the others' shape is seen by
        then), so the walk takes ``Line.firsts``.
        """
        if limit <= 0:
            return []
        heap, out, sc = self._walk(), [], self.scorer
        while heap:
            # _walk, then _settle below, leave a line on top (no ``cast``: a call each candidate walked)
            r, prefix, _, i, line, g, t = heap[0]  # type: ignore[misc]
            ms = line.firsts
            if ms[i].shape not in seen:
                seen.add(ms[i].shape)
                out.append(_new(Pick, (sc.scored(g, t, prefix), ms[i], r)))
                if len(out) == limit:
                    break
            i += 1
            while i < len(ms) and ms[i].shape in seen:  # its shape came out of another line
                i += 1
            if i < len(ms):
                heapq.heapreplace(heap, _new(Entry, (r, prefix, ms[i].tail, i, line, g, t)))
            else:
                heapq.heappop(heap)
            if heap and type(heap[0]) is Placeholder:
                self._settle(heap)
        return out

    def fastest(self, fastest: set[Timing]) -> tuple[Group, Member, Timing]:
        """The best candidate whose timing is one of ``fastest`` (made, and late: ``plan._deadline_refusal``): its
        group, member and timing.

        Every line of a late timing is BLOCKED whatever it costs, and a bundle's costs never fall, so the
        best is among each bundle's cheapest groups (``Scorer._add_cheapest_late``). Bundles are taken by
        a floor of their cost (``_floor_cents`` of the timing's hours), cheapest first, and only while that
        floor is not past the best found, so most are never costed."""
        sc = self.scorer
        timings, nodes, hourly_f, by_gpu = sc._timings, sc._nodes, sc.book.hourly_f, sc._by_gpu
        floors: list[tuple[bool, int, int, list[Group], Timing]] = []
        for row, bundles in self._timed:
            t = timings.get(row.bundle[0].timing_keys[by_gpu])
            if t is not None and t in fastest:
                assert t.late is not None and t.est_blocker is None
                for bundle in bundles:
                    g = bundle[0]
                    floors.append((g.not_reserved, _math_floor(hourly_f(g, nodes) * t.hours * _CENTS_UNDER), g.index,
                                   bundle, t))
        floors.sort()  # (a group's index is its own: nothing after it is compared)
        top: Entry | None = None
        found: list[Entry] = []
        for not_reserved, cents, _, bundle, t in floors:
            if top is not None and (not_reserved, cents) > top.prefix[:2]:
                break  # its candidates, and those of the bundles after it, sort after the best found
            found.clear()
            sc._add_cheapest_late(found, bundle, t)
            head = min(found)
            if top is None or head < top:
                top = head
        assert top is not None  # a refusal reads only which it is (no ``Scored``)
        return top.group, top.line.members[0], top.timing

    def first(self) -> Pick | None:
        self._settle(self._heap)
        if not self._heap:
            return None
        r, prefix, _, _, line, g, t = self._heap[0]  # type: ignore[misc]  # settled: a candidate's line on top
        return Pick(self.scorer.scored(g, t, prefix), line.members[0], r)


def need_tolerance(hours: float, stretch: float) -> float:
    """How far a float ``needed`` (``Ranking.needs``, hours after now) may be from ``Timing.needed``, twice
    over, with room to spare; ``stretch``: 1 / (1 - deadline_safety). ``needed`` rounds to the microsecond
    (2.8e-10 h) where it starts, finishes and after the division by 1 - safety, which stretches the error
    before it; the floats err by a few parts in 1e16. The bound here is 36 microseconds x (1 + stretch),
    plus a part in 1e12 (``test_fast_paths`` finds the errors under a tenth of it)."""
    return 1e-8 * (1 + stretch) + 1e-12 * abs(hours)


def fmt_hours(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 3600:.1f} h"


def fmt_time(dt: datetime) -> str:
    """``dt`` in UTC to the minute, as ``strftime("%Y-%m-%d %H:%M UTC")`` writes it, in half its time."""
    u = dt if dt.tzinfo is UTC else dt.astimezone(UTC)
    return f"{u.year}-{u.month:02d}-{u.day:02d} {u.hour:02d}:{u.minute:02d} UTC"
