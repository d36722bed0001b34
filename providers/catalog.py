"""The bundled instance catalog: dated fallback offers for when live prices are out of reach.

``providers/data/catalog.csv`` holds one row per (provider, region, zone,
instance type), every price with its source key and the date it was valid
(``providers/data/README.md`` explains the columns and the sources). Providers
with live prices replace these offers at run time; the sandbox cloud, the demo
and the tests use them as they are.

Prices stay in the currency they were published in (AWS and Tencent intl USD,
Alibaba CNY): conversion happens once, in ``scheduler.money``.
"""

from __future__ import annotations

import csv
import io
from datetime import date
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Iterable, Sequence

from scheduler.errors import UserError
from scheduler.gpus import GPUS
from scheduler.models import PROVIDERS, Offer, Price, ReservedCapacity, Stock
from scheduler.money import CURRENCIES, Money

COLUMNS = (
    "provider",
    "region",
    "zone",
    "instance_type",
    "gpu",
    "gpu_count",
    "gpu_mem_gib",
    "vcpus",
    "mem_gib",
    "currency",
    "on_demand",
    "on_demand_source",
    "on_demand_as_of",
    "spot",
    "spot_source",
    "spot_as_of",
    "spot_interruptions_per_hour",
    "interruptions_source",
    "stock",
)

_FIX = "correct the row (providers/data/README.md describes every column)"


class _RowProblem(Exception):
    """Internal: one bad field in one row; turned into a UserError naming the line."""


def load_catalog(path: Path | None = None) -> list[Offer]:
    """Every offer in ``path``, or in the bundled catalog when ``path`` is None.

    A malformed row raises ``UserError`` naming the file, the line and the field.
    The bundled catalog is parsed once per process.
    """
    if path is None:
        return list(_bundled())
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read catalog {path}: {exc.strerror or exc}", fix="check the path") from None
    return parse_catalog(text, str(path))


def parse_catalog(text: str, origin: str = "catalog.csv") -> list[Offer]:
    """Parse catalog CSV text; ``origin`` names the file in error messages."""
    reader = csv.reader(io.StringIO(text))
    header = tuple(c.strip() for c in next(reader, []))
    missing = [c for c in COLUMNS if c not in header]
    extra = [c for c in header if c not in COLUMNS]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing column(s) {', '.join(missing)}")
        if extra:
            parts.append(f"unknown column(s) {', '.join(extra)}")
        raise UserError(f"{origin}: line 1: {'; '.join(parts)}", fix=f"the header is: {','.join(COLUMNS)}")

    offers: list[Offer] = []
    seen: dict[str, int] = {}
    for cells in reader:
        line = reader.line_num
        if not any(c.strip() for c in cells):
            continue
        try:
            if len(cells) != len(header):
                raise _RowProblem(f"{len(cells)} cells, expected {len(header)}")
            offer = _offer({name: value.strip() for name, value in zip(header, cells)})
        except _RowProblem as exc:
            raise UserError(f"{origin}: line {line}: {exc}", fix=_FIX) from None
        if offer.key in seen:
            raise UserError(
                f"{origin}: line {line}: {offer.key} is already listed on line {seen[offer.key]}",
                fix="keep one row per provider, region, zone and instance type",
            )
        seen[offer.key] = line
        offers.append(offer)
    return offers


@lru_cache(maxsize=1)
def _bundled() -> tuple[Offer, ...]:
    text = resources.files("providers").joinpath("data/catalog.csv").read_text(encoding="utf-8")
    return tuple(parse_catalog(text, "providers/data/catalog.csv"))


# --- one row ------------------------------------------------------------------


def _offer(cell: dict[str, str]) -> Offer:
    provider = _required(cell, "provider")
    if provider not in PROVIDERS:
        raise _RowProblem(f"provider {provider!r} is not one of {', '.join(PROVIDERS)}")
    gpu = _required(cell, "gpu")
    if gpu not in GPUS:
        raise _RowProblem(f"gpu {gpu!r} is not a known GPU ({', '.join(GPUS)})")
    currency = _required(cell, "currency")
    if currency not in CURRENCIES:
        raise _RowProblem(f"currency {currency!r} is not one of {', '.join(CURRENCIES)}")
    stock_text = cell["stock"] or Stock.unknown.value
    try:
        stock = Stock(stock_text)
    except ValueError:
        raise _RowProblem(f"stock {stock_text!r} is not one of {', '.join(s.value for s in Stock)}") from None

    on_demand = _price(cell, "on_demand", currency)
    spot = _price(cell, "spot", currency)
    if on_demand is None and spot is None:
        raise _RowProblem("neither an on_demand nor a spot price")
    if on_demand is not None and spot is not None and spot.per_hour > on_demand.per_hour:
        # Every cloud here caps spot at the on-demand price; more is a typo.
        raise _RowProblem(f"spot {spot.per_hour.amount} is above on_demand {on_demand.per_hour.amount}")
    rate = _number(cell, "spot_interruptions_per_hour")
    if rate < 0:
        raise _RowProblem("spot_interruptions_per_hour must not be negative")
    _required(cell, "interruptions_source")

    zone = _required(cell, "zone")
    region = _required(cell, "region")
    if not zone.startswith(region):
        raise _RowProblem(f"zone {zone!r} is not in region {region!r}")
    return Offer(
        provider=provider,
        region=region,
        zone=zone,
        instance_type=_required(cell, "instance_type"),
        gpu=gpu,
        gpu_count=_count(cell, "gpu_count"),
        gpu_mem_gib=_positive(cell, "gpu_mem_gib"),
        vcpus=_count(cell, "vcpus"),
        mem_gib=_positive(cell, "mem_gib"),
        on_demand=on_demand,
        spot=spot,
        on_demand_stock=stock,
        spot_stock=stock if spot is not None else Stock.unknown,
        spot_interruptions_per_hour=rate,
    )


def _required(cell: dict[str, str], column: str) -> str:
    value = cell[column]
    if not value:
        raise _RowProblem(f"{column} is empty")
    return value


def _number(cell: dict[str, str], column: str) -> float:
    text = _required(cell, column)
    try:
        return float(text)
    except ValueError:
        raise _RowProblem(f"{column} {text!r} is not a number") from None


def _positive(cell: dict[str, str], column: str) -> float:
    value = _number(cell, column)
    if value <= 0:
        raise _RowProblem(f"{column} must be positive, got {value:g}")
    return value


def _count(cell: dict[str, str], column: str) -> int:
    text = _required(cell, column)
    if not text.isdigit() or int(text) < 1:
        raise _RowProblem(f"{column} {text!r} is not a whole number of at least 1")
    return int(text)


def _price(cell: dict[str, str], column: str, currency: str) -> Price | None:
    """A price with its source and as-of date; all three cells empty means 'no price'."""
    amount_text, source, as_of_text = cell[column], cell[f"{column}_source"], cell[f"{column}_as_of"]
    if not (amount_text or source or as_of_text):
        return None
    if not amount_text:
        raise _RowProblem(f"{column} is empty but its source or as_of is not")
    if not source:
        raise _RowProblem(f"{column} has no {column}_source: every price says where it came from")
    if not as_of_text:
        raise _RowProblem(f"{column} has no {column}_as_of date")
    try:
        amount = Decimal(amount_text)
    except InvalidOperation:
        raise _RowProblem(f"{column} {amount_text!r} is not a number") from None
    if not amount.is_finite() or amount <= 0:
        raise _RowProblem(f"{column} must be a positive amount, got {amount_text!r}")
    try:
        as_of = date.fromisoformat(as_of_text)
    except ValueError:
        raise _RowProblem(f"{column}_as_of {as_of_text!r} is not a date like 2026-11-09") from None
    return Price(per_hour=Money(amount=amount, currency=currency), source=source, as_of=as_of)


# --- queries --------------------------------------------------------------------


def filter_offers(
    offers: Iterable[Offer],
    *,
    providers: Sequence[str] | None = None,
    regions: Sequence[str] | None = None,
    gpus: Sequence[str] | None = None,
) -> list[Offer]:
    """The offers matching every given filter, in their original order; None means 'any'."""
    wanted_providers = None if providers is None else set(providers)
    wanted_regions = None if regions is None else set(regions)
    wanted_gpus = None if gpus is None else set(gpus)
    return [
        o
        for o in offers
        if (wanted_providers is None or o.provider in wanted_providers)
        and (wanted_regions is None or o.region in wanted_regions)
        and (wanted_gpus is None or o.gpu in wanted_gpus)
    ]


def regions_of(offers: Iterable[Offer], provider: str) -> list[str]:
    """The regions where ``provider`` has at least one offer, sorted."""
    return sorted({o.region for o in offers if o.provider == provider})


def owned_offers(
    reserved: Sequence[ReservedCapacity], offers: Sequence[Offer]
) -> list[tuple[ReservedCapacity, Offer]]:
    """Pair every reserved-capacity declaration with the catalog offer it runs on.

    Match on provider, region and instance type, and on zone when the declaration
    names one. A regional declaration (no zone) is paired with the first matching
    zone in sorted order: its price is zero at the margin wherever it runs, so the
    zone only says where a launch goes. Expiry (``until``) is the caller's to
    check: this function has no clock. A declaration with no matching offer
    raises ``UserError`` naming what the catalog does have.
    """
    pairs: list[tuple[ReservedCapacity, Offer]] = []
    for r in reserved:
        candidates = sorted(
            (
                o
                for o in offers
                if o.provider == r.provider and o.region == r.region and o.instance_type == r.instance_type
            ),
            key=lambda o: o.zone,
        )
        if r.zone is not None:
            in_zone = [o for o in candidates if o.zone == r.zone]
            if not in_zone:
                zones = ", ".join(o.zone for o in candidates) or "none"
                raise UserError(
                    f"reserved {r.provider} {r.instance_type}: no offer in zone {r.zone} (zones with it: {zones})",
                    fix="correct the zone in GPUSCHED_RESERVED or leave it out",
                )
            candidates = in_zone
        if not candidates:
            raise UserError(
                f"reserved {r.provider} {r.instance_type} in {r.region}: "
                f"not an instance type the catalog knows there",
                fix=_reserved_hint(r, offers),
            )
        pairs.append((r, candidates[0]))
    return pairs


def _reserved_hint(r: ReservedCapacity, offers: Sequence[Offer]) -> str:
    elsewhere = sorted({o.region for o in offers if o.provider == r.provider and o.instance_type == r.instance_type})
    if elsewhere:
        return f"{r.instance_type} is listed in {', '.join(elsewhere)}; correct the region in GPUSCHED_RESERVED"
    types = sorted({o.instance_type for o in offers if o.provider == r.provider and o.region == r.region})
    if types:
        return f"instance types in {r.provider} {r.region}: {', '.join(types)}"
    return f"the catalog has no {r.provider} offers in {r.region}; known: {regions_of(offers, r.provider)}"
