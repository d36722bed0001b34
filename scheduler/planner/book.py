"""The offers and fleet slots of one ``plan()`` call, grouped for ``planner_rank``.

A ``Book`` folds the offers and fleet slots into ``Group``s of candidates that
share every number the planner computes (cloud, region, GPU setup, vCPUs,
capacity, price, reclaim rate, fleet slot) and differ only in zone, instance
type and stock, so a job prices a group once instead of each candidate. It
also keeps what every job of the call would otherwise recompute: FX rates,
hourly prices per node count, ``Money`` per amount, the groups a filter lets
through.

Everything here lives for one ``plan()`` call: no module-level state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import NamedTuple

from scheduler.models import Capacity, Offer, Stock
from scheduler.money import Money
from scheduler.planner.inputs import FleetSlot, PlannerPolicy, Source


@dataclass(eq=False, slots=True)
class Member:
    """One candidate of a group: an offer (or a slot's offer) with this group's capacity."""

    offer: Offer
    avoid_key: str | None  # "Offer.key|capacity" for new capacity; fleet slots are never avoided
    sold_out: bool
    tail: tuple  # the sort key after (provider, region): zone, type, capacity, source, instance, gpu, count, seq
    shape: int  # what runners-up show once (provider, region, type, capacity, source, instance), interned
    fields: dict = field(init=False)  # an Option's fields up to instance_id (``Book`` sets them), read once


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
        self._more: dict[tuple[Decimal, bool], str] = {}
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
            for mem in g.members:
                o = mem.offer
                mem.fields = {"provider": o.provider, "region": o.region, "zone": o.zone,
                              "instance_type": o.instance_type, "gpu": o.gpu, "gpu_count": o.gpu_count,
                              "capacity": g.capacity, "source": g.source, "instance_id": g.instance_id}
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
            for bundle in got:  # by price, so costs never fall along a bundle (planner_rank.Lazy)
                bundle.sort(key=lambda g: self.hourly(g, 1).amount)
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

    def more(self, extra: Decimal) -> str:
        """A feasible runner-up's why: ``extra`` more than the choice (to the cent, policy currency)."""
        key = (extra, extra.is_signed())
        text = self._more.get(key)
        if text is None:
            text = self._more[key] = f"feasible; {self.money(extra)} more"
        return text

    def money(self, cost: Decimal) -> Money:
        """``cost`` (to the cent, policy currency) as Money; one object per amount: costs repeat across jobs."""
        key = (cost, cost.is_signed())  # 0.00 == -0.00, but they print differently
        m = self._money.get(key)
        if m is None:
            m = self._money[key] = Money(amount=cost, currency=self.policy.currency)
        return m


