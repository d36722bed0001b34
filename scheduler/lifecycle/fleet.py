"""What we already hold, as planner slots: warm idle machines and free units of owned reserved capacity.

One rule matches a reservation to an offer (``reserved_offer``): same provider, region and
instance type, the reservation's zone if it names one, else the first zone by name. The tick
skips a reservation no offer matches (a cloud's offers may be missing for a tick) and logs it;
``gpusched plan`` refuses it, since there a mismatch is a settings mistake to fix now.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

import structlog
from sqlalchemy import select
from sqlalchemy.orm import Session

from scheduler.errors import UserError
from scheduler.lifecycle.context import TickContext
from scheduler.models import Capacity, Offer, ReservedCapacity
from scheduler.planner.inputs import FleetSlot
from scheduler.states import INSTANCE_LIVE
from scheduler.states import InstanceRowState as I
from scheduler.store.tables import InstanceRow
from scheduler.times import utc

log = structlog.get_logger("gpusched.fleet")


def reserved_offer(res: ReservedCapacity, offers: Iterable[Offer]) -> Offer | None:
    """The offer a reservation launches as, or None when no offer matches it."""
    matches = sorted(
        (o for o in offers
         if o.provider == res.provider and o.region == res.region
         and o.instance_type == res.instance_type and (res.zone is None or o.zone == res.zone)),
        key=lambda o: o.zone,
    )
    return matches[0] if matches else None


def reserved_slots(reserved: Iterable[ReservedCapacity], offers: Iterable[Offer], now: datetime, *,
                   in_use: Callable[[ReservedCapacity], int] = lambda res: 0,
                   strict: bool = False) -> list[FleetSlot]:
    """A slot per free unit of each reservation still in force; ``in_use`` counts its live machines.

    ``strict``: a reservation that matches no offer is a UserError (else it is logged and skipped).
    """
    offers = list(offers)
    slots: list[FleetSlot] = []
    for res in reserved:
        if utc(res.until) <= now or (res.start is not None and utc(res.start) > now):
            continue  # not in force: its term is over, or has not begun
        offer = reserved_offer(res, offers)
        if offer is None:
            if strict:
                raise UserError(
                    f"reserved capacity {res.provider} {res.region} {res.instance_type} matches no offer",
                    fix="check GPUSCHED_RESERVED against `gpusched plan` offers (provider, region, instance type)",
                )
            log.warning("reserved_unmatched", provider=res.provider, region=res.region,
                        instance_type=res.instance_type)
            continue
        free = res.count - in_use(res)
        slots.extend(FleetSlot(kind="reserved", instance_id=None, offer=offer,
                               capacity=Capacity.reserved, until=utc(res.until))
                     for _ in range(max(free, 0)))
    return slots

# Asked every tick: built once (``scheduler.store.database``, "Statements built once").
_WARM_IDLE = (
    select(InstanceRow)
    # A machine whose spot reclaim notice came (``agent_reports.reclaim_pending``) is nobody's slot.
    .where(InstanceRow.state == I.running.value, InstanceRow.job_id.is_(None), InstanceRow.preempted.is_(False))
    .order_by(InstanceRow.id)
)


def fleet_slots(ctx: TickContext, s: Session, now: datetime) -> list[FleetSlot]:
    """Warm idle instances we hold, plus free units of owned reserved capacity."""
    offers = ctx.offers.by_key(ctx.providers, now)
    slots: list[FleetSlot] = []
    idle = s.scalars(_WARM_IDLE).all()
    for row in idle:
        offer = offers.get(f"{row.provider}/{row.region}/{row.zone}/{row.instance_type}")
        if offer is None:
            continue
        cap = Capacity.reserved if row.reserved else Capacity(row.capacity)
        slots.append(FleetSlot(kind="warm", instance_id=row.id, offer=offer, capacity=cap))

    def live(res: ReservedCapacity) -> int:
        return len(s.scalars(
            select(InstanceRow.id).where(
                InstanceRow.reserved.is_(True),
                InstanceRow.provider == res.provider,
                InstanceRow.region == res.region,
                InstanceRow.instance_type == res.instance_type,
                InstanceRow.state.in_([x.value for x in INSTANCE_LIVE]),
            )
        ).all())

    return slots + reserved_slots(ctx.settings.reserved, offers.values(), now, in_use=live)
