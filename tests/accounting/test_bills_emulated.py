"""Money truth end to end: jobs run through the daemon's tick on three clouds, each cloud bills what it ran
by its own rules, the real bill readers read those bills through the real SDKs over HTTP, and the monthly
report reconciles them with the ledger.

AWS runs on the in-process sandbox cloud and its bill comes from moto's Cost Explorer; Alibaba and Tencent
run through their real adapters to the ECS and CVM emulators, and bill through the BSS and Billing
emulators (``scheduler/simulation/emulated_bills.py``, as ``gpusched demo --via-emulators`` does). Each
bill carries one machine gpusched never ran, which the report must flag.
"""

from __future__ import annotations

import csv
import io
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from openpyxl import load_workbook
from pypdf import PdfReader

pytest.importorskip("aliyunsdkbssopenapi", reason="the Alibaba billing SDK is optional: pip install '.[alibaba]'")
pytest.importorskip("tencentcloud.billing.v20180709", reason="the Tencent billing SDK is optional: "
                    "pip install '.[tencent]'")
pytest.importorskip("moto", reason="moto serves the AWS bill: pip install '.[test]'")

from providers.registry import build_sandbox  # noqa: E402
from scheduler.accounting.bill_render import bill_cells, render_bills_csv  # noqa: E402
from scheduler.accounting.report_delivery import report_notice  # noqa: E402
from scheduler.accounting.report_pdf import render_pdf  # noqa: E402
from scheduler.accounting.report_render import render_csv, render_html, render_markdown  # noqa: E402
from scheduler.accounting.report_xlsx import render_xlsx  # noqa: E402
from scheduler.accounting.reports import MonthlyReport, monthly_report  # noqa: E402
from scheduler.clock import SimClock  # noqa: E402
from scheduler.jobs.jobfile import load_job_file  # noqa: E402
from scheduler.lifecycle import service  # noqa: E402
from scheduler.lifecycle import tick as lifecycle  # noqa: E402
from scheduler.lifecycle.tick import TickContext  # noqa: E402
from scheduler.models import (
    JobSpec,  # noqa: E402
    ReservedCapacity,  # noqa: E402
)
from scheduler.settings import Settings  # noqa: E402
from scheduler.simulation.demo import attach_emulators  # noqa: E402
from scheduler.simulation.emulated_bills import emulated_bills  # noqa: E402
from scheduler.simulation.simagent import SimAgents  # noqa: E402
from scheduler.states import JOB_TERMINAL  # noqa: E402
from scheduler.store.database import Store  # noqa: E402
from scheduler.store.tables import JobRow  # noqa: E402

# Hours of simulated work through two HTTP emulators: a minute or two on a quiet machine, more on a busy one.
pytestmark = pytest.mark.timeout(600)

START = datetime(2026, 11, 3, 1, 0, tzinfo=UTC)
MONTH = "2026-11"
CLUSTER = "bills-e2e"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _job(cloud: str) -> JobSpec:
    spec = load_job_file(EXAMPLES / "helmet-s-train.yaml").model_dump(mode="json")
    spec["name"] = f"helmet-on-{cloud}"
    spec["where"] = {"providers": [cloud]}
    # Hours of work: the ledger opens AWS's billing at the tick that first sees the machine running (AWS does
    # not bill the boot), up to a tick after AWS's meter starts; a small share of a long run.
    spec["train"]["epochs"] = 60
    spec["policy"]["capacity"] = "on-demand"
    spec["policy"]["budget"] = "5000 CNY"
    return JobSpec.model_validate(spec)


@pytest.fixture(scope="module")
def month(tmp_path_factory: pytest.TempPathFactory) -> tuple[MonthlyReport, dict[str, str]]:
    out = tmp_path_factory.mktemp("bills-e2e")
    settings = Settings(
        _env_file=None, data_dir=out, cluster=CLUSTER, backend="sandbox", providers=["aws", "alibaba", "tencent"],
        idle_stop_minutes=10, idle_warm="fixed", fx_rates="2026-11:USD/CNY=7.12", sandbox_seed=3,
        reserved=[ReservedCapacity(provider="alibaba", region="cn-hangzhou", instance_type="ecs.gn7i-c8g1.2xlarge",
                                   count=1, start=START - timedelta(days=30), until=START + timedelta(days=300))],
    )
    clock = SimClock(START)
    store = Store(settings.db_url)
    store.migrate()
    providers, clouds = build_sandbox(settings, clock)
    emulators: list = []
    attach_emulators(settings, clock, providers, clouds, emulators)
    bills = None
    try:
        ctx = TickContext.build(store, providers, clock, settings, seed=3)
        agents = SimAgents(store, providers, CLUSTER, seed=3)
        ids = random.Random(3)
        for cloud in ("aws", "alibaba", "tencent"):
            service.submit(store, clock, _job(cloud), source=f"{cloud}.yaml", ids=ids)
        for _ in range(2000):
            agents.step(clock.now())
            lifecycle.tick(ctx)
            clock.advance(timedelta(minutes=1))
            with store.session(write=False) as s:
                open_jobs = [j for j in s.query(JobRow).all() if j.state not in {x.value for x in JOB_TERMINAL}]
            if not open_jobs:
                break
        for _ in range(20):  # the machines go idle, then the reaper stops them
            agents.step(clock.now())
            lifecycle.tick(ctx)
            clock.advance(timedelta(minutes=1))
        cvm = next(e for e in emulators if hasattr(e, "tencent_id"))
        bills = emulated_bills(clouds, clock, MONTH, cluster=CLUSTER, reserved=settings.reserved,
                               tencent_ids=cvm.tencent_id)
        report = monthly_report(settings, MONTH, now=clock.now(), store=store, bills=bills.readers)
        return report, dict(bills.planted)
    finally:
        if bills is not None:
            bills.close()
        for emulator in emulators:
            emulator.close()
        store.dispose()


def test_every_cloud_s_bill_is_read_and_matched_to_the_ledger(month: tuple[MonthlyReport, dict[str, str]]) -> None:
    report, _ = month
    assert report.bills is not None
    by_cloud = {c.cloud: c for c in report.bills.clouds}
    assert set(by_cloud) == {"aws", "alibaba", "tencent"}
    for c in by_cloud.values():
        assert c.read, c.error
        assert c.matched, f"{c.cloud}: no ledger instance matched its bill"
        assert c.ledger is not None and c.ledger.amount > 0
        assert not c.missing, f"{c.cloud}: {[m.key for m in c.missing]}"
        # The clouds bill from the exact moment and round as they settle; the ledger follows each cloud's rule
        # but learns of a change at the tick that sees it: a small difference, within 1%.
        assert c.difference_pct is not None and abs(c.difference_pct) <= Decimal(1), (c.cloud, c.difference_pct)
    # AWS does not bill the boot, and neither does the ledger: it can only be short of the bill (by the part
    # of a tick between the machine running and the tick that saw it), never over it but for rounding.
    aws = by_cloud["aws"]
    assert aws.difference is not None and aws.difference.amount >= Decimal("-0.0001"), aws.difference
    assert any(c.difference is not None and c.difference.amount != 0 for c in by_cloud.values())
    assert by_cloud["aws"].currency == "USD" and by_cloud["alibaba"].currency == "CNY"
    assert by_cloud["tencent"].currency == "USD"


def test_the_planted_machine_is_flagged_in_every_cloud_with_why(month: tuple[MonthlyReport, dict[str, str]]) -> None:
    report, planted = month
    assert report.bills is not None
    kinds = {c.cloud: {u.key: u.kind for u in c.unknown} for c in report.bills.clouds}
    assert kinds == {
        "alibaba": {planted["alibaba"]: "not-gpusched"},
        "tencent": {planted["tencent"]: "other-cluster"},
        "aws": {planted["aws"]: "leak"},
    }
    assert all(c.status == "check" for c in report.bills.clouds)  # an unknown machine needs a look


def test_a_reserved_machine_costs_nothing_on_the_bill_or_in_the_ledger(
        month: tuple[MonthlyReport, dict[str, str]]) -> None:
    report, _ = month
    assert report.bills is not None
    [alibaba] = [c for c in report.bills.clouds if c.cloud == "alibaba"]
    reserved = [m for m in alibaba.matched if m.ledger is not None and m.ledger.amount == 0]
    for m in reserved:
        assert m.billed is not None and m.billed.amount == 0


def test_the_table_shows_in_every_report_format(month: tuple[MonthlyReport, dict[str, str]]) -> None:
    report, planted = month
    assert report.bills is not None
    md = render_markdown(report)
    assert "## Bills vs ledger" in md
    html = render_html(report)
    assert "<h2 id=\"bills\">Bills vs ledger</h2>" in html
    for cloud, key in planted.items():
        assert key in md and key in html
        assert f"| {cloud} |" in md
    rows = list(csv.DictReader(io.StringIO(render_csv(report))))
    differences = {r["key"]: r for r in rows if r["section"] == "bill_difference"}
    assert set(differences) == {"aws", "alibaba", "tencent"}
    for c in report.bills.clouds:
        assert c.ledger_report is not None and c.billed_report is not None
        want = (c.billed_report.amount - c.ledger_report.amount).quantize(Decimal("0.01"))
        assert Decimal(differences[c.cloud]["cost"]) == want
    sheet = load_workbook(io.BytesIO(render_xlsx(report)))["Bills"]
    cells = [[cell.value for cell in row] for row in sheet.iter_rows()]
    assert [r[0] for r in cells[1:4]] == [c.cloud for c in report.bills.clouds]
    assert any(f"unknown: {planted['aws']}" == r[1] for r in cells)
    detail = list(csv.DictReader(io.StringIO(render_bills_csv(report.bills))))
    assert {r["kind"] for r in detail} == {"total", "matched", "unknown"}
    assert all(r["currency"] for r in detail)
    pdf = PdfReader(io.BytesIO(render_pdf(report)))  # and the mailed PDF
    text = "".join(page.extract_text() for page in pdf.pages)
    assert "Bills vs ledger" in text
    for cloud, key in planted.items():
        assert key in text
    for c in report.bills.clouds:
        assert bill_cells(c)[5] in text  # each cloud's difference %
    facts = dict(report_notice(report, {}).facts)  # the chat summary says it too
    assert facts["Bills vs ledger"].count("1 unknown") == 3


def test_the_month_s_dated_rate_converts_the_report_figures(month: tuple[MonthlyReport, dict[str, str]]) -> None:
    report, _ = month
    assert report.bills is not None and report.bills.fx_dated
    assert report.bills.fx == {"USD": Decimal("7.12")}
    [aws] = [c for c in report.bills.clouds if c.cloud == "aws"]
    assert aws.ledger is not None and aws.ledger_report is not None
    assert aws.ledger_report.amount == aws.ledger.amount * Decimal("7.12")
