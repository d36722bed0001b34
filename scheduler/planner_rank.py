"""Ranking one job's candidates for ``planner``, fast: score groups, not candidates.

A ``plan()`` call builds one ``Book``: its offers and fleet slots folded into
``Group``s of candidates that share every number the planner computes (cloud,
region, GPU setup, vCPUs, capacity, price, reclaim rate, fleet slot) and differ
only in zone, instance type and stock. For a job, ``Scorer`` scores each
matching group once (``perf.estimate`` once per GPU setup; hours, finish and
deadline once per setup x capacity x reclaim rate x start; cost and budget once
per group), and ``Ranking`` merges the groups' members with a heap into the
planner's order, lazily: a decision needs the best few only.

The order, as if every candidate were scored and sorted: rank (0 feasible,
1 only transient blockers, 2 other blockers, 3 memory / estimate blockers),
reserved capacity first, expected cost, warm first, finish, then the
candidate's identity (provider, region, zone, type, capacity, source, instance,
gpu, count), then input order (offers, then canonical fleet slots) for exact
ties. Sort keys nest as ``(rank, Scored.prefix, Member.tail)``.

Everything here lives for one ``plan()`` call: no module-level state.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import TYPE_CHECKING, Literal, NamedTuple

from scheduler.errors import UserError
from scheduler.models import Capacity, Kind, Offer, Stock
from scheduler.money import Money
from scheduler.perf import Estimate, estimate

if TYPE_CHECKING:
    from scheduler.planner import FleetSlot, PlanJob, PlannerPolicy

Source = Literal["new", "warm", "reserved"]
BlockerKind = Literal["stock", "avoid", "taken", "estimate", "memory", "deadline", "spot_risk", "budget",
                      "reservation"]
_TRANSIENT = frozenset({"stock", "avoid", "taken"})  # waiting can clear these; the rest it cannot
_CENT = Decimal("0.01")


@dataclass(frozen=True, slots=True)
class Blocker:
    kind: BlockerKind
    text: str
    holder: str | None = None  # "taken": the job the slot went to

    @property
    def transient(self) -> bool:
        return self.kind in _TRANSIENT


# --- the book: offers and slots, grouped once per plan() call ------------------------


@dataclass(eq=False, slots=True)
class Member:
    """One candidate of a group: an offer (or a slot's offer) with this group's capacity."""

    offer: Offer
    avoid_key: str | None  # "Offer.key|capacity" for new capacity; fleet slots are never avoided
    sold_out: bool
    tail: tuple  # the sort key after (provider, region): zone, type, capacity, source, instance, gpu, count, seq
    shape: int  # what runners-up show once (provider, region, type, capacity, source, instance), interned


class Line(NamedTuple):
    """Members in tie-break order, and the first of each shape among them (all that runners-up look at)."""

    members: list[Member]
    firsts: list[Member]

    @classmethod
    def of(cls, members: list[Member]) -> Line:
        seen: set[int] = set()
        firsts = []
        for mem in members:
            if mem.shape not in seen:
                seen.add(mem.shape)
                firsts.append(mem)
        return cls(members, firsts)


@dataclass(eq=False, slots=True)
class Group:
    """Candidates whose every number is the same: one price, GPU setup and reclaim rate in one region."""

    provider: str
    region: str
    gpu: str
    gpu_count: int
    vcpus: int
    capacity: Capacity
    source: Source
    rate: float  # reclaims per hour as the cost model sees them (0 for naive strategies)
    price: Money | None  # per node, in the offer's currency; None for reserved capacity (already paid)
    slot: int | None = None  # index into the canonical fleet
    instance_id: str | None = None
    until: datetime | None = None
    members: list[Member] = field(default_factory=list)
    every: Line = field(default_factory=lambda: Line([], []))
    clean: Line = field(default_factory=lambda: Line([], []))  # not sold out
    sold: Line = field(default_factory=lambda: Line([], []))
    index: int = 0  # in Book.groups
    est_key: int = 0  # GPU setup (gpu, count, vCPUs), interned by the book
    timing_key: int = 0  # GPU setup x capacity x reclaim rate x warm start, interned by the book
    hourly: dict[int, Money] = field(default_factory=dict)  # nodes -> price of all nodes, policy currency


class Filter(NamedTuple):
    """What a job (or a relaxed copy of it) lets through."""

    gpus: tuple[str, ...] | None
    gpu_count: int
    providers: tuple[str, ...] | None
    regions: tuple[str, ...] | None
    capacities: frozenset[Capacity]
    slots: bool  # a gang of nodes is launched fresh: fleet slots are single machines

    def admits(self, g: Group) -> bool:
        return (
            g.capacity in self.capacities
            and (self.gpus is None or g.gpu in self.gpus)
            and g.gpu_count == self.gpu_count
            and (self.providers is None or g.provider in self.providers)
            and (self.regions is None or g.region in self.regions)
        )


class Book:
    """Everything a plan() call sees besides the jobs, grouped, and the slots already handed out."""

    def __init__(self, offers: Sequence[Offer], slots: Sequence[FleetSlot], now: datetime, policy: PlannerPolicy,
                 measured: Mapping[tuple[str, str, int], float] | None) -> None:
        self.now, self.policy, self.measured = now, policy, measured
        self.taken: dict[int, str] = {}  # slot index -> the job it went to
        self.start_new = now + timedelta(hours=policy.boot_hours)
        self._rates: dict[tuple[str, str], Decimal] = {}
        self._matching: dict[Filter, list[list[Group]]] = {}
        self._keys: dict[tuple, int] = {}  # interned setups, timings and shapes (tagged)
        groups: dict[tuple, Group] = {}
        for i, offer in enumerate(offers):
            for j, cap in enumerate((Capacity.spot, Capacity.on_demand)):
                price = offer.price(cap)
                if price is None:
                    continue
                money = price.per_hour
                key = (offer.provider, offer.region, offer.gpu, offer.gpu_count, offer.vcpus,
                       offer.spot_interruptions_per_hour if cap is Capacity.spot else None, cap,
                       money.currency, str(money.amount))  # str: 1.0 and 1.00 print differently
                g = groups.get(key)
                if g is None:
                    g = groups[key] = self._group(offer, cap, "new", money)
                g.members.append(Member(offer, f"{offer.key}|{cap.value}", offer.stock(cap) is Stock.sold_out,
                                        *self._tail(offer, g, 2 * i + j)))
        self.groups = list(groups.values())
        base = 2 * len(offers)
        for i, slot in enumerate(slots):
            price = slot.offer.price(slot.capacity)
            if slot.capacity is not Capacity.reserved and price is None:
                continue  # a warm machine we cannot price cannot be compared
            g = self._group(slot.offer, slot.capacity, slot.kind, None if price is None else price.per_hour)
            g.slot, g.instance_id, g.until = i, slot.instance_id, slot.until
            g.members.append(Member(slot.offer, None, False, *self._tail(slot.offer, g, base + i)))
            self.groups.append(g)
        for i, g in enumerate(self.groups):
            g.index = i
            g.members.sort(key=lambda mem: mem.tail)
            g.every = Line.of(g.members)
            g.clean = Line.of([mem for mem in g.members if not mem.sold_out])
            g.sold = Line.of([mem for mem in g.members if mem.sold_out])

    def _group(self, offer: Offer, cap: Capacity, source: Source, price: Money | None) -> Group:
        rate = 0.0 if self.policy.naive_spot else offer.spot_interruptions_per_hour
        g = Group(offer.provider, offer.region, offer.gpu, offer.gpu_count, offer.vcpus, cap, source, rate, price)
        setup = (offer.gpu, offer.gpu_count, offer.vcpus)
        g.est_key = self._intern(("setup", *setup))
        g.timing_key = self._intern(("timing", *setup, cap, rate if cap is Capacity.spot else 0.0, source == "warm"))
        return g

    def _tail(self, offer: Offer, g: Group, seq: int) -> tuple[tuple, int]:
        """A member's sort-key tail and its shape."""
        cap, iid = g.capacity.value, g.instance_id or ""
        shape = ("shape", offer.provider, offer.region, offer.instance_type, cap, g.source, iid)
        return ((offer.zone, offer.instance_type, cap, g.source, iid, offer.gpu, offer.gpu_count, seq),
                self._intern(shape))

    def _intern(self, key: tuple) -> int:
        return self._keys.setdefault(key, len(self._keys))

    def matching(self, f: Filter) -> list[list[Group]]:
        """The groups ``f`` lets through, in bundles that share a timing (GPU setup, capacity, rate, start)."""
        got = self._matching.get(f)
        if got is None:
            bundles: dict[int, list[Group]] = {}
            for g in self.groups:
                if (f.slots or g.slot is None) and f.admits(g):
                    bundles.setdefault(g.timing_key, []).append(g)
            got = self._matching[f] = list(bundles.values())
        return got

    def rate(self, src: str, dst: str) -> Decimal:
        r = self._rates.get((src, dst))
        if r is None:
            r = self._rates[(src, dst)] = self.policy.fx.rate(src, dst)
        return r

    def hourly(self, g: Group, nodes: int) -> Money:
        """All nodes' hourly price in the policy currency (``FxRates.convert`` x nodes, the same arithmetic)."""
        h = g.hourly.get(nodes)
        if h is None:
            cur = self.policy.currency
            if g.price is None:
                h = Money.zero(cur)
            else:
                h = Money(amount=g.price.amount * self.rate(g.price.currency, cur), currency=cur) * nodes
            g.hourly[nodes] = h
        return h


# --- scoring one job ------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class Timing:
    """One GPU setup x capacity x reclaim rate x start for one job: hours, finish and deadline."""

    capacity: Capacity
    est_blocker: Blocker | None  # estimate / memory: the job cannot run here at all
    hours: float  # expected, including interruption overhead (0 when est_blocker)
    interruptions: float
    hours_dec: Decimal
    start: datetime
    finish: datetime
    late: Literal["deadline", "spot_risk"] | None  # the deadline blocker, if any (its text on demand)
    worst: datetime  # spot's bad case: finish after 1.5 x the expected interruptions + 1
    physical_batch: int | None
    _late_blocker: Blocker | None = None
    _needed: datetime | None = None

    def needed(self, now: datetime, safety: float) -> datetime:
        """The earliest deadline this would meet (the inverse of the deadline check); when usable."""
        if self._needed is None:
            need = now + (self.finish - now) / (1 - safety)
            self._needed = max(need, self.worst) if self.capacity is Capacity.spot else need
        return self._needed

    def late_blocker(self, deadline: datetime, now: datetime, safety: float) -> Blocker:
        """The deadline blocker's text (formatting is the slow part, so only for options shown)."""
        if self._late_blocker is None:
            if self.late == "spot_risk":
                text = ("too risky on spot: a late interruption would miss the deadline by "
                        f"{fmt_hours(self.worst - deadline)}")
            elif self.finish > deadline:
                text = f"misses deadline by {fmt_hours(self.finish - deadline)}"
            else:
                margin = safety * max(deadline - now, timedelta(0))
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
    reservation: bool  # the reservation ends before the expected finish
    budget_total: Decimal | None  # cost + spent, budget currency (when the job has a budget)
    over_budget: bool
    structural: bool  # a blocker waiting cannot clear
    avoided: frozenset[Member]  # members the job avoids (recently out of capacity)
    taken_by: str | None  # fleet slot held for another job
    prefix: tuple  # the sort key between rank and (zone, ...): reserved, cost, warm, finish, provider, region
    runs: tuple[tuple[int, Line], ...] = ()  # the members by rank
    est_cost: Money | None = None  # cost as Money, made once when an Option needs it

    @property
    def usable(self) -> bool:
        return self.timing.est_blocker is None

    def blockers(self, mem: Member, job: PlanJob, book: Book) -> list[Blocker]:
        """In the order the planner has always listed them (they join into ``Option.why``)."""
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
            assert job.deadline_at is not None
            out.append(t.late_blocker(job.deadline_at, book.now, book.policy.deadline_safety))
        if self.reservation:
            assert self.group.until is not None
            out.append(Blocker("reservation", f"reservation ends {fmt_time(self.group.until)}, "
                                              "before the expected finish"))
        budget = job.spec.policy.budget
        if self.over_budget:
            assert budget is not None and self.budget_total is not None
            total = Money(amount=self.budget_total, currency=budget.currency)
            out.append(Blocker("budget", f"over budget ({total} > {budget})"))
        return out

    def _runs(self) -> tuple[tuple[int, Line], ...]:
        g = self.group
        if self.timing.est_blocker is not None:
            return ((3, g.every),)
        if self.structural:
            return ((2, g.every),)
        if self.taken_by is not None:
            return ((1, g.every),)
        if not self.avoided:
            return tuple((r, line) for r, line in ((0, g.clean), (1, g.sold)) if line.members)
        clean = Line.of([mem for mem in g.members if not mem.sold_out and mem not in self.avoided])
        blocked = Line.of([mem for mem in g.members if mem.sold_out or mem in self.avoided])
        return tuple((r, line) for r, line in ((0, clean), (1, blocked)) if line.members)

    def best(self) -> tuple[tuple, Member, int]:
        """This group's first member in planner order: (sort key, member, rank)."""
        return min(((r, self.prefix, line.members[0].tail), line.members[0], r) for r, line in self.runs)


Pick = tuple[Scored, Member, int]  # a candidate: its group's score, which member, its rank


class Scorer:
    """One job's groups, each scored once and shared by every filter the planner tries for it."""

    def __init__(self, book: Book, job: PlanJob) -> None:
        self.book, self.job = book, job
        self._estimates: dict[int, Estimate | str] = {}
        self._timings: dict[int, Timing] = {}
        self._scored: list[Scored | None] = [None] * len(book.groups)
        deadline = job.deadline_at
        # A finish after this leaves less than deadline_safety of the remaining time spare.
        self._cutoff = None if deadline is None else \
            deadline - book.policy.deadline_safety * max(deadline - book.now, timedelta(0))

    def rank(self, f: Filter) -> Ranking:
        got, scored = [], self._scored
        for bundle in self.book.matching(f):
            t = None
            for g in bundle:
                s = scored[g.index]
                if s is None:
                    if t is None:
                        t = self._timing(g)
                    s = scored[g.index] = self._score(g, t)
                got.append(s)
        return Ranking(got)

    def first_usable(self, f: Filter) -> Pick | None:
        """``rank(f).first()`` when that is feasible or only waits on stock, else None, scoring fewer groups."""
        heads, scored = [], self._scored
        for bundle in self.book.matching(f):
            t = self._timing(bundle[0])
            if t.est_blocker is not None or t.late is not None:
                continue  # rank 2 or 3 whatever it costs
            for g in bundle:
                s = scored[g.index]
                if s is None:
                    s = scored[g.index] = self._score(g, t)
                if not s.structural:
                    heads.extend(((r, s.prefix, line.members[0].tail), line.members[0], r, s) for r, line in s.runs)
        if not heads:
            return None
        _, mem, r, s = min(heads)
        return s, mem, r

    def _estimate(self, g: Group) -> Estimate | str:
        est = self._estimates.get(g.est_key)
        if est is None:
            job = self.job
            try:
                est = estimate(job.spec, g.gpu, g.gpu_count, g.vcpus, epochs_done=job.epochs_done,
                               nodes=job.spec.resources.nodes, measured=self.book.measured)
            except UserError as exc:  # an unknown GPU, or a job file the model cannot size
                est = str(exc).replace("\n  fix:", ":")
            self._estimates[g.est_key] = est
        return est

    def _timing(self, g: Group) -> Timing:
        """Expected hours (spot: with interruptions), finish and the deadline check, once per timing key."""
        t = self._timings.get(g.timing_key)
        if t is not None:
            return t
        book, spec = self.book, self.job.spec
        policy, now, cap = book.policy, book.now, g.capacity
        est = self._estimate(g)
        blocker = None
        if isinstance(est, str):
            blocker = Blocker("estimate", est)
        elif not est.fits or not math.isfinite(est.hours):
            blocker = Blocker("memory", est.why_not or f"does not fit in {g.gpu} memory")
        h = worst = n = 0.0
        if blocker is None:
            assert isinstance(est, Estimate)
            h = worst = est.hours
            if cap is Capacity.spot:
                n = g.rate * spec.resources.nodes * h
                if spec.kind is Kind.train and est.epoch_hours is not None:
                    lost = est.epoch_hours / 2  # resumes from the last epoch's checkpoint
                else:
                    lost = h / 2  # no checkpoint: on average half the work is redone
                base, k = h, 1.5 * n + 1
                h = base + (n * policy.restart_hours + min(n * lost, base))
                worst = base + (k * policy.restart_hours + min(k * lost, base))
        start = now if g.source == "warm" else book.start_new
        finish = start + timedelta(hours=h)
        worst_at = start + timedelta(hours=worst) if cap is Capacity.spot else finish  # h == worst off spot
        late: Literal["deadline", "spot_risk"] | None = None
        deadline = self.job.deadline_at
        if blocker is None and deadline is not None:
            assert self._cutoff is not None
            # Spot must also survive its bad case (interrupted 1.5 x as often as expected, plus
            # once more late in the run, the rest run on-demand) by the deadline itself. The
            # safety margin covers estimate error; this net covers interruption bad luck.
            if finish > self._cutoff:
                late = "deadline"
            elif cap is Capacity.spot and not policy.naive_spot and worst_at > deadline:
                late = "spot_risk"
        t = self._timings[g.timing_key] = Timing(
            cap, blocker, h, n, Decimal(repr(h)), start, finish, late, worst_at,
            est.physical_batch if isinstance(est, Estimate) else None)
        return t

    def _score(self, g: Group, t: Timing) -> Scored:
        book, job = self.book, self.job
        hourly = book.hourly(g, job.spec.resources.nodes)
        cost = (hourly.amount * t.hours_dec).quantize(_CENT, rounding=ROUND_HALF_EVEN)
        reservation = over = False
        budget_total = None
        if t.est_blocker is None:
            reservation = g.until is not None and t.finish > g.until
            budget = job.spec.policy.budget
            if budget is not None:
                budget_total = cost * book.rate(book.policy.currency, budget.currency)
                if job.spent is not None:
                    budget_total = budget_total + job.spent.amount * book.rate(job.spent.currency, budget.currency)
                over = budget_total > budget.amount
        structural = t.est_blocker is not None or t.late is not None or reservation or over
        avoided: frozenset[Member] = frozenset()
        if job.avoid and g.slot is None:
            avoided = frozenset(mem for mem in g.members if mem.avoid_key in job.avoid)
        taken_by = book.taken.get(g.slot) if g.slot is not None else None
        prefix = (g.capacity is not Capacity.reserved, cost, g.source != "warm", t.finish, g.provider, g.region)
        s = Scored(g, t, hourly, cost, reservation, budget_total, over, structural, avoided, taken_by, prefix)
        s.runs = s._runs()
        return s


class Ranking:
    """The scored groups one filter lets through; candidates come out best first."""

    def __init__(self, scored: list[Scored]) -> None:
        self.scored = scored

    def _heap(self, firsts: bool) -> list[tuple]:
        heap = [((r, s.prefix, ms[0].tail), 0, ms, r, s)
                for s in self.scored for r, line in s.runs for ms in (line.firsts if firsts else line.members,)]
        heapq.heapify(heap)
        return heap

    def picks(self) -> Iterator[Pick]:
        """Every candidate, best first (a fresh iteration each call)."""
        heap = self._heap(False)
        while heap:
            _, i, ms, r, s = heap[0]
            yield s, ms[i], r
            i += 1
            if i < len(ms):
                heapq.heapreplace(heap, ((r, s.prefix, ms[i].tail), i, ms, r, s))
            else:
                heapq.heappop(heap)

    def distinct(self, seen: set[int]) -> Iterator[Pick]:
        """Best first, skipping any candidate whose ``Member.shape`` is in ``seen``; adds what it yields.

        Only the first member of each shape in a line can come out (the others' shape is seen by
        then), so the heap walks ``Line.firsts``.
        """
        heap = self._heap(True)
        while heap:
            _, i, ms, r, s = heap[0]
            if ms[i].shape not in seen:
                seen.add(ms[i].shape)
                yield s, ms[i], r
            i += 1
            while i < len(ms) and ms[i].shape in seen:  # its shape came out of another line
                i += 1
            if i < len(ms):
                heapq.heapreplace(heap, ((r, s.prefix, ms[i].tail), i, ms, r, s))
            else:
                heapq.heappop(heap)

    def first(self) -> Pick | None:
        heads = [((r, s.prefix, line.members[0].tail), line.members[0], r, s)
                 for s in self.scored for r, line in s.runs]
        if not heads:
            return None
        _, mem, r, s = min(heads)
        return s, mem, r


def fmt_hours(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 3600:.1f} h"


def fmt_time(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
