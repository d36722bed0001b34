"""Live offers from DescribeZoneInstanceConfigInfos: price, stock and GPU count per zone and type.

One call per region answers for pay-as-you-go and SPOTPAID together. The paid
price is ``UnitPriceDiscount``, in the account's currency (the config says
which). The GPU model is not in the API: it comes from the bundled catalog's row
for the instance type, or from the instance family (``_FAMILY_GPUS``); a type
whose GPU cannot be named, or that has no whole GPU, is left out.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping, Sequence

from providers.tencent.config import NAME
from scheduler.gpus import GPUS
from scheduler.models import Offer, Price, Stock
from scheduler.money import Money

__all__ = ["live_offers"]

_LIVE_SOURCE = "Tencent Cloud DescribeZoneInstanceConfigInfos (live)"
# Families whose GPU the catalog may not list (docs/gpus-and-clouds.md, "GPU instance families").
_FAMILY_GPUS = {
    "GN7": "T4", "GN7vi": "T4", "GI3X": "T4", "PNV4": "A10", "GT4": "A100-40G",
    "GN10X": "V100-32G", "GN10Xp": "V100-32G",
}


def live_offers(region: str, items: Sequence[Mapping[str, Any]], catalog: Sequence[Offer], currency: str,
                today: date) -> list[Offer]:
    """The offers in one region's ``InstanceTypeQuotaSet``, with ``catalog`` (tencent rows) filling the gaps."""
    grouped: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for item in items:
        key = (str(item.get("Zone") or ""), str(item.get("InstanceType") or ""))
        grouped.setdefault(key, {})[str(item.get("InstanceChargeType") or "")] = item
    offers = []
    for (zone, instance_type), by_charge in sorted(grouped.items()):
        offer = _live_offer(region, zone, instance_type, by_charge, catalog, currency, today)
        if offer is not None:
            offers.append(offer)
    return offers


def _live_offer(region: str, zone: str, instance_type: str, by_charge: Mapping[str, Mapping[str, Any]],
                catalog: Sequence[Offer], currency: str, today: date) -> Offer | None:
    any_item = next(iter(by_charge.values()))
    gpu_count = int(any_item.get("Gpu") or 0) or int(float(any_item.get("GpuCount") or 0))
    known = _catalog_row(catalog, region, zone, instance_type)
    gpu = known.gpu if known is not None else _FAMILY_GPUS.get(instance_type.split(".")[0])
    if gpu_count < 1 or not zone or gpu is None or (known is None and gpu not in GPUS):
        return None  # not a whole-GPU type, or one whose GPU model we cannot name
    vcpus = int(any_item.get("Cpu") or 0) or (known.vcpus if known is not None else 0)
    mem_gib = float(any_item.get("Memory") or 0) or (known.mem_gib if known is not None else 0.0)
    if vcpus < 1 or mem_gib <= 0:
        return None  # a size we cannot plan with
    od_item, spot_item = by_charge.get("POSTPAID_BY_HOUR"), by_charge.get("SPOTPAID")
    catalog_od = known.on_demand if known is not None and known.zone == zone else None
    catalog_spot = known.spot if known is not None and known.zone == zone else None
    fields: dict[str, Any] = {}
    if known is not None:
        fields["spot_interruptions_per_hour"] = known.spot_interruptions_per_hour
    return Offer(
        provider=NAME, region=region, zone=zone, instance_type=instance_type, gpu=gpu, gpu_count=gpu_count,
        gpu_mem_gib=known.gpu_mem_gib if known is not None else GPUS[gpu].mem_gib,
        vcpus=vcpus,
        mem_gib=mem_gib,
        on_demand=None if od_item is None else (_live_price(od_item, currency, today) or catalog_od),
        spot=None if spot_item is None else (_live_price(spot_item, currency, today) or catalog_spot),
        on_demand_stock=_stock(od_item), spot_stock=_stock(spot_item),
        **fields,
    )


def _live_price(item: Mapping[str, Any] | None, currency: str, today: date) -> Price | None:
    amount = _paid_amount((item or {}).get("Price") or {})
    if amount is None:
        return None
    return Price(per_hour=Money(amount=amount, currency=currency), source=_LIVE_SOURCE, as_of=today)


def _catalog_row(catalog: Sequence[Offer], region: str, zone: str, instance_type: str) -> Offer | None:
    """The catalog's row for this type: same zone first, then same region, then anywhere."""
    rows = [o for o in catalog if o.instance_type == instance_type]
    for same in (lambda o: o.zone == zone, lambda o: o.region == region, lambda o: True):
        match = next((o for o in rows if same(o)), None)
        if match is not None:
            return match
    return None


def _paid_amount(item: Mapping[str, Any]) -> Decimal | None:
    """What one hour costs: the discounted unit price where CVM gives one, else the list unit price."""
    for name in ("UnitPriceDiscount", "UnitPrice"):
        value = item.get(name)
        if value is None:
            continue
        try:
            amount = Decimal(str(value))  # the SDK hands a float; its repr is the wire's number
        except InvalidOperation:
            continue
        if amount.is_finite() and amount > 0:
            return amount
    return None


def _stock(item: Mapping[str, Any] | None) -> Stock:
    if item is None:
        return Stock.unknown
    if item.get("Status") == "SOLD_OUT" or item.get("StatusCategory") == "WithoutStock":
        return Stock.sold_out
    if item.get("StatusCategory") == "UnderStock":
        return Stock.low
    return Stock.available if item.get("Status") == "SELL" else Stock.unknown
