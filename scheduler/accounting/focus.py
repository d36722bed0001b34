"""The month's ledger as a FinOps FOCUS 1.0 cost-and-usage file (the schema the big clouds export).

One row per priced piece of usage, plus the reservations' fees, so a FinOps tool that reads the clouds'
own FOCUS exports reads gpusched's beside them. The figures are the monthly report's, line for line
(``report_lines``): the three cost columns map onto its one definition of cost:

* ``BilledCost``: what the hour was billed (0 on a reserved machine: its fee is billed by the purchase);
* ``EffectiveCost``: the amortized view: billed + the hour's share of the reservation's fee; the unused
  part of a reservation is a usage row of its own (``CommitmentDiscountStatus`` Unused); purchase rows
  carry 0 here, as the spec asks, since their fee is spread over the usage rows. The column sums to
  the report's total;
* ``ListCost``: the hours at on-demand prices (reserved hours too: it is the price before any discount);
  ``ContractedCost``: at the price the hour was charged before a commitment (spot, on-demand, or the
  on-demand price for a reserved machine), since gpusched knows of no negotiated rates.

Reservation fees are ``Purchase`` rows in the billing period they are billed in: the upfront fee in
the month the term starts (``One-Time``), the monthly fee in each month of the term (``Recurring``).

Amounts are in the report currency, converted at the month's rates like the report (FOCUS 1.0 has one
currency column, ``BillingCurrency``). Teams are sub-accounts; team, project, job and GPU are tags.

focus-validator 1.0.0 still names five columns as the spec's drafts did (``Provider``, ``Publisher``,
``InvoiceIssuer``, ``ResourceID``, ``ChargeType``); they are written beside the 1.0 names
(``ProviderName`` ..., ``ChargeCategory``), with the same values, so the file passes that validator and
reads right in tools that follow the spec.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Union

from sqlalchemy.orm import Session

from scheduler.accounting.report_lines import RESERVED, CostLike, Line, PoolUse, convert, month_lines, priced_period
from scheduler.accounting.report_render import write_atomic
from scheduler.accounting.reservations import day_fees
from scheduler.models import ReservedCapacity
from scheduler.money import FxRates
from scheduler.times import utc

__all__ = ["FOCUS_COLUMNS", "FocusRow", "focus_rows", "render_focus_csv", "write_focus"]

FocusValue = Union[str, Decimal, datetime, None]
FocusRow = dict[str, FocusValue]

FOCUS_COLUMNS = (
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency",
    "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription",
    "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart", "CommitmentDiscountCategory",
    "CommitmentDiscountId", "CommitmentDiscountName", "CommitmentDiscountStatus", "CommitmentDiscountType",
    "ConsumedQuantity", "ConsumedUnit", "ContractedCost", "ContractedUnitPrice", "EffectiveCost",
    "InvoiceIssuerName", "ListCost", "ListUnitPrice", "PricingCategory", "PricingQuantity", "PricingUnit",
    "ProviderName", "PublisherName", "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType",
    "ServiceCategory", "ServiceName", "SkuId", "SkuPriceId", "SubAccountId", "SubAccountName", "Tags",
)  # fmt: skip

# focus-validator 1.0.0's names for four of the columns above (see the module docstring).
_VALIDATOR_ALIASES = {"Provider": "ProviderName", "Publisher": "PublisherName", "InvoiceIssuer": "InvoiceIssuerName",
                      "ResourceID": "ResourceId", "ChargeType": "ChargeCategory"}  # fmt: skip

# (provider name, service name) as each cloud names itself in its own bills.
_CLOUDS = {
    "aws": ("Amazon Web Services", "Amazon Elastic Compute Cloud"),
    "alibaba": ("Alibaba Cloud", "Elastic Compute Service"),
    "tencent": ("Tencent Cloud", "Cloud Virtual Machine"),
    "sandbox": ("gpusched sandbox", "Sandbox Compute"),
}
_PRICING_CATEGORY = {"spot": "Dynamic", "on-demand": "Standard", RESERVED: "Committed"}
_HOURS = "Hours"


def _cloud(provider: str) -> tuple[str, str]:
    return _CLOUDS.get(provider, (provider, f"{provider} compute"))


def _commitment_id(key: tuple[str, str, str]) -> str:
    return "reservation/" + "/".join(key)


def _base(account: str, start: datetime, end: datetime, currency: str) -> FocusRow:
    row: FocusRow = dict.fromkeys(FOCUS_COLUMNS)
    row.update(BillingAccountId=account, BillingAccountName=account, BillingCurrency=currency,
               BillingPeriodStart=start, BillingPeriodEnd=end, ServiceCategory="Compute")  # fmt: skip
    return row


def _where(row: FocusRow, provider: str, region: str) -> None:
    name, service = _cloud(provider)
    row.update(ProviderName=name, PublisherName=name, InvoiceIssuerName=name, ServiceName=service,
               RegionId=region, RegionName=region)  # fmt: skip


def _usage_row(line: Line, base: FocusRow) -> FocusRow:
    row = dict(base)
    _where(row, line.provider, line.region)
    use = "busy" if line.busy else "idle"
    hours = line.hours
    contracted = line.on_demand if line.reserved else line.cost
    tags = {"team": line.team, "gpu": line.gpu, "capacity": line.capacity, "usage": use}
    if line.project:
        tags["project"] = line.project
    if line.job_id:
        tags["job"] = line.job_id
    row.update(
        ChargeCategory="Usage", ChargeFrequency="Usage-Based",
        ChargeDescription=f"{line.instance_type} ({line.gpu}), {line.capacity}, {use}"
                          + (f", job {line.job_id}" if line.job_id else ""),
        ChargePeriodStart=line.start, ChargePeriodEnd=line.end,
        BilledCost=line.cost, EffectiveCost=line.cost + line.fee, ListCost=line.on_demand, ContractedCost=contracted,
        ListUnitPrice=line.on_demand / hours if hours else None,
        ContractedUnitPrice=contracted / hours if hours else None,
        PricingCategory=_PRICING_CATEGORY.get(line.capacity, "Other"), PricingQuantity=hours, PricingUnit=_HOURS,
        ConsumedQuantity=hours, ConsumedUnit=_HOURS,
        ResourceId=line.instance_id or None, ResourceName=line.instance_id or None, ResourceType="Virtual Machine",
        SkuId=line.instance_type, SkuPriceId=f"{line.provider}/{line.region}/{line.instance_type}/{line.capacity}",
        SubAccountId=line.team, SubAccountName=line.team, Tags=json.dumps(tags, sort_keys=True),
    )  # fmt: skip
    if line.reserved:
        _commitment(row, line.pool_key, "Used")
    return row


def _commitment(row: FocusRow, key: tuple[str, str, str], status: str | None) -> None:
    row.update(CommitmentDiscountId=_commitment_id(key), CommitmentDiscountName=" ".join(key),
               CommitmentDiscountCategory="Usage", CommitmentDiscountType="Reservation",
               CommitmentDiscountStatus=status)  # fmt: skip


def _unused_row(use: PoolUse, base: FocusRow, start: datetime, as_of: datetime) -> FocusRow:
    pool = use.pool
    row = dict(base)
    _where(row, pool.key[0], pool.key[1])
    unused_hours = max(pool.prepaid_hours - use.busy_hours, Decimal(0))
    row.update(
        ChargeCategory="Usage", ChargeFrequency="Usage-Based",
        ChargeDescription=f"unused part of reservation {pool.label} x{pool.count}",
        ChargePeriodStart=start, ChargePeriodEnd=as_of,
        BilledCost=Decimal(0), EffectiveCost=use.unused_fee, ListCost=Decimal(0), ContractedCost=Decimal(0),
        PricingCategory="Committed", PricingQuantity=unused_hours, PricingUnit=_HOURS,
        SkuId=pool.key[2], SkuPriceId="/".join((*pool.key, RESERVED)), Tags="{}",
    )  # fmt: skip
    _commitment(row, pool.key, "Unused")
    return row


def _purchase_rows(
    reserved: Sequence[ReservedCapacity], base: FocusRow, start: datetime, end: datetime, currency: str, fx: FxRates
) -> list[FocusRow]:
    rows = []
    for res in reserved:
        key = (res.provider, res.region, res.instance_type)
        label = f"reservation {' '.join(key)} x{res.count}"
        billed: list[tuple[str, str, Decimal, datetime, datetime]] = []
        if res.upfront_fee is not None and res.start is not None and start <= utc(res.start) < end:
            amount = convert(res.upfront_fee.amount, res.upfront_fee.currency, currency, fx)
            billed.append(("One-Time", f"upfront fee of {label}, for its whole term", amount, utc(res.start),
                           min(utc(res.until), end)))  # fmt: skip
        if res.monthly_fee is not None:
            monthly = res.model_copy(update={
                "upfront_fee": None,
                "monthly_fee": res.monthly_fee.model_copy(update={"amount": convert(
                    res.monthly_fee.amount, res.monthly_fee.currency, currency, fx)}),
            })  # fmt: skip
            days = day_fees(monthly, start, end)
            if days:
                lo = max(start, utc(res.start)) if res.start is not None else start
                billed.append(("Recurring", f"monthly fee of {label}",
                               sum((m.amount for m in days.values()), Decimal(0)), lo, min(utc(res.until), end)))
        for frequency, description, amount, lo, hi in billed:
            row = dict(base)
            _where(row, res.provider, res.region)
            row.update(
                ChargeCategory="Purchase", ChargeFrequency=frequency, ChargeDescription=description,
                ChargePeriodStart=lo, ChargePeriodEnd=hi,
                # The fee is spread over the usage rows (EffectiveCost), so the purchase itself carries none.
                BilledCost=amount, EffectiveCost=Decimal(0), ListCost=amount, ContractedCost=amount,
                PricingCategory="Committed", PricingQuantity=Decimal(res.count), PricingUnit="Reservations",
                SkuId=res.instance_type, SkuPriceId="/".join((*key, RESERVED)), Tags="{}",
            )  # fmt: skip
            _commitment(row, key, None)
            rows.append(row)
    return rows


def focus_rows(
    session: Session, month: str, *, start: datetime, end: datetime, as_of: datetime, currency: str, fx: FxRates,
    reserved: Sequence[ReservedCapacity] = (), open_costs: Sequence[CostLike] = (), account: str = "gpusched",
) -> list[FocusRow]:
    """The month's FOCUS rows: usage (busy and idle), reservations' unused parts, and their purchases."""
    raw, _opened = month_lines(session, month, start, end, currency, fx, open_costs)
    lines, uses = priced_period(raw, reserved, start, as_of, currency, fx)
    base = _base(account, start, end, currency)
    rows = [_usage_row(line, base) for line in lines]
    rows += [_unused_row(u, base, start, as_of) for u in uses if u.unused_fee]
    rows += _purchase_rows(reserved, base, start, end, currency, fx)
    return rows


def _cell(value: FocusValue) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return utc(value).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, Decimal):
        return format(value.normalize() if value else Decimal(0), "f")
    return value


def render_focus_csv(rows: Sequence[FocusRow]) -> str:
    """The rows as CSV: empty cells are nulls, dates in UTC ISO 8601, amounts as plain decimals."""
    header = (*FOCUS_COLUMNS, *_VALIDATOR_ALIASES)
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(header)
    for row in rows:
        out.writerow([_cell(row[_VALIDATOR_ALIASES.get(col, col)]) for col in header])
    return buf.getvalue()


def write_focus(rows: Sequence[FocusRow], month: str, out_dir: Path) -> Path:
    """Write focus-<month>.csv into ``out_dir``; returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"focus-{month}.csv"
    write_atomic(path, render_focus_csv(rows))
    return path
