"""Unit costs: per completed training run, per 1,000 images inferred, per GPU-hour by GPU model; in every rendering.

A small ledger with figures worked out by hand: two training runs completed in November (one began in
October on a reserved machine, at October's FX rate and October's reservation fee), one still running,
one failed, one finished in December; two inference jobs completed; a four-GPU machine.
"""

from __future__ import annotations

import csv
import io
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from openpyxl import load_workbook
from sqlalchemy.orm import Session

from scheduler.accounting.report_render import render_csv, render_html, render_markdown
from scheduler.accounting.report_xlsx import render_xlsx
from scheduler.accounting.reports import MonthlyReport
from scheduler.models import ReservedCapacity
from scheduler.money import FxRates, Money
from scheduler.store.tables import JobRow
from tests.accounting.report_checks import assert_agrees
from tests.accounting.test_reports import FX, Ledger, nov, report_for

UTC = timezone.utc
OCTOBER_FX = FxRates(base="CNY", rates={"USD": Decimal("7.0")})
# 744 CNY a month for one machine: 1 CNY an hour in October (744 h), 744/720 in November.
RESERVATION = ReservedCapacity(provider="tencent", region="r1", instance_type="g5.xlarge", count=1,
                               start=datetime(2026, 10, 1, tzinfo=UTC), until=datetime(2026, 12, 1, tzinfo=UTC),
                               monthly_fee="744 CNY")  # fmt: skip


def oct_(day: int, hour: int = 0) -> datetime:
    return datetime(2026, 10, day, hour, tzinfo=UTC)


def job(session: Session, jid: str, kind: str, state: str, finished: datetime | None, images: int = 0) -> None:
    spec = {"infer": {"images": images}} if kind == "infer" else {}
    session.add(JobRow(id=jid, name=jid, team="vision", kind=kind, model="yolov9-s", spec_json=spec, state=state,
                       submitted_at=oct_(1), finished_at=finished, updated_at=oct_(1)))  # fmt: skip
    session.flush()


def fx_for(month: str) -> FxRates:
    return OCTOBER_FX if month == "2026-10" else FX


@pytest.fixture
def report(session: Session, ledger: Ledger) -> MonthlyReport:
    a10g = ledger.instance("i-a10g", price="10", on_demand="20", currency="CNY")
    a100 = ledger.instance("i-a100", gpu="A100", price="5", on_demand="12", currency="USD", capacity="on-demand")
    a100.gpu_count = 4
    res = ledger.instance("i-res", provider="tencent", gpu="T4", capacity="reserved", price="0", on_demand="8",
                          currency="CNY")  # fmt: skip
    job(session, "train-1", "train", "succeeded", nov(10))
    job(session, "train-2", "train", "succeeded", nov(20))
    job(session, "train-3", "train", "running", None)
    job(session, "train-4", "train", "succeeded", datetime(2026, 12, 2, tzinfo=UTC))
    job(session, "train-5", "train", "failed", nov(6))
    job(session, "infer-1", "infer", "succeeded", nov(12), images=200_000)
    job(session, "infer-2", "infer", "succeeded", nov(13), images=50_000)
    # train-1: 10 h on the reserved machine in October (its fee share: 10 x 1 CNY), 10 h of USD spot in
    # October at October's 7.0 (2 USD = 14 CNY), 5 h in November (50 CNY).
    ledger.cost(res, oct_(20), oct_(20, 10), amount="0", on_demand="80", job_id="train-1")
    ledger.cost(ledger.instance("i-usd", price="0.2", on_demand="0.5"), oct_(21), oct_(21, 10), amount="2",
                on_demand="5", job_id="train-1")  # fmt: skip
    ledger.cost(a10g, nov(2), nov(2, 5), amount="50", on_demand="100", job_id="train-1")
    # train-2: 2 h on the four-GPU machine: 10 USD = 72 CNY, 8 GPU-hours.
    ledger.cost(a100, nov(15), nov(15, 2), amount="10", on_demand="24", job_id="train-2")
    ledger.cost(a10g, nov(5), nov(5, 3), amount="30", on_demand="60", job_id="train-3")
    ledger.cost(a10g, nov(6), nov(6, 1), amount="10", on_demand="20", job_id="train-5")
    ledger.cost(a10g, nov(30, 20), nov(30, 22), amount="20", on_demand="40", job_id="train-4")
    ledger.cost(a10g, nov(11), nov(11, 4), amount="40", on_demand="80", job_id="infer-1")
    ledger.cost(a10g, nov(12), nov(12, 1), amount="10", on_demand="20", job_id="infer-2")
    ledger.cost(a10g, nov(3), nov(3, 1), amount="10", on_demand="20", kind="idle")
    return report_for(session, reserved=[RESERVATION], fx_for=fx_for)


def test_per_training_run_counts_completed_runs_at_their_whole_cost(report: MonthlyReport) -> None:
    t = report.unit_costs.training
    assert t.jobs == 2 and t.units == 2
    whole = (Decimal(10) + 14 + 50) + 72  # train-1 over two months (fee, spot, November), train-2
    assert t.cost == Money(amount=whole, currency="CNY")
    assert t.per_unit.amount == whole / 2
    assert t.billed.amount == whole - 10  # the reservation's fee share is not billed
    # On-demand equivalent: billed hours only (5 USD at 7.0, 100 CNY, 24 USD at 7.2), never the prepaid ones.
    assert t.on_demand_equivalent.amount == 35 + 100 + Decimal("172.8")
    assert t.gpu_hours == 10 + 10 + 5 + 8


def test_per_thousand_images_counts_completed_inference(report: MonthlyReport) -> None:
    i = report.unit_costs.inference
    assert (i.jobs, i.images, i.units) == (2, 250_000, Decimal(250))
    assert i.cost.amount == 50 and i.per_unit.amount == Decimal("0.2")


def test_per_gpu_hour_by_gpu_model(report: MonthlyReport) -> None:
    gpus = {g.gpu: g for g in report.unit_costs.by_gpu}
    assert set(gpus) == {"A10G", "A100"}  # no reserved T4 hour ran in November
    a10g, a100 = gpus["A10G"], gpus["A100"]
    # A10G: 5 + 3 + 1 + 2 + 4 + 1 busy h, 1 idle h, all at 10 CNY/h.
    assert (a10g.gpu_hours, a10g.busy_gpu_hours, a10g.billed_gpu_hours) == (17, 16, 17)
    assert a10g.cost.amount == 170 and a10g.per_gpu_hour.amount == 10
    assert a10g.per_busy_gpu_hour.amount == Decimal(170) / 16  # the idle hour is paid by the busy ones
    assert a10g.on_demand_per_gpu_hour.amount == 20
    assert (a100.gpu_hours, a100.cost.amount, a100.per_gpu_hour.amount) == (8, 72, 9)
    assert a100.on_demand_per_gpu_hour.amount == Decimal("172.8") / 8
    # The same GPUs, the same hours and money as the report's by-GPU table (the unused reservation apart).
    by_gpu = {b.key: b for b in report.by_gpu if not b.unused_reservation}
    for g in gpus.values():
        assert g.cost == by_gpu[g.gpu].cost and g.on_demand_equivalent == by_gpu[g.gpu].on_demand_equivalent
    assert report.unit_costs.machines_without_gpu_count == 0
    assert_agrees(report)


def test_a_month_without_completed_jobs_has_no_per_unit_figure(session: Session, ledger: Ledger) -> None:
    inst = ledger.instance("i-1", price="2", on_demand="4", currency="CNY")
    job(session, "run", "train", "running", None)
    ledger.cost(inst, nov(2), nov(2, 2), amount="4", on_demand="8", job_id="run")
    r = report_for(session)
    assert r.unit_costs.training.jobs == 0 and r.unit_costs.training.per_unit is None
    assert r.unit_costs.inference.per_unit is None
    md = render_markdown(r)
    assert "| training run | 0 run(s) | 0.00 CNY | - |" in md


def test_every_rendering_carries_the_unit_costs(report: MonthlyReport) -> None:
    per_run = report.unit_costs.training.per_unit
    md = render_markdown(report)
    assert "## Unit costs" in md
    assert f"| training run | 2 run(s) | {report.unit_costs.training.cost} | {per_run} per run |" in md
    assert "| 1,000 images inferred | 250,000 images, 2 job(s) | 50.00 CNY | 0.2000 CNY per 1,000 |" in md
    assert "| A100 | 8.0 | 100.0% | 72.00 CNY | 9.00 CNY | 9.00 CNY | 21.60 CNY |" in md
    html = render_html(report, phone_charts=False)
    assert "<h2>Unit costs</h2>" in html and f"{per_run} per run" in html

    rows = [r for r in csv.DictReader(io.StringIO(render_csv(report))) if r["section"] == "unit_cost"]
    assert len(rows) == 2 + 3 * 2  # two kinds of run, three figures per GPU model
    for row in rows:
        if row["per_unit"]:  # units x per unit = cost, within the rounding of the two cells
            assert abs(Decimal(row["units"]) * Decimal(row["per_unit"]) - Decimal(row["cost"])) \
                <= Decimal("0.00005") * Decimal(row["units"]) + Decimal("0.005") * (1 + Decimal(row["per_unit"])), row
    [train] = [r for r in rows if r["key"].startswith("training run")]
    assert Decimal(train["per_unit"]) == per_run.amount.quantize(Decimal("0.0001")) and train["units"] == "2.00"
    [images] = [r for r in rows if r["key"].startswith("1,000 images")]
    assert images["per_unit"] == "0.2000"  # four places: a unit cost is often under a cent

    ws = load_workbook(io.BytesIO(render_xlsx(report)))["Unit costs"]
    sheet = [list(r) for r in ws.iter_rows(values_only=True)]
    assert sheet[0][:5] == ["unit", "of", "units", "cost", "per unit"]
    [images] = [r for r in sheet if r[0] == "1,000 images inferred"]
    assert images[2] == 250 and images[4] == pytest.approx(0.2)
