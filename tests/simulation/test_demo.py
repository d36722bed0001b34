"""The demo scenario end to end: the daemon's tick on the sandbox cloud in simulated time."""

from __future__ import annotations

import io
from decimal import Decimal

import pytest
from rich.console import Console
from sqlalchemy import select

from scheduler.money import Money, total
from scheduler.settings import Settings
from scheduler.simulation.demo import run_demo
from scheduler.store.database import Store
from scheduler.store.tables import AttemptRow, CostRecordRow, InstanceRow, JobRow
from tests.accounting.report_checks import assert_agrees


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "run"
    buf = io.StringIO()
    result = run_demo(out, seed=7, console=Console(file=buf, width=200))
    return result, buf.getvalue()


def test_every_job_succeeds_with_a_preemption_resume_and_an_idle_stop(demo):
    result, _ = demo
    assert result.jobs >= 7 and result.succeeded == result.jobs
    assert result.preemptions >= 1
    assert result.resumed_from_epochs and min(result.resumed_from_epochs) > 0
    assert result.idle_stops >= 1


def test_spend_is_exact_and_below_on_demand(demo):
    result, _ = demo
    store = Store(f"sqlite:///{result.out_dir / 'gpusched.db'}")
    fx = Settings(_env_file=None).fx
    with store.session(write=False) as s:
        rows = s.scalars(select(CostRecordRow)).all()
        spend = total((Money(amount=r.amount, currency=r.currency) for r in rows), "CNY", fx)
        jobs = s.scalars(select(JobRow)).all()
        attempts = s.scalars(select(AttemptRow)).all()
        live = s.scalars(select(InstanceRow).where(InstanceRow.state.in_(["pending", "running"]),
                                                   InstanceRow.reserved.is_(False))).all()
    store.dispose()
    assert spend == result.spend and spend.amount > 0
    assert result.on_demand_equivalent > result.spend
    assert not live, "the demo must leave no paid machine running"
    # A resumed attempt starts where the preempted one ended.
    by_job = {}
    for a in sorted(attempts, key=lambda a: (a.job_id, a.number)):
        prev = by_job.get(a.job_id)
        if prev is not None and prev.state == "preempted":
            assert a.start_epoch == prev.end_epoch
        by_job[a.job_id] = a
    assert {j.team for j in jobs} == {"vision-qa", "retail-ai", "traffic-ops"}
    assert result.reserved_hours > Decimal(0)
    # The summary's busy reserved hours are the report's (a reserved machine up without a job is prepaid idle).
    assert result.report is not None
    assert Decimal(0) < result.reserved_busy_hours == result.report.reserved_busy_hours < result.reserved_hours


def test_report_files_and_summary(demo):
    result, text = demo
    assert set(result.report_paths) == {"html", "csv", "md", "xlsx"}
    html = result.report_paths["html"].read_text()
    assert html.count("data:image/png;base64,") >= 2
    for team in ("vision-qa", "retail-ai", "traffic-ops"):
        assert team in html
    assert "jobs succeeded" in text and "preempted" in text and "idle stop" in text
    assert "saved" in text and "report (html)" in text


def test_same_seed_same_run(tmp_path, demo):
    result, _ = demo
    again = run_demo(tmp_path / "again", seed=7, console=Console(file=io.StringIO()))
    assert (again.spend, again.preemptions, again.idle_stops) == (result.spend, result.preemptions, result.idle_stops)


def test_the_demo_report_agrees_with_itself(demo):
    """Issue 18: the team rows added to 651 CNY of on-demand equivalent against a headline of 60."""
    result, text = demo
    report = result.report
    assert report is not None and report.month == "2026-11"
    assert_agrees(report)
    team_on_demand = sum((b.on_demand_equivalent.amount for b in report.by_team), Decimal(0))
    assert team_on_demand == report.on_demand_equivalent.amount
    assert report.on_demand_equivalent == result.on_demand_equivalent  # the demo's summary and the report agree
    assert report.billed == result.spend
    # The prepaid machine is a reservation with a fee: its unused part is a row, its use a percentage.
    [res] = report.reservations
    assert res.fee_set and res.fee.amount > 0 and res.prepaid_hours > res.busy_hours > 0
    assert report.total.amount == report.billed.amount + res.fee.amount
    assert any(b.unused_reservation for b in report.by_team)
    assert f"total {report.total}" in text
    assert report.forecast is not None and any(d.future for d in report.by_day)


def test_the_demo_report_reads_in_a_browser_on_a_screen_and_a_phone(demo, tmp_path):
    """The report a real month makes (not a fixture's), in the system's Chromium: see test_report_browser."""
    from tests.accounting.browser import chromium, images, layout_problems, sync_playwright

    result, _ = demo
    page_file = result.report_paths["html"]
    problems = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            for name, viewport, phone in (("1280", {"width": 1280, "height": 800}, False),
                                          ("390", {"width": 390, "height": 844}, True)):
                ctx = browser.new_context(viewport=viewport, is_mobile=phone, has_touch=phone)
                page = ctx.new_page()
                page.goto(page_file.as_uri())
                page.screenshot(path=str(tmp_path / f"demo-report-{name}.png"), full_page=True)
                problems[name] = layout_problems(page, wide_tables=not phone)
                loaded = [(i["complete"], i["natural"] > 0, i["phone"]) for i in images(page)]
                assert loaded == [(True, True, phone)] * 3
                ctx.close()
        finally:
            browser.close()
    assert problems == {"1280": [], "390": []}
    units = result.report.unit_costs
    assert units.training.jobs > 0 and units.training.per_unit is not None  # the demo completes training runs
