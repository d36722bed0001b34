"""The tick on the sandbox cloud: launch, preempt and resume, idle stop, and the no-leak invariants.

Crash tests follow docs/reliability.md: the tick is killed at a named point (after the
intent is committed, after the cloud call but before its result is recorded),
a new tick context (a "restarted daemon") drives the same store and cloud on,
and the invariants are checked: at most one live instance per (job, attempt),
no instance without a live job once things settle, every job finished or queued.
"""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal

import pytest
import yaml
from sqlalchemy import func, select

from providers.base import (
    TAG_ATTEMPT,
    TAG_INSTANCE,
    TAG_JOB,
    TAG_MANAGED,
    InstanceState,
    NoCapacity,
    ProviderUnavailable,
    Throttled,
)
from providers.catalog import filter_offers, load_catalog
from providers.sandbox.provider import SandboxCloud, SandboxProvider, capabilities_like
from scheduler.jobs.jobfile import parse_job
from scheduler.lifecycle import service
from scheduler.lifecycle import tick as lifecycle
from scheduler.lifecycle.agent_reports import report_heartbeat
from scheduler.lifecycle.tick import SimulatedCrash, TickContext
from scheduler.models import Capacity, ReservedCapacity
from scheduler.settings import Settings
from scheduler.simulation.simagent import SimAgents
from scheduler.states import InstanceRowState, JobState
from scheduler.store.tables import AttemptRow, IdleStopRow, InstanceRow, JobRow

STEP = timedelta(minutes=1)


def job_spec(**policy):
    data = {
        "name": "helmet-small",
        "team": "vision-qa",
        "kind": "train",
        "model": "yolov9-s",
        "data": {"uri": "s3://bucket/helmet", "train_images": 4000, "val_images": 500},
        "train": {"epochs": 20, "batch": 64},
        "resources": {"gpus": ["A10"]},
        "where": {"providers": ["alibaba"], "regions": ["cn-hangzhou"]},
        "policy": {"deadline": "48h", "capacity": "auto", **policy},
    }
    return parse_job(data, "test.yaml")


class World:
    """A daemon's worth of parts on a SimClock: one sandbox cloud posing as Alibaba."""

    def __init__(self, store, clock, *, reserved=(), interruption_scale: float = 0.0, seed: int = 3,
                 list_delay_seconds: float = 0) -> None:
        self.store, self.clock = store, clock
        self.settings = Settings(_env_file=None, cluster="t", providers=["alibaba"], idle_stop_minutes=10,
                                 launch_grace_seconds=120, reserved=list(reserved))
        offers = filter_offers(load_catalog(), providers=["alibaba"], regions=["cn-hangzhou"])
        # list_delay_seconds: a new instance shows in listings only after a while (eventual consistency).
        self.cloud = SandboxCloud(clock, offers, seed=seed, interruption_scale=interruption_scale,
                                  list_delay_seconds=list_delay_seconds)
        self.provider = SandboxProvider(self.cloud, name="alibaba", capabilities=capabilities_like("alibaba"))
        self.agents = SimAgents(store, {"alibaba": self.provider}, "t", seed=seed)
        self.ctx = self.new_ctx()

    def new_ctx(self, **kw) -> TickContext:
        """A fresh daemon process: nothing in memory survives but the store and the cloud."""
        return TickContext(store=self.store, providers={"alibaba": self.provider}, clock=self.clock,
                           settings=self.settings, ids=random.Random(len(self.cloud.all_instances())), **kw)

    def submit(self, spec) -> str:
        return service.submit(self.store, self.clock, spec, source="test.yaml").id

    def step(self, n: int = 1, ctx: TickContext | None = None) -> None:
        for _ in range(n):
            self.agents.step(self.clock.now())
            lifecycle.tick(ctx or self.ctx)
            self.clock.advance(STEP)

    def run_until(self, predicate, limit: int = 5000) -> None:
        for _ in range(limit):
            if predicate():
                return
            self.step()
        raise AssertionError("condition not reached in simulated time")

    def job(self, job_id: str) -> JobRow:
        with self.store.session(write=False) as s:
            return s.get(JobRow, job_id)

    def attempts(self, job_id: str) -> list[AttemptRow]:
        with self.store.session(write=False) as s:
            return list(s.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.number)))

    def instances(self) -> list[InstanceRow]:
        with self.store.session(write=False) as s:
            return list(s.scalars(select(InstanceRow).order_by(InstanceRow.created_at)))

    def live_cloud(self):
        return [i for i in self.cloud.all_instances() if i.state is not InstanceState.terminated]


def assert_invariants(world: World) -> None:
    """No leak, no double launch, no lost job."""
    per_attempt: dict[tuple[str, str], int] = {}
    for inst in world.live_cloud():
        key = (inst.tags[TAG_JOB], inst.tags[TAG_ATTEMPT])
        per_attempt[key] = per_attempt.get(key, 0) + 1
    doubles = {k: n for k, n in per_attempt.items() if n > 1}
    assert not doubles, f"more than one live instance per (job, attempt): {doubles}"
    rows = {r.id: r for r in world.instances()}
    for inst in world.live_cloud():
        row = rows.get(inst.tags[TAG_INSTANCE])
        assert row is not None and row.state != InstanceRowState.terminated.value, \
            f"cloud instance {inst.instance_id} has no live record: leaked"
    with world.store.session(write=False) as s:
        states = set(s.scalars(select(JobRow.state)))
    assert states <= {s.value for s in JobState}, states


def test_train_job_runs_to_success_then_machine_is_idle_stopped(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(job_spec())
    w.run_until(lambda: w.job(job_id).state == JobState.succeeded.value)
    job = w.job(job_id)
    assert job.epochs_done == 20 and job.attempt == 1
    [inst] = w.instances()
    assert inst.job_id is None and inst.idle_since is not None
    # Warm for idle_stop_minutes, then stopped (Alibaba: stop-charging, spot can stop) or terminated.
    w.run_until(lambda: w.instances()[0].state in ("stopped", "terminated"), limit=30)
    with store.session(write=False) as s:
        stops = s.scalars(select(IdleStopRow)).all()
    assert len(stops) == 1
    assert stops[0].at - job.finished_at >= timedelta(minutes=10)
    assert_invariants(w)


def test_stopped_machine_is_terminated_after_the_retention_period(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(job_spec(capacity="on-demand"))
    w.run_until(lambda: w.job(job_id).state == JobState.succeeded.value)
    w.run_until(lambda: w.instances()[0].state == "stopped", limit=30)
    stopped_at = w.instances()[0].stopped_at
    sim_clock.advance(timedelta(hours=w.settings.stopped_retention_hours) - timedelta(minutes=5))
    w.step(2)
    assert w.instances()[0].state == "stopped"  # not yet
    w.run_until(lambda: w.instances()[0].state == "terminated", limit=20)
    assert sim_clock.now() - stopped_at >= timedelta(hours=w.settings.stopped_retention_hours)
    assert w.live_cloud() == []


def test_preempted_spot_job_resumes_from_last_checkpoint(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(job_spec(capacity="spot"))
    w.run_until(lambda: w.job(job_id).epochs_done >= 5)
    done_before = w.job(job_id).epochs_done
    [row] = w.instances()
    assert row.capacity == "spot"
    w.cloud.preempt(row.cloud_id)
    w.step()
    job = w.job(job_id)
    assert job.preemptions == 1 and job.state in (JobState.queued.value, JobState.planned.value,
                                                   JobState.provisioning.value)
    assert "resumes from epoch" in (w.attempts(job_id)[0].reason or "") or job.reason
    w.run_until(lambda: w.job(job_id).state == JobState.succeeded.value)
    first, second = w.attempts(job_id)[:2]
    assert first.state == "preempted" and first.end_epoch >= done_before
    assert second.number == 2 and second.start_epoch == first.end_epoch > 0
    assert second.client_token != first.client_token
    assert_invariants(w)


@pytest.mark.parametrize("point", ["after_intent", "after_launch"])
def test_crash_between_intent_and_cloud_leaves_no_leak_and_no_lost_job(store, sim_clock, point):
    w = World(store, sim_clock, list_delay_seconds=90)
    job_id = w.submit(job_spec())

    def crash(name: str) -> None:
        if name == point:
            raise SimulatedCrash(name)

    with pytest.raises(SimulatedCrash):
        w.step(ctx=w.new_ctx(crashpoint=crash))
    launched_at_cloud = len(w.cloud.all_instances())
    assert launched_at_cloud == (0 if point == "after_intent" else 1)
    [row] = w.instances()
    assert row.state == InstanceRowState.requested.value  # the intent survived the crash

    restarted = w.new_ctx()
    w.run_until(lambda: w.job(job_id).state == JobState.running.value)
    assert len(w.cloud.all_instances()) == 1, "the re-issued launch must reuse the client token"
    assert w.instances()[0].cloud_id == w.cloud.all_instances()[0].instance_id
    w.run_until(lambda: w.job(job_id).state == JobState.succeeded.value)
    assert_invariants(w)
    del restarted


def test_invariant_check_fails_when_tokens_are_random(store, sim_clock, monkeypatch):
    """The planted bug of docs/reliability.md: a random token per call launches twice after a crash."""
    w = World(store, sim_clock, list_delay_seconds=90)
    w.submit(job_spec())
    monkeypatch.setattr(lifecycle, "_request_token", lambda row: f"rnd-{random.random()}")

    def crash(name: str) -> None:
        if name == "after_launch":
            raise SimulatedCrash(name)

    with pytest.raises(SimulatedCrash):
        w.step(ctx=w.new_ctx(crashpoint=crash))
    w.step(3)
    with pytest.raises(AssertionError, match="more than one live instance"):
        assert_invariants(w)


def test_orphan_with_our_tags_is_terminated_after_grace_untagged_never(store, sim_clock):
    w = World(store, sim_clock)
    offer = w.provider.offers()[0]
    orphan = w.cloud.launch(region=offer.region, zone=offer.zone, instance_type=offer.instance_type,
                            capacity=Capacity.on_demand, client_token="leak-1",
                            tags={TAG_MANAGED: "t", TAG_INSTANCE: "inst-nobody", TAG_JOB: "job-x", TAG_ATTEMPT: "1"})
    stranger = w.cloud.launch(region=offer.region, zone=offer.zone, instance_type=offer.instance_type,
                              capacity=Capacity.on_demand, client_token="someone-else", tags={"owner": "ml-team"})
    w.step(1)
    assert w.cloud.get(orphan.instance_id).state is not InstanceState.terminated  # inside the grace period
    w.step(5)
    states = {i.instance_id: i.state for i in w.cloud.all_instances()}
    assert states[orphan.instance_id] in (InstanceState.terminating, InstanceState.terminated)
    assert states[stranger.instance_id] is not InstanceState.terminated


def test_no_capacity_avoids_the_offer_and_launches_elsewhere(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(job_spec(capacity="spot"))
    w.cloud.fail_next("launch", NoCapacity("no stock in this zone", code="OperationDenied.NoStock"))
    w.step(2)
    first, second = w.attempts(job_id)[:2]
    assert first.state == "launch_failed" and "no stock" in first.reason
    assert (second.zone, second.instance_type) != (first.zone, first.instance_type)
    assert len(w.cloud.all_instances()) == 1
    assert_invariants(w)


def test_cancel_running_job_frees_machine_for_idle_stop(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(job_spec())
    w.run_until(lambda: w.job(job_id).state == JobState.running.value)
    service.cancel(store, sim_clock, job_id)
    w.step()
    [row] = w.instances()
    assert row.job_id is None and row.idle_since is not None
    w.run_until(lambda: w.instances()[0].state in ("stopped", "terminated"), limit=30)
    assert w.attempts(job_id)[-1].state == "cancelled"
    assert_invariants(w)


def test_reserved_capacity_used_first_and_never_idle_stopped(store, sim_clock):
    res = ReservedCapacity(provider="alibaba", region="cn-hangzhou", instance_type="ecs.gn7i-c8g1.2xlarge",
                           count=1, until=sim_clock.now() + timedelta(days=90))
    w = World(store, sim_clock, reserved=[res])
    job_id = w.submit(job_spec())
    w.run_until(lambda: w.job(job_id).state == JobState.succeeded.value)
    [row] = w.instances()
    assert row.reserved and row.price_amount == Decimal(0)
    w.step(60)
    assert w.instances()[0].state == InstanceRowState.running.value  # prepaid: stopping saves nothing
    with store.session(write=False) as s:
        assert s.scalar(select(func.count()).select_from(IdleStopRow)) == 0


def test_throttled_launch_is_retried_with_the_same_token(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(job_spec())
    w.cloud.fail_next("launch", Throttled("slow down", code="Throttling"), times=2)
    w.step()
    assert len(w.cloud.all_instances()) == 1
    assert w.job(job_id).state in (JobState.provisioning.value, JobState.running.value)


def test_unreachable_cloud_keeps_the_intent_and_reissues_it(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(job_spec())
    w.cloud.lose_next_launch_response()  # created at the cloud, the answer lost
    w.cloud.fail_next("launch", ProviderUnavailable("down", code="ServiceUnavailable"), times=10)
    w.step()
    assert w.instances()[0].state == InstanceRowState.requested.value
    w.run_until(lambda: w.job(job_id).state == JobState.running.value)
    assert len(w.cloud.all_instances()) == 1
    assert_invariants(w)


def test_failed_listing_does_not_mark_instances_lost(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(job_spec())
    w.run_until(lambda: w.job(job_id).state == JobState.running.value)
    w.cloud.fail_next("instances", ProviderUnavailable("down"), times=50)
    [row] = w.instances()
    for _ in range(5):
        with store.session() as s:  # its agent still talks to the daemon: only the cloud's API is down
            report_heartbeat(s, [row.id], sim_clock.now())
        lifecycle.tick(w.ctx)
        sim_clock.advance(timedelta(minutes=3))
    assert w.job(job_id).state == JobState.running.value and w.job(job_id).preemptions == 0


def test_job_nothing_can_run_is_refused_with_a_reason(store, sim_clock):
    w = World(store, sim_clock)
    spec = job_spec(budget="1 CNY")
    job_id = w.submit(spec)
    w.step()
    job = w.job(job_id)
    assert job.state == JobState.failed.value
    assert job.reason.startswith("refused:") and "budget" in job.reason
    assert w.cloud.all_instances() == []


def test_spot_yaml_round_trip_of_plan_json_is_stored(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(job_spec())
    w.step()
    plan = w.job(job_id).plan_json
    assert plan["action"] == "launch" and plan["choice"]["provider"] == "alibaba"
    assert yaml.safe_dump(plan)  # plain JSON types only


def test_launch_carries_agent_user_data_without_the_api_token(store, sim_clock):
    w = World(store, sim_clock)
    secret = "daemon-api-token-0123456789abcdef"
    w.settings = Settings(_env_file=None, cluster="t", providers=["alibaba"], api_token=secret,
                          agent_api_url="https://gpusched.example:8642")
    w.ctx = w.new_ctx()
    job_id = w.submit(job_spec())
    w.step()
    [inst] = w.cloud.all_instances()
    assert inst.user_data.startswith("#cloud-config")
    assert f"GPUSCHED_AGENT_INSTANCE={inst.tags[TAG_INSTANCE]}" in inst.user_data  # the machine, not the job
    assert job_id not in inst.user_data
    assert "https://gpusched.example:8642" in inst.user_data
    assert secret not in inst.user_data


def test_team_over_its_monthly_budget_waits(store, sim_clock):
    w = World(store, sim_clock)
    w.settings = Settings(_env_file=None, cluster="t", providers=["alibaba"], team_budgets={"vision-qa": "0.01 CNY"},
                          reserved=[])
    w.ctx = w.new_ctx()
    job_id = w.submit(job_spec())
    w.step()
    job = w.job(job_id)
    assert job.state == JobState.failed.value and "monthly budget" in job.reason  # a whole month would not do
    w.settings = Settings(_env_file=None, cluster="t", providers=["alibaba"], team_budgets={"vision-qa": "800 CNY"})
    w.ctx = w.new_ctx()
    other = w.submit(job_spec())
    w.step()
    assert w.job(other).state in (JobState.provisioning.value, JobState.running.value)


def test_the_tick_runs_a_job_to_success_on_postgresql_too(pg_store, sim_clock):
    w = World(pg_store, sim_clock)
    job_id = w.submit(job_spec())
    w.run_until(lambda: w.job(job_id).state == JobState.succeeded.value)
    assert w.job(job_id).epochs_done == 20
    assert_invariants(w)


def test_running_job_switches_spot_to_on_demand_and_back_as_the_rule_says(store, sim_clock):
    """The spot-under-deadline rule in the daemon's own tick: a job that falls behind leaves spot at
    its next checkpoint; once it is ahead again and spot has stayed available, it goes back."""
    w = World(store, sim_clock)
    base = job_spec(deadline="7h")
    spec = base.model_copy(update={"train": base.train.model_copy(update={"epochs": 60}),
                                   "data": base.data.model_copy(update={"train_images": 20000})})
    job_id = w.submit(spec)
    speed = {"factor": 1.0}
    w.agents.true_factor = lambda _job, _gpu: speed["factor"]  # how fast the job really runs
    seen: list[str] = []
    for step in range(1000):
        w.step()
        attempts = w.attempts(job_id)
        if attempts and (not seen or seen[-1] != attempts[-1].capacity):
            seen.append(attempts[-1].capacity)
        if step == 20:
            speed["factor"] = 4.0  # the job runs 4x slower than planned: it falls behind
        if seen[-1] == "on-demand":
            speed["factor"] = 0.4  # and then catches up
        if w.job(job_id).state == JobState.succeeded.value:
            break
    assert seen == ["spot", "on-demand", "spot"]
    job = w.job(job_id)
    assert job.state == JobState.succeeded.value and job.finished_at <= job.deadline_at
    assert job.preemptions == 0  # moves are not preemptions
    moves = [a for a in w.attempts(job_id) if a.state == "preempted"]
    assert [m.reason.split(":")[0] for m in moves] == ["moved to on-demand", "moved to spot"]
    # each move happened at a checkpoint: the next attempt starts exactly where the last one ended
    atts = w.attempts(job_id)
    assert all(b.start_epoch == a.end_epoch for a, b in zip(atts, atts[1:]))
    assert_invariants(w)


def test_a_job_reclaimed_after_its_last_checkpoint_but_before_its_exit_is_relaunched_to_finish(store, sim_clock):
    """The agent checkpointed every epoch, then spot was reclaimed before the exit was reported:
    the job must not wait forever (the steering rule has nothing left to weigh); it is relaunched."""
    from scheduler.lifecycle.agent_reports import report_progress

    w = World(store, sim_clock)
    w.agents.step = lambda now: 0  # the test plays the agent
    job_id = w.submit(job_spec(deadline="48h"))
    w.run_until(lambda: w.job(job_id).state == JobState.running.value)
    first = w.attempts(job_id)[-1]
    with store.session() as s:
        report_progress(s, job_id, first.number, 20, "s3://bucket/helmet/last.pt", sim_clock.now())
    inst = next(r for r in w.instances() if r.job_id == job_id)
    w.cloud.preempt(inst.cloud_id)
    w.run_until(lambda: len(w.attempts(job_id)) == 2 and w.job(job_id).state == JobState.running.value,
                limit=120)
    again = w.attempts(job_id)[-1]
    assert again.start_epoch == 20 and w.job(job_id).preemptions == 1


def test_a_job_short_of_restarts_finishes_on_on_demand_and_is_not_steered_back_to_spot(store, sim_clock):
    """Every spot attempt is reclaimed before it checkpoints: before one more such loss could use up
    max_restarts the planner puts the job on on-demand, and the steering rule, however long spot then
    stays available, leaves it there (moving back is what once made such a job fail on its eleventh
    reclaim)."""
    w = World(store, sim_clock)
    base = job_spec(deadline="24h", max_restarts=6)
    job_id = w.submit(base.model_copy(update={"train": base.train.model_copy(update={"epochs": 60})}))
    for _ in range(12):
        w.run_until(lambda: w.job(job_id).state == JobState.running.value)
        if w.attempts(job_id)[-1].capacity != "spot":
            break
        inst = next(r for r in w.instances() if r.job_id == job_id)
        w.cloud.preempt(inst.cloud_id)
        w.run_until(lambda: w.job(job_id).state != JobState.running.value, limit=60)
    w.run_until(lambda: w.job(job_id).state == JobState.succeeded.value, limit=5000)
    job, attempts = w.job(job_id), w.attempts(job_id)
    reclaims = job.preemptions
    assert 2 <= reclaims <= 6 - 1  # spot while it was safe, and a restart still to spare
    assert job.finished_at <= job.deadline_at
    assert [a.capacity for a in attempts] == ["spot"] * reclaims + ["on-demand"]
    assert not any((a.reason or "").startswith("moved to spot") for a in attempts)
    assert job.restarts == reclaims  # no attempt got past its first epoch
    assert_invariants(w)


def test_reclaims_the_job_resumes_from_a_later_checkpoint_do_not_spend_max_restarts(store, sim_clock):
    """Every spot attempt is reclaimed after it checkpointed: the job stays on spot past max_restarts
    reclaims and succeeds (issue 17: counting these put every multi-day run on on-demand)."""
    w = World(store, sim_clock)
    base = job_spec(deadline="48h", max_restarts=3)
    job_id = w.submit(base.model_copy(update={"train": base.train.model_copy(update={"epochs": 60})}))
    for _ in range(6):
        w.run_until(lambda: w.job(job_id).state == JobState.running.value)
        w.run_until(lambda: w.job(job_id).epochs_done > w.attempts(job_id)[-1].start_epoch)
        inst = next(r for r in w.instances() if r.job_id == job_id)
        w.cloud.preempt(inst.cloud_id)
        w.run_until(lambda: w.job(job_id).state != JobState.running.value, limit=60)
    w.run_until(lambda: w.job(job_id).state in (JobState.succeeded.value, JobState.failed.value), limit=5000)
    job, attempts = w.job(job_id), w.attempts(job_id)
    assert job.state == JobState.succeeded.value
    assert job.preemptions == 6 > 3 and job.restarts == 0
    assert [a.capacity for a in attempts[:7]] == ["spot"] * 7
    assert_invariants(w)


def test_only_losses_in_a_row_without_progress_spend_max_restarts(store, sim_clock):
    """Every other spot attempt is reclaimed before it checkpoints, the rest after: more losses without
    progress in all than max_restarts, never two in a row. The job stays on spot and succeeds (issue 17:
    on a market reclaimed every two hours about one attempt in four is lost during its boot and first
    epoch, and counting those over a multi-day run put it on on-demand halfway)."""
    w = World(store, sim_clock)
    base = job_spec(deadline="48h", max_restarts=3)
    job_id = w.submit(base.model_copy(update={"train": base.train.model_copy(update={"epochs": 60})}))
    counts = []
    for k in range(10):
        w.run_until(lambda: w.job(job_id).state == JobState.running.value)
        if k % 2:
            w.run_until(lambda: w.job(job_id).epochs_done > w.attempts(job_id)[-1].start_epoch)
        inst = next(r for r in w.instances() if r.job_id == job_id)
        w.cloud.preempt(inst.cloud_id)
        w.run_until(lambda: w.job(job_id).state != JobState.running.value, limit=60)
        counts.append(w.job(job_id).restarts)
    assert counts == [1, 0] * 5
    w.run_until(lambda: w.job(job_id).state in (JobState.succeeded.value, JobState.failed.value), limit=5000)
    job, attempts = w.job(job_id), w.attempts(job_id)
    assert job.state == JobState.succeeded.value
    assert sum(a.end_epoch == a.start_epoch for a in attempts[:10]) == 5 > 3
    assert [a.capacity for a in attempts[:11]] == ["spot"] * 11
    assert_invariants(w)


def test_a_job_past_its_deadline_after_a_reclaim_is_finished_on_on_demand_not_refused(store, sim_clock):
    # Two refusals in one tick: the job that has run keeps its epochs on on-demand (``planner.fallback``),
    # the one that never ran is refused; each decision is matched to its own job.
    w = World(store, sim_clock)
    job_id = w.submit(job_spec(capacity="spot", deadline="24h"))
    w.run_until(lambda: w.job(job_id).epochs_done >= 2)
    [row] = w.instances()
    w.cloud.preempt(row.cloud_id)
    w.clock.advance(timedelta(hours=25))  # the deadline passes before the tick sees the reclaim
    hopeless = w.submit(job_spec(deadline="5m"))
    w.step()
    job, other = w.job(job_id), w.job(hopeless)
    assert other.state == JobState.failed.value and other.reason.startswith("refused:")
    assert job.state != JobState.failed.value
    assert job.plan_json["action"] == "launch" and job.plan_json["choice"]["capacity"] == "on-demand"
    assert job.plan_json["reason"].startswith("the deadline can no longer be met (")
    assert w.attempts(job_id)[-1].number == 2
    assert_invariants(w)
