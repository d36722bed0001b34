"""The FOCUS export: the report's figures row for row, in the spec's columns (focus-validator: tests/focus)."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone
from decimal import Decimal

from sqlalchemy.orm import Session

from scheduler.accounting.focus import FOCUS_COLUMNS, FocusRow, focus_rows, render_focus_csv
from scheduler.accounting.reports import month_bounds
from scheduler.models import ReservedCapacity
from scheduler.money import Money
from tests.accounting.test_reports import FX, Ledger, mixed_month, nov, report_for

UTC = timezone.utc
# The mixed month's reserved machine (tencent r1 g5.xlarge), a year bought on November 1st.
YEAR = ReservedCapacity(provider="tencent", region="r1", instance_type="g5.xlarge", count=1, start=nov(1),
                        until=datetime(2027, 11, 1, tzinfo=UTC),
                        upfront_fee=Money(amount=Decimal(8760), currency="CNY"))


def rows_for(session: Session, reserved: tuple[ReservedCapacity, ...] = (YEAR,)) -> list[FocusRow]:
    start, end = month_bounds("2026-11")
    return focus_rows(session, "2026-11", start=start, end=end, as_of=end, currency="CNY", fx=FX,
                      reserved=reserved, account="gpusched-test")  # fmt: skip


def total(rows: list[FocusRow], column: str, **where: str | None) -> Decimal:
    picked = [r for r in rows if all(r[k] == v for k, v in where.items())]
    return sum((r[column] for r in picked), Decimal(0))  # type: ignore[misc]


def test_effective_cost_is_the_reports_amortized_total(session: Session, ledger: Ledger) -> None:
    mixed_month(ledger)
    report = report_for(session, reserved=[YEAR])
    rows = rows_for(session)
    assert report.reserved_fees.amount == Decimal(8760) * 30 / 365  # November's share of the year
    assert total(rows, "EffectiveCost") == report.total.amount
    assert total(rows, "BilledCost", ChargeCategory="Usage") == report.billed.amount
    billed_list = total(rows, "ListCost", ChargeCategory="Usage", PricingCategory="Dynamic") \
        + total(rows, "ListCost", ChargeCategory="Usage", PricingCategory="Standard")
    assert billed_list == report.on_demand_equivalent.amount
    assert total(rows, "EffectiveCost", CommitmentDiscountStatus="Unused") == report.reserved_unused.amount
    assert total(rows, "EffectiveCost", CommitmentDiscountStatus="Used") == report.reserved_fees.amount \
        - report.reserved_unused.amount


def test_the_upfront_fee_is_a_one_time_purchase_in_the_month_the_term_starts(session: Session, ledger: Ledger) -> None:
    mixed_month(ledger)
    [purchase] = [r for r in rows_for(session) if r["ChargeCategory"] == "Purchase"]
    assert purchase["ChargeFrequency"] == "One-Time" and purchase["BilledCost"] == Decimal(8760)
    assert purchase["EffectiveCost"] == 0  # spread over the usage rows instead
    assert purchase["CommitmentDiscountId"] == "reservation/tencent/r1/g5.xlarge"
    later = YEAR.model_copy(update={"start": datetime(2026, 10, 1, tzinfo=UTC)})  # bought in October
    assert not [r for r in rows_for(session, (later,)) if r["ChargeCategory"] == "Purchase"]


def test_a_monthly_fee_is_a_recurring_purchase_prorated_to_the_term(session: Session, ledger: Ledger) -> None:
    mixed_month(ledger)
    monthly = ReservedCapacity(provider="aws", region="r1", instance_type="p4d", count=2, start=nov(16),
                               until=datetime(2027, 5, 16, tzinfo=UTC),
                               monthly_fee=Money(amount=Decimal(300), currency="USD"))  # fmt: skip
    [purchase] = [r for r in rows_for(session, (monthly,)) if r["ChargeCategory"] == "Purchase"]
    assert purchase["ChargeFrequency"] == "Recurring"
    assert purchase["BilledCost"] == Decimal(300) * Decimal("7.2") * 15 / 30  # from the 16th: half of November
    assert purchase["ChargePeriodStart"] == nov(16)


def test_usage_rows_say_who_ran_what_where(session: Session, ledger: Ledger) -> None:
    mixed_month(ledger)
    rows = [r for r in rows_for(session) if r["ChargeCategory"] == "Usage" and r["ResourceId"]]
    aws = next(r for r in rows if r["ResourceId"] == "i-aws" and r["Tags"] and "job-v" in str(r["Tags"]))
    assert (aws["ProviderName"], aws["ServiceName"], aws["SubAccountId"], aws["PricingCategory"]) == (
        "Amazon Web Services", "Amazon Elastic Compute Cloud", "vision", "Dynamic")
    assert json.loads(str(aws["Tags"])) == {"team": "vision", "project": "helmet", "job": "job-v", "gpu": "A10G",
                                            "capacity": "spot", "usage": "busy"}  # fmt: skip
    assert aws["PricingQuantity"] == Decimal("10.5") and aws["BilledCost"] == Decimal("5.11455") * Decimal("7.2")
    reserved = next(r for r in rows if r["ResourceId"] == "i-res")
    assert reserved["BilledCost"] == 0 and reserved["ListCost"] == Decimal("208.32")
    assert reserved["CommitmentDiscountStatus"] == "Used" and reserved["EffectiveCost"] > 0


def test_csv_has_every_column_nulls_empty_and_plain_numbers(session: Session, ledger: Ledger) -> None:
    mixed_month(ledger)
    text = render_focus_csv(rows_for(session))
    table = list(csv.DictReader(io.StringIO(text)))
    assert set(FOCUS_COLUMNS) <= set(table[0])
    assert all(r["ChargeClass"] == "" for r in table)  # null: no corrections
    for r in table:
        for col in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost"):
            Decimal(r[col])  # parses
            assert "E" not in r[col]
        assert r["BillingPeriodStart"] == "2026-11-01T00:00:00Z" and r["ChargePeriodEnd"].endswith("Z")
        assert r["Provider"] == r["ProviderName"] and r["ResourceID"] == r["ResourceId"]


def test_an_empty_month_has_no_rows(session: Session) -> None:
    assert rows_for(session, ()) == []
    assert render_focus_csv([]).splitlines()[0].startswith("AvailabilityZone,BilledCost")


def test_report_time_before_month_end_prices_up_to_then(session: Session, ledger: Ledger) -> None:
    mixed_month(ledger)
    start, end = month_bounds("2026-11")
    rows = focus_rows(session, "2026-11", start=start, end=end, as_of=nov(16), currency="CNY", fx=FX,
                      reserved=(YEAR,))  # fmt: skip
    assert total(rows, "EffectiveCost") == report_for(session, reserved=[YEAR], now=nov(16)).total.amount
