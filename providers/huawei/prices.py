"""Offers for Huawei Cloud: prices from the bundled catalog, stock from ECS's flavor list.

Huawei's ECS API sells but does not price. The on-demand price of a flavor is in the
Billing Center's rating API (a separate global service, BSS), and a spot price is
not available through any API at all: Huawei shows the market price only on its
console and bills each hour at the price of that hour. So the prices here are the
bundled catalog's (``providers/data/catalog.csv``, huawei rows, each with its source
and date), and the adapter does not claim ``Capability.live_prices``.

What ECS does say, in one ``ListFlavors`` call per region, is where each flavor is on
sale: ``os_extra_specs`` ``cond:operation:status`` / ``cond:operation:az`` for
pay-per-use and ``cond:spot:operation:status`` / ``cond:spot:operation:az`` for spot,
the per-AZ form being ``az1(normal),az2(sellout)``. A flavor with no spot status is not
sold as spot (Huawei's rule: unset means ``abandon``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.models import Offer, Stock

__all__ = ["SPOT_NOT_SOLD", "flavor_stock", "offers_with_stock", "zone_status"]

_AZ_ENTRY = re.compile(r"\s*([^(),\s]+)\s*\(\s*([a-z_]+)\s*\)\s*")
_STOCK = {
    "normal": Stock.available,
    "promotion": Stock.available,
    "obt": Stock.available,
    "sellout": Stock.sold_out,
    "obt_sellout": Stock.sold_out,
    "abandon": Stock.sold_out,  # taken off sale: nothing to launch there
}
SPOT_NOT_SOLD = "abandon"


def zone_status(region_status: str | None, per_az: str | None, zone: str, *, unset: str | None) -> str | None:
    """A flavor's sale status in ``zone``: the AZ's own entry, else the region-wide one, else ``unset``."""
    for match in _AZ_ENTRY.finditer(per_az or ""):
        if match.group(1) == zone:
            return match.group(2)
    return region_status or unset


def flavor_stock(
    flavors: Sequence[Mapping[str, Any]], zones: Sequence[str]
) -> dict[tuple[str, str], tuple[Stock, Stock]]:
    """(zone, flavor) -> (on-demand stock, spot stock) for every flavor in a ListFlavors answer."""
    found: dict[tuple[str, str], tuple[Stock, Stock]] = {}
    for flavor in flavors:
        specs = flavor.get("os_extra_specs") or {}
        for zone in zones:
            od = zone_status(specs.get("cond:operation:status"), specs.get("cond:operation:az"), zone, unset="normal")
            spot = zone_status(specs.get("cond:spot:operation:status"), specs.get("cond:spot:operation:az"), zone,
                               unset=SPOT_NOT_SOLD)
            found[(zone, str(flavor.get("id")))] = (_STOCK.get(od or "", Stock.unknown),
                                                    _STOCK.get(spot or "", Stock.unknown))
    return found


def offers_with_stock(rows: Sequence[Offer], flavors: Sequence[Mapping[str, Any]]) -> list[Offer]:
    """The catalog ``rows`` of one region with the stock ECS reports; a row ECS does not list keeps 'unknown'."""
    stock = flavor_stock(flavors, sorted({o.zone for o in rows}))
    out = []
    for row in rows:
        od, spot = stock.get((row.zone, row.instance_type), (Stock.unknown, Stock.unknown))
        out.append(row.model_copy(update={"on_demand_stock": od, "spot_stock": spot if row.spot else Stock.unknown}))
    return out
