"""The report agrees with itself, and reservations are amortized as the report says.

A table of small ledgers, each with figures worked out by hand: every breakdown, the daily bars and
the CSV add up to the headline (``report_checks.assert_agrees``), and the reservation figures are the
hand-computed ones. Rule under test (scheduler/accounting/reservations.py): an upfront fee is spread
evenly over the hours of its term, a monthly fee over the hours of its month.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from scheduler.accounting.reports import (
    UNUSED_RESERVATIONS,
    MonthlyReport,
    monthly_report,
    render_html,
    render_markdown,
    write_monthly_report,
)
from scheduler.accounting.reservations import day_fees, prepaid_hours
from scheduler.errors import SettingsError
from scheduler.models import ReservedCapacity
from scheduler.money import FxRates, Money
from scheduler.settings import load_settings
from scheduler.store.database import Store
from tests.accounting.report_checks import assert_agrees
from tests.accounting.test_reports import FX, Ledger, mixed_month, nov, report_for

UTC = timezone.utc
YEAR_2026 = (datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))  # 8,760 h


def reservation(**kw: object) -> ReservedCapacity:
    base: dict[str, object] = dict(provider="tencent", region="r1", instance_type="g5.xlarge", count=1,
                                   start=YEAR_2026[0], until=YEAR_2026[1])  # fmt: skip
    base.update(kw)
    return ReservedCapacity.model_validate(base)


def reserved_machine(ledger: Ledger, iid: str = "i-res", team: str = "ocr"):
    return ledger.instance(iid, provider="tencent", gpu="T4", team=team, capacity="reserved", price="0",
                           on_demand="8.68", currency="CNY")  # fmt: skip


def spot_machine(ledger: Ledger):
    return ledger.instance("i-spot", team="vision", price="0.5", on_demand="1.2", currency="USD")


@dataclass(frozen=True)
class Case:
    write: Callable[[Ledger], None]
    reserved: tuple[ReservedCapacity, ...] = ()
    now: datetime = datetime(2026, 12, 1, 6, tzinfo=UTC)
    currency: str = "CNY"
    want: dict[str, Decimal | None] = field(default_factory=dict)  # report attribute (dotted) -> amount


def busy_and_idle(ledger: Ledger) -> None:
    res = reserved_machine(ledger)
    ledger.cost(res, nov(20), nov(21), amount="0", on_demand="208.32", job_id="job-o", project="receipts")
    ledger.cost(res, nov(21), nov(21, 12), amount="0", on_demand="104.16", kind="idle")
    spot = spot_machine(ledger)
    ledger.cost(spot, nov(3), nov(3, 10), amount="5", on_demand="12", job_id="job-v", project="helmet")


def busy_36h_from_the_16th(ledger: Ledger) -> None:
    res = reserved_machine(ledger)
    ledger.cost(res, nov(16), nov(17, 12), amount="0", on_demand="312.48", job_id="job-o")


def two_machines_on_one_reservation(ledger: Ledger) -> None:
    for iid, team in (("i-r1", "ocr"), ("i-r2", "vision")):
        res = reserved_machine(ledger, iid, team)
        ledger.cost(res, nov(1), nov(3), amount="0", on_demand="416.64", job_id=f"job-{team}")


def ten_busy_hours(ledger: Ledger) -> None:
    res = reserved_machine(ledger)
    ledger.cost(res, nov(5), nov(5, 10), amount="0", on_demand="86.8", job_id="job-o")


def spot_on_the_3rd(ledger: Ledger) -> None:
    spot = ledger.instance("i-spot", team="vision", price="1", on_demand="3", currency="CNY")
    ledger.cost(spot, nov(3), nov(3, 10), amount="10", on_demand="30", job_id="job-v")


CASES = {
    "spot only, no reservation": Case(
        spot_on_the_3rd, want={"total": Decimal(10), "savings": Decimal(20), "reserved_fees": Decimal(0)}),
    "upfront fee, a day busy and half a day idle": Case(
        busy_and_idle, (reservation(upfront_fee=Money.parse("8760 CNY")),),
        want={"reserved_fees": Decimal(720), "reserved_unused": Decimal(696), "total": Decimal(720 + 36),
              "billed": Decimal(36), "on_demand_equivalent": Decimal("86.4"), "prepaid_idle_hours": Decimal(12),
              "reserved_on_demand_value": Decimal("208.32"), "reserved_prepaid_hours": Decimal(720)}),
    "monthly fee, term from the 16th": Case(
        busy_36h_from_the_16th,
        (reservation(monthly_fee=Money.parse("3000 CNY"), start=datetime(2026, 11, 16, tzinfo=UTC),
                     until=datetime(2027, 11, 16, tzinfo=UTC)),),
        want={"reserved_fees": Decimal(1500), "reserved_unused": Decimal(1350), "reserved_prepaid_hours": Decimal(360),
              "reserved_utilisation_pct": Decimal(10)}),
    "upfront and monthly (partial upfront)": Case(
        ten_busy_hours, (reservation(upfront_fee=Money.parse("8760 CNY"), monthly_fee=Money.parse("720 CNY")),),
        want={"reserved_fees": Decimal(1440), "reserved_unused": Decimal(1420)}),
    "two machines on one reservation that ends on the 2nd": Case(
        two_machines_on_one_reservation,
        (reservation(upfront_fee=Money.parse("768 CNY"), start=datetime(2026, 10, 1, tzinfo=UTC),
                     until=datetime(2026, 11, 2, tzinfo=UTC)),),
        want={"reserved_fees": Decimal(24), "reserved_unused": Decimal(0), "reserved_utilisation_pct": Decimal(400)}),
    "a fee in USD, the report in CNY": Case(
        ten_busy_hours, (reservation(monthly_fee=Money.parse("100 USD"), start=None),),
        want={"reserved_fees": Decimal(720), "reserved_unused": Decimal(710)}),
    "a reservation without a fee": Case(
        ten_busy_hours, (reservation(),),
        want={"reserved_fees": Decimal(0), "total": Decimal(0), "reserved_utilisation_pct": Decimal(10) / 720 * 100}),
    "the month half over": Case(
        spot_on_the_3rd, (reservation(upfront_fee=Money.parse("8760 CNY")),), now=nov(16),
        want={"reserved_fees": Decimal(360), "total": Decimal(370), "forecast.billed": Decimal(20),
              "forecast.reserved_fees": Decimal(720), "forecast.total": Decimal(740)}),
    "mixed month with a reservation": Case(
        mixed_month, (reservation(upfront_fee=Money.parse("8760 CNY")),),
        want={"reserved_fees": Decimal(720), "reserved_unused": Decimal(696)}),
    "mixed month, the report in USD (conversions that do not terminate)": Case(
        mixed_month, (reservation(upfront_fee=Money.parse("8760 CNY")),), currency="USD",
        want={"reserved_prepaid_hours": Decimal(720)}),
}  # fmt: skip


def _get(report: MonthlyReport, dotted: str) -> Decimal | None:
    value: object = report
    for part in dotted.split("."):
        value = getattr(value, part)
    return value.amount if isinstance(value, Money) else value  # type: ignore[return-value]


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_every_sum_equals_its_headline(session: Session, ledger: Ledger, case: Case) -> None:
    case.write(ledger)
    r = report_for(session, now=case.now, reserved=case.reserved, currency=case.currency)
    assert_agrees(r)
    for attr, want in case.want.items():
        assert _get(r, attr) == want, attr


def test_the_unused_part_is_a_row_of_its_own_in_every_table(session: Session, ledger: Ledger) -> None:
    busy_and_idle(ledger)
    r = report_for(session, reserved=(reservation(upfront_fee=Money.parse("8760 CNY")),))
    for rows in (r.by_team, r.by_project, r.by_cloud, r.by_gpu, r.by_capacity):
        [unused] = [b for b in rows if b.unused_reservation]
        assert unused.key == UNUSED_RESERVATIONS and unused.cost.amount == 696
    teams = {b.key: b for b in r.by_team}
    # ocr ran the reserved machine 24 h of 720 prepaid: a thirtieth of the month's 720 CNY.
    assert teams["ocr"].reserved_fee.amount == 24 and teams["ocr"].billed.amount == 0
    assert teams["vision"].reserved_fee.amount == 0 and teams["vision"].cost.amount == 36
    [use] = r.reservations
    assert (use.prepaid_hours, use.busy_hours, use.idle_hours) == (720, 24, 12)
    jobs = {j.id: j for j in r.jobs}
    assert jobs["job-o"].reserved_fee.amount == 24 and jobs["job-o"].cost.amount == 0  # its budget sees 0
    assert use.utilisation_pct == Decimal(24) / 720 * 100
    md, html = render_markdown(r), render_html(r)
    assert "| (unused reservations) | - | - | - | - | 696.00 CNY | 696.00 CNY |" in md
    assert "24.0 busy h of 720.0 prepaid h" in html and "12.0 prepaid idle h" in html


def test_days_to_come_are_blank_not_zero(session: Session, ledger: Ledger) -> None:
    spot_on_the_3rd(ledger)
    r = report_for(session, now=nov(16, 12))
    future = [d.day.day for d in r.by_day if d.future]
    assert future == list(range(17, 31))
    days = {d.day.day: d for d in r.by_day}
    assert days[4].cost == Money.zero("CNY")  # a past day with no spend is a zero
    [note] = [n for n in r.notes if "not over" in n]
    assert "2026-11-16 12:00" in note


def test_trend_converts_each_month_at_its_own_rate(session: Session, ledger: Ledger) -> None:
    spot = spot_machine(ledger)
    ledger.cost(spot, datetime(2026, 10, 5, tzinfo=UTC), datetime(2026, 10, 5, 10, tzinfo=UTC), amount="5",
                on_demand="12")  # fmt: skip
    ledger.cost(spot, nov(5), nov(5, 10), amount="5", on_demand="12")
    rates = {"2026-10": FxRates(base="CNY", rates={"USD": Decimal("7.0")}), "2026-11": FX}
    r = report_for(session, fx=rates["2026-11"], fx_for=lambda m: rates.get(m, FX), fx_dated=True)
    assert [(t.month, t.total.amount, t.complete) for t in r.trend] == [
        ("2026-10", Decimal(35), True), ("2026-11", Decimal(36), True)
    ]
    assert r.trend[0].fx == {"USD": Decimal("7.0")}
    assert "the rates set for 2026-11" in r.notes[0]


@pytest.mark.parametrize(
    ("res", "start", "end", "want_hours", "want_fee"),
    [
        pytest.param(reservation(upfront_fee=Money.parse("8760 CNY")), datetime(2026, 11, 1, tzinfo=UTC),
                     datetime(2026, 12, 1, tzinfo=UTC), Decimal(720), Decimal(720), id="a year upfront, November"),
        pytest.param(reservation(upfront_fee=Money.parse("8760 CNY"), count=3), datetime(2026, 2, 1, tzinfo=UTC),
                     datetime(2026, 3, 1, tzinfo=UTC), Decimal(3 * 672), Decimal(672), id="count 3, February"),
        pytest.param(reservation(monthly_fee=Money.parse("3100 CNY")), datetime(2026, 12, 1, tzinfo=UTC),
                     datetime(2026, 12, 11, 12, tzinfo=UTC), Decimal(252), Decimal(1050),
                     id="monthly, ten and a half days of December"),
        pytest.param(reservation(upfront_fee=Money.parse("8760 CNY")), datetime(2027, 1, 1, tzinfo=UTC),
                     datetime(2027, 2, 1, tzinfo=UTC), Decimal(0), Decimal(0), id="after the term"),
    ],
)  # fmt: skip
def test_amortization_rule(res: ReservedCapacity, start: datetime, end: datetime, want_hours: Decimal,
                           want_fee: Decimal) -> None:
    assert prepaid_hours(res, start, end) == want_hours
    days = day_fees(res, start, end)
    assert sum((m.amount for m in days.values()), Decimal(0)) == want_fee
    assert all(isinstance(d, date) and start.date() <= d <= end.date() for d in days)


@pytest.mark.parametrize(
    ("terms", "match"),
    [
        ({"upfront_fee": "100 CNY", "start": None}, "needs the term's start"),
        ({"start": "2027-02-01T00:00:00Z"}, "is not before until"),
        ({"upfront_fee": "100 CNY", "monthly_fee": "10 USD"}, "same currency"),
        ({"monthly_fee": "ten CNY"}, "not an amount with a currency"),
    ],
)
def test_bad_reservation_terms_say_what_is_wrong(terms: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        reservation(**terms)


def test_the_report_reads_reservation_terms_and_dated_rates_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSCHED_RESERVED", json.dumps([{
        "provider": "tencent", "region": "r1", "instance_type": "g5.xlarge", "count": 1,
        "start": "2026-01-01T08:00:00+08:00", "until": "2027-01-01T08:00:00+08:00", "upfront_fee": "1216.66 USD",
    }]))  # fmt: skip
    monkeypatch.setenv("GPUSCHED_FX_USD_CNY_BY_MONTH", '{"2026-11": "7.2", "2026-10": "7.0"}')
    monkeypatch.setenv("GPUSCHED_FX_USD_CNY", "9")
    settings = load_settings(_env_file=None, data_dir=tmp_path)
    store = Store(settings.db_url)
    store.migrate()
    with store.session() as s:
        ten_busy_hours(Ledger(s))
    paths = write_monthly_report(settings, "2026-11", now=datetime(2026, 12, 1, tzinfo=UTC), store=store)
    report = monthly_report(settings, "2026-11", now=datetime(2026, 12, 1, tzinfo=UTC), store=store)
    store.dispose()
    assert_agrees(report)
    # 1,216.66 USD over 8,760 h, 720 of them in November, at November's 7.2: 720.00 CNY within rounding.
    assert abs(report.reserved_fees.amount - Decimal("1216.66") * 720 / 8760 * Decimal("7.2")) < Decimal("1e-6")
    assert report.fx == {"USD": Decimal("7.2")} and report.fx_dated
    assert "the rates set for 2026-11" in paths["md"].read_text(encoding="utf-8")
    assert [t.month for t in report.trend] == ["2026-08", "2026-09", "2026-10", "2026-11"]
    assert report.trend[0].fx == {"USD": Decimal(9)} and report.trend[2].fx == {"USD": Decimal("7.0")}


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"GPUSCHED_FX_USD_CNY_BY_MONTH": '{"2026-13": "7.1"}'}, "GPUSCHED_FX_USD_CNY_BY_MONTH: .*2026-13"),
        ({"GPUSCHED_FX_USD_CNY_BY_MONTH": '{"2026-11": "-1"}'}, "must be above 0"),
        ({"GPUSCHED_RESERVED": '[{"provider": "aws", "region": "r", "instance_type": "t", "count": 1, '
                               '"until": "2027-01-01T00:00:00Z", "upfront_fee": "9 CNY"}]'},
         r"GPUSCHED_RESERVED\[0\]: an upfront_fee needs the term's start"),
    ],
)  # fmt: skip
def test_bad_report_settings_name_the_setting(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], match: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=match):
        load_settings(_env_file=None)
