"""The monthly cost report: exact aggregation, the idle-avoided estimate, and the three renderings."""

from __future__ import annotations

import base64
import csv
import io
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from scheduler.accounting.reports import (
    CSV_COLUMNS,
    NO_PROJECT,
    MonthlyReport,
    build_report,
    month_bounds,
    previous_month,
    render_charts,
    render_csv,
    render_html,
    render_markdown,
    write_report,
)
from scheduler.errors import UserError
from scheduler.money import FxRates, Money
from scheduler.store.tables import CostRecordRow, IdleStopRow, InstanceRow, JobRow, UsageIntervalRow

UTC = timezone.utc
FX = FxRates(base="CNY", rates={"USD": Decimal("7.2")})
AFTER_NOVEMBER = datetime(2026, 12, 1, 6, tzinfo=UTC)


def nov(day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC)


def dec(day: int, hour: int = 0) -> datetime:
    return datetime(2026, 12, day, hour, tzinfo=UTC)


def hours_between(start: datetime, end: datetime) -> Decimal:
    return Decimal(int((end - start).total_seconds())) / Decimal(3600)


@dataclass(frozen=True)
class Cost:
    """A cost line as the test wrote it, to compute expectations from."""

    amount: Decimal
    on_demand: Decimal
    currency: str
    capacity: str = "spot"


class Ledger:
    """Writes the rows the ledger and the idle reaper would write, straight into the tables."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.written: list[Cost] = []

    def instance(
        self, iid: str, *, provider: str = "aws", gpu: str = "A10G", capacity: str = "spot", team: str = "vision",
        price: str = "0.5", on_demand: str = "1.212", currency: str = "USD",
    ) -> InstanceRow:  # fmt: skip
        row = InstanceRow(
            id=iid, provider=provider, region="r1", zone="r1a", instance_type="g5.xlarge", gpu=gpu, gpu_count=1,
            capacity=capacity, reserved=capacity == "reserved", client_token=f"tok-{iid}", state="running",
            team=team, price_amount=Decimal(price), price_currency=currency, on_demand_amount=Decimal(on_demand),
            created_at=nov(1),
        )  # fmt: skip
        self.session.add(row)
        self.session.flush()
        return row

    def cost(
        self, inst: InstanceRow, start: datetime, end: datetime, *, amount: str, on_demand: str,
        kind: str = "busy", job_id: str | None = None, team: str | None = None, project: str | None = None,
    ) -> CostRecordRow:  # fmt: skip
        interval = UsageIntervalRow(
            instance_id=inst.id, job_id=job_id, team=team or inst.team, project=project, kind=kind,
            provider=inst.provider, region=inst.region, gpu=inst.gpu, instance_type=inst.instance_type,
            capacity=inst.capacity, start=start, end=end, accounted=True,
        )  # fmt: skip
        self.session.add(interval)
        self.session.flush()
        row = CostRecordRow(
            usage_interval_id=interval.id, month=start.strftime("%Y-%m"), instance_id=inst.id, job_id=job_id,
            team=team or inst.team, project=project, kind=kind, provider=inst.provider, region=inst.region,
            gpu=inst.gpu, instance_type=inst.instance_type, capacity=inst.capacity, start=start, end=end,
            hours=hours_between(start, end), amount=Decimal(amount), on_demand_amount=Decimal(on_demand),
            currency=inst.price_currency,
        )  # fmt: skip
        self.session.add(row)
        self.session.flush()
        self.written.append(Cost(Decimal(amount), Decimal(on_demand), inst.price_currency, inst.capacity))
        return row

    def interval(self, inst: InstanceRow, start: datetime, end: datetime | None = None) -> None:
        self.session.add(
            UsageIntervalRow(
                instance_id=inst.id, team=inst.team, kind="busy", provider=inst.provider, region=inst.region,
                gpu=inst.gpu, instance_type=inst.instance_type, capacity=inst.capacity, start=start, end=end,
            )  # fmt: skip
        )
        self.session.flush()

    def idle_stop(self, inst: InstanceRow, at: datetime) -> None:
        self.session.add(
            IdleStopRow(
                instance_id=inst.id, at=at, action="stopped", team=inst.team, provider=inst.provider, gpu=inst.gpu,
                capacity=inst.capacity, price_amount=inst.price_amount, price_currency=inst.price_currency,
            )  # fmt: skip
        )
        self.session.flush()

    def job(self, jid: str, *, team: str, budget: str | None = None, preemptions: int = 0) -> None:
        money = Money.parse(budget) if budget else None
        self.session.add(
            JobRow(
                id=jid, name=f"{jid}-name", team=team, project="helmet", kind="train", model="yolov9-s", spec_json={},
                state="succeeded", submitted_at=nov(1), budget_amount=money.amount if money else None,
                budget_currency=money.currency if money else None, preemptions=preemptions, updated_at=nov(1),
            )  # fmt: skip
        )
        self.session.flush()


def expected_in_cny(costs: list[Cost], attr: str) -> Decimal:
    rate = {"CNY": Decimal(1), "USD": Decimal("7.2")}
    return sum((getattr(c, attr) * rate[c.currency] for c in costs), Decimal(0))


def mixed_month(ledger: Ledger) -> None:
    """Two teams, two clouds, spot / on-demand / reserved, USD and CNY, busy and idle, one job per team."""
    aws = ledger.instance("i-aws", team="vision", capacity="spot", price="0.4871", on_demand="1.212")
    ali = ledger.instance("i-ali", provider="alibaba", gpu="A10", team="ocr", capacity="on-demand",
                          price="11.98", on_demand="11.98", currency="CNY")  # fmt: skip
    res = ledger.instance("i-res", provider="tencent", gpu="T4", team="ocr", capacity="reserved",
                          price="0", on_demand="8.68", currency="CNY")  # fmt: skip
    ledger.job("job-v", team="vision", budget="20 USD", preemptions=2)
    ledger.job("job-o", team="ocr", budget="900 CNY")
    ledger.cost(aws, nov(3, 8), nov(3, 18, 30), amount="5.11455", on_demand="12.726", job_id="job-v", project="helmet")
    ledger.cost(aws, nov(3, 18, 30), nov(3, 18, 45), amount="0.121775", on_demand="0.303", kind="idle")
    ledger.cost(ali, nov(10, 22), nov(11, 4), amount="71.88", on_demand="71.88", job_id="job-o", project="receipts")
    ledger.cost(ali, nov(11, 4), nov(11, 4, 6), amount="1.198", on_demand="1.198", kind="idle")
    ledger.cost(res, nov(20), nov(21), amount="0", on_demand="208.32", job_id="job-o", project="receipts")


def report_for(session: Session, month: str = "2026-11", **kw: object) -> MonthlyReport:
    kw.setdefault("currency", "CNY")
    kw.setdefault("fx", FX)
    kw.setdefault("now", AFTER_NOVEMBER)
    return build_report(session, month, **kw)  # type: ignore[arg-type]


# --- months ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("month", "start", "end"),
    [
        ("2026-11", datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)),
        ("2026-12", datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
        ("2028-02", datetime(2028, 2, 1, tzinfo=UTC), datetime(2028, 3, 1, tzinfo=UTC)),
    ],
)
def test_month_is_a_utc_calendar_month(month: str, start: datetime, end: datetime) -> None:
    assert month_bounds(month) == (start, end)


@pytest.mark.parametrize("bad", ["2026-13", "2026-00", "2026-1", "26-11", "2026/11", "2026-11-01", "", "november"])
def test_malformed_month_is_a_user_error(session: Session, bad: str) -> None:
    with pytest.raises(UserError, match="month must look like 2026-11"):
        report_for(session, bad)


@pytest.mark.parametrize(
    ("now", "month"),
    [(datetime(2026, 12, 1, 6, tzinfo=UTC), "2026-11"), (datetime(2027, 1, 1, tzinfo=UTC), "2026-12"),
     (datetime(2026, 11, 30, 23, tzinfo=timezone(timedelta(hours=-3))), "2026-11")],
)  # fmt: skip
def test_previous_month_is_the_last_complete_utc_month(now: datetime, month: str) -> None:
    assert previous_month(now) == month


# --- aggregation -------------------------------------------------------------


def test_totals_are_the_exact_sum_of_rows_converted_at_the_given_rate(session: Session, ledger: Ledger) -> None:
    mixed_month(ledger)
    r = report_for(session)
    assert r.total == Money(amount=expected_in_cny(ledger.written, "amount"), currency="CNY")
    paid = [c for c in ledger.written if c.capacity != "reserved"]  # prepaid hours are not "saved"
    assert len(paid) < len(ledger.written)
    assert r.on_demand_equivalent.amount == expected_in_cny(paid, "on_demand")
    assert r.records == len(ledger.written)
    assert r.fx == {"USD": Decimal("7.2")}


def test_report_in_usd_converts_cny_rows(session: Session, ledger: Ledger) -> None:
    mixed_month(ledger)
    fx = FxRates(base="CNY", rates={"USD": Decimal("7.1234")})
    r = report_for(session, currency="USD", fx=fx)
    converted = [fx.convert(Money(amount=c.amount, currency=c.currency), "USD") for c in ledger.written]
    want = sum((m.amount for m in converted), Decimal(0))
    # 1/7.1234 does not terminate: each converted line is rounded to the report's 12 places, once.
    assert r.total.currency == "USD" and abs(r.total.amount - want) <= Decimal("0.5e-12") * len(converted)
    assert r.fx == {"CNY": fx.rate("CNY", "USD")}
    assert "1 CNY = 0.140382 USD" in r.notes[0]


def test_savings_count_billed_hours_and_reserved_hours_are_shown_apart(session: Session, ledger: Ledger) -> None:
    mixed_month(ledger)
    r = report_for(session)
    assert r.savings == r.on_demand_equivalent - r.billed
    assert r.billed == r.total  # no reservation fee configured: the reservation counts as free, and a note says so
    assert r.savings_pct == r.savings.amount / r.on_demand_equivalent.amount * 100
    reserved = next(b for b in r.by_capacity if b.key == "reserved")
    # Prepaid hours are in neither side of the savings; their on-demand value is shown apart.
    assert reserved.cost.amount == 0 and reserved.on_demand_equivalent.amount == 0 and reserved.savings.amount == 0
    assert r.reserved_on_demand_value.amount == Decimal("208.32")
    [res] = r.reservations
    assert res.configured is False and res.busy_hours == 24 and res.utilisation_pct is None
    assert any("no reservation in GPUSCHED_RESERVED covers" in n for n in r.notes)
    on_demand = next(b for b in r.by_capacity if b.key == "on-demand")
    assert on_demand.cost == on_demand.on_demand_equivalent


def test_busy_and_idle_hours_and_idle_cost(session: Session, ledger: Ledger) -> None:
    mixed_month(ledger)
    r = report_for(session)
    assert r.busy_hours == Decimal("10.5") + 6 + 24
    assert r.idle_hours == Decimal("0.25") + Decimal("0.1")
    assert r.idle_cost.amount == Decimal("0.121775") * Decimal("7.2") + Decimal("1.198")


@pytest.mark.parametrize("attr", ["by_team", "by_project", "by_cloud", "by_gpu", "by_capacity"])
def test_every_breakdown_adds_up_to_the_total(session: Session, ledger: Ledger, attr: str) -> None:
    mixed_month(ledger)
    r = report_for(session)
    rows = getattr(r, attr)
    assert sum((b.cost.amount for b in rows), Decimal(0)) == r.total.amount
    assert sum((b.hours for b in rows), Decimal(0)) == r.busy_hours + r.idle_hours
    assert abs(sum((b.share_pct for b in rows), Decimal(0)) - 100) < Decimal("1e-20")
    assert [b.cost.amount for b in rows] == sorted((b.cost.amount for b in rows), reverse=True)


@pytest.mark.parametrize(
    ("attr", "key", "amount"),
    [
        ("by_team", "vision", (Decimal("5.11455") + Decimal("0.121775")) * Decimal("7.2")),
        ("by_team", "ocr", Decimal("71.88") + Decimal("1.198")),
        ("by_cloud", "alibaba", Decimal("71.88") + Decimal("1.198")),
        ("by_cloud", "tencent", Decimal(0)),
        ("by_gpu", "A10G", (Decimal("5.11455") + Decimal("0.121775")) * Decimal("7.2")),
        ("by_project", "receipts", Decimal("71.88")),
        ("by_project", NO_PROJECT, Decimal("0.121775") * Decimal("7.2") + Decimal("1.198")),
    ],
)
def test_breakdown_rows(session: Session, ledger: Ledger, attr: str, key: str, amount: Decimal) -> None:
    mixed_month(ledger)
    rows = {b.key: b for b in getattr(report_for(session), attr)}
    assert rows[key].cost.amount == amount


def test_team_by_capacity_cells_add_up_to_team_totals(session: Session, ledger: Ledger) -> None:
    mixed_month(ledger)
    r = report_for(session)
    for team in r.by_team:
        cells = [c for c in r.team_by_capacity if c.team == team.key]
        assert sum((c.cost.amount for c in cells), Decimal(0)) == team.cost.amount
    assert {(c.team, c.capacity) for c in r.team_by_capacity} == {
        ("vision", "spot"), ("ocr", "on-demand"), ("ocr", "reserved")
    }


def test_daily_spend_splits_a_line_across_midnight_by_time(session: Session, ledger: Ledger) -> None:
    mixed_month(ledger)
    r = report_for(session)
    assert len(r.by_day) == 30 and r.by_day[0].day.isoformat() == "2026-11-01"
    days = {d.day.day: d for d in r.by_day}
    # alibaba 22:00 -> 04:00 for 71.88: 2 h on the 10th, 4 h on the 11th, plus the idle tail on the 11th.
    assert days[10].cost.amount == Decimal("71.88") * 2 / 6
    assert days[11].cost.amount == Decimal("71.88") - Decimal("71.88") * 2 / 6 + Decimal("1.198")
    assert days[11].idle_cost.amount == Decimal("1.198")
    assert days[12].cost.amount == 0
    assert sum((d.cost.amount for d in r.by_day), Decimal(0)) == r.total.amount


def test_rows_of_other_months_are_left_out(session: Session, ledger: Ledger) -> None:
    inst = ledger.instance("i-1", currency="CNY", price="10", on_demand="10")
    ledger.cost(inst, nov(30, 22), nov(30, 23), amount="10", on_demand="10")
    ledger.cost(inst, dec(1), dec(1, 1), amount="10", on_demand="10")
    ledger.cost(inst, datetime(2026, 10, 31, 23, tzinfo=UTC), nov(1), amount="10", on_demand="10")
    assert report_for(session).total.amount == 10
    assert report_for(session, "2026-12").total.amount == 10


def test_open_costs_are_added_and_clipped_to_the_month(session: Session, ledger: Ledger) -> None:
    inst = ledger.instance("i-1", currency="CNY", price="6", on_demand="12")
    ledger.cost(inst, nov(5), nov(5, 1), amount="6", on_demand="12")

    def still_running(start: datetime, end: datetime) -> CostRecordRow:
        # The ledger's open-interval view is never persisted; a transient row has the same attributes.
        h = hours_between(start, end)
        return CostRecordRow(
            month=start.strftime("%Y-%m"), instance_id="i-1", job_id=None, team="vision", project=None, kind="busy",
            provider="aws", region="r1", gpu="A10G", instance_type="g5.xlarge", capacity="spot", start=start,
            end=end, hours=h, amount=h * 6, on_demand_amount=h * 12, currency="CNY",
        )  # fmt: skip

    opened = [still_running(nov(30, 20), dec(1, 4))]  # 4 h in November, 4 in December
    r = report_for(session, now=dec(1, 4), open_costs=opened)
    assert r.total.amount == 6 + 4 * 6
    assert r.busy_hours == 1 + 4
    assert any("still-running" in n for n in r.notes)
    early = report_for(session, "2026-12", now=dec(1, 4), open_costs=opened)
    assert early.total.amount == 4 * 6
    assert any("not over" in n for n in early.notes)


def test_a_cost_in_an_unknown_currency_is_a_user_error(session: Session, ledger: Ledger) -> None:
    inst = ledger.instance("i-eur", currency="EUR")
    ledger.cost(inst, nov(2), nov(2, 1), amount="1", on_demand="2")
    with pytest.raises(UserError, match="EUR"):
        report_for(session)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"currency": "EUR"}, "report currency"), ({"idle_assumed_hours": Decimal(-1)}, "negative")],
)
def test_bad_report_arguments_are_user_errors(session: Session, kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(UserError, match=match):
        report_for(session, **kwargs)


# --- idle waste avoided ------------------------------------------------------


@pytest.mark.parametrize(
    ("stop_at", "next_start", "now", "want_hours"),
    [
        pytest.param(nov(10, 12), None, AFTER_NOVEMBER, Decimal(8), id="assumed hours"),
        pytest.param(nov(10, 12), nov(10, 15, 30), AFTER_NOVEMBER, Decimal("3.5"), id="capped by next start"),
        pytest.param(nov(10, 12), nov(10, 11), AFTER_NOVEMBER, Decimal(8), id="an earlier start does not cap"),
        pytest.param(nov(30, 22), None, AFTER_NOVEMBER, Decimal(2), id="capped by month end"),
        pytest.param(nov(30, 22), dec(1, 1), AFTER_NOVEMBER, Decimal(2), id="month end before next start"),
        pytest.param(nov(10, 12), None, nov(10, 13, 15), Decimal("1.25"), id="capped by report time"),
    ],
)  # fmt: skip
def test_idle_cost_avoided(
    session: Session, ledger: Ledger, stop_at: datetime, next_start: datetime | None, now: datetime, want_hours: Decimal
) -> None:
    inst = ledger.instance("i-idle", price="0.9", currency="USD")
    other = ledger.instance("i-other")
    ledger.interval(other, stop_at + timedelta(minutes=30))  # another machine starting must not cap this one
    if next_start is not None:
        ledger.interval(inst, next_start, next_start + timedelta(hours=1))
    ledger.idle_stop(inst, stop_at)
    r = report_for(session, now=now)
    assert r.idle_stops == 1
    assert r.idle_hours_avoided == want_hours
    assert r.idle_cost_avoided.amount == Decimal("0.9") * Decimal("7.2") * want_hours
    assert any("estimate" in n and "8 h" in n for n in r.notes)


def test_idle_stops_of_other_months_and_reserved_machines(session: Session, ledger: Ledger) -> None:
    spot = ledger.instance("i-spot", price="2", currency="CNY")
    reserved = ledger.instance("i-res", capacity="reserved", price="0", currency="CNY")
    ledger.idle_stop(spot, datetime(2026, 10, 31, 23, tzinfo=UTC))
    ledger.idle_stop(spot, nov(4))
    ledger.idle_stop(reserved, nov(4))
    r = report_for(session, idle_assumed_hours=Decimal(3))
    assert r.idle_stops == 2
    assert r.idle_hours_avoided == 6
    assert r.idle_cost_avoided.amount == 2 * 3  # stopping a prepaid machine saves nothing


# --- jobs and budgets --------------------------------------------------------


def test_jobs_carry_cost_to_date_and_budget_checks(session: Session, ledger: Ledger) -> None:
    mixed_month(ledger)
    aws = session.get(InstanceRow, "i-aws")
    assert aws is not None
    ledger.cost(aws, datetime(2026, 10, 30, tzinfo=UTC), datetime(2026, 10, 30, 10, tzinfo=UTC),
                amount="4.871", on_demand="12.12", job_id="job-v")  # fmt: skip
    r = report_for(session)
    jobs = {j.id: j for j in r.jobs}
    v, o = jobs["job-v"], jobs["job-o"]
    assert v.cost.amount == Decimal("5.11455") * Decimal("7.2")
    assert v.cost_to_date.amount == (Decimal("5.11455") + Decimal("4.871")) * Decimal("7.2")
    assert v.budget == Money(amount=Decimal("144.0"), currency="CNY")
    assert v.over_budget is False and v.preemptions == 2 and v.name == "job-v-name"
    assert o.cost.amount == Decimal("71.88") and o.hours == 30
    assert o.over_budget is False
    teams = {t.team: t for t in r.budget_vs_actual}
    assert teams["ocr"].budget.amount == 900 and teams["ocr"].actual.amount == Decimal("71.88")
    assert teams["ocr"].used_pct == Decimal("71.88") / 900 * 100


def test_a_job_past_its_budget_is_flagged(session: Session, ledger: Ledger) -> None:
    inst = ledger.instance("i-1", currency="CNY", price="10", on_demand="10")
    ledger.job("job-a", team="vision", budget="15 CNY")
    ledger.job("job-b", team="vision")
    ledger.cost(inst, nov(2), nov(2, 2), amount="20", on_demand="20", job_id="job-a")
    ledger.cost(inst, nov(3), nov(3, 1), amount="10", on_demand="10", job_id="job-b")
    r = report_for(session)
    assert {j.id: j.over_budget for j in r.jobs} == {"job-a": True, "job-b": False}
    [team] = r.budget_vs_actual
    assert (team.team, team.jobs, team.budget.amount, team.actual.amount) == ("vision", 1, 15, 20)
    assert team.over_budget is True


# --- rendering ---------------------------------------------------------------


@pytest.fixture
def mixed_report(session: Session, ledger: Ledger) -> MonthlyReport:
    mixed_month(ledger)
    inst = session.get(InstanceRow, "i-aws")
    assert inst is not None
    ledger.idle_stop(inst, nov(3, 18, 45))
    return report_for(session)


def test_html_is_self_contained_with_three_png_charts(mixed_report: MonthlyReport) -> None:
    html = render_html(mixed_report)
    uris = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(uris) == 3
    assert all(base64.b64decode(u).startswith(b"\x89PNG") for u in uris)
    assert "vision" in html and "ocr" in html
    assert str(mixed_report.total) in html
    assert "estimate, not a bill" in html
    assert "http://" not in html and "https://" not in html  # nothing to fetch: it must open offline, in a mail


def test_charts_have_names_and_none_for_an_empty_month(mixed_report: MonthlyReport, session: Session) -> None:
    assert set(render_charts(mixed_report)) == {"team_capacity", "daily", "clouds"}
    assert render_charts(report_for(session, "2026-01")) == {}


def test_html_escapes_names(session: Session, ledger: Ledger) -> None:
    inst = ledger.instance("i-1", currency="CNY")
    ledger.session.add(
        JobRow(id="j1", name="<b>bold</b>", team="vision", kind="train", model="yolov9-s", spec_json={},
               state="running", submitted_at=nov(1), updated_at=nov(1))  # fmt: skip
    )
    ledger.cost(inst, nov(2), nov(2, 1), amount="1", on_demand="1", job_id="j1")
    html = render_html(report_for(session))
    assert "<b>bold</b>" not in html and "&lt;b&gt;bold&lt;/b&gt;" in html


def test_csv_is_one_flat_table_whose_total_row_matches(mixed_report: MonthlyReport) -> None:
    rows = list(csv.DictReader(io.StringIO(render_csv(mixed_report))))
    assert tuple(rows[0].keys()) == CSV_COLUMNS
    [total] = [r for r in rows if r["section"] == "total"]
    assert Decimal(total["cost"]) == mixed_report.total.quantize().amount
    assert Decimal(total["on_demand_equivalent"]) == mixed_report.on_demand_equivalent.quantize().amount
    assert total["currency"] == "CNY"
    teams = [r for r in rows if r["section"] == "team"]
    assert {r["key"] for r in teams} == {"vision", "ocr"}
    # Each row is rounded to cents on its own, so the parts may differ from the total by half a cent each.
    assert abs(sum(Decimal(r["cost"]) for r in teams) - Decimal(total["cost"])) <= Decimal("0.005") * len(teams)
    assert {r["section"] for r in rows} >= {"project", "cloud", "gpu", "capacity", "day", "job", "idle_avoided"}
    assert len([r for r in rows if r["section"] == "day"]) == 30


def test_markdown_has_the_tables(mixed_report: MonthlyReport) -> None:
    md = render_markdown(mixed_report)
    for heading in ("## Summary", "## By team", "## By cloud", "## By capacity type", "## Budget vs actual", "## Jobs"):
        assert heading in md
    assert "| Team | hours | billed | on-demand equivalent | saved | reserved fee | cost | share |" in md
    assert re.search(r"^\| ocr \| 30\.1 \| ", md, re.MULTILINE)
    assert str(mixed_report.total) in md


def test_an_empty_month_renders(session: Session, tmp_path: Path) -> None:
    r = report_for(session, "2026-02")
    assert r.records == 0 and r.total == Money.zero("CNY") and r.savings_pct == 0
    assert len(r.by_day) == 28 and r.jobs == () and r.by_team == ()
    assert "No spend recorded" in render_html(r)
    assert "No spend recorded" in render_markdown(r)
    [total] = [row for row in csv.DictReader(io.StringIO(render_csv(r))) if row["section"] == "total"]
    assert total["cost"] == "0.00"
    paths = write_report(r, tmp_path / "out")
    assert {p.name for p in paths.values()} == {"report-2026-02.html", "report-2026-02.csv", "report-2026-02.md",
                                                "report-2026-02.xlsx"}


def test_write_report_writes_the_four_renderings(mixed_report: MonthlyReport, tmp_path: Path) -> None:
    paths = write_report(mixed_report, tmp_path / "reports")
    assert set(paths) == {"html", "csv", "md", "xlsx"}
    assert paths["csv"].read_text(encoding="utf-8") == render_csv(mixed_report)
    assert paths["md"].read_text(encoding="utf-8") == render_markdown(mixed_report)
    assert paths["html"].read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == sorted(p.name for p in paths.values())
