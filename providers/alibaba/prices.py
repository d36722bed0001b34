"""Live prices and stock from ECS; where ECS gives no price, the bundled catalog's stands.

DescribePrice gives the on-demand price, DescribeSpotPriceHistory the spot
price per zone, DescribeAvailableResource the stock. Each function takes
``call``, the adapter's way to send one request to one region and get ECS's
JSON back (errors already translated).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from aliyunsdkcore.request import RpcRequest
from aliyunsdkecs.request.v20140526.DescribeAvailableResourceRequest import (
    DescribeAvailableResourceRequest,
)
from aliyunsdkecs.request.v20140526.DescribePriceRequest import DescribePriceRequest
from aliyunsdkecs.request.v20140526.DescribeSpotPriceHistoryRequest import (
    DescribeSpotPriceHistoryRequest,
)

from providers.alibaba.wire import TIMESTAMP, items, parse_time
from providers.base import InvalidRequest, NoCapacity, NotFound
from scheduler.clock import Clock
from scheduler.models import Capacity, Price, Stock
from scheduler.money import Money

__all__ = ["Call", "on_demand_price", "spot_prices", "stock"]

Call = Callable[[RpcRequest], dict[str, Any]]

_MAX_PAGES = 1000  # a day of hourly points per zone is a few pages; this only stops a runaway answer
_STOCK = {"WithStock": Stock.available, "ClosedWithStock": Stock.low,
          "WithoutStock": Stock.sold_out, "ClosedWithoutStock": Stock.sold_out}


def stock(call: Call, capacity: Capacity, spot_duration_hours: int) -> dict[tuple[str, str], Stock]:
    """Stock per (zone, instance type) at ``capacity``, as DescribeAvailableResource says."""
    ask = DescribeAvailableResourceRequest()
    ask.set_DestinationResource("InstanceType")
    ask.set_InstanceChargeType("PostPaid")
    if capacity is Capacity.spot:
        ask.set_SpotStrategy("SpotAsPriceGo")
        ask.set_SpotDuration(spot_duration_hours)
    else:
        ask.set_SpotStrategy("NoSpot")
    body = call(ask)
    found: dict[tuple[str, str], Stock] = {}
    for zone in items(body, "AvailableZones", "AvailableZone"):
        for resource in items(zone, "AvailableResources", "AvailableResource"):
            for supported in items(resource, "SupportedResources", "SupportedResource"):
                if supported.get("Status") == "SoldOut":
                    level = Stock.sold_out
                else:
                    level = _STOCK.get(str(supported.get("StatusCategory", "")), Stock.unknown)
                found[(str(zone.get("ZoneId")), str(supported.get("Value")))] = level
    return found


def on_demand_price(call: Call, instance_type: str, clock: Clock) -> Price | None:
    """The PostPaid hourly price of the instance type itself (no disk, no bandwidth); None when ECS gives none."""
    ask = DescribePriceRequest()
    ask.set_ResourceType("instance")
    ask.set_InstanceType(instance_type)
    ask.set_PriceUnit("Hour")
    try:
        body = call(ask)
    except (InvalidRequest, NotFound, NoCapacity):
        return None  # not priced here: the catalog's figure stands
    price = (body.get("PriceInfo") or {}).get("Price") or {}
    lines = [d for d in items(price, "DetailInfos", "DetailInfo") if d.get("Resource") == "instanceType"]
    amount = lines[0].get("TradePrice") if lines else price.get("TradePrice")
    if amount is None or not price.get("Currency"):
        return None
    return Price(
        per_hour=Money(amount=Decimal(str(amount)), currency=str(price["Currency"])),
        source="Alibaba Cloud DescribePrice (PostPaid, instance type only)",
        as_of=clock.now().date(),
    )


def spot_prices(call: Call, instance_type: str, spot_duration_hours: int, clock: Clock) -> dict[str, Price]:
    """The latest spot price per zone over the last day; empty when ECS gives none.

    The history is paged (``Offset`` / ``NextOffset``, 0 on the last page) and oldest first, so the
    newest prices are on the last page: every page is read.
    """
    start = (clock.now().astimezone(UTC) - timedelta(days=1)).strftime(TIMESTAMP)
    currency = ""
    latest: dict[str, tuple[datetime, Decimal]] = {}
    offset = 0
    for _ in range(_MAX_PAGES):
        ask = DescribeSpotPriceHistoryRequest()
        ask.set_NetworkType("vpc")
        ask.set_InstanceType(instance_type)
        ask.set_OSType("linux")
        ask.set_SpotDuration(spot_duration_hours)
        ask.set_StartTime(start)
        if offset:
            ask.set_Offset(offset)
        try:
            body = call(ask)
        except (InvalidRequest, NotFound, NoCapacity):
            return {}
        currency = str(body.get("Currency") or currency)
        page = items(body, "SpotPrices", "SpotPriceType")
        for point in page:
            when = parse_time(str(point.get("Timestamp", "")))
            if when is None or point.get("SpotPrice") is None:
                continue
            zone = str(point.get("ZoneId"))
            if zone not in latest or when > latest[zone][0]:
                latest[zone] = (when, Decimal(str(point["SpotPrice"])))
        next_offset = _int(body.get("NextOffset"))
        if not page or next_offset <= offset:
            break  # the last page (NextOffset 0), or an answer that would not move on
        offset = next_offset
    if not currency:
        return {}
    source = f"Alibaba Cloud DescribeSpotPriceHistory (SpotDuration={spot_duration_hours})"
    return {
        zone: Price(per_hour=Money(amount=amount, currency=currency), source=source, as_of=when.date())
        for zone, (when, amount) in latest.items()
    }


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
