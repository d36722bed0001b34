"""The fair score and the causes it lists, on what the real tick writes (no hand-made events)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from sqlalchemy import select

from providers.base import NoCapacity
from providers.catalog import load_catalog
from scheduler.jobs.jobfile import parse_job
from scheduler.settings import Settings
from scheduler.simulation.fair_score import fair_score, work_gpu_hours, write_explain_csv
from scheduler.simulation.lower_bound import lower_bound
from scheduler.simulation.simulate import Submission, simulate
from scheduler.simulation.trace_file import TraceEntry
from scheduler.states import JobState
from scheduler.store.tables import CostRecordRow
from tests.conftest import SIM_START
from tests.lifecycle.test_lifecycle import World, job_spec

SETTINGS = Settings(_env_file=None)


def score_of(w: World, job_id: str, infeasible: str | None = None):
    with w.store.session(write=False) as s:
        return fair_score(s, {job_id: 0}, [2.0], [infeasible] if infeasible is not None else None,
                          currency="CNY", fx=SETTINGS.fx)


def test_a_job_reclaimed_past_its_restart_budget_is_explained_by_it(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(job_spec(capacity="spot", max_restarts=0))
    # Lost before its first checkpoint: a loss without progress spends the restart budget.
    w.run_until(lambda: w.job(job_id).state == JobState.running.value)
    [row] = w.instances()
    w.cloud.preempt(row.cloud_id)
    w.step()
    assert w.job(job_id).state == JobState.failed.value
    score, [result] = score_of(w, job_id)
    assert result.reason == "restart_budget" and "max_restarts 0" in result.detail
    assert result.outcome == "failed" and result.preemptions == 1 and not result.unavoidable
    assert score.why_failed_or_late == {"restart_budget": 1}
    # What it ran is money spent on failed work, and nothing was done on time.
    with store.session(write=False) as s:
        billed = sum(s.scalars(select(CostRecordRow.amount).where(CostRecordRow.job_id == job_id)), Decimal(0))
    assert billed > 0 and score.cost_failed_or_late == billed.quantize(Decimal("0.01")) == result.cost
    assert score.cost_completed_on_time == 0 and score.completed_gpu_hours == 0
    assert score.cost_per_completed_gpu_hour is None
    assert score.misses_avoidable is None  # no bound: nothing to tell avoidable from unavoidable


def test_a_refusal_after_the_clouds_had_no_capacity_is_a_stock_out(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(job_spec(deadline="3h", capacity="on-demand"))
    w.cloud.fail_next("launch", NoCapacity("no stock in this zone", code="OperationDenied.NoStock"), times=10_000)
    w.run_until(lambda: w.job(job_id).state == JobState.failed.value, limit=300)
    _, [result] = score_of(w, job_id)
    assert result.reason == "stock_out", result.detail
    assert "refused by the cloud" in result.detail and "then refused" in result.detail


def test_a_refused_job_is_the_planners_refusal_unless_the_bound_calls_it_infeasible(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(job_spec(budget="1 CNY"))
    w.step()
    score, [result] = score_of(w, job_id)
    assert result.reason == "refused" and "budget" in result.detail
    score, [result] = score_of(w, job_id, infeasible="every option that meets the deadline is over budget")
    assert result.reason == "infeasible" and result.unavoidable
    assert score.failed_unavoidable == 1 and score.misses_unavoidable == 1 and score.misses_avoidable == 0
    assert score.infeasible_jobs == 1


def entry(name: str, **policy) -> TraceEntry:
    job = {"name": name, "team": "vision-qa", "kind": "train", "model": "yolov9-t",
           "data": {"uri": "s3://b/d", "train_images": 2000, "val_images": 200},
           "train": {"epochs": 10, "batch": 32}, "resources": {"gpus": ["A10", "T4"]},
           "where": {"providers": ["alibaba"], "regions": ["cn-hangzhou"]}, "policy": policy}
    return TraceEntry(at=SIM_START, job=parse_job(job, name))


def test_simulated_policies_are_scored_on_the_same_work_and_unavoidable_misses_are_counted_apart(tmp_path):
    entries = [entry("fine", deadline="24h"), entry("too-tight", deadline="5m"), entry("no-deadline")]
    bound = lower_bound(entries, load_catalog(), currency="CNY", fx=SETTINGS.fx)
    assert [j.why_not is not None for j in bound.jobs] == [False, True, False]
    subs = [Submission(at=e.at, job=e.job, source=f"t:{i + 1}") for i, e in enumerate(entries)]
    work = work_gpu_hours([(e.job, e.at) for e in entries], load_catalog(), currency="CNY", fx=SETTINGS.fx)
    assert all(w is not None and w > 0 for w in work)

    scores = {}
    for policy in ("on-demand", "spot-greedy"):
        summary = simulate(subs, policy=policy, seed=3, bound=bound, horizon=timedelta(days=2))
        f = scores[policy] = summary.fair_score
        assert f.work_gpu_hours == Decimal(repr(round(sum(work), 2)))
        assert f.infeasible_jobs == 1 and f.misses_unavoidable == 1 and f.misses_avoidable == 0
        assert f.misses_unavoidable + f.misses_avoidable == summary.deadline_misses
        assert f.why_failed_or_late == {"infeasible": 1}
        [explained] = summary.explained
        assert explained.trace_line == 2 and explained.name == "too-tight" and explained.unavoidable
        # The bill is the sum of its three parts (each rounded to a cent).
        parts = f.cost_completed_on_time + f.cost_failed_or_late + f.cost_idle
        assert abs(parts - summary.total_cost) <= Decimal("0.02")
        assert f.completed_gpu_hours == Decimal(repr(round(work[0] + work[2], 2)))
        # Per GPU-hour done on time: the whole bill, failed work and idle machines included.
        assert f.cost_per_completed_gpu_hour is not None
        assert abs(f.cost_per_completed_gpu_hour * f.completed_gpu_hours - summary.total_cost) < Decimal("0.05")
        path = tmp_path / f"{policy}.csv"
        write_explain_csv(summary.explained, path)
        lines = path.read_text().splitlines()
        assert lines[0].startswith("trace_line,job_id,name") and len(lines) == 2 and ",infeasible,True," in lines[1]
    assert scores["on-demand"].completed_gpu_hours == scores["spot-greedy"].completed_gpu_hours
