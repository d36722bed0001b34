"""Ranking one job's candidates for ``planner``, fast: score groups, not candidates.

A ``plan()`` call builds one ``Book``: its offers and fleet slots folded into
``Group``s of candidates that share every number the planner computes (cloud,
region, GPU setup, vCPUs, capacity, price, reclaim rate, fleet slot) and differ
only in zone, instance type and stock. For a job, ``Scorer`` prices each
matching group once (``perf.figures`` once per GPU setup, or once per GPU for
inference and export, which read nothing else of the setup; hours, finish and
deadline once per setup x capacity x reclaim rate x start; cost and budget once
per group), and ``Ranking`` merges the groups' members with a heap into the
planner's order, lazily: a decision needs the best few only, so only those few
groups (and whatever a refusal's reason looks at) get a full ``Scored``.

Speed notes (10,000 queued jobs x 2,000 offers is the benchmark): the per-group
loop (``Scorer._enter``) is the hot path and does only a cost and a rank for a
new machine; a job whose deadline has passed skips the relaxed-filter hints
(nothing can be on time, ``Scorer.past_deadline``).

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import TYPE_CHECKING, Literal, NamedTuple

from scheduler.errors import UserError
from scheduler.models import Capacity, Kind, Offer, Stock
from scheduler.money import Money
from scheduler.perf import GPU_ONLY_KINDS, Figures, figures

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
    fields: dict = field(init=False)  # the offer's part of an Option's fields, read once

    def __post_init__(self) -> None:
        o = self.offer
        self.fields = {"provider": o.provider, "region": o.region, "zone": o.zone,
                       "instance_type": o.instance_type, "gpu": o.gpu, "gpu_count": o.gpu_count}


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
    not_reserved: bool = True  # sort-key flags (see Scored.prefix), kept here: reading them is cheaper
    not_warm: bool = True
    instance_id: str | None = None
    until: datetime | None = None
    members: list[Member] = field(default_factory=list)
    every: Line = field(default_factory=lambda: Line([], []))
    clean: Line = field(default_factory=lambda: Line([], []))  # not sold out
    sold: Line = field(default_factory=lambda: Line([], []))
    index: int = 0  # in Book.groups
    # Interned by the book: the GPU setup (gpu, count, vCPUs), and the GPU alone (perf.GPU_ONLY_KINDS).
    est_keys: tuple[int, int] = (0, 0)
    timing_keys: tuple[int, int] = (0, 0)  # each x capacity x reclaim rate x warm start
    hourly: dict[int, Money] = field(default_factory=dict)  # nodes -> price of all nodes, policy currency
    # The members by rank (see ``Scored._runs``), made once: [0] clean at 0 and sold out at 1 (no other
    # blocker), [1] all at 1 (the slot is held), [2] all at 2 (structural), [3] all at 3 (cannot estimate).
    runs: tuple[tuple[tuple[int, Line], ...], ...] = ()


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
        self._money: dict[tuple[Decimal, bool], Money] = {}
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
            g.runs = (tuple((r, line) for r, line in ((0, g.clean), (1, g.sold)) if line.members),
                      *(((r, g.every),) for r in (1, 2, 3)))

    def _group(self, offer: Offer, cap: Capacity, source: Source, price: Money | None) -> Group:
        rate = 0.0 if self.policy.naive_spot else offer.spot_interruptions_per_hour
        g = Group(offer.provider, offer.region, offer.gpu, offer.gpu_count, offer.vcpus, cap, source, rate, price,
                  not_reserved=cap is not Capacity.reserved, not_warm=source != "warm")
        setup = (offer.gpu, offer.gpu_count, offer.vcpus)
        how = (cap, rate if cap is Capacity.spot else 0.0, source == "warm")
        g.est_keys = (self._intern(("setup", *setup)), self._intern(("gpu", offer.gpu)))
        g.timing_keys = (self._intern(("timing", *setup, *how)), self._intern(("gpu timing", offer.gpu, *how)))
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
                    bundles.setdefault(g.timing_keys[0], []).append(g)
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

    def money(self, cost: Decimal) -> Money:
        """``cost`` (to the cent, policy currency) as Money; one object per amount: costs repeat across jobs."""
        key = (cost, cost.is_signed())  # 0.00 == -0.00, but they print differently
        m = self._money.get(key)
        if m is None:
            m = self._money[key] = Money(amount=cost, currency=self.policy.currency)
        return m


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
    prefix: tuple  # the sort key between rank and (zone, ...): reserved, cost, warm, finish, provider, region
    # Most groups of most jobs keep these defaults (``Scorer._score`` sets the rest).
    reservation: bool = False  # the reservation ends before the expected finish
    budget_total: Decimal | None = None  # cost + spent, budget currency (when the job has a budget)
    over_budget: bool = False
    structural: bool = False  # a blocker waiting cannot clear
    avoided: frozenset[Member] = frozenset()  # members the job avoids (recently out of capacity)
    taken_by: str | None = None  # fleet slot held for another job
    runs: tuple[tuple[int, Line], ...] = ()  # the members by rank

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
            return g.runs[3]
        if self.structural:
            return g.runs[2]
        if self.taken_by is not None:
            return g.runs[1]
        if not self.avoided:
            return g.runs[0]
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
        self._estimates: dict[int, Figures | str] = {}
        self._timings: dict[int, Timing] = {}
        self._scored: list[Scored | None] = [None] * len(book.groups)
        deadline = self._deadline = job.deadline_at
        self._resumes = job.spec.kind is Kind.train  # from its last epoch's checkpoint, after a reclaim
        # A finish after this leaves less than deadline_safety of the remaining time spare.
        self._cutoff = None if deadline is None else \
            deadline - book.policy.deadline_safety * max(deadline - book.now, timedelta(0))
        spec = job.spec
        self._by_gpu = int(spec.kind in GPU_ONLY_KINDS)  # which of Group.est_keys / timing_keys
        self._nodes, self._budget = spec.resources.nodes, spec.policy.budget
        self._budget_rate = self._spent = None  # policy currency -> budget currency; spent, in the budget's
        if self._budget is not None:
            self._budget_rate = book.rate(book.policy.currency, self._budget.currency)
            if job.spent is not None:
                self._spent = job.spent.amount * book.rate(job.spent.currency, self._budget.currency)

    @property
    def past_deadline(self) -> bool:
        """Whatever can run is late: every start is at or after now and takes some time (4 minutes or more)."""
        return self._cutoff is not None and self._cutoff <= self.book.now

    def rank(self, f: Filter) -> Ranking:
        """Every candidate ``f`` lets through, in a heap; most groups get no ``Scored`` (see ``_enter``)."""
        bundles, heap = [], []
        for bundle in self.book.matching(f):
            t = self._timing(bundle[0])
            bundles.append((t, bundle))
            for g in bundle:
                self._enter(g, t, heap)
        heapq.heapify(heap)
        return Ranking(self, bundles, heap)

    def scored(self, g: Group, t: Timing | None = None) -> Scored:
        """``g`` scored in full (once)."""
        s = self._scored[g.index]
        if s is None:
            s = self._scored[g.index] = self._score(g, self._timing(g) if t is None else t)
        return s

    def first_usable(self, f: Filter) -> Pick | None:
        """``rank(f).first()`` when that is feasible or only waits on stock, else None, scoring fewer groups."""
        if self.past_deadline:
            return None  # no need to estimate what the relaxed filter adds
        heads = []
        for bundle in self.book.matching(f):
            t = self._timing(bundle[0])
            if t.est_blocker is not None or t.late is not None:
                continue  # rank 2 or 3 whatever it costs
            for g in bundle:
                s = self.scored(g, t)
                if not s.structural:
                    heads.extend(((r, s.prefix, line.members[0].tail), line.members[0], r, s) for r, line in s.runs)
        if not heads:
            return None
        _, mem, r, s = min(heads)
        return s, mem, r

    def _estimate(self, g: Group) -> Figures | str:
        key = g.est_keys[self._by_gpu]
        est = self._estimates.get(key)
        if est is None:
            job = self.job
            try:
                est = figures(job.spec, g.gpu, g.gpu_count, g.vcpus, epochs_done=job.epochs_done,
                              nodes=self._nodes, measured=self.book.measured)
            except UserError as exc:  # an unknown GPU, or a job file the model cannot size
                est = str(exc).replace("\n  fix:", ":")
            self._estimates[key] = est
        return est

    def _timing(self, g: Group) -> Timing:
        """Expected hours (spot: with interruptions), finish and the deadline check, once per timing key."""
        key = g.timing_keys[self._by_gpu]
        t = self._timings.get(key)
        if t is None:
            t = self._timings[key] = self._time(g)
        return t

    def _time(self, g: Group) -> Timing:
        book, cap, spot = self.book, g.capacity, g.capacity is Capacity.spot
        est = self._estimate(g)
        blocker = None
        if isinstance(est, str):
            blocker = Blocker("estimate", est)
        elif not est.fits or not math.isfinite(est.hours):
            blocker = Blocker("memory", est.why_not or f"does not fit in {g.gpu} memory")
        h = worst = n = 0.0
        if blocker is None:
            assert isinstance(est, Figures)
            h = worst = est.hours
            if spot:
                n = g.rate * self._nodes * h
                if self._resumes and est.epoch_hours is not None:
                    lost = est.epoch_hours / 2  # resumes from the last epoch's checkpoint
                else:
                    lost = h / 2  # no checkpoint: on average half the work is redone
                base, k, restart = h, 1.5 * n + 1, book.policy.restart_hours
                h = base + (n * restart + min(n * lost, base))
                worst = base + (k * restart + min(k * lost, base))
        start = book.start_new if g.not_warm else book.now
        finish = start + timedelta(hours=h)
        worst_at = start + timedelta(hours=worst) if spot else finish  # h == worst off spot
        late: Literal["deadline", "spot_risk"] | None = None
        deadline = self._deadline
        if blocker is None and deadline is not None:
            assert self._cutoff is not None
            # Spot must also survive its bad case (interrupted 1.5 x as often as expected, plus
            # once more late in the run, the rest run on-demand) by the deadline itself. The
            # safety margin covers estimate error; this net covers interruption bad luck.
            if finish > self._cutoff:
                late = "deadline"
            elif spot and not book.policy.naive_spot and worst_at > deadline:
                late = "spot_risk"
        return Timing(cap, blocker, h, n, Decimal(repr(h)), start, finish, late, worst_at,
                      est.physical_batch if isinstance(est, Figures) else None)

    def _enter(self, g: Group, t: Timing, heap: list[tuple]) -> None:
        """Add ``g``'s lines to ``heap``: ((rank, prefix, first tail), 0, line, rank, group, timing).

        The hot loop of planning (~30 groups a job). A new machine for a job that avoids nothing (nearly
        every group) needs only its cost and the rank ``Scored._runs`` would give it; a ``Scored`` is
        made later for the few candidates a decision shows. Fleet slots and avoiding jobs score in full.
        """
        s = self._scored[g.index]
        if s is None and g.slot is None and not self.job.avoid:
            cost = self._cost(g, t)
            if t.est_blocker is not None:
                runs = g.runs[3]
            elif t.late is not None or (self._budget is not None and self._budget_total(cost) > self._budget.amount):
                runs = g.runs[2]  # structural: late or over budget (a new machine has no reservation to outlast)
            else:
                runs = g.runs[0]
            prefix = (g.not_reserved, cost, g.not_warm, t.finish, g.provider, g.region)  # as Scored.prefix
        else:
            s = s or self.scored(g, t)
            runs, prefix = s.runs, s.prefix
        for r, line in runs:
            heap.append(((r, prefix, line.members[0].tail), 0, line, r, g, t))

    def _cost(self, g: Group, t: Timing) -> Decimal:
        hourly = g.hourly.get(self._nodes) or self.book.hourly(g, self._nodes)
        return (hourly.amount * t.hours_dec).quantize(_CENT, ROUND_HALF_EVEN)  # positional: a keyword costs 2x

    def _budget_total(self, cost: Decimal) -> Decimal:
        """``cost`` plus what the job has spent, in the budget's currency."""
        total = cost * self._budget_rate
        return total if self._spent is None else total + self._spent

    def _score(self, g: Group, t: Timing) -> Scored:
        """A group's cost and blockers, in full."""
        cost = self._cost(g, t)
        s = Scored(g, t, self.book.hourly(g, self._nodes), cost,
                   (g.not_reserved, cost, g.not_warm, t.finish, g.provider, g.region))
        if t.est_blocker is not None:
            s.structural = True
        else:
            s.reservation = g.until is not None and t.finish > g.until
            if self._budget is not None:
                s.budget_total = self._budget_total(cost)
                s.over_budget = s.budget_total > self._budget.amount
            s.structural = t.late is not None or s.reservation or s.over_budget
        if g.slot is not None:
            s.taken_by = self.book.taken.get(g.slot)
        elif self.job.avoid:
            s.avoided = frozenset(mem for mem in g.members if mem.avoid_key in self.job.avoid)
        s.runs = s._runs()
        return s


class Ranking:
    """The candidates one filter lets through, best first; a group is scored in full when a caller needs it."""

    def __init__(self, scorer: Scorer, bundles: list[tuple[Timing, list[Group]]], heap: list[tuple]) -> None:
        self.scorer = scorer
        self.bundles = bundles  # per timing: the groups that share it
        self._heap = heap  # ((rank, prefix, first tail), 0, line, rank, group, timing) per line, heapified

    @property
    def scored(self) -> list[Scored]:
        """Every group, scored in full."""
        return [self.scorer.scored(g, t) for t, groups in self.bundles for g in groups]

    def picks(self) -> Iterator[Pick]:
        """Every candidate, best first (a fresh iteration each call)."""
        heap = self._heap[:]
        while heap:
            key, i, line, r, g, t = heap[0]
            ms = line.members
            yield self.scorer.scored(g, t), ms[i], r
            i += 1
            if i < len(ms):
                heapq.heapreplace(heap, ((r, key[1], ms[i].tail), i, line, r, g, t))
            else:
                heapq.heappop(heap)

    def distinct(self, seen: set[int]) -> Iterator[Pick]:
        """Best first, skipping any candidate whose ``Member.shape`` is in ``seen``; adds what it yields.

        Only the first member of each shape in a line can come out (the others' shape is seen by
        then), so the walk takes ``Line.firsts``.
        """
        heap = self._heap[:]
        while heap:
            key, i, line, r, g, t = heap[0]
            ms = line.firsts
            if ms[i].shape not in seen:
                seen.add(ms[i].shape)
                yield self.scorer.scored(g, t), ms[i], r
            i += 1
            while i < len(ms) and ms[i].shape in seen:  # its shape came out of another line
                i += 1
            if i < len(ms):
                heapq.heapreplace(heap, ((r, key[1], ms[i].tail), i, line, r, g, t))
            else:
                heapq.heappop(heap)

    def best(self, keep: Callable[[Timing], bool]) -> Pick:
        """The best candidate whose timing ``keep`` accepts (there must be one): ``Scored.best`` of the
        best such group, from the heap's keys, so only that group is scored in full."""
        _, _, line, r, g, t = min(entry for entry in self._heap if keep(entry[5]))
        return self.scorer.scored(g, t), line.members[0], r

    def first(self) -> Pick | None:
        if not self._heap:
            return None
        _, _, line, r, g, t = self._heap[0]
        return self.scorer.scored(g, t), line.members[0], r


def fmt_hours(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 3600:.1f} h"


def fmt_time(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
