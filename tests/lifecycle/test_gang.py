"""Multi-node jobs on the sandbox cloud: the whole gang launches in one zone, or none of it does.

Same daemon parts as test_lifecycle (the tick on a SimClock over a sandbox cloud posing as
Alibaba, simulated agents); the checks are on what the cloud and the store end up holding.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import select

from providers.base import (
    TAG_ATTEMPT,
    TAG_INSTANCE,
    TAG_JOB,
    InstanceRequest,
    InstanceState,
    ProviderUnavailable,
)
from providers.sandbox.provider import SandboxProvider, capabilities_like
from scheduler.agent import tokens as agent_token
from scheduler.agent.runner import AgentConfig, run_agent
from scheduler.app.api import create_app
from scheduler.lifecycle import service
from scheduler.lifecycle.gang import node_token as gang_node_token
from scheduler.lifecycle.tick import SimulatedCrash
from scheduler.settings import Settings
from scheduler.states import InstanceRowState, JobState
from scheduler.store.tables import AttemptRow, CostRecordRow, InstanceRow, JobRow
from tests.agent.machines import machine_row
from tests.fakes.objectstore import MemoryStore
from tests.fakes.yolov9 import TRAIN, dataset_files
from tests.lifecycle.test_lifecycle import World, job_spec

RUNNING, SUCCEEDED = JobState.running.value, JobState.succeeded.value


def gang_spec(nodes: int = 2, **policy):
    spec = job_spec(**policy)
    return spec.model_copy(update={"resources": spec.resources.model_copy(update={"nodes": nodes})})


def attempt_rows(w: World, job_id: str, number: int) -> list[InstanceRow]:
    """The instance rows written for one attempt, node 0 first (the tokens say which node)."""
    base = f"gs-{job_id}-a{number}"
    rows = [r for r in w.instances() if r.client_token == base or r.client_token.startswith(f"{base}-n")]
    return sorted(rows, key=lambda r: r.client_token)


def assert_gang_invariants(w: World, nodes: int = 2) -> None:
    """No leak, no double launch: a node per token at most, a gang's nodes at most per attempt."""
    live = w.live_cloud()
    per_attempt = Counter((i.tags[TAG_JOB], i.tags[TAG_ATTEMPT]) for i in live)
    assert all(n <= nodes for n in per_attempt.values()), f"more live instances than nodes: {per_attempt}"
    tokens = Counter(i.client_token for i in w.cloud.all_instances())
    assert all(n == 1 for n in tokens.values()), f"a client token launched twice: {tokens}"
    rows = {r.id: r for r in w.instances()}
    for inst in live:
        row = rows.get(inst.tags[TAG_INSTANCE])
        assert row is not None and row.state != InstanceRowState.terminated.value, \
            f"cloud instance {inst.instance_id} has no live record: leaked"


def settle(w: World) -> None:
    """Run until every machine is stopped or gone (the reaper's idle time, then the cloud's delays)."""
    w.run_until(lambda: all(r.state in ("stopped", "terminated") for r in w.instances()), limit=60)
    assert not [i for i in w.live_cloud() if i.state not in (InstanceState.stopped,)]


def test_two_node_job_launches_both_nodes_in_one_zone_and_costs_two_nodes(any_store, sim_clock):
    w = World(any_store, sim_clock)  # SQLite and PostgreSQL
    job_id = w.submit(gang_spec())
    w.step()
    first, second = attempt_rows(w, job_id, 1)
    assert (first.client_token, second.client_token) == (f"gs-{job_id}-a1", f"gs-{job_id}-a1-n1")
    assert {(r.zone, r.instance_type, r.capacity) for r in (first, second)} == {
        (first.zone, first.instance_type, first.capacity)}
    assert len(w.cloud.all_instances()) == 2
    assert {i.zone for i in w.cloud.all_instances()} == {first.zone}
    assert w.job(job_id).state == JobState.provisioning.value  # booting: not running until both are up

    w.run_until(lambda: w.job(job_id).state == RUNNING)
    [attempt] = w.attempts(job_id)
    nodes = attempt_rows(w, job_id, 1)
    assert all(r.state == InstanceRowState.running.value for r in nodes)
    assert attempt.instance_id == first.id and attempt.started_at == max(r.running_at for r in nodes)

    w.run_until(lambda: w.job(job_id).state == SUCCEEDED)
    job = w.job(job_id)
    assert job.epochs_done == 20 and job.attempt == 1
    nodes = attempt_rows(w, job_id, 1)
    assert all(r.job_id is None and r.idle_since == job.finished_at for r in nodes)  # both freed at once

    settle(w)
    with any_store.session(write=False) as s:
        busy = s.scalars(select(CostRecordRow).where(CostRecordRow.job_id == job_id,
                                                      CostRecordRow.kind == "busy")).all()
    by_node = {r.id: sum((c.amount for c in busy if c.instance_id == r.id), Decimal(0)) for r in nodes}
    # Both nodes billed from the same launch to the same finish at the same price: 2 x one node.
    assert len(by_node) == 2 and by_node[first.id] > 0 and by_node[first.id] == by_node[second.id]
    assert sum(c.amount for c in busy) == 2 * by_node[first.id]
    assert_gang_invariants(w)


class LastMachineInZone(SandboxProvider):
    """The zone has stock for one more machine only: the cloud sells out after the next launch."""

    armed = True

    def launch(self, request: InstanceRequest):
        inst = super().launch(request)
        if self.armed:
            self.armed = False
            self.cloud.sell_out(request.offer, request.capacity)
        return inst


def test_stock_out_on_the_second_node_terminates_the_first_and_relaunches_elsewhere(store, sim_clock):
    w = World(store, sim_clock)
    w.provider = LastMachineInZone(w.cloud, name="alibaba", capabilities=capabilities_like("alibaba"))
    w.ctx = w.new_ctx()
    job_id = w.submit(gang_spec(capacity="spot"))
    w.step()
    first = w.attempts(job_id)[0]
    assert first.state == "launch_failed" and "sold out" in first.reason
    node0, node1 = attempt_rows(w, job_id, 1)
    assert node1.state == InstanceRowState.terminated.value and node1.cloud_id is None  # refused: never created
    assert node0.state == InstanceRowState.terminating.value and node0.job_id is None
    assert w.cloud.get(node0.cloud_id).state in (InstanceState.terminating, InstanceState.terminated)

    w.run_until(lambda: w.job(job_id).state == SUCCEEDED)
    second = w.attempts(job_id)[1]
    assert (second.zone, second.instance_type) != (first.zone, first.instance_type)
    assert {(r.zone, r.instance_type) for r in attempt_rows(w, job_id, 2)} == {(second.zone, second.instance_type)}
    assert [r.state for r in attempt_rows(w, job_id, 1)] == ["terminated", "terminated"]  # confirmed by the cloud
    assert len(w.cloud.all_instances()) == 3  # node 0 of attempt 1, then the whole second gang
    assert_gang_invariants(w)


def test_losing_one_node_requeues_the_job_releases_the_other_and_resumes(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(gang_spec(capacity="spot"))
    w.run_until(lambda: w.job(job_id).epochs_done >= 5)
    survivor, lost = attempt_rows(w, job_id, 1)  # the cloud reclaims node 1, not the rank 0 node
    w.cloud.preempt(lost.cloud_id)
    w.run_until(lambda: w.job(job_id).preemptions == 1, limit=5)
    first = w.attempts(job_id)[0]
    assert first.state == "preempted" and first.end_epoch >= 5
    survivor, lost = attempt_rows(w, job_id, 1)
    assert lost.state == InstanceRowState.terminated.value and lost.preempted
    assert survivor.job_id is None and survivor.idle_since is not None  # released, warm for the reaper

    w.run_until(lambda: w.job(job_id).state == SUCCEEDED)
    second = w.attempts(job_id)[1]
    assert second.start_epoch == first.end_epoch and w.job(job_id).epochs_done == 20
    fresh = attempt_rows(w, job_id, 2)
    assert len(fresh) == 2 and survivor.id not in {r.id for r in fresh}  # a gang is launched whole, anew
    settle(w)
    assert attempt_rows(w, job_id, 1)[0].state in ("stopped", "terminated")  # the survivor was reaped
    assert_gang_invariants(w)


def test_a_reclaimed_gang_loses_the_work_of_every_node(store, sim_clock):
    """The simulation's lost GPU-hours count both nodes of a gang, not only the one the attempt names."""
    from scheduler.simulation.simulate import _lost_gpu_hours

    w = World(store, sim_clock)
    job_id = w.submit(gang_spec(capacity="spot"))
    w.run_until(lambda: w.job(job_id).epochs_done >= 3)
    sim_clock.advance(timedelta(minutes=20))  # into the next epoch: work no checkpoint holds yet
    w.cloud.preempt(attempt_rows(w, job_id, 1)[1].cloud_id)
    w.run_until(lambda: w.job(job_id).preemptions == 1, limit=5)
    with store.session(write=False) as s:
        lost = _lost_gpu_hours(s, w.agents, w.ctx)
    first, node0 = w.attempts(job_id)[0], attempt_rows(w, job_id, 1)[0]
    spec = w.agents._spec(job_id)
    est = w.agents._estimate_for(spec, job_id, node0.provider, node0.instance_type, node0.gpu, node0.gpu_count, 0)
    ran_h = (first.ended_at - first.started_at).total_seconds() / 3600
    kept_h = first.end_epoch * est.epoch_hours * w.agents.true_factor(job_id, node0.gpu)
    per_node = (ran_h - kept_h) * node0.gpu_count
    assert per_node > 0 and float(lost) == pytest.approx(2 * per_node, rel=1e-9)


@pytest.mark.parametrize("point", ["after_intent", "after_launch"])
def test_crash_after_the_intents_launches_each_node_exactly_once(store, sim_clock, point):
    w = World(store, sim_clock, list_delay_seconds=90)
    job_id = w.submit(gang_spec())

    def crash(name: str) -> None:
        if name == point:
            raise SimulatedCrash(name)

    with pytest.raises(SimulatedCrash):
        w.step(ctx=w.new_ctx(crashpoint=crash))
    assert len(w.cloud.all_instances()) == (0 if point == "after_intent" else 1)
    assert [r.state for r in attempt_rows(w, job_id, 1)] == ["requested", "requested"]  # both intents survived

    w.ctx = w.new_ctx()  # the restarted daemon
    w.run_until(lambda: w.job(job_id).state == RUNNING)
    rows = attempt_rows(w, job_id, 1)
    assert sorted(i.client_token for i in w.cloud.all_instances()) == [r.client_token for r in rows]
    assert {r.cloud_id for r in rows} == {i.instance_id for i in w.cloud.all_instances()}
    w.run_until(lambda: w.job(job_id).state == SUCCEEDED)
    assert len(w.cloud.all_instances()) == 2
    assert_gang_invariants(w)


def test_an_unanswered_node_launch_is_reissued_with_its_token(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(gang_spec())
    # Node 0: four calls fail, the fifth (the last retry) creates it and its answer is lost.
    w.cloud.fail_next("launch", ProviderUnavailable("down", code="ServiceUnavailable"), times=4)
    w.cloud.lose_next_launch_response()
    w.step()
    assert [r.state for r in attempt_rows(w, job_id, 1)] == ["requested", "requested"]  # outcome unknown
    assert len(w.cloud.all_instances()) == 1  # the rest of the gang waits for the next tick
    w.run_until(lambda: w.job(job_id).state == RUNNING)
    assert len(w.cloud.all_instances()) == 2
    assert_gang_invariants(w)


def test_cancel_releases_every_node_for_idle_stop(store, sim_clock):
    w = World(store, sim_clock)
    job_id = w.submit(gang_spec())
    w.run_until(lambda: w.job(job_id).state == RUNNING)
    service.cancel(store, sim_clock, job_id)
    w.step()
    rows = attempt_rows(w, job_id, 1)
    assert len(rows) == 2 and all(r.job_id is None and r.idle_since is not None for r in rows)
    assert w.attempts(job_id)[-1].state == "cancelled"
    settle(w)
    assert_gang_invariants(w)


def test_each_node_is_its_own_machine_and_learns_its_rank_with_its_work(store, sim_clock):
    w = World(store, sim_clock)
    secret = "daemon-api-token-0123456789abcdef"
    w.settings = Settings(_env_file=None, cluster="t", providers=["alibaba"], api_token=secret,
                          agent_api_url="https://gpusched.example:8642")
    w.ctx = w.new_ctx()
    job_id = w.submit(gang_spec())
    w.step()
    envs = {}
    for inst in w.cloud.all_instances():
        doc = yaml.safe_load(inst.user_data)
        env = next(f for f in doc["write_files"] if f["path"] == "/etc/gpusched/agent.env")["content"]
        assert secret not in env and "GPUSCHED_NODE_RANK" not in env  # the rank comes with the work
        envs[inst.tags[TAG_INSTANCE]] = dict(line.split("=", 1) for line in env.splitlines())
    rows = attempt_rows(w, job_id, 1)
    assert sorted(envs) == sorted(r.id for r in rows)
    cfgs = {row_id: AgentConfig.from_env(env) for row_id, env in envs.items()}
    assert all(cfg.instance_id == row_id for row_id, cfg in cfgs.items())
    w.run_until(lambda: w.job(job_id).state == RUNNING)
    http = TestClient(create_app(store, sim_clock, w.settings))
    ranks = {}
    for row in rows:
        work = http.get("/v1/agent/work", headers={"Authorization": f"Bearer {cfgs[row.id].token}"}).json()
        assert work["action"] == "run" and work["job_id"] == job_id and work["nodes"] == 2
        ranks[row.id] = work["node_rank"]
    assert [ranks[r.id] for r in rows] == [0, 1]  # node 0's machine is rank 0


AGENT_API_TOKEN = "agent-test-api-token-0123456789"
RANK0_ADDR = "10.0.3.17"


def running_gang(store, sim_clock, attempts: int = 1):
    """A two-node job whose attempt ``attempts`` runs on two machines (as the tick leaves it); the API,
    and each attempt's machines' tokens by rank: ``{attempt: {rank: (instance id, token)}}``. An earlier
    attempt's machines were released (warm, working for nobody)."""
    job = service.submit(store, sim_clock, gang_spec(), source="gang.yaml")
    key = agent_token.signing_key(AGENT_API_TOKEN)
    machines: dict[int, dict[int, tuple[str, str]]] = {}
    with store.session() as s:
        row = s.get(JobRow, job.id)
        row.state, row.attempt = "running", attempts
        for n in range(1, attempts + 1):
            current = n == attempts
            machines[n] = {}
            for rank in range(2):
                inst = f"inst-a{n}n{rank}0000000"
                s.add(machine_row(inst, sim_clock, job_id=job.id if current else None,
                                  client_token=gang_node_token(job.id, n, rank), provider="alibaba",
                                  region="cn-hangzhou", zone="cn-hangzhou-h", instance_type="ecs.gn7i-c8g1.2xlarge",
                                  gpu="A10", capacity="spot"))
                machines[n][rank] = (inst, agent_token.issue(key, inst, sim_clock.now(), timedelta(hours=2)))
            s.flush()
            s.add(AttemptRow(job_id=job.id, number=n, state="running" if current else "preempted",
                             client_token=f"gs-{job.id}-a{n}", provider="alibaba", region="cn-hangzhou",
                             zone="cn-hangzhou-h", instance_type="ecs.gn7i-c8g1.2xlarge", capacity="spot",
                             instance_id=machines[n][0][0], start_epoch=0, created_at=sim_clock.now(),
                             started_at=sim_clock.now()))
    http = TestClient(create_app(store, sim_clock, Settings(_env_file=None, api_token=AGENT_API_TOKEN)))
    return job, http, machines


def node_agent(machine: tuple[str, str], workdir: Path, **kw) -> AgentConfig:
    instance_id, token = machine
    return AgentConfig(api="http://testserver", instance_id=instance_id, token=token, workdir=str(workdir),
                       poll_seconds=kw.pop("poll_seconds", 0.05), **kw)


def dataset_bucket() -> MemoryStore:
    """The bucket of ``job_spec``'s dataset: every node stages it before it meets the others."""
    bucket = MemoryStore()
    bucket.put_tree("s3://bucket/helmet", dataset_files())
    return bucket


def bearer(machine: tuple[str, str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {machine[1]}"}


def launcher_flags(argv: list[str]) -> dict[str, str]:
    return {flag: argv[argv.index(flag) + 1] for flag in ("--nnodes", "--node_rank", "--master_addr")}


def test_only_rank_zero_reports_for_the_gang(store, sim_clock, tmp_path, monkeypatch):
    """Through the daemon's real API: every rank starts the launcher with rank 0's address; rank 1
    exiting ends nothing; rank 0's exit finishes the job."""
    job, http, machines = running_gang(store, sim_clock)
    launched: dict[int, list[str]] = {}

    monkeypatch.setenv("FAKE_EPOCH_SECONDS", "0.01")
    buckets: dict[int, MemoryStore] = {}

    def run(rank: int) -> bool:
        workdir = tmp_path / f"node{rank}"

        def launch(argv):  # stands in for the launcher and train_dual.py: what rank 0 writes, every rank writes
            launched[rank] = list(argv)
            return subprocess.Popen([sys.executable, "-c", TRAIN, *argv[1:]])

        buckets[rank] = dataset_bucket()
        return run_agent(node_agent(machines[1][rank], workdir), http, launch=launch, stores=buckets[rank],
                         address=lambda api: RANK0_ADDR)

    # Rank 0 advertises (as its agent does first thing), then rank 1 runs to its exit.
    mine = {"job_id": job.id, "attempt": 1}
    assert http.post("/v1/agent/rendezvous", headers=bearer(machines[1][0]),
                     json={**mine, "node_rank": 0, "addr": RANK0_ADDR}).status_code == 204
    # Only rank 0 speaks for the gang: rank 1's machine can neither advertise nor report.
    r = http.post("/v1/agent/rendezvous", headers=bearer(machines[1][1]),
                  json={**mine, "node_rank": 0, "addr": "10.0.3.18"})
    assert r.status_code == 400 and r.json()["error"] == "only rank 0 reports for the gang"
    assert http.post("/v1/agent/finished", headers=bearer(machines[1][1]), json={**mine, "ok": True}).status_code == 400
    assert run(1) is True
    with store.session(write=False) as s:
        assert s.get(JobRow, job.id).state == RUNNING and s.get(JobRow, job.id).epochs_done == 0
    assert not buckets[1].under("s3://bucket/helmet/runs")  # rank 1 staged the dataset, uploaded nothing
    assert run(0) is True
    with store.session(write=False) as s:
        assert s.get(JobRow, job.id).state == SUCCEEDED and s.get(JobRow, job.id).epochs_done == 20
        assert all(s.get(InstanceRow, m[0]).job_id is None for m in machines[1].values())  # both warm now
    assert "weights/last.pt" in buckets[0].under(f"s3://bucket/helmet/runs/{job.name}")
    assert {rank: launcher_flags(argv) for rank, argv in launched.items()} == {
        0: {"--nnodes": "2", "--node_rank": "0", "--master_addr": RANK0_ADDR},
        1: {"--nnodes": "2", "--node_rank": "1", "--master_addr": RANK0_ADDR},
    }
    events = http.get(f"/v1/jobs/{job.id}", headers={"Authorization": f"Bearer {AGENT_API_TOKEN}"}).json()["events"]
    assert sum(e["kind"] == "rendezvous" for e in events) == 1  # advertised twice, the same address: one event


class RankZeroBootsLater:
    """A clock for rank 1's agent: while it sleeps, rank 0 comes up (after ``polls`` polls) and advertises."""

    def __init__(self, sim_clock, http, machine: tuple[str, str], job_id: str, polls: int) -> None:
        self.clock, self.http, self.machine, self.job_id, self.left, self.sleeps = \
            sim_clock, http, machine, job_id, polls, 0

    def now(self):
        return self.clock.now()

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.clock.sleep(seconds)
        self.left -= 1
        if self.left == 0:
            r = self.http.post("/v1/agent/rendezvous", headers=bearer(self.machine),
                               json={"job_id": self.job_id, "attempt": 1, "node_rank": 0, "addr": RANK0_ADDR})
            assert r.status_code == 204


def test_a_rank_waits_for_rank_zero_to_advertise_then_starts(store, sim_clock, tmp_path):
    job, http, machines = running_gang(store, sim_clock)
    clock = RankZeroBootsLater(sim_clock, http, machines[1][0], job.id, polls=3)
    argvs: list[list[str]] = []
    ok = run_agent(node_agent(machines[1][1], tmp_path, poll_seconds=30), http, clock=clock,
                   launch=lambda argv: argvs.append(list(argv)) or subprocess.Popen([sys.executable, "-c", "pass"]),
                   stores=dataset_bucket())
    assert ok is True and clock.sleeps >= 3  # it polled until the address was there, then launched once
    assert len(argvs) == 1 and launcher_flags(argvs[0])["--master_addr"] == RANK0_ADDR


def test_a_rank_gives_up_when_rank_zero_never_advertises(store, sim_clock, tmp_path):
    from scheduler.agent.runner import RENDEZVOUS_TIMEOUT

    job, http, machines = running_gang(store, sim_clock)
    start = sim_clock.now()
    argvs: list[list[str]] = []
    ok = run_agent(node_agent(machines[1][1], tmp_path, poll_seconds=60), http, clock=sim_clock,
                   launch=lambda argv: argvs.append(list(argv)), stores=dataset_bucket())
    assert ok is False and argvs == []  # nothing launched: alone, it would train a model nobody asked for
    assert RENDEZVOUS_TIMEOUT <= sim_clock.now() - start <= RENDEZVOUS_TIMEOUT + timedelta(minutes=1)
    with store.session(write=False) as s:
        assert s.get(JobRow, job.id).state == RUNNING  # a rank's giving up ends nothing: the daemon decides


def test_an_old_attempts_address_never_reaches_the_next_attempt(store, sim_clock, tmp_path):
    """Attempt 2 runs on fresh machines: attempt 1's rank 0 is refused, and its address is not shown."""
    from scheduler.agent.runner import Work

    job, http, machines = running_gang(store, sim_clock, attempts=2)
    old, new = machines[1][0], machines[2][0]
    r = http.post("/v1/agent/rendezvous", headers=bearer(old),
                  json={"job_id": job.id, "attempt": 1, "node_rank": 0, "addr": "10.0.9.9"})
    assert r.status_code == 409 and "not this machine's work" in r.json()["error"]
    # Attempt 1's machine may not even name attempt 2: that is another machine's work.
    r = http.post("/v1/agent/rendezvous", headers=bearer(old),
                  json={"job_id": job.id, "attempt": 2, "node_rank": 0, "addr": "10.0.9.9"})
    assert r.status_code == 409
    argvs: list[list[str]] = []
    stale = Work(job_id=job.id, attempt=1, spec=gang_spec(), nodes=2)  # what it was told before the reclaim
    ok = run_agent(node_agent(old, tmp_path), http, stale, launch=lambda argv: argvs.append(argv),
                   stores=dataset_bucket(), address=lambda api: "10.0.9.9")
    assert ok is False and argvs == []  # a stale rank 0 does not train
    assert http.get("/v1/agent/work", headers=bearer(old)).json()["action"] == "wait"  # released: warm
    assert http.get("/v1/agent/work", headers=bearer(new)).json()["master_addr"] is None
    assert http.post("/v1/agent/rendezvous", headers=bearer(new),
                     json={"job_id": job.id, "attempt": 2, "node_rank": 0, "addr": "fd00::7"}).status_code == 204
    assert http.get("/v1/agent/work", headers=bearer(new)).json()["master_addr"] == "fd00::7"
    assert http.get("/v1/agent/work", headers=bearer(machines[2][1])).json()["master_addr"] == "fd00::7"


@pytest.mark.parametrize(("body", "says"), [
    ({"node_rank": 1, "addr": RANK0_ADDR}, "only rank 0"),
    ({"node_rank": 0, "addr": "rank0.internal; rm -rf /"}, "addr"),  # an IP address, nothing else
    ({"node_rank": 0}, "addr"),
    ({"node_rank": 0, "addr": RANK0_ADDR, "port": 1}, "port"),
])
def test_a_bad_rendezvous_is_refused_and_records_nothing(store, sim_clock, body, says):
    job, http, machines = running_gang(store, sim_clock)
    auth = bearer(machines[1][0])
    r = http.post("/v1/agent/rendezvous", headers=auth, json={"job_id": job.id, "attempt": 1, **body})
    assert r.status_code == 400 and says in r.json()["error"]
    assert http.get("/v1/agent/work", headers=auth).json()["master_addr"] is None
    assert http.post("/v1/agent/rendezvous", json={"job_id": job.id, "attempt": 1, "node_rank": 0,
                                                   "addr": RANK0_ADDR}).status_code == 401


def test_local_address_is_the_interface_on_the_route_to_the_daemon():
    from scheduler.agent.runner import local_address

    assert local_address("http://127.0.0.1:8642") == "127.0.0.1"
    assert local_address("https://localhost") in ("127.0.0.1", "::1")
