"""The simulated on-instance agent: a job finishes at the very moment the simulation jumps to.

``SimAgents.next_event_after`` tells the simulator when a running job will end;
the simulator sets the clock there and steps the agents. If the agent then
decided "not yet" (float hours a hair short of the finish), no later event would
wake the job and it would sit billed until an unrelated tick: that inflated
every policy's cost in the month simulation by about 8%.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from scheduler.jobs.jobfile import parse_job
from scheduler.lifecycle import tick as lifecycle
from scheduler.store.tables import JobRow
from tests.lifecycle.test_lifecycle import World


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
