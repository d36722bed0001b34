"""The forecast to the month's end counts the work queued now, apart from the run rate.

Plans are the planner's own ``Decision`` objects, stored as the tick stores them (``model_dump(mode="json")``),
so the report reads the shape the planner really writes.
"""

from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlalchemy.orm import Session

from scheduler.accounting.queued_work import plan_estimate
from scheduler.accounting.report_render import render_csv, render_html, render_markdown
from scheduler.accounting.reports import MonthlyReport
from scheduler.models import Capacity
from scheduler.money import Money
from scheduler.planner.plan import Decision, Option
from scheduler.store.tables import JobRow
from tests.accounting.report_checks import assert_agrees
from tests.accounting.test_reports import Ledger, nov, report_for

UTC = timezone.utc
MID_NOVEMBER = nov(16)  # 15 days of 30 gone: 360 h left


def option(cost: str, hours: float) -> Option:
    return Option(provider="aws", region="r1", zone="r1a", instance_type="g5.xlarge", gpu="A10G", gpu_count=1,
                  capacity=Capacity.spot, source="new", instance_id=None, est_hours=hours,
                  price_per_hour=Money.parse("1 CNY"), est_cost=Money.parse(cost), finish_by=nov(20),
                  expected_interruptions=0.1, physical_batch=16, feasible=True, why="cheapest")  # fmt: skip


def plan(jid: str, choice: Option | None, *alternatives: Option, action: str = "wait") -> dict:
    return Decision(job_id=jid, action=action, choice=choice, alternatives=alternatives,
                    reason="waiting for a cheaper spot price").model_dump(mode="json")  # type: ignore[arg-type]


def job(session: Session, jid: str, state: str, plan_json: dict | None, team: str = "vision",
        project: str | None = None) -> None:
    session.add(JobRow(id=jid, name=f"{jid}-name", team=team, project=project, kind="train", model="yolov9-s",
                       spec_json={}, state=state, submitted_at=nov(15) + timedelta(minutes=len(jid)),
                       plan_json=plan_json, updated_at=nov(15)))  # fmt: skip
    session.flush()


@pytest.fixture
def report(session: Session, ledger: Ledger) -> MonthlyReport:
    inst = ledger.instance("i-1", price="2", on_demand="4", currency="CNY")
    ledger.cost(inst, nov(2), nov(2, 15), amount="30", on_demand="60")  # the run rate: 30 in 15 days
    job(session, "a", "queued", plan("a", option("100 CNY", 10), action="launch"), project="helmet")
    # No choice (it waits): the best alternative, 50 USD over 720 h; half of it fits in the 360 h left.
    job(session, "b", "queued", plan("b", None, option("50 USD", 720), option("1 CNY", 1)), team="ocr")
    job(session, "c", "queued", None)  # submitted, not planned yet
    job(session, "d", "planned", plan("d", option("20 CNY", 2), action="launch"), project="helmet")
    job(session, "e", "running", plan("e", option("999 CNY", 5), action="launch"))  # running: in the run rate
    job(session, "f", "succeeded", plan("f", option("999 CNY", 5), action="launch"))
    return report_for(session, now=MID_NOVEMBER, team_budgets={"vision": Money.parse("500 CNY")})


def test_queued_work_is_its_own_part_of_the_forecast(report: MonthlyReport) -> None:
    f = report.forecast
    assert f is not None
    assert f.billed.amount == 60  # the run rate alone: 30 so far, doubled
    assert [q.id for q in f.queued_jobs] == ["a", "b", "c", "d"]
    parts = {q.id: q.in_month.amount for q in f.queued_jobs}
    assert parts == {"a": 100, "b": Decimal("50") * Decimal("7.2") / 2, "c": 0, "d": 20}
    assert f.queued.amount == 100 + 180 + 20
    assert f.total.amount == 60 + 300
    assert f.unestimated == 1 and f.queued_jobs[2].estimate is None
    assert f.queued_jobs[1].estimate == Money(amount=Decimal(360), currency="CNY")
    assert any("1 of them not planned yet" in n for n in report.notes)
    assert_agrees(report)


def test_a_team_budget_forecast_adds_the_team_queued_work(report: MonthlyReport) -> None:
    [vision] = report.team_budgets
    assert vision.actual.amount == 30
    assert vision.forecast.amount == 60 + 100 + 20  # its run rate and its jobs a and d; b is ocr's


def test_a_finished_month_has_no_forecast_whatever_waits(session: Session, ledger: Ledger) -> None:
    inst = ledger.instance("i-1", price="2", on_demand="4", currency="CNY")
    ledger.cost(inst, nov(2), nov(2, 15), amount="30", on_demand="60")
    job(session, "a", "queued", plan("a", option("100 CNY", 10)))
    assert report_for(session, now=datetime(2026, 12, 1, 6, tzinfo=UTC)).forecast is None


def test_the_renderings_show_the_run_rate_and_the_queued_work_apart(report: MonthlyReport) -> None:
    md = render_markdown(report)
    assert "| 2026-11 (forecast) | 60.00 CNY | 0.00 CNY | 300.00 CNY | 360.00 CNY | - |" in md
    assert "## Work queued now" in md and "| c-name (c) | vision | - | not planned yet | - | 0.00 CNY |" in md
    assert "| b-name (b) | ocr | - | 360.00 CNY | 720.0 | 180.00 CNY |" in md
    html = render_html(report, phone_charts=False)
    assert "<h2>Work queued now</h2>" in html and "300.00 CNY for the 4 job(s) queued now" in html
    rows = list(csv.DictReader(io.StringIO(render_csv(report))))
    [forecast] = [r for r in rows if r["section"] == "forecast"]
    [queued] = [r for r in rows if r["section"] == "forecast_queued"]
    assert (forecast["billed"], forecast["cost"], queued["cost"], queued["units"]) == ("60.00", "360.00", "300.00",
                                                                                         "4.00")
    assert {r["key"]: r["cost"] for r in rows if r["section"] == "queued_job"} == {
        "a": "100.00", "b": "180.00", "c": "0.00", "d": "20.00"}


@pytest.mark.parametrize(
    "stored",
    [None, {}, {"choice": None, "alternatives": []}, {"choice": {"est_cost": {"amount": "x", "currency": "CNY"}}},
     {"choice": {"est_cost": {"amount": "-1", "currency": "CNY"}, "est_hours": 1}},
     {"choice": {"est_cost": {"amount": "5", "currency": "EUR"}, "est_hours": 1}}, ["not", "a", "plan"]],
)  # fmt: skip
def test_a_plan_without_a_usable_estimate_gives_none(stored: object) -> None:
    assert plan_estimate(stored) is None  # type: ignore[arg-type]
