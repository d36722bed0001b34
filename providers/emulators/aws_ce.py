"""AWS Cost Explorer's answer for a month, worked out from what a sandbox cloud ran, for moto to serve.

moto's Cost Explorer tracks no cost: ``GetCostAndUsage`` answers from a queue of results set through
``POST /moto-api/static/ce/cost-and-usage-results`` (``{"results": [...]}``), each result handed to the
next request whose parameters moto has not seen, and the same answer to the same parameters after that.
So a bill of N pages is N results, each but the last carrying a ``NextPageToken``: the reader's first
request takes page 1, its request with that token page 2, and so on.

``ce_pages`` builds those results the way Cost Explorer shapes them for the request
``providers/aws/bills.py`` sends (MONTHLY, ``UnblendedCost``, grouped by the ``gpusched:instance`` and
``gpusched:cluster`` tags): one ``ResultsByTime`` entry for the month, one group per tag pair, keys
``"gpusched:instance$<value>"`` (``"...$"`` for untagged usage), amounts as strings to 10 places, the
unit the prices' currency. The charges come from ``providers/sandbox/billing.py`` under AWS's rules
(per second, 60 seconds at least per start; reservations cover their hours at 0); ``extra`` adds groups
the sandbox did not run (someone else's machine, untagged usage). ``load_into_moto`` posts the pages.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from providers.base import TAG_INSTANCE, TAG_MANAGED
from providers.bills import month_days
from providers.sandbox.billing import Charge

__all__ = ["ExtraGroup", "ce_pages", "load_into_moto"]

_PLACES = Decimal("0.0000000001")
RESULTS_PATH = "/moto-api/static/ce/cost-and-usage-results"


@dataclass(frozen=True)
class ExtraGroup:
    """A group of the bill the sandbox did not run: its tags (none: untagged usage) and amount."""

    amount: Decimal
    tags: Mapping[str, str] = field(default_factory=dict)
    currency: str = "USD"


def ce_pages(charges: Sequence[Charge], month: str, *, extra: Sequence[ExtraGroup] = (), page_size: int = 100,
             estimated: bool = False, token_prefix: str = "page") -> list[dict[str, Any]]:
    """The month's ``GetCostAndUsage`` answers, ``page_size`` groups a page, as moto's static results."""
    if page_size < 1:
        raise ValueError("page_size must be at least 1")
    sums: dict[tuple[str, str], list[Any]] = {}
    for c in charges:
        if c.month != month:
            continue
        key = (c.instance.tags.get(TAG_INSTANCE, ""), c.instance.tags.get(TAG_MANAGED, ""))
        acc = sums.setdefault(key, [Decimal(0), c.currency])
        acc[0] += c.amount
    for e in extra:
        key = (e.tags.get(TAG_INSTANCE, ""), e.tags.get(TAG_MANAGED, ""))
        acc = sums.setdefault(key, [Decimal(0), e.currency])
        acc[0] += e.amount
    groups = [
        {"Keys": [f"{TAG_INSTANCE}${instance}", f"{TAG_MANAGED}${cluster}"],
         "Metrics": {"UnblendedCost": {"Amount": str(amount.quantize(_PLACES)), "Unit": unit}}}
        for (instance, cluster), (amount, unit) in sums.items()
    ]
    start, end = month_days(month)
    chunks = [groups[i:i + page_size] for i in range(0, len(groups), page_size)] or [[]]
    pages = []
    for n, chunk in enumerate(chunks, 1):
        page: dict[str, Any] = {
            "GroupDefinitions": [{"Type": "TAG", "Key": TAG_INSTANCE}, {"Type": "TAG", "Key": TAG_MANAGED}],
            "ResultsByTime": [{"TimePeriod": {"Start": start, "End": end}, "Total": {}, "Groups": chunk,
                               "Estimated": estimated}],
            "DimensionValueAttributes": [],
        }
        if n < len(chunks):
            page["NextPageToken"] = f"{token_prefix}-{n + 1}"
        pages.append(page)
    return pages


def load_into_moto(endpoint: str, pages: Sequence[Mapping[str, Any]]) -> None:
    """Queue ``pages`` in the moto server at ``endpoint`` (``http://127.0.0.1:PORT``; loopback only)."""
    parts = urlsplit(endpoint)
    if parts.hostname not in ("127.0.0.1", "localhost"):
        raise ValueError(f"moto's results are loaded on this machine only, not {parts.hostname}")
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("POST", RESULTS_PATH, body=json.dumps({"results": list(pages)}),
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
    finally:
        conn.close()
    if response.status != 201:
        raise RuntimeError(f"moto refused the Cost Explorer results: HTTP {response.status}")
