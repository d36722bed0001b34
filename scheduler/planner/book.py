"""The offers and fleet slots of one ``plan()`` call, grouped for ``planner.rank`` and ``planner.heap``.

A ``CandidateBook`` folds the offers and fleet slots into ``Group``s of candidates
that share every number the planner computes (cloud, region, GPU setup, vCPUs,
capacity, price, reclaim rate, fleet slot) and differ only in zone, instance type
and stock, so a job prices a group once instead of each candidate. It also keeps
what every job of the call would otherwise recompute: FX rates, hourly prices per
node count, ``Money`` per amount, the groups a filter lets through. The offers'
part, a ``Market``, depends on nothing but the offers and the policy, so a caller
that plans the same offers again passes the one it has (``market_for``).

Not to be confused with the other containers of offers: ``providers.catalog`` reads
the bundled price list, ``lifecycle.offerbook.OfferBook`` caches the clouds' live
offers between daemon ticks, and ``simulation.lower_bound_options.PricedCatalog``
prices offers once for a whole trace, without stock, reclaim rates or fleet slots.

A book lives for one ``plan()`` call, a market for as long as its caller keeps it; no
module-level state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from enum import IntEnum
from typing import NamedTuple, Protocol

from scheduler.models import Capacity, Offer, Stock
from scheduler.money import Money
from scheduler.planner import cost
from scheduler.planner.allowed import OfferFilter
from scheduler.planner.inputs import FleetSlot, PlannerPolicy, Source


class Costed(Protocol):
    """A candidate's cost as ``CandidateBook.money_of`` and ``more`` read it (a ``rank.Scored``): made when read."""

    @property
    def cost(self) -> Decimal: ...


class Rank(IntEnum):
    """How far a candidate is from usable: the first key of the planner's order (``rank``'s module text)."""

    FEASIBLE = 0  # nothing stands in the way
    WAITING = 1  # only transient blockers (sold out, recently out of capacity, slot held): waiting may clear them
    BLOCKED = 2  # a structural blocker (deadline, budget, reservation ends too soon): waiting never helps
    CANNOT_RUN = 3  # the job does not fit the GPU's memory, or cannot be estimated on it


class Tail(NamedTuple):
    """A member's sort key after (provider, region): its identity, then input order for exact ties."""

    zone: str
    instance_type: str
    capacity: str  # Capacity.value
    source: Source
    instance_id: str  # "" for a new machine
    gpu: str
    gpu_count: int
    # Two offers of one key (only a direct caller of plan() can pass them: the catalog refuses it) are
    # told apart by stock before input order, so the plan does not depend on the order they came in.
    sold_out: bool
    seq: int  # input order: 2 x offer index + (0 spot, 1 on-demand); fleet slots after every offer


@dataclass(eq=False, slots=True)
class Member:
    """One candidate of a group: an offer (or a slot's offer) with this group's capacity."""

    offer: Offer
    avoid_key: str | None  # "Offer.key|capacity" for new capacity; fleet slots are never avoided
    sold_out: bool
    tail: Tail
    shape: int  # what runners-up show once (provider, region, type, capacity, source, instance), interned
    option_fields: dict = field(init=False)  # the ``Option`` fields the member decides (see ``plan._Planning.option``)


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


RankedLines = tuple[tuple[Rank, Line], ...]


class Runs(NamedTuple):
    """A group's members by rank, made once per ``plan()`` call; ``rank.Scored`` picks the one that applies."""

    open: RankedLines  # no blocker for the group: its members FEASIBLE, or WAITING when sold out
    held: RankedLines  # its fleet slot is held for another job: all WAITING
    blocked: RankedLines  # a structural blocker: all BLOCKED
    cannot_run: RankedLines  # all CANNOT_RUN


_NO_RUNS = Runs((), (), (), ())


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
    not_reserved: bool = True  # sort-key flags (see rank.Prefix), kept here: reading them is cheaper
    not_warm: bool = True
    instance_id: str | None = None
    until: datetime | None = None
    members: list[Member] = field(default_factory=list)
    index: int = 0  # in CandidateBook.groups
    # Interned by the book: the GPU setup (gpu, count, vCPUs), and the GPU alone (perf.GPU_ONLY_KINDS).
    est_keys: tuple[int, int] = (0, 0)
    timing_keys: tuple[int, int] = (0, 0)  # each x capacity x reclaim rate x warm start
    hourly: dict[int, Money] = field(default_factory=dict)  # nodes -> price of all nodes, policy currency
    hourly_f: dict[int, float] = field(default_factory=dict)  # the same amounts as floats (``heap._floor_cents``)
    runs: Runs = _NO_RUNS


class Row(NamedTuple):
    """A bundle (groups sharing a timing) as ``heap.ranking`` reads it for one kind of job
    (``CandidateBook.rows``)."""

    est_key: int  # its first group's (``Group.est_keys``, the one the job's kind reads)
    hourly: float | None  # all nodes' hourly price of its first group, as a float (``Market.hourly_f``); None for
    # a fleet slot's bundle (it is never a placeholder)
    spot_rate: float  # its reclaim rate on spot (``Group.rate``), else 0
    order: int  # -1 - its first group's index (``heap.Placeholder.order``)
    bundle: list[Group]


class Timed(NamedTuple):
    """A timing (``Group.timing_keys[by_gpu]``) of the bundles a filter lets through (``CandidateBook.rows``), as
    ``heap.Ranking.needs`` and ``fastest`` read it."""

    est_key: int  # ``Row.est_key``
    start: float  # hours after now its machines start: boot_hours for new ones, none warm or reserved (``cost.start``)
    spot: bool
    group: Group  # its first bundle's first group
    bundles: list[list[Group]]


class Link(NamedTuple):
    """A bundle of new machines in its ``Chain`` (``CandidateBook.rows``)."""

    hourly: float  # its first group's hourly price for the job's nodes (``Row.hourly``), on spot times 1 +
    # rate x nodes x restart_hours: x the estimate's hours, at or below the cost of each group (``heap.ranking``)
    order: int  # ``Row.order``
    bundle: list[Group]


Chain = tuple[int, list[Link]]  # an est key (``Row.est_key``) and its bundles of new machines, by (hourly, order)


class Rows(NamedTuple):
    """What ``heap.ranking`` reads of the bundles a filter lets through, for a kind of job (``CandidateBook.rows``)."""

    matching: list[list[Group]]
    rows: list[Row]  # a row per bundle
    timed: list[Timed]
    chains: list[Chain]  # the bundles of new machines
    slots: list[Row]  # the fleet slots' bundles


class Filter(NamedTuple):
    """What a job (or a copy with one of its filters lifted) lets through: the offers its job file allows,
    the capacities the planner allows it (``plan._planner_capacities``), and whether fleet slots."""

    offers: OfferFilter
    capacities: frozenset[Capacity]
    slots: bool  # a gang of nodes is launched fresh: fleet slots are single machines


class Market:
    """The offers of a ``plan()`` call folded into ``Group``s, for one policy: what does not depend on the
    clock, the fleet or the jobs. A daemon's offers change rarely between ticks (a refresh lists an
    unchanged offer as the same object), so its tick keeps one and passes it to every ``plan()`` call
    while the offers are the same objects (``serves``); grouping them again was most of a small plan.

    Nothing here changes once made but caches of what it would always compute the same way: hourly
    prices per node count (``Group.hourly``) and the bundles a filter lets through.
    """

    def __init__(self, offers: Sequence[Offer], policy: PlannerPolicy) -> None:
        self.offers, self.policy = tuple(offers), policy
        self.keys: dict[tuple, int] = {}  # interned setups, timings and shapes (tagged); a book copies it
        self._rates: dict[tuple[str, str], Decimal] = {}
        self._matching: dict[tuple[OfferFilter, frozenset[Capacity]], list[list[Group]]] = {}
        groups: dict[tuple, Group] = {}
        spot, sold = Capacity.spot, Stock.sold_out
        for i, offer in enumerate(self.offers):
            for j, cap, value in _NEW_CAPACITIES:
                price = offer.price(cap)
                if price is None:
                    continue
                money = price.per_hour
                key = (offer.provider, offer.region, offer.gpu, offer.gpu_count, offer.vcpus,
                       offer.spot_interruptions_per_hour if cap is spot else None, cap,
                       money.currency, str(money.amount))  # str: 1.0 and 1.00 print differently
                g = groups.get(key)
                if g is None:
                    g = groups[key] = _group(self.keys, policy, offer, cap, "new", money)
                sold_out = offer.stock(cap) is sold
                g.members.append(Member(offer, f"{offer.key}|{value}", sold_out,
                                        *_tail(self.keys, offer, g, sold_out, 2 * i + j, value)))
        self.groups = list(groups.values())
        _finish(self.groups, 0)

    def serves(self, offers: Sequence[Offer], policy: PlannerPolicy) -> bool:
        """Whether this market is ``offers`` (the same objects, in the same order) under ``policy``."""
        mine = self.offers
        return (len(mine) == len(offers) and (policy is self.policy or policy == self.policy)
                and all(a is b for a, b in zip(mine, offers)))

    def matching(self, offers: OfferFilter, capacities: frozenset[Capacity]) -> list[list[Group]]:
        """The groups of new machines a job's filters let through, in bundles that share a timing, each by price."""
        key = (offers, capacities)
        got = self._matching.get(key)
        if got is None:
            bundles: dict[int, list[Group]] = {}
            for g in self.groups:
                if g.capacity in capacities and offers.admits(g):
                    bundles.setdefault(g.timing_keys[0], []).append(g)
            got = self._matching[key] = list(bundles.values())
            for bundle in got:  # by price, so costs never fall along a bundle (heap.Placeholder)
                bundle.sort(key=lambda g: self.hourly(g, 1).amount)
        return got

    def rate(self, src: str, dst: str) -> Decimal:
        r = self._rates.get((src, dst))
        if r is None:
            r = self._rates[(src, dst)] = self.policy.fx.rate(src, dst)
        return r

    def hourly_f(self, g: Group, nodes: int) -> float:
        """``hourly``'s amount as a float (for a lower bound only: ``heap._floor_cents``)."""
        f = g.hourly_f.get(nodes)
        if f is None:
            f = g.hourly_f[nodes] = float(self.hourly(g, nodes).amount)
        return f

    def hourly(self, g: Group, nodes: int) -> Money:
        """All nodes' hourly price in the policy currency (``cost.hourly``), once per group and node count."""
        h = g.hourly.get(nodes)
        if h is None:
            h = g.hourly[nodes] = cost.hourly(g.price, nodes, self.policy.currency, self.rate)
        return h


def market_for(offers: Sequence[Offer], policy: PlannerPolicy, last: Market | None) -> Market:
    """``last`` when it serves ``offers`` under ``policy`` (``Market.serves``), else a new market."""
    return last if last is not None and last.serves(offers, policy) else Market(offers, policy)


def _group(keys: dict[tuple, int], policy: PlannerPolicy, offer: Offer, cap: Capacity, source: Source,
           price: Money | None) -> Group:
    rate = 0.0 if policy.naive_spot else offer.spot_interruptions_per_hour
    g = Group(offer.provider, offer.region, offer.gpu, offer.gpu_count, offer.vcpus, cap, source, rate, price,
              not_reserved=cap is not Capacity.reserved, not_warm=source != "warm")
    setup = (offer.gpu, offer.gpu_count, offer.vcpus)
    how = (cap, rate if cap is Capacity.spot else 0.0, source == "warm")
    g.est_keys = (_intern(keys, ("setup", *setup)), _intern(keys, ("gpu", offer.gpu)))
    g.timing_keys = (_intern(keys, ("timing", *setup, *how)), _intern(keys, ("gpu timing", offer.gpu, *how)))
    return g


# New machines' capacities, with their input order (``Tail.seq``) and values: an enum member's ``value`` is a
# Python property, and a market reads it twice per offer and capacity.
_NEW_CAPACITIES = ((0, Capacity.spot, Capacity.spot.value), (1, Capacity.on_demand, Capacity.on_demand.value))


def _tail(keys: dict[tuple, int], offer: Offer, g: Group, sold_out: bool, seq: int,
          cap: str) -> tuple[Tail, int]:
    """A member's sort-key tail and its shape; ``cap``: ``g.capacity.value``."""
    iid = g.instance_id or ""
    shape = ("shape", offer.provider, offer.region, offer.instance_type, cap, g.source, iid)
    return (Tail(offer.zone, offer.instance_type, cap, g.source, iid, offer.gpu, offer.gpu_count,
                 sold_out, seq),
            _intern(keys, shape))


def _intern(keys: dict[tuple, int], key: tuple) -> int:
    return keys.setdefault(key, len(keys))


def _finish(groups: list[Group], first: int) -> None:
    """Number ``groups`` from ``first`` and sort each one's members into the lines ``heap`` walks."""
    for i, g in enumerate(groups, first):
        g.index = i
        for mem in g.members:
            o = mem.offer
            mem.option_fields = {"provider": o.provider, "region": o.region, "zone": o.zone,
                                 "instance_type": o.instance_type, "gpu": o.gpu, "gpu_count": o.gpu_count,
                                 "capacity": g.capacity, "source": g.source, "instance_id": g.instance_id}
        g.members.sort(key=lambda mem: mem.tail)
        every = Line.of(g.members)
        clean = Line.of([mem for mem in g.members if not mem.sold_out])
        sold = Line.of([mem for mem in g.members if mem.sold_out])
        g.runs = Runs(open=tuple((r, line) for r, line in ((Rank.FEASIBLE, clean), (Rank.WAITING, sold))
                                 if line.members),
                      held=((Rank.WAITING, every),), blocked=((Rank.BLOCKED, every),),
                      cannot_run=((Rank.CANNOT_RUN, every),))


class CandidateBook:
    """Everything a plan() call sees besides the jobs, grouped, and the slots already handed out: the
    offers' ``Market`` (``market`` when it serves these offers and policy, else a new one) and the fleet's
    slots, each a group of its own, numbered after the market's."""

    def __init__(self, offers: Sequence[Offer], slots: Sequence[FleetSlot], now: datetime, policy: PlannerPolicy,
                 measured: Mapping[tuple[str, str, int], float] | None, market: Market | None = None) -> None:
        self.now, self.policy, self.measured = now, policy, measured
        self.spot_risk = not policy.naive_spot  # (a property) whether spot must survive a bad case by the deadline
        if market is None or not market.serves(offers, policy):
            market = Market(offers, policy)
        self.market = market
        self.taken: dict[int, str] = {}  # slot index -> the job it went to
        self.start_new = cost.start(now, policy.boot_hours, warm=False)  # a warm machine starts at ``now``
        # A fixed-offset ``now`` (``datetime.timezone``) lets deadlines join its zone object (``in_now_zone``).
        self._now_zone = now.tzinfo if type(now.tzinfo) is timezone else None
        self._margins: dict[timedelta, timedelta] = {}
        self.rate, self.hourly, self.hourly_f = market.rate, market.hourly, market.hourly_f
        # Keyed by whole cents (an int), or by the amount's text for 0: hashing a Decimal costs ~10x its
        # str() (CPython computes it from the digits every time, for each new object), and the text tells
        # 0.00 from -0.00 as the Money prints.
        self._money: dict[int | str, Money] = {}
        self._more: dict[int, str] = {}  # by cents
        self._texts: dict[int, str] = {}  # ``money_text``, by cents
        self._matching: dict[Filter, list[list[Group]]] = {}
        self._rows: dict[tuple[Filter, int, int], Rows] = {}
        # ``plan._rows``: a job's rows by what its filter and kind are made from (making a Filter, and hashing
        # one, cost more than a flat key of the job file's fields).
        self.by_job: dict[tuple, Rows] = {}
        keys = dict(market.keys)  # the slots' keys numbered after the market's, as if grouped with them
        base = 2 * len(offers)
        slot_groups: list[Group] = []
        for i, slot in enumerate(slots):
            price = slot.offer.price(slot.capacity)
            if slot.capacity is not Capacity.reserved and price is None:
                continue  # a warm machine we cannot price cannot be compared
            g = _group(keys, policy, slot.offer, slot.capacity, slot.kind, None if price is None else price.per_hour)
            g.slot, g.instance_id, g.until = i, slot.instance_id, slot.until
            g.members.append(Member(slot.offer, None, False,
                                    *_tail(keys, slot.offer, g, False, base + i, g.capacity.value)))
            slot_groups.append(g)
        _finish(slot_groups, len(market.groups))
        self._slot_groups = slot_groups
        self.groups = market.groups + slot_groups

    def matching(self, f: Filter) -> list[list[Group]]:
        """The groups ``f`` lets through, in bundles that share a timing (GPU setup, capacity, rate, start):
        the market's, then the fleet slots' (a slot's timing is never a new machine's: it starts warm, or
        is reserved capacity)."""
        got = self._matching.get(f)
        if got is None:
            got = self.market.matching(f.offers, f.capacities)
            if f.slots and self._slot_groups:
                bundles: dict[int, list[Group]] = {}
                capacities, offers = f.capacities, f.offers
                for g in self._slot_groups:
                    if g.capacity in capacities and offers.admits(g):
                        bundles.setdefault(g.timing_keys[0], []).append(g)
                if bundles:
                    for bundle in bundles.values():
                        bundle.sort(key=lambda g: self.hourly(g, 1).amount)
                    got = got + list(bundles.values())
            self._matching[f] = got
        return got

    def rows(self, f: Filter, nodes: int, by_gpu: int) -> Rows:
        """``matching(f)``, a ``Row`` per bundle of it (what ``heap.ranking`` reads of each for a job on
        ``nodes`` whose estimates are keyed by ``Group.est_keys[by_gpu]``), per timing
        (``Group.timing_keys[by_gpu]``) its first row and its bundles (``heap.Ranking.needs`` and
        ``fastest``), the bundles of new machines in a ``Chain`` per est key, and the fleet slots' rows;
        made once per plan() call."""
        key = (f, nodes, by_gpu)
        got = self._rows.get(key)
        if got is None:
            matching = self.matching(f)
            rows, slots = [], []
            timings: dict[int, Timed] = {}
            chains: dict[int, list[Link]] = {}
            restart, boot = self.policy.restart_hours, self.policy.boot_hours
            for bundle in matching:
                g = bundle[0]
                hourly = None if g.slot is not None else self.hourly_f(g, nodes)
                row = Row(g.est_keys[by_gpu], hourly, g.rate if g.capacity is Capacity.spot else 0.0, -1 - g.index,
                          bundle)
                rows.append(row)
                timed = timings.get(g.timing_keys[by_gpu])
                if timed is None:
                    timed = timings[g.timing_keys[by_gpu]] = Timed(row.est_key, boot if g.not_warm else 0.0,
                                                                   g.capacity is Capacity.spot, g, [])
                timed.bundles.append(bundle)
                if hourly is None:
                    slots.append(row)
                else:
                    chains.setdefault(row.est_key, []).append(
                        Link(hourly * (1.0 + row.spot_rate * nodes * restart) if row.spot_rate else hourly, row.order,
                             bundle))
            for links in chains.values():
                links.sort(key=lambda link: link[:2])
            got = self._rows[key] = Rows(matching, rows, list(timings.values()), list(chains.items()), slots)
        return got

    def in_now_zone(self, dt: datetime) -> datetime:
        """``dt``, the same instant, in ``now``'s time zone object when both zones are fixed offsets.

        Python compares and subtracts aware datetimes of one zone object field by field, but asks both
        zones for their offsets when the objects differ, even equal ones (a job's deadline is parsed with
        its own): ~5x the time, and a job's deadline meets every candidate's finish. With fixed offsets
        both ways give the same answers; other zones are left alone (field by field is wall-clock
        arithmetic there)."""
        zone = self._now_zone
        if zone is None or dt.tzinfo is zone or type(dt.tzinfo) is not timezone:
            return dt
        return dt.astimezone(zone)

    def margin(self, deadline: datetime) -> timedelta:
        """The deadline's safety margin: ``deadline_safety`` of the time left until it (none once past).
        One per distinct time left: jobs submitted together with the same relative deadline share it, and
        a timedelta times a float is among the slowest things a job's scoring does."""
        left = deadline - self.now
        if left <= _NO_TIME:
            return _NO_TIME  # ``deadline_safety`` x nothing: most of a month-old queue, each with its own time left
        m = self._margins.get(left)
        if m is None:
            m = self._margins[left] = self.policy.deadline_safety * left
        return m

    def more(self, cents: int, s: Costed, best: Costed) -> str:
        """A feasible runner-up's why: ``s`` costs ``cents`` (> 0) more than the choice, ``best`` (costs to the
        cent, policy currency: their difference is ``cents`` hundredths, and prints alike whatever the costs;
        their Decimals are read only for a difference not seen yet)."""
        text = self._more.get(cents)
        if text is None:
            text = self._more[cents] = f"feasible; {self.money(s.cost - best.cost)} more"
        return text

    def money_text(self, cents: int, m: Money) -> str:
        """``str(m)``, ``m`` being ``money_of(cents, ...)``'s Money (one per amount): made once per amount, as
        costs repeat across jobs and ``Money.__str__`` (rounded, with thousands separators) costs as much as the
        rest of a choice's reason. Not kept for 0 cents (0.00 and -0.00 print differently, as ``money`` says)."""
        text = self._texts.get(cents) if cents else None
        if text is None:
            text = str(m)
            if cents:
                self._texts[cents] = text
        return text

    def money_of(self, cents: int, s: Costed) -> Money:
        """``money(s.cost, cents)``, reading ``s.cost`` only for an amount not made yet (``cents``: its cents)."""
        m = self._money.get(cents) if cents else None
        return self.money(s.cost, cents) if m is None else m

    def money(self, cost: Decimal, cents: int = 0) -> Money:
        """``cost`` (to the cent, policy currency) as Money; one object per amount: costs repeat across jobs.
        ``cents``: ``cost`` in cents when the caller has them (``rank.Prefix.cents``), a faster key."""
        # Not the Decimal: 0.00 == -0.00, but they print differently (and see ``_money``); nor 0 cents.
        key: int | str = cents or str(cost)
        m = self._money.get(key)
        if m is None:
            m = self._money[key] = _money(cost, self.policy.currency)
        return m


_NO_TIME = timedelta(0)
_new, _set = object.__new__, object.__setattr__
_MONEY_FIELDS = set(Money.model_fields)  # never changed: shared by every ``_money``, as ``plan.built`` shares


def _money(amount: Decimal, currency: str) -> Money:
    """``Money(amount=amount, currency=currency)`` for a Decimal (validation keeps the object) and the policy's
    currency (validated with it), without validating them again: ``plan.built``'s way, a third of the time, for
    the ~4,000 amounts a big queue's options show (``test_fast_paths`` checks it)."""
    m = _new(Money)
    _set(m, "__dict__", {"amount": amount, "currency": currency})
    _set(m, "__pydantic_fields_set__", _MONEY_FIELDS)
    _set(m, "__pydantic_extra__", None)
    _set(m, "__pydantic_private__", None)
    return m


