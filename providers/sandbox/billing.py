"""A cloud's own bill, worked out from what its sandbox cloud really ran, by that cloud's billing rules.

The emulated bills (``providers/emulators/alibaba_bss.py``, ``tencent_billing.py``, and the Cost Explorer
results ``aws_ce.py`` loads into moto) all start here, so the bill a reconciliation reads comes from the
machines' own state history, never from gpusched's ledger: the ledger follows the same rules
(``Capability.bills_from_running``) but learns of a change it did not make at the tick that sees it, while
the cloud bills from the exact moment of each state change. That, and each cloud's rounding, make the
small, real difference a reconciliation should find.

The rules (``BillingRules``), per cloud:

* AWS bills time in ``running`` only (a boot is free: usage starts when the instance enters running), per
  second, with a 60-second minimum each time an instance starts; the amount is kept to 10 places, as Cost
  Explorer reports it;
* Alibaba ECS and Tencent CVM pay-as-you-go (and spot) bill from creation: time in ``pending`` (the boot,
  and the boot after a start) and ``running``; per second, settled every clock hour (UTC), each hour's
  charge rounded to the cent (half up) on its own;
* a stop (stop-charging), a reclaim or a termination ends a billed span; a stopped machine is not billed;
* a reservation (``Reservation``: region, instance type, count, term) covers, in each clock hour, the first
  ``count`` matching on-demand instances by launch order: their hour's gross charge is deducted in full
  (AWS's RI-covered usage costs 0 unblended; Alibaba shows it as ``DeductedByResourcePackage``; Tencent
  as ``OriginalCostWithRI``).

Each hour is priced at the instance's price on that UTC day (``SandboxCloud.price_on``: spot at the day's
price). A ``Charge`` is one instance's settlement for one clock hour.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal

from providers.base import InstanceState
from providers.sandbox.cloud import SandboxCloud, SandboxInstance
from scheduler.models import Capacity

__all__ = [
    "ALIBABA_RULES",
    "AWS_RULES",
    "RULES",
    "TENCENT_RULES",
    "BillingRules",
    "Charge",
    "Reservation",
    "hourly_charges",
    "instance_totals",
    "running_spans",
]

_HOUR = timedelta(hours=1)
_SECONDS_PER_HOUR = Decimal(3600)


@dataclass(frozen=True)
class BillingRules:
    cloud: str
    minimum_seconds: int = 0  # billed at least this long each time the instance starts running
    places: Decimal = Decimal("0.01")  # each settlement rounded to this (half up)
    bills_boot: bool = True  # time in pending is billed (from creation) or not (from running)


AWS_RULES = BillingRules("aws", minimum_seconds=60, places=Decimal("0.0000000001"), bills_boot=False)
ALIBABA_RULES = BillingRules("alibaba")
TENCENT_RULES = BillingRules("tencent")
RULES = {r.cloud: r for r in (AWS_RULES, ALIBABA_RULES, TENCENT_RULES)}


@dataclass(frozen=True)
class Reservation:
    """Capacity the account prepaid: it covers ``count`` matching on-demand instances an hour in its term."""

    region: str
    instance_type: str
    count: int
    start: datetime
    until: datetime


@dataclass(frozen=True)
class Charge:
    """One instance's settlement for one clock hour (UTC), in the price's currency."""

    instance: SandboxInstance
    hour: datetime  # the clock hour's start
    begin: datetime  # the billed span inside it
    end: datetime
    seconds: Decimal  # billed seconds (a started run's minimum included)
    unit_price: Decimal  # per hour
    gross: Decimal  # before deductions, rounded by the rules
    deducted: Decimal  # covered by a reservation
    currency: str

    @property
    def amount(self) -> Decimal:
        """What is owed for the hour."""
        return self.gross - self.deducted

    @property
    def month(self) -> str:
        return f"{self.hour.year:04d}-{self.hour.month:02d}"


def running_spans(cloud: SandboxCloud, instance_id: str, now: datetime, *,
                  with_boot: bool = False) -> list[tuple[datetime, datetime]]:
    """[start, end) of each stretch the instance spent running (with its boots: pending too), up to ``now``
    for one still running."""
    billed = {InstanceState.running, InstanceState.pending} if with_boot else {InstanceState.running}
    spans: list[tuple[datetime, datetime]] = []
    began: datetime | None = None
    for at, state in cloud.history(instance_id):
        if state in billed and began is None:
            began = at
        elif state not in billed and began is not None:
            spans.append((began, at))
            began = None
    if began is not None and began < now:
        spans.append((began, now))
    return [(a, b) for a, b in spans if b > a]


def _hours_of(start: datetime, end: datetime) -> Iterable[tuple[datetime, datetime, datetime]]:
    """(clock hour, piece start, piece end) for [start, end) cut at every UTC hour."""
    cursor = start
    while cursor < end:
        hour = cursor.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)
        cut = min(end, hour + _HOUR)
        yield hour, cursor, cut
        cursor = cut


def _seconds(delta: timedelta) -> Decimal:
    return Decimal(delta.days * 86_400 + delta.seconds) + Decimal(delta.microseconds) / Decimal(1_000_000)


def hourly_charges(cloud: SandboxCloud, rules: BillingRules, *, month: str | None = None,
                   now: datetime | None = None, reservations: Sequence[Reservation] = ()) -> list[Charge]:
    """Every instance's hourly settlements (of ``month``, ``YYYY-MM``, when given), in hour then launch order."""
    now = now or cloud_now(cloud)
    raw: list[tuple[int, SandboxInstance, datetime, datetime, datetime, Decimal]] = []
    for order, inst in enumerate(cloud.all_instances()):
        for start, end in running_spans(cloud, inst.instance_id, now, with_boot=rules.bills_boot):
            extra = max(Decimal(0), Decimal(rules.minimum_seconds) - _seconds(end - start))
            for i, (hour, begin, cut) in enumerate(_hours_of(start, end)):
                billed = _seconds(cut - begin) + (extra if i == 0 else Decimal(0))
                raw.append((order, inst, hour, begin, cut, billed))
    # One settlement per instance and hour: a stop and a start within the hour add up.
    merged: dict[tuple[str, datetime], list] = {}
    for order, inst, hour, begin, cut, billed in raw:
        slot = merged.setdefault((inst.instance_id, hour), [order, inst, hour, begin, cut, Decimal(0)])
        slot[3], slot[4] = min(slot[3], begin), max(slot[4], cut)
        slot[5] += billed
    covered = _covered(merged.values(), reservations)
    charges = []
    for order, inst, hour, begin, cut, billed in sorted(merged.values(), key=lambda s: (s[2], s[0])):
        if month is not None and f"{hour.year:04d}-{hour.month:02d}" != month:
            continue
        price = cloud.price_on(inst.instance_id, hour.date())
        if price is None:
            continue
        unit = price.per_hour.amount
        gross = (billed * unit / _SECONDS_PER_HOUR).quantize(rules.places, rounding=ROUND_HALF_UP)
        deducted = gross if (inst.instance_id, hour) in covered else Decimal(0)
        charges.append(Charge(instance=inst, hour=hour, begin=begin, end=cut, seconds=billed, unit_price=unit,
                              gross=gross, deducted=deducted, currency=price.per_hour.currency))
    return charges


def _covered(slots: Iterable[list], reservations: Sequence[Reservation]) -> set[tuple[str, datetime]]:
    """The (instance, hour) pairs a reservation pays for: per hour, the first ``count`` on-demand matches."""
    if not reservations:
        return set()
    by_hour: dict[datetime, list[tuple[int, SandboxInstance]]] = {}
    for order, inst, hour, *_ in slots:
        if inst.capacity is not Capacity.spot:
            by_hour.setdefault(hour, []).append((order, inst))
    covered: set[tuple[str, datetime]] = set()
    for hour, running in by_hour.items():
        for res in reservations:
            if not res.start <= hour < res.until:
                continue
            matches = sorted((o, i) for o, i in running
                             if i.region == res.region and i.instance_type == res.instance_type
                             and (i.instance_id, hour) not in covered)
            covered.update((i.instance_id, hour) for _, i in matches[: res.count])
    return covered


def instance_totals(charges: Iterable[Charge]) -> dict[str, Mapping[str, Decimal]]:
    """Per instance id: summed ``seconds``, ``gross``, ``deducted`` and ``amount`` of its charges."""
    out: dict[str, dict[str, Decimal]] = {}
    for c in charges:
        acc = out.setdefault(c.instance.instance_id,
                             {"seconds": Decimal(0), "gross": Decimal(0), "deducted": Decimal(0), "amount": Decimal(0)})
        acc["seconds"] += c.seconds
        acc["gross"] += c.gross
        acc["deducted"] += c.deducted
        acc["amount"] += c.amount
    return out


def cloud_now(cloud: SandboxCloud) -> datetime:
    """The sandbox cloud's own "now" (its clock), for a bill asked without one."""
    return cloud.now()
