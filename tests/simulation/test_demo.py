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


def test_report_files_and_summary(demo):
    result, text = demo
    assert set(result.report_paths) == {"html", "csv", "md"}
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
