"""The simulated on-instance agent: a job finishes at the very moment the simulation jumps to.

``SimAgents.next_event_after`` tells the simulator when a running job will end;
the simulator sets the clock there and steps the agents. If the agent then
decided "not yet" (float hours a hair short of the finish), no later event would
wake the job and it would sit billed until an unrelated tick: that inflated
every policy's cost in the month simulation by about 8%.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from scheduler.jobs import perf
from scheduler.jobs.jobfile import parse_job
from scheduler.lifecycle import tick as lifecycle
from scheduler.lifecycle.perf_learning import catalog_vcpus
from scheduler.simulation.simagent import SimAgents
from scheduler.store.tables import AttemptRow, InstanceRow, JobRow, PerfSampleRow
from tests.lifecycle.test_lifecycle import STEP, World


def _spec(kind: str, n: int) -> dict:
    base = {
        "name": f"{kind}-{n}", "team": "vision-qa", "kind": kind, "model": "yolov9-s",
        "resources": {"gpus": ["A10"]},
        "where": {"providers": ["alibaba"], "regions": ["cn-hangzhou"]},
        "policy": {"capacity": "on-demand"},
    }
    if kind == "train":
        base["data"] = {"uri": "s3://bucket/helmet", "train_images": 1000 + 137 * n, "val_images": 100}
        base["train"] = {"epochs": 3 + n % 4, "batch": 32}
    else:
        base["infer"] = {"source": "s3://bucket/images/", "images": 3000 + 911 * n,
                         "weights": "s3://bucket/runs/x/best.pt"}
    return base


@pytest.mark.parametrize("kind", ["train", "infer"])
def test_every_job_finishes_at_the_event_the_agents_announced(store, sim_clock, kind):
    w = World(store, sim_clock, seed=5)
    ids = [w.submit(parse_job(_spec(kind, n), "t.yaml")) for n in range(12)]

    def running() -> set[str]:
        with store.session(write=False) as s:
            return set(s.scalars(select(JobRow.id).where(JobRow.state == "running")))

    w.run_until(lambda: running() == set(ids), limit=60)
    finished_at_event = 0
    while running():
        now = sim_clock.now()
        w.agents.step(now)
        nxt = w.agents.next_event_after(now)
        assert nxt is not None, "a running job with no announced finish: it would never be woken"
        before = running()
        sim_clock.set(nxt)
        w.agents.step(nxt)
        ended = before - running()
        assert ended, f"no job ended at the announced finish {nxt.isoformat()}"
        for job_id in ended:
            assert w.job(job_id).finished_at == nxt
        finished_at_event += len(ended)
        lifecycle.tick(w.ctx)
    assert finished_at_event == len(ids)


def test_the_epoch_times_the_daemon_learns_are_the_jobs_own_whatever_the_steps(store, sim_clock):
    """A report is dated when its last epoch ended, not when the step that found it ran: the
    simulation jumps unevenly (here 7 to 95 minutes), and samples dated at the step once ranged
    from 0.6x to 7x the run's true speed, which the planner then learnt as the GPU's speed."""
    w = World(store, sim_clock, seed=5)
    spec = _spec("train", 0)
    spec["data"]["train_images"], spec["train"]["epochs"] = 40_000, 300  # outlasts the 40 steps below
    job_id = w.submit(parse_job(spec, "t.yaml"))
    w.run_until(lambda: w.job(job_id).state == "running", limit=60)
    for minutes in [7, 95, 12, 33, 61, 8, 47, 90, 15, 70] * 4:
        if w.job(job_id).state != "running":
            break
        sim_clock.advance(timedelta(minutes=minutes))
        w.agents.step(sim_clock.now())
    with store.session(write=False) as s:
        samples = s.scalars(select(PerfSampleRow).where(PerfSampleRow.job_id == job_id)
                            .order_by(PerfSampleRow.id)).all()
        [attempt] = s.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id)).all()
        inst = s.get(InstanceRow, attempt.instance_id)
    est = perf.estimate(parse_job(spec, "t.yaml"), inst.gpu, inst.gpu_count, catalog_vcpus(inst.instance_type))
    true_epoch_s = est.epoch_hours * w.agents.true_factor(job_id, inst.gpu) * 3600
    assert len(samples) >= 10
    # The first sample measures from the attempt's start less the estimated setup (the true one differs).
    for sample in samples[1:]:
        assert sample.epoch_seconds == pytest.approx(true_epoch_s, rel=1e-6)


def test_the_step_after_a_tick_says_what_a_whole_step_would(store, sim_clock):
    """The simulator steps the agents again after each tick for the attempts the tick started
    (``step_started``): a whole step at that moment must find nothing more to report and announce
    the same next finish, through reclaims, requeues and finishes."""
    w = World(store, sim_clock, seed=5, interruption_scale=20.0)
    specs = []
    for n in range(12):
        spec = _spec("train" if n % 2 else "infer", n)
        spec["policy"] = {"capacity": "spot" if n % 3 else "on-demand"}
        specs.append(parse_job(spec, "t.yaml"))
    whole = SimAgents(store, {"alibaba": w.provider}, "t", seed=5)

    def progress() -> list[tuple]:
        with store.session(write=False) as s:
            return [*s.execute(select(JobRow.id, JobRow.state, JobRow.epochs_done, JobRow.attempt)
                               .order_by(JobRow.id)),
                    *s.execute(select(AttemptRow.id, AttemptRow.state, AttemptRow.end_epoch).order_by(AttemptRow.id))]

    started_by_tick = 0
    for k in range(2000):
        if k % 15 == 0 and specs:
            w.submit(specs.pop())  # one every quarter hour: ticks start attempts all along
        now = sim_clock.now()
        w.agents.step(now)
        known = set(w.agents._finish_at)
        lifecycle.tick(w.ctx)
        w.agents.step_started(now)
        started_by_tick += bool(set(w.agents._finish_at) - known)
        before = progress()
        assert whole.step(now) == 0
        assert progress() == before
        assert whole.next_event_after(now) == w.agents.next_event_after(now)
        if not specs and all(row[1] in ("succeeded", "failed") for row in before if str(row[0]).startswith("job-")):
            break
        sim_clock.advance(STEP)
    jobs = [row for row in before if str(row[0]).startswith("job-")]
    # Every job ended (one may fail once reclaims use up its restarts: job ids, and so the seeded speeds, are random).
    assert len(jobs) == 12 and all(row[1] in ("succeeded", "failed") for row in jobs), jobs
    assert sum(row[1] == "succeeded" for row in jobs) >= 6, jobs  # 10-12 of 12 in 25 runs
    reclaimed = sum(1 for row in before if row[1] == "preempted")
    assert started_by_tick >= 12 and reclaimed > 0, (started_by_tick, reclaimed)
