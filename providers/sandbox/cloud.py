"""An in-memory cloud on a Clock: the simulated market behind the sandbox provider.

``SandboxCloud`` is the simulated market of ONE cloud: a catalog of offers, boot
and stop delays, stock-outs, quotas, spot prices that drift and spot instances
that get reclaimed. It knows nothing about HTTP: the wire-protocol emulators in
``providers/emulators/`` and ``SandboxProvider`` (in ``providers/sandbox/provider.py``) are
both faces on top of it. Its instance records live in ``providers/sandbox/instance.py``.
It stays one file because it is one state machine: stock, timing, reclaims, faults
and listings all read and change the same machines under one lock.

Time only moves when the injected Clock moves. Instance state is not driven by a
timer; it is worked out lazily from the clock on every read, so a SimClock that
jumps a day ahead sees every boot, stop and reclaim that happened in between,
each recorded at the moment it was due, not at the moment it was noticed.

Everything random comes from ``random.Random`` instances seeded from the cloud's
seed (and, per instance, the client token), so one seed and one call sequence
always give the same ids, boot times, reclaims, stock-outs and prices.
"""

from __future__ import annotations

import bisect
import copy
import random
import threading
from collections import deque
from datetime import date, datetime, timedelta
from decimal import Decimal
from types import MappingProxyType
from typing import Literal, Mapping, Sequence

from providers.base import (
    InstanceState,
    InvalidRequest,
    NoCapacity,
    NotFound,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
)
from providers.sandbox.instance import PREEMPT_REASON, SandboxInstance, _Machine
from scheduler.clock import Clock
from scheduler.models import Capacity, Offer, Price, Stock
from scheduler.money import Money

__all__ = ["OPERATIONS", "PREEMPT_REASON", "SandboxCloud", "SandboxInstance", "market_key"]

OPERATIONS = ("offers", "launch", "instances", "stop", "start", "terminate")

_S = InstanceState
# States in which a spot reclaim can still hit the machine.
_RECLAIMABLE = frozenset({_S.pending, _S.running, _S.stopping})
# An exponential draw can be astronomically far away; past this it never happens.
_NEVER_HOURS = 24 * 365 * 10
_DRIFT_STEPS = 1000  # spot drift is drawn in steps of 0.01 %


def market_key(offer: Offer | str) -> str:
    """``region/zone/instance_type``: an offer's identity inside one cloud.

    Accepts an Offer, its ``Offer.key`` (``provider/region/zone/type``) or the
    market key itself, so callers need not care which provider name an offer
    carries.
    """
    if isinstance(offer, Offer):
        return f"{offer.region}/{offer.zone}/{offer.instance_type}"
    parts = offer.split("/")
    if len(parts) not in (3, 4) or not all(parts):
        raise ValueError(f"{offer!r} is neither region/zone/type nor provider/region/zone/type")
    return "/".join(parts[-3:])


class SandboxCloud:
    """The simulated market of one cloud. Thread-safe; every read settles state from the clock.

    ``spot_interruption_behavior="stop"`` makes a reclaim stop the instance
    instead of terminating it (Alibaba's ``SpotInterruptionBehavior=Stop``).
    ``spot_can_stop=False`` makes the cloud itself refuse to stop spot
    instances, as AWS does for one-time spot requests.
    ``list_delay_seconds`` hides new instances from listings for a while (clouds
    list eventually-consistently); direct lookups by id see them at once.
    ``forget_terminated_seconds`` drops terminated instances from listings and
    lookups after a while (AWS keeps them about an hour); None keeps them.
    """

    def __init__(
        self,
        clock: Clock,
        offers: Sequence[Offer],
        *,
        seed: int = 0,
        boot_seconds: float = 90,
        boot_jitter: float = 30,
        stop_seconds: float = 30,
        terminate_seconds: float = 10,
        interruption_scale: float = 1.0,
        notice_seconds: float = 120,
        spot_interruption_behavior: Literal["terminate", "stop"] = "terminate",
        spot_can_stop: bool = True,
        stockout_probability: float = 0.0,
        spot_price_drift: bool = False,
        gpu_quota: int | None = None,
        list_delay_seconds: float = 0,
        forget_terminated_seconds: float | None = None,
        id_prefix: str = "sbx",
    ) -> None:
        if not 0.0 <= stockout_probability <= 1.0:
            raise ValueError("stockout_probability must be between 0 and 1")
        if min(boot_seconds, boot_jitter, stop_seconds, terminate_seconds, notice_seconds) < 0:
            raise ValueError("delays must not be negative")
        if interruption_scale < 0:
            raise ValueError("interruption_scale must not be negative")
        if spot_interruption_behavior not in ("terminate", "stop"):
            raise ValueError("spot_interruption_behavior is 'terminate' or 'stop'")
        self._clock = clock
        self._seed = seed
        self._boot = boot_seconds
        self._jitter = boot_jitter
        self._stop_delay = timedelta(seconds=stop_seconds)
        self._terminate_delay = timedelta(seconds=terminate_seconds)
        self._interruption_scale = interruption_scale
        self._notice = timedelta(seconds=notice_seconds)
        self._reclaim_to = _S.stopped if spot_interruption_behavior == "stop" else _S.terminated
        self._spot_can_stop = spot_can_stop
        self._stockout_probability = stockout_probability
        self._stockout_rng = random.Random(f"{seed}:stockout")
        self._drift = spot_price_drift
        self._gpu_quota = gpu_quota
        self._list_delay = timedelta(seconds=list_delay_seconds)
        self._forget_after = (
            None if forget_terminated_seconds is None else timedelta(seconds=forget_terminated_seconds)
        )
        self._id_prefix = id_prefix
        self._lock = threading.RLock()

        self._catalog: dict[str, Offer] = {}
        self._listed_offers: dict[str, Offer] = {}  # key -> the offer ``offers`` last listed
        self._prices_day: date | None = None  # ``_spot_price``'s day, and its prices by key
        self._day_prices: dict[str, Price] = {}
        for offer in offers:
            key = market_key(offer)
            if key in self._catalog:
                raise ValueError(f"offer {key} is listed twice")
            self._catalog[key] = offer
        # (market key, stock capacity) -> sold out until (None: until restocked)
        self._sold_out: dict[tuple[str, Capacity], datetime | None] = {}
        for key, offer in self._catalog.items():
            for cap in (Capacity.spot, Capacity.on_demand):
                if offer.stock(cap) is Stock.sold_out:
                    self._sold_out[(key, cap)] = None

        self._machines: dict[str, _Machine] = {}
        self._order: list[str] = []  # every id ever, in launch order
        # Ids a listing may still show (forgotten ones pruned), in launch order. Listings and
        # the event scan walk this, not the month's every machine; page tokens are launch
        # numbers, so pruning between two pages does not shift them.
        self._listed: list[str] = []
        self._seq: dict[str, int] = {}
        self._by_token: dict[str, str] = {}
        self._faults: dict[str, deque[ProviderError]] = {op: deque() for op in OPERATIONS}
        self._lose_next_launch = False
        self._counter = 0

    # --- the cloud API ------------------------------------------------------

    def offers(self, regions: Sequence[str] | None = None) -> list[Offer]:
        """The catalog with today's spot prices and current stock, as the catalog names its provider."""
        with self._lock:
            self._maybe_fail("offers")
            now = self._clock.now()
            wanted = None if regions is None else set(regions)
            out = []
            day = now.date()
            listed = self._listed_offers
            for key, offer in self._catalog.items():
                if wanted is not None and offer.region not in wanted:
                    continue
                spot = self._spot_price(key, offer, day)
                spot_stock = self._stock_now(key, offer, Capacity.spot, now)
                on_demand_stock = self._stock_now(key, offer, Capacity.on_demand, now)
                # The same object as last time when nothing of it changed (a day's spot price is one
                # object, see ``_spot_price``), so a caller can tell an unchanged list by identity.
                last = listed.get(key)
                if last is not None and last.spot is spot and last.spot_stock is spot_stock \
                        and last.on_demand_stock is on_demand_stock:
                    out.append(last)
                    continue
                copy_ = listed[key] = offer.model_copy(
                    update={"spot": spot, "spot_stock": spot_stock, "on_demand_stock": on_demand_stock})
                out.append(copy_)
            return out

    def launch(
        self,
        *,
        region: str,
        zone: str,
        instance_type: str,
        capacity: Capacity,
        client_token: str | None = None,
        tags: Mapping[str, str] | None = None,
        name: str = "",
        image: str = "",
        user_data: str = "",
        max_price: Decimal | None = None,
    ) -> SandboxInstance:
        """Create one instance, pending at once; the same ``client_token`` returns the same instance.

        A spot ``max_price`` below today's spot price is refused as NoCapacity
        (``SpotMaxPriceTooLow``): there is no stock at that price.
        """
        with self._lock:
            self._maybe_fail("launch")
            now = self._clock.now()
            key = f"{region}/{zone}/{instance_type}"
            if client_token is not None and client_token in self._by_token:
                machine = self._machines[self._by_token[client_token]]
                if market_key(machine.offer) != key or machine.capacity is not capacity:
                    raise InvalidRequest(
                        f"IdempotentParameterMismatch: client token {client_token!r} was used for "
                        f"{market_key(machine.offer)} ({machine.capacity.value}), not {key} ({capacity.value})",
                        code="IdempotentParameterMismatch",
                        fix="derive the client token from everything that defines the request",
                    )
                self._settle(machine, now)
                return self._snapshot(machine, now)

            offer = self._catalog.get(key)
            if offer is None:
                raise InvalidRequest(f"no instance type {instance_type} in {region}/{zone}", code="InvalidInstanceType")
            price = self._price(key, offer, capacity, now.date())
            if price is None:
                raise InvalidRequest(
                    f"{instance_type} in {zone} is not sold as {capacity.value}", code="InvalidCapacityType"
                )
            if self._stock_now(key, offer, capacity, now) is Stock.sold_out:
                raise NoCapacity(f"{key} is sold out for {capacity.value}", code="NoStock")
            if self._stockout_probability and self._stockout_rng.random() < self._stockout_probability:
                raise NoCapacity(f"{key} has no {capacity.value} stock right now", code="NoStock")
            if capacity is Capacity.spot and max_price is not None and max_price < price.per_hour.amount:
                raise NoCapacity(
                    f"spot price {price.per_hour} is above the limit {max_price}", code="SpotMaxPriceTooLow"
                )
            self._check_quota(offer.gpu_count)

            self._counter += 1
            instance_id = f"{self._id_prefix}-{self._counter:06x}"
            token = client_token if client_token is not None else f"{instance_id}-auto"
            machine = _Machine(
                instance_id=instance_id,
                offer=offer,
                capacity=capacity,
                client_token=token,
                tags=dict(tags or {}),
                name=name,
                image=image,
                user_data=user_data,
                launched_at=now,
                rng=random.Random(f"{self._seed}:{token}"),
            )
            self._boot_up(machine, now)
            self._machines[instance_id] = machine
            self._order.append(instance_id)
            self._listed.append(instance_id)
            self._seq[instance_id] = self._counter
            self._by_token[token] = instance_id
            snapshot = self._snapshot(machine, now)
            if self._lose_next_launch:
                self._lose_next_launch = False
                raise ProviderUnavailable(
                    "the launch call timed out before its response arrived", code="RequestTimeout"
                )
            return snapshot

    def instances(
        self,
        *,
        tags: Mapping[str, str] | None = None,
        regions: Sequence[str] | None = None,
        page_size: int | None = None,
        page_token: str | None = None,
    ) -> tuple[list[SandboxInstance], str | None]:
        """One page of the instances carrying every tag in ``tags``; returns (page, next token or None)."""
        with self._lock:
            self._maybe_fail("instances")
            now = self._clock.now()
            try:
                start_seq = int(page_token) if page_token else 0
            except ValueError:
                raise InvalidRequest(f"bad page token {page_token!r}", code="InvalidNextToken") from None
            if not page_token:
                self._prune(now)
            start = bisect.bisect_left(self._listed, start_seq, key=self._seq.__getitem__)
            wanted_regions = None if regions is None else set(regions)
            wanted_tags = dict(tags or {})
            page: list[SandboxInstance] = []
            for pos in range(start, len(self._listed)):
                if page_size is not None and len(page) >= page_size:
                    return page, str(self._seq[self._listed[pos]])
                machine = self._machines[self._listed[pos]]
                if now - machine.launched_at < self._list_delay:
                    continue
                if wanted_regions is not None and machine.offer.region not in wanted_regions:
                    continue
                if any(machine.tags.get(k) != v for k, v in wanted_tags.items()):
                    continue
                self._settle(machine, now)
                if self._forgotten(machine, now):
                    continue
                page.append(self._snapshot(machine, now))
            return page, None

    def get(self, instance_id: str, region: str | None = None) -> SandboxInstance:
        """One instance by id (no listing delay); NotFound if unknown, in another region, or forgotten."""
        with self._lock:
            now = self._clock.now()
            return self._snapshot(self._find(instance_id, region, now), now)

    def stop(self, instance_id: str, *, region: str | None = None) -> None:
        """running -> stopping -> stopped; stopping or stopped already is success."""
        with self._lock:
            self._maybe_fail("stop")
            now = self._clock.now()
            machine = self._find(instance_id, region, now)
            if machine.state in (_S.stopping, _S.stopped):
                return
            if machine.capacity is Capacity.spot and not self._spot_can_stop:
                raise InvalidRequest(
                    f"spot instance {instance_id} cannot be stopped on this cloud", code="UnsupportedOperation"
                )
            if machine.state is not _S.running:
                raise InvalidRequest(
                    f"instance {instance_id} is {machine.state.value}; only a running instance can be stopped",
                    code="IncorrectInstanceState",
                )
            self._enter(machine, _S.stopping, now)
            machine.next_change = (now + self._stop_delay, _S.stopped)

    def start(self, instance_id: str, *, region: str | None = None) -> None:
        """stopped -> pending -> running; pending or running already is success.

        A stopped machine released its hardware (stop-charging), so starting it
        can fail with NoCapacity when the offer is sold out.
        """
        with self._lock:
            self._maybe_fail("start")
            now = self._clock.now()
            machine = self._find(instance_id, region, now)
            if machine.state in (_S.pending, _S.running):
                return
            if machine.state is not _S.stopped:
                raise InvalidRequest(
                    f"instance {instance_id} is {machine.state.value}; only a stopped instance can be started",
                    code="IncorrectInstanceState",
                )
            key = market_key(machine.offer)
            if self._stock_now(key, machine.offer, machine.capacity, now) is Stock.sold_out:
                raise NoCapacity(f"{key} is sold out for {machine.capacity.value}", code="NoStock")
            machine.preempted = False
            machine.preempt_reason = None
            machine.notice_at = None
            self._enter(machine, _S.pending, now)
            self._boot_up(machine, now)

    def terminate(self, instance_id: str, *, region: str | None = None) -> None:
        """-> terminating -> terminated; terminating or terminated already is success; unknown is NotFound."""
        with self._lock:
            self._maybe_fail("terminate")
            now = self._clock.now()
            machine = self._find(instance_id, region, now)
            if machine.state in (_S.terminating, _S.terminated):
                return
            self._enter(machine, _S.terminating, now)
            machine.next_change = (now + self._terminate_delay, _S.terminated)

    # --- scripting, for tests and the demo ----------------------------------

    def sell_out(self, offer: Offer | str, capacity: Capacity, until: datetime | None = None) -> None:
        """No stock for ``offer`` at ``capacity`` until ``until`` (None: until ``restock``)."""
        with self._lock:
            self._sold_out[(self._known_key(offer), _stock_capacity(capacity))] = until

    def restock(self, offer: Offer | str, capacity: Capacity) -> None:
        with self._lock:
            self._sold_out.pop((self._known_key(offer), _stock_capacity(capacity)), None)

    def preempt(self, instance_id: str, at: datetime | None = None) -> None:
        """Schedule a spot reclaim at ``at`` (None: now), with the usual notice before it."""
        with self._lock:
            now = self._clock.now()
            machine = self._find(instance_id, None, now)
            if machine.capacity is not Capacity.spot:
                raise InvalidRequest(f"{instance_id} is {machine.capacity.value}; only spot instances are reclaimed")
            when = now if at is None or at < now else at
            machine.reclaim_at = when
            machine.notice_at = when - self._notice

    def fail_next(self, operation: str, error: ProviderError, times: int = 1) -> None:
        """The next ``times`` calls of ``operation`` raise (a copy of) ``error`` before doing anything."""
        if operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}; use one of {', '.join(OPERATIONS)}")
        if times < 1:
            raise ValueError("times must be at least 1")
        with self._lock:
            self._faults[operation].extend([error] * times)

    def lose_next_launch_response(self) -> None:
        """The next successful launch happens at the cloud, but the caller gets ProviderUnavailable."""
        with self._lock:
            self._lose_next_launch = True

    # --- read-only accessors for tests and benchmarks -----------------------

    @property
    def clock(self) -> Clock:
        """The clock this cloud runs on (the HTTP emulators date what they answer by it)."""
        return self._clock

    def all_instances(self) -> list[SandboxInstance]:
        """Every instance ever launched, forgotten ones included, in launch order."""
        with self._lock:
            now = self._clock.now()
            out = []
            for instance_id in self._order:
                machine = self._machines[instance_id]
                self._settle(machine, now)
                out.append(self._snapshot(machine, now))
            return out

    def next_event_after(self, now: datetime) -> datetime | None:
        """The earliest scheduled change (a boot ending, a stop finishing, a spot reclaim) after ``now``.

        Lets a simulation jump from event to event instead of ticking through quiet hours.
        """
        with self._lock:
            times = []
            self._prune(now)
            for machine_id in self._listed:  # forgotten machines have nothing left to happen
                machine = self._machines[machine_id]
                self._settle(machine, now)
                if machine.next_change is not None:
                    times.append(machine.next_change[0])
                if machine.reclaim_at is not None and machine.state in _RECLAIMABLE:
                    times.append(machine.reclaim_at)
            later = [t for t in times if t > now]
            return min(later) if later else None

    def ended_at(self, instance_id: str) -> datetime | None:
        """When the instance stopped running (reclaimed, stopped or terminated); None while it runs."""
        with self._lock:
            machine = self._any_machine(instance_id)
            self._settle(machine, self._clock.now())
            if machine.state in (_S.pending, _S.running):
                return None
            for at, state in machine.history:
                if state not in (_S.pending, _S.running):
                    return at
            return machine.state_since

    def now(self) -> datetime:
        """The cloud's own time (its injected clock)."""
        return self._clock.now()

    def price_on(self, instance_id: str, day: date) -> Price | None:
        """What the instance's hours cost on ``day`` (its offer at its capacity: spot at that day's price);
        what the cloud's own bill charges it (``providers/sandbox/billing.py``)."""
        with self._lock:
            machine = self._any_machine(instance_id)
            return self._price(market_key(machine.offer), machine.offer, machine.capacity, day)

    def history(self, instance_id: str) -> list[tuple[datetime, InstanceState]]:
        """Every state the instance entered, with the moment it was due."""
        with self._lock:
            machine = self._any_machine(instance_id)
            self._settle(machine, self._clock.now())
            return list(machine.history)

    # --- inside -------------------------------------------------------------

    def _maybe_fail(self, operation: str) -> None:
        queue = self._faults[operation]
        if queue:
            # A fresh copy per raise, so tracebacks of earlier raises do not pile up.
            raise copy.copy(queue.popleft())

    def _known_key(self, offer: Offer | str) -> str:
        key = market_key(offer)
        if key not in self._catalog:
            raise ValueError(f"{key} is not in this cloud's catalog")
        return key

    def _stock_now(self, key: str, offer: Offer, capacity: Capacity, now: datetime) -> Stock:
        cap = _stock_capacity(capacity)
        slot = (key, cap)
        if slot in self._sold_out:
            until = self._sold_out[slot]
            if until is None or now < until:
                return Stock.sold_out
            del self._sold_out[slot]
        listed = offer.stock(cap)
        return Stock.available if listed in (Stock.unknown, Stock.sold_out) else listed

    def _price(self, key: str, offer: Offer, capacity: Capacity, day: date) -> Price | None:
        if capacity is Capacity.spot:
            return self._spot_price(key, offer, day)
        return offer.on_demand  # reserved machines run on on-demand hardware

    def _spot_price(self, key: str, offer: Offer, day: date) -> Price | None:
        if offer.spot is None or not self._drift:
            return offer.spot
        if day != self._prices_day:
            self._prices_day, self._day_prices = day, {}
        price = self._day_prices.get(key)
        if price is None:
            price = self._day_prices[key] = self._drifted(key, offer, day)
        return price

    def _drifted(self, key: str, offer: Offer, day: date) -> Price:
        assert offer.spot is not None
        # One draw per offer and day, independent of call order: same seed, same prices.
        rng = random.Random(f"{self._seed}:{key}:{day.isoformat()}")
        factor = 1 + Decimal(rng.randint(-_DRIFT_STEPS, _DRIFT_STEPS)) / (10 * _DRIFT_STEPS)
        amount = (offer.spot.per_hour.amount * factor).quantize(Decimal("0.0001"))
        od = offer.on_demand
        if od is not None and od.per_hour.currency == offer.spot.per_hour.currency:
            amount = min(amount, od.per_hour.amount)
        return Price(
            per_hour=Money(amount=amount, currency=offer.spot.per_hour.currency),
            source=f"{offer.spot.source} (sandbox daily drift)",
            as_of=day,
        )

    def _check_quota(self, gpus: int) -> None:
        if self._gpu_quota is None:
            return
        now = self._clock.now()
        used = 0
        for machine in self._machines.values():
            self._settle(machine, now)
            if machine.state is not _S.terminated:
                used += machine.offer.gpu_count
        if used + gpus > self._gpu_quota:
            raise QuotaExceeded(
                f"GPU quota {self._gpu_quota} would be exceeded ({used} in use, {gpus} asked)",
                code="QuotaExceeded.GPU",
                fix="ask the cloud for a higher GPU quota or terminate unused instances",
            )

    def _boot_up(self, machine: _Machine, now: datetime) -> None:
        boot = max(1.0, self._boot + machine.rng.uniform(-self._jitter, self._jitter))
        machine.next_change = (now + timedelta(seconds=boot), _S.running)
        if not machine.history:
            machine.history.append((now, _S.pending))
        self._draw_reclaim(machine, now)

    def _draw_reclaim(self, machine: _Machine, since: datetime) -> None:
        rate = machine.offer.spot_interruptions_per_hour * self._interruption_scale
        machine.reclaim_at = machine.notice_at = None
        if machine.capacity is not Capacity.spot or rate <= 0:
            return
        hours = machine.rng.expovariate(rate)
        if hours > _NEVER_HOURS:
            return
        machine.reclaim_at = since + timedelta(hours=hours)
        machine.notice_at = max(since, machine.reclaim_at - self._notice)

    def _enter(self, machine: _Machine, state: InstanceState, at: datetime) -> None:
        machine.state = state
        machine.history.append((at, state))
        if state not in _RECLAIMABLE:
            machine.reclaim_at = None
            if machine.notice_at is not None and machine.notice_at > at:
                machine.notice_at = None  # it left before anyone announced a reclaim

    def _settle(self, machine: _Machine, now: datetime) -> None:
        """Apply every transition due by ``now``, each at its own time, in order."""
        while True:
            change = machine.next_change
            reclaim = machine.reclaim_at if machine.state in _RECLAIMABLE else None
            due_change = change if change is not None and change[0] <= now else None
            due_reclaim = reclaim if reclaim is not None and reclaim <= now else None
            if due_change is not None and (due_reclaim is None or due_change[0] <= due_reclaim):
                machine.next_change = None
                self._enter(machine, due_change[1], due_change[0])
            elif due_reclaim is not None:
                machine.next_change = None
                machine.preempted = True
                machine.preempt_reason = PREEMPT_REASON
                self._enter(machine, self._reclaim_to, due_reclaim)
            else:
                return

    def _prune(self, now: datetime) -> None:
        if self._forget_after is not None:
            self._listed = [i for i in self._listed if not self._forgotten(self._machines[i], now)]

    def _forgotten(self, machine: _Machine, now: datetime) -> bool:
        return (
            self._forget_after is not None
            and machine.state is _S.terminated
            and now - machine.state_since >= self._forget_after
        )

    def _any_machine(self, instance_id: str) -> _Machine:
        machine = self._machines.get(instance_id)
        if machine is None:
            raise NotFound(f"no instance {instance_id}", code="InvalidInstanceID.NotFound")
        return machine

    def _find(self, instance_id: str, region: str | None, now: datetime) -> _Machine:
        machine = self._machines.get(instance_id)
        if machine is not None:
            self._settle(machine, now)
        if (
            machine is None
            or (region is not None and machine.offer.region != region)
            or self._forgotten(machine, now)
        ):
            where = f" in {region}" if region else ""
            raise NotFound(f"no instance {instance_id}{where}", code="InvalidInstanceID.NotFound")
        return machine

    def _snapshot(self, machine: _Machine, now: datetime) -> SandboxInstance:
        notice = machine.notice_at if machine.notice_at is not None and machine.notice_at <= now else None
        # What may change after the launch; the rest (offer, tags, token, name, image, user data) does not.
        key = (machine.state, machine.history[-1], len(machine.history), machine.preempted, machine.preempt_reason,
               notice)
        if machine.snapshot is not None and machine.snapshot[0] == key:
            return machine.snapshot[1]
        snapshot = SandboxInstance(
            instance_id=machine.instance_id,
            offer=machine.offer,
            capacity=machine.capacity,
            client_token=machine.client_token,
            tags=MappingProxyType(dict(machine.tags)),
            state=machine.state,
            state_since=machine.state_since,
            launched_at=machine.launched_at,
            preempted=machine.preempted,
            preempt_reason=machine.preempt_reason,
            interruption_notice_at=notice,
            name=machine.name,
            image=machine.image,
            user_data=machine.user_data,
        )
        machine.snapshot = (key, snapshot)
        return snapshot


def _stock_capacity(capacity: Capacity) -> Capacity:
    # Reserved instances run on the on-demand pool.
    return Capacity.spot if capacity is Capacity.spot else Capacity.on_demand
