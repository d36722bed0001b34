"""One bad job stops nobody: the tick sets it aside with its reason and schedules every other job.

Cases: a job the planner fails on (injected for one job), a job whose plan cannot be written, and jobs
stored before the bounds existed (a budget of 1e999999999 and a year-9999 deadline written straight
into the store, as the API used to accept them).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import select

from scheduler.accounting.reports import build_report
from scheduler.lifecycle import service
from scheduler.lifecycle import tick as lifecycle
from scheduler.states import JobState
from scheduler.store.tables import EventRow, JobRow
from tests.lifecycle.test_lifecycle import World, job_spec


def events(world: World, job_id: str) -> list[EventRow]:
    with world.store.session(write=False) as s:
        return list(s.scalars(select(EventRow).where(EventRow.job_id == job_id).order_by(EventRow.id)))


def named(name: str):
    return job_spec().model_copy(update={"name": name})


def test_a_job_the_planner_fails_on_is_held_and_the_others_launch(store, sim_clock, monkeypatch):
    w = World(store, sim_clock)
    good, poison, other = (w.submit(named(n)) for n in ("good", "poison", "other"))
    real_plan = lifecycle.plan

    def plan(jobs, *args, **kwargs):
        if any(j.spec.name == "poison" for j in jobs):
            raise ArithmeticError("the planner trips on this job")
        return real_plan(jobs, *args, **kwargs)

    monkeypatch.setattr(lifecycle, "plan", plan)
    report = lifecycle.tick(w.ctx)

    assert report.set_aside == 1 and report.launched == 2
    assert w.job(good).state == JobState.provisioning.value
    assert w.job(other).state == JobState.provisioning.value
    held = w.job(poison)
    assert held.state == JobState.queued.value
    assert held.reason.startswith("held: it could not be planned or priced (ArithmeticError: the planner trips")
    assert [e.kind for e in events(w, poison)] == ["submitted", "job_held"]

    w.clock.advance(timedelta(minutes=1))
    lifecycle.tick(w.ctx)  # still failing: held again, no second event for the same reason
    assert [e.kind for e in events(w, poison)] == ["submitted", "job_held"]

    monkeypatch.setattr(lifecycle, "plan", real_plan)  # fixed (an upgrade): the held job is planned
    w.clock.advance(timedelta(minutes=1))
    lifecycle.tick(w.ctx)
    assert w.job(poison).state == JobState.provisioning.value


def test_a_plan_that_cannot_be_written_holds_only_that_job(store, sim_clock, monkeypatch):
    w = World(store, sim_clock)
    good, broken = w.submit(named("good")), w.submit(named("broken"))
    real_act = lifecycle._act

    def act(ctx, now, decision, report):
        if decision.job_id == broken:
            raise OSError("disk full while writing the plan")
        return real_act(ctx, now, decision, report)

    monkeypatch.setattr(lifecycle, "_act", act)
    report = lifecycle.tick(w.ctx)
    assert report.set_aside == 1 and report.launched == 1
    assert w.job(good).state == JobState.provisioning.value
    job = w.job(broken)
    assert job.state == JobState.queued.value
    assert "its plan could not be carried out (OSError: disk full" in job.reason


def _insert_legacy(world: World, job_id: str, *, budget: str | None = None, deadline: str | None = None) -> None:
    """A row as the API stored it before the bounds: written directly, no validation on the way."""
    spec = job_spec().model_dump(mode="json")
    spec["name"] = job_id
    now = world.clock.now()
    if budget is not None:
        spec["policy"]["budget"] = f"{budget} CNY"
    if deadline is not None:
        spec["policy"]["deadline"] = deadline
    with world.store.session() as s:
        s.add(JobRow(
            id=job_id, name=job_id, team="vision-qa", kind="train", model="yolov9-s", spec_json=spec,
            state=JobState.queued.value, priority=50, submitted_at=now, updated_at=now,
            deadline_at=datetime.fromisoformat(deadline) if deadline else None,
            budget_amount=Decimal(budget) if budget else None, budget_currency="CNY" if budget else None,
            attempt=0, preemptions=0, epochs_done=0, epochs_total=20,
        ))


def test_jobs_stored_before_the_bounds_are_failed_with_why_and_break_nothing(store, sim_clock):
    w = World(store, sim_clock)
    good = w.submit(named("good"))
    _insert_legacy(w, "job-huge-budget", budget="1e999999999")
    _insert_legacy(w, "job-year-9999", deadline="9999-12-31T23:00:00+00:00")

    # Listing jobs (GET /v1/jobs, `gpusched status`) works with the rows as they are.
    listed = {v.id: v for v in service.list_jobs(w.store)}
    assert set(listed) == {good, "job-huge-budget", "job-year-9999"}
    assert listed["job-huge-budget"].budget is None  # SQLite keeps it as infinity: not shown as a budget

    report = lifecycle.tick(w.ctx)
    assert report.set_aside == 2 and report.launched == 1
    assert w.job(good).state == JobState.provisioning.value
    for job_id, why in (("job-huge-budget", "policy.budget: "),
                        ("job-year-9999", "the year 9999 is outside 2000-2199")):
        row = w.job(job_id)
        assert row.state == JobState.failed.value
        assert row.reason.startswith("set aside: its stored job file is not valid any more") and why in row.reason
        assert row.finished_at is not None
        assert events(w, job_id)[-1].kind == "job_set_aside"
    assert {v.id for v in service.list_jobs(w.store, state="failed")} == {"job-huge-budget", "job-year-9999"}
    detail = service.get_job(w.store, "job-huge-budget")
    assert detail.events[-1].kind == "job_set_aside"

    w.clock.advance(timedelta(minutes=1))
    assert lifecycle.tick(w.ctx).set_aside == 0  # once failed, the jobs are not looked at again


def test_a_running_job_stored_before_the_bounds_is_failed_and_its_machine_freed(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(named("legacy"))
    w.run_until(lambda: w.job(job_id).state == JobState.running.value)
    with w.store.session() as s:  # as if stored before the bounds, now read back by a restarted daemon
        row = s.get(JobRow, job_id)
        row.spec_json = {**row.spec_json, "policy": {**row.spec_json["policy"], "budget": "1e999999999 CNY"}}
        row.budget_amount, row.budget_currency = Decimal("1e999999999"), "CNY"  # SQLite: infinity
    ctx = w.new_ctx()
    w.step(ctx=ctx)
    assert w.job(job_id).state == JobState.failed.value
    w.step(2, ctx=ctx)
    assert all(i.job_id is None for i in w.instances())  # its machine is idle, for the reaper or the next job
    with w.store.session(write=False) as s:  # the month's report lists its cost, without the budget
        report = build_report(s, w.clock.now().strftime("%Y-%m"), currency="CNY", fx=w.settings.fx,
                              now=w.clock.now())
    [cost] = [j for j in report.jobs if j.id == job_id]
    assert cost.budget is None and cost.cost.amount > 0


def test_a_store_error_is_told_in_the_drivers_words() -> None:
    """A held job's reason had SQLAlchemy's whole error: the SQL, the parameters and its background link."""
    import sqlite3

    from sqlalchemy.exc import OperationalError

    from scheduler.lifecycle.set_aside import describe

    exc = OperationalError("INSERT INTO jobs ...", {"id": "job-1"},
                           sqlite3.OperationalError("database or disk is full"))
    assert describe(exc) == "the store: database or disk is full"
