"""A team at 100% of its monthly budget: new jobs wait; with GPUSCHED_BUDGET_AT_LIMIT=stop, running ones
stop right after their next checkpoint and wait too, resuming from it."""

from __future__ import annotations

from sqlalchemy import select

from scheduler.money import Money
from scheduler.settings import Settings
from scheduler.states import JobState
from scheduler.store.tables import EventRow
from tests.accounting.test_reports import Ledger, nov
from tests.lifecycle.test_lifecycle import World, job_spec


def world(store, clock, at_limit: str) -> World:
    w = World(store, clock)
    w.settings = Settings(_env_file=None, cluster="t", providers=["alibaba"], idle_stop_minutes=10,
                          team_budgets={"vision-qa": "800 CNY"}, budget_at_limit=at_limit)
    w.ctx = w.new_ctx()
    return w


def exhaust_budget(w: World) -> None:
    """Another machine of the team's billed 800 CNY this month: the team is at 100%."""
    with w.store.session() as s:
        ledger = Ledger(s)
        other = ledger.instance("i-elsewhere", team="vision-qa", price="80", on_demand="80", currency="CNY")
        ledger.cost(other, nov(1), nov(1, 10), amount="800", on_demand="800")


def running_with_epochs(w: World, job_id: str, epochs: int) -> None:
    w.run_until(lambda: w.job(job_id).state == JobState.running.value and w.job(job_id).epochs_done >= epochs)


def test_stop_at_the_limit_stops_a_running_job_right_after_its_next_checkpoint(store, sim_clock) -> None:
    w = world(store, sim_clock, "stop")
    job_id = w.submit(job_spec())
    running_with_epochs(w, job_id, 2)
    exhaust_budget(w)
    w.step()  # this tick sees the team at its limit
    at_limit = w.job(job_id).epochs_done
    assert w.job(job_id).state == JobState.running.value  # not stopped mid-epoch
    for _ in range(600):
        w.step()
        if w.job(job_id).state != JobState.running.value:
            break
        # Every tick until then saw no new checkpoint: a stop comes with the first one after the limit.
        assert w.job(job_id).epochs_done == at_limit
    job = w.job(job_id)
    [first] = w.attempts(job_id)[:1]
    assert first.state == "preempted" and first.end_epoch == job.epochs_done > at_limit
    assert "budget" in first.reason and job.preemptions == 0  # a budget stop is not a reclaim
    [machine] = [i for i in w.instances() if i.id == first.instance_id]
    assert machine.job_id is None and machine.state in ("terminating", "terminated")
    with store.session(write=False) as s:
        kinds = list(s.scalars(select(EventRow.kind).where(EventRow.job_id == job_id)))
    assert "budget_stop" in kinds
    # It then waits like any new job of the team, and nothing else starts for it.
    w.step(30)
    job = w.job(job_id)
    assert job.state == JobState.queued.value and "waits for budget" in job.reason
    assert len(w.attempts(job_id)) == 1
    # A raised budget (a restarted daemon with new settings): it resumes from the checkpoint it stopped at.
    w.settings = w.settings.model_copy(update={"team_budgets": {"vision-qa": Money.parse("5000 CNY")}})
    w.ctx = w.new_ctx()
    w.run_until(lambda: len(w.attempts(job_id)) == 2 and w.attempts(job_id)[1].start_epoch is not None)
    assert w.attempts(job_id)[1].start_epoch == first.end_epoch


def test_wait_at_the_limit_lets_a_running_job_finish_and_holds_new_ones(store, sim_clock) -> None:
    w = world(store, sim_clock, "wait")
    job_id = w.submit(job_spec())
    running_with_epochs(w, job_id, 2)
    exhaust_budget(w)
    new = w.submit(job_spec())
    w.run_until(lambda: w.job(job_id).state == JobState.succeeded.value)
    assert len(w.attempts(job_id)) == 1
    assert w.job(new).state == JobState.queued.value and "waits for budget" in w.job(new).reason
    assert w.attempts(new) == []


