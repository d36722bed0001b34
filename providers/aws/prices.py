"""Spot prices from DescribeSpotPriceHistory, in the currency each region bills in.

On-demand prices and instance specs come from the bundled catalog
(``providers.catalog``); only spot prices are asked of EC2, per region.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from providers.aws.client import EC2Client
from scheduler.models import Price
from scheduler.money import Money
from scheduler.times import utc

__all__ = ["SPOT_PRICE_SOURCE", "currency_for", "latest_spot_prices", "spot_price_records"]

SPOT_PRICE_SOURCE = "aws describe_spot_price_history"
# DescribeSpotPriceHistory takes the product with or without "(Amazon VPC)";
# the plain one is what instances in a VPC (all of ours) are billed as.
SPOT_PRODUCT = "Linux/UNIX"


def spot_price_records(client: EC2Client, instance_types: list[str], now: datetime) -> list[dict[str, Any]]:
    """Every DescribeSpotPriceHistory record for ``instance_types`` in effect at ``now`` (all pages)."""
    paginator = client.get_paginator("describe_spot_price_history")
    records: list[dict[str, Any]] = []
    # A start time of now gives the price in effect now, per zone.
    for page in paginator.paginate(InstanceTypes=instance_types, ProductDescriptions=[SPOT_PRODUCT], StartTime=now):
        records.extend(page.get("SpotPriceHistory", []))
    return records


def currency_for(region: str) -> str:
    """AWS bills its China regions (Beijing, Ningxia: ``cn-*``) in yuan, every other region in dollars."""
    return "CNY" if region.startswith("cn-") else "USD"


def latest_spot_prices(records: Iterable[Mapping[str, Any]], currency: str = "USD") -> dict[tuple[str, str], Price]:
    """The newest DescribeSpotPriceHistory record per (instance type, zone), as a Price in ``currency``."""
    newest: dict[tuple[str, str], tuple[datetime, Decimal]] = {}
    for record in records:
        key = (str(record["InstanceType"]), str(record["AvailabilityZone"]))
        stamp = utc(record["Timestamp"])
        try:
            amount = Decimal(str(record["SpotPrice"]))
        except InvalidOperation:
            continue  # a garbled record says nothing; the catalog price stays
        if not amount.is_finite() or amount <= 0:
            continue
        if key not in newest or stamp > newest[key][0]:
            newest[key] = (stamp, amount)
    return {
        key: Price(
            per_hour=Money(amount=amount, currency=currency),
            source=f"{SPOT_PRICE_SOURCE} {stamp.isoformat()}",
            as_of=stamp.date(),
        )
        for key, (stamp, amount) in newest.items()
    }
