"""Matching the clouds' bills to the ledger (``scheduler/accounting/reconcile_bills.reconcile``), table-driven.

Each case is a small ledger, one cloud's bill lines, what the store knows, and what the reconciliation
must say: the totals in the cloud's currency, the difference and whether it is within tolerance, and
which instances are unknown (with their kind) or missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from providers.base import TAG_INSTANCE, TAG_MANAGED, AuthFailed
from providers.bills import BillLine
from scheduler.accounting.reconcile_bills import KnownInstances, LedgerInstance, reconcile
from scheduler.errors import GpuschedError
from scheduler.money import FxRates, Money

MONTH = "2026-11"
AS_OF = datetime(2026, 12, 1, 6, tzinfo=UTC)
FX = FxRates(base="CNY", rates={"USD": Decimal("7.1")})
CLUSTER = "prod"


def cny(x: str) -> Money:
    return Money(amount=Decimal(x), currency="CNY")


def usd(x: str) -> Money:
    return Money(amount=Decimal(x), currency="USD")


def led(instance: str, amount: Money, cloud_id: str | None = None, cloud: str = "alibaba",
        team: str = "vision") -> LedgerInstance:
    return LedgerInstance(instance=instance, cloud=cloud, cloud_id=cloud_id, team=team, amount=amount)


def bill(amount: Money, instance_id: str | None = None, cloud: str = "alibaba", **tags: str) -> BillLine:
    names = {"instance": TAG_INSTANCE, "cluster": TAG_MANAGED}
    return BillLine(cloud=cloud, month=MONTH, instance_id=instance_id,
                    tags={names.get(k, k): v for k, v in tags.items()}, amount=amount)


@dataclass
class Case:
    name: str
    ledger: list[LedgerInstance]
    lines: list[BillLine]
    ledger_total: str
    billed: str
    difference: str
    pct: str | None  # rounded to 2 places, or None
    within: bool
    unknown: dict[str, str] = field(default_factory=dict)  # key -> kind
    missing: list[str] = field(default_factory=list)
    others: str = "0"
    known: KnownInstances = field(default_factory=KnownInstances)
    cloud: str = "alibaba"


CASES = [
    Case("the same to the cent",
         [led("gi-1", cny("100.00"), "i-1"), led("gi-2", cny("50"), "i-2")],
         [bill(cny("100.00"), "i-1"), bill(cny("50"), "i-2")],
         "150", "150", "0", "0.00", True),
    Case("rounding by the hour: a small difference within 1%",
         [led("gi-1", cny("14.2989"), "i-1")],
         [bill(cny("14.30"), "i-1")],
         "14.2989", "14.30", "0.0011", "0.01", True),
    Case("over the tolerance",
         [led("gi-1", cny("100"), "i-1")],
         [bill(cny("102"), "i-1")],
         "100", "102", "2", "2.00", False),
    Case("a bill under the ledger is a negative difference",
         [led("gi-1", cny("100"), "i-1")],
         [bill(cny("99.5"), "i-1")],
         "100", "99.5", "-0.5", "-0.50", True),
    Case("an untagged stranger is not gpusched's and does not count against the ledger",
         [led("gi-1", cny("100"), "i-1")],
         [bill(cny("100"), "i-1"), bill(cny("30"), "i-stranger", owner="data-team")],
         "100", "100", "0", "0.00", True, unknown={"i-stranger": "not-gpusched"}, others="30"),
    Case("this cluster's tag on an instance the store never had is a leak",
         [led("gi-1", cny("10"), "i-1")],
         [bill(cny("10"), "i-1"), bill(cny("7"), "i-lost", instance="gi-lost", cluster=CLUSTER)],
         "10", "10", "0", "0.00", True, unknown={"i-lost": "leak"}, others="7"),
    Case("another cluster's tag",
         [led("gi-1", cny("10"), "i-1")],
         [bill(cny("10"), "i-1"), bill(cny("7"), "i-theirs", instance="gi-x", cluster="staging")],
         "10", "10", "0", "0.00", True, unknown={"i-theirs": "other-cluster"}, others="7"),
    Case("an instance the store has but whose time the ledger never counted is a leak",
         [led("gi-1", cny("10"), "i-1")],
         [bill(cny("10"), "i-1"), bill(cny("4"), "i-9")],
         "10", "10", "0", "0.00", True, unknown={"i-9": "leak"}, others="4",
         known=KnownInstances(by_cloud_id={"i-9": "gi-9"}, ids=frozenset({"gi-9"}))),
    Case("a ledger instance the bill lacks is missing",
         [led("gi-1", cny("10"), "i-1"), led("gi-2", cny("5"), "i-2")],
         [bill(cny("10"), "i-1")],
         "15", "10", "-5", "-33.33", False, missing=["gi-2"]),
    Case("a reserved machine's free hours and a bill that charges nothing for them match",
         [led("gi-r", cny("0"), "i-r")],
         [bill(cny("0"), "i-r")],
         "0", "0", "0", None, True),
    Case("a free ledger line absent from the bill is not missing",
         [led("gi-r", cny("0"), "i-r")],
         [],
         "0", "0", "0", None, True),
    Case("AWS: matched by the gpusched:instance tag, the untagged remainder is someone else's",
         [led("gi-1", usd("1.25"), "i-0abc", cloud="aws"), led("gi-2", usd("2"), "i-0def", cloud="aws")],
         [bill(usd("1.2500000001"), None, "aws", instance="gi-1", cluster=CLUSTER),
          bill(usd("2"), None, "aws", instance="gi-2", cluster=CLUSTER), bill(usd("9.99"), None, "aws")],
         "3.25", "3.2500000001", "0.0000000001", "0.00", True, unknown={"(untagged)": "not-gpusched"},
         others="9.99", cloud="aws"),
    Case("a ledger in CNY against a USD bill converts at the month's rate",
         [led("gi-1", cny("71"), "ins-1", cloud="tencent")],
         [bill(usd("10.05"), "ins-1", "tencent")],
         "10", "10.05", "0.05", "0.50", True, cloud="tencent"),
    Case("two bill lines of one instance add up",
         [led("gi-1", cny("20"), "i-1")],
         [bill(cny("12"), "i-1"), bill(cny("8"), None, instance="gi-1")],
         "20", "20", "0", "0.00", True),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reconcile(case: Case) -> None:
    rec = reconcile(MONTH, case.ledger, {case.cloud: case.lines}, cluster=CLUSTER, currency="CNY", fx=FX,
                    as_of=AS_OF, known={case.cloud: case.known})
    [c] = rec.clouds
    assert c.read and c.cloud == case.cloud
    assert c.ledger is not None and c.billed is not None and c.difference is not None and c.others is not None
    assert c.ledger.amount == Decimal(case.ledger_total)
    assert c.billed.amount == Decimal(case.billed)
    assert c.difference.amount == Decimal(case.difference)
    assert (None if c.difference_pct is None else f"{c.difference_pct:.2f}") == case.pct
    assert c.within_tolerance is case.within
    assert {u.key: u.kind for u in c.unknown} == case.unknown
    assert [m.instance for m in c.missing] == case.missing
    assert c.others.amount == Decimal(case.others)
    assert c.status == ("ok" if case.within and not case.unknown and not case.missing else "check")
    # Report-currency figures are the same amounts at the month's rate.
    assert c.ledger_report == FX.convert(c.ledger, "CNY")
    assert c.others_report == FX.convert(c.others, "CNY")


def test_an_unread_bill_keeps_its_error_and_the_other_clouds_still_reconcile() -> None:
    refused = AuthFailed("Tencent Cloud DescribeBillDetail refused the credentials", provider="tencent",
                         code="AuthFailure.SignatureFailure", fix="check GPUSCHED_TENCENT_SECRET_KEY")
    bills: dict[str, list[BillLine] | GpuschedError] = {"tencent": refused, "alibaba": [bill(cny("10"), "i-1")]}
    rec = reconcile(MONTH, [led("gi-1", cny("10"), "i-1")], bills, cluster=CLUSTER, currency="CNY", fx=FX,
                    as_of=AS_OF)
    by_cloud = {c.cloud: c for c in rec.clouds}
    assert by_cloud["tencent"].status == "unread"
    assert "AuthFailure.SignatureFailure" in (by_cloud["tencent"].error or "")
    assert "GPUSCHED_TENCENT_SECRET_KEY" in (by_cloud["tencent"].error or "")
    assert by_cloud["alibaba"].status == "ok"
    assert not rec.ok


def test_unknown_instances_are_listed_biggest_first_with_the_why() -> None:
    lines = [bill(cny("1"), "i-small"), bill(cny("50"), "i-big"), bill(cny("5"), "i-mid", cluster=CLUSTER)]
    [c] = reconcile(MONTH, [], {"alibaba": lines}, cluster=CLUSTER, currency="CNY", fx=FX, as_of=AS_OF).clouds
    assert [u.key for u in c.unknown] == ["i-big", "i-mid", "i-small"]
    assert "someone else's" in c.unknown[0].why
    assert "lost" in c.unknown[1].why
    assert c.ledger is not None and c.ledger.amount == 0 and c.difference_pct is None
