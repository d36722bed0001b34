"""One long-lived agent per machine, through the daemon's real API (TestClient) and the real tick.

The agent loop runs in a thread with a fake launch (a small Python process standing in for YOLOv9);
the daemon's side runs on a SimClock: its API, and the tick over a sandbox cloud, driven by the test.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import timedelta

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from structlog.testing import capture_logs

from providers.base import InstanceState
from scheduler.agent import tokens as agent_token
from scheduler.agent.machine import MachineGpus
from scheduler.agent.runner import AgentConfig, DaemonLink, Stale, run_machine_agent
from scheduler.app.api import create_app
from scheduler.clock import SystemClock
from scheduler.lifecycle import service
from scheduler.lifecycle import tick as lifecycle
from scheduler.lifecycle.agent_watch import silence
from scheduler.lifecycle.context import TickContext
from scheduler.lifecycle.tick import release_cancelled
from scheduler.settings import Settings
from scheduler.states import JobState
from scheduler.store.tables import EventRow, InstanceRow, JobRow
from tests.agent.machines import machine_auth, machine_token, put_on_machine
from tests.fakes.objectstore import MemoryStore
from tests.fakes.yolov9 import TRAIN, dataset_files
from tests.lifecycle.test_lifecycle import STEP, World, job_spec

API_TOKEN = "machine-agent-test-api-token-0123"
A10 = MachineGpus(name="NVIDIA A10", model="A10", count=1, memory_mib=23028, source="nvml")

# Stands in for train_dual.py: results.csv rows and last.pt files as YOLOv9 writes them (tests/fakes/yolov9.py).
FAKE_TRAIN = TRAIN


class Launcher:
    """The agent's ``launch``: records every command and starts a stand-in for it."""

    def __init__(self, script: str = FAKE_TRAIN) -> None:
        self.script, self.argvs, self.procs = script, [], []

    def __call__(self, argv):
        self.argvs.append(list(argv))
        proc = subprocess.Popen([sys.executable, "-c", self.script, *argv[1:]])
        self.procs.append(proc)
        return proc


class MachineClock:
    """The machine's clock in these tests: the daemon's simulated time, but real (short) sleeps."""

    def __init__(self, sim_clock) -> None:
        self.sim, self.real = sim_clock, SystemClock()

    def now(self):
        return self.sim.now()

    def sleep(self, seconds: float) -> None:
        self.real.sleep(seconds)


def bucket() -> MemoryStore:
    """The bucket of these tests' jobs (``job_spec``): the dataset folder they train on."""
    store = MemoryStore()
    store.put_tree("s3://bucket/helmet", dataset_files())
    return store


class AgentThread:
    """``run_machine_agent`` in a thread, as systemd runs it on the machine; ``stop`` ends its loop."""

    def __init__(self, cfg: AgentConfig, http: TestClient, launch, sim_clock, **kw) -> None:
        self.stop = threading.Event()
        self.error: BaseException | None = None

        def body() -> None:
            try:
                run_machine_agent(cfg, http, clock=MachineClock(sim_clock), launch=launch,
                                  stores=kw.pop("stores", bucket()), discover=kw.pop("discover", lambda: A10),
                                  gpu_util=lambda: 55.0, stop=self.stop, **kw)
            except BaseException as exc:  # the test fails with it below
                self.error = exc

        self.thread = threading.Thread(target=body, daemon=True)
        self.thread.start()

    def join(self, timeout: float = 20) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the agent did not exit"
        assert self.error is None, f"the agent crashed: {self.error!r}"

    def halt(self) -> None:
        self.stop.set()
        self.join()


def wait_for(predicate, timeout: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout} s")
        time.sleep(0.02)


def job_state(store, job_id: str) -> str:
    with store.session(write=False) as s:
        return s.get(JobRow, job_id).state


def events(store, kind: str, **where) -> list[EventRow]:
    with store.session(write=False) as s:
        q = select(EventRow).where(EventRow.kind == kind)
        for column, value in where.items():
            q = q.where(getattr(EventRow, column) == value)
        return list(s.scalars(q.order_by(EventRow.id)))


def small_job(name: str, epochs: int):
    spec = job_spec(capacity="on-demand")
    return spec.model_copy(update={"name": name, "train": spec.train.model_copy(update={"epochs": epochs})})


# --- the machine's life: two jobs, one boot ------------------------------------------------


def test_one_agent_runs_a_job_then_the_next_job_put_on_its_warm_machine(store, sim_clock, tmp_path):
    w = World(store, sim_clock)
    w.settings = Settings(_env_file=None, cluster="t", providers=["alibaba"], idle_stop_minutes=30, idle_warm="fixed",
                          api_token=API_TOKEN, agent_api_url="http://testserver", agent_silence_minutes=60)
    w.ctx = w.new_ctx()
    http = TestClient(create_app(store, sim_clock, w.settings))
    first = w.submit(small_job("helmet-a", 3))

    def tick() -> None:  # the daemon's tick; the real agent below does the agents' part
        lifecycle.tick(w.ctx)
        sim_clock.advance(STEP)

    for _ in range(10):
        tick()
        if job_state(store, first) == JobState.running.value:
            break
    [cloud] = w.cloud.all_instances()
    doc = yaml.safe_load(cloud.user_data)  # the one boot: cloud-init's env file is all the agent gets
    env = next(f for f in doc["write_files"] if f["path"] == "/etc/gpusched/agent.env")["content"]
    cfg = AgentConfig.from_env(dict(line.split("=", 1) for line in env.splitlines()))
    assert cfg.cloud == "alibaba"  # where a spot machine would read its reclaim notice
    cfg = replace(cfg, workdir=str(tmp_path / "work"), started_mark=str(tmp_path / "agent-started"), poll_seconds=0.02)
    launch = Launcher()
    agent = AgentThread(cfg, http, launch, sim_clock)

    wait_for(lambda: job_state(store, first) == JobState.succeeded.value, what="job A finished")
    assert (tmp_path / "agent-started").exists()
    with store.session(write=False) as s:
        assert s.get(JobRow, first).epochs_done == 3
        assert s.get(InstanceRow, cfg.instance_id).job_id is None  # warm, waiting for work

    second = w.submit(small_job("helmet-b", 2))
    tick()  # the planner puts B on the warm machine: action "reuse", no launch
    assert events(store, "job_reused_instance", job_id=second, instance_id=cfg.instance_id)
    wait_for(lambda: job_state(store, second) == JobState.succeeded.value, what="job B finished")

    assert len(w.cloud.all_instances()) == 1  # no second boot
    assert [a[a.index("--name") + 1] for a in launch.argvs] == ["helmet-a", "helmet-b"]
    with store.session(write=False) as s:
        assert s.get(JobRow, second).epochs_done == 2
        assert s.get(InstanceRow, cfg.instance_id).last_heartbeat_at is not None
    assert len(events(store, "agent_hello", instance_id=cfg.instance_id)) == 1
    assert all(w.attempts(job)[-1].instance_id == cfg.instance_id for job in (first, second))

    sim_clock.advance(timedelta(minutes=31))
    tick()  # idle past its warm time: the reaper stops the machine, and its agent is told to exit
    wait_for(lambda: not agent.thread.is_alive(), what="the agent's exit")
    agent.join()
    assert not agent.stop.is_set()  # it left because the daemon said so


# --- one machine's token, one machine's work -------------------------------------------------


def test_a_machine_token_speaks_only_for_its_own_instance(store, sim_clock):
    http = TestClient(create_app(store, sim_clock, Settings(_env_file=None, api_token=API_TOKEN)))
    a = service.submit(store, sim_clock, job_spec(), source="a.yaml").id
    b = service.submit(store, sim_clock, job_spec(), source="b.yaml").id
    put_on_machine(store, sim_clock, a, instance_id="inst-00000000000a")
    put_on_machine(store, sim_clock, b, instance_id="inst-00000000000b")
    mine, theirs = machine_auth(API_TOKEN, "inst-00000000000a", sim_clock), {"job_id": b, "attempt": 1}
    assert http.get("/v1/agent/work", headers=mine).json()["job_id"] == a
    for path, extra in (("/progress", {"epochs_done": 5}), ("/finished", {"ok": True}),
                        ("/rendezvous", {"node_rank": 0, "addr": "10.0.0.9"}), ("/heartbeat", {})):
        r = http.post(f"/v1/agent{path}", headers=mine, json={**theirs, **extra})
        assert r.status_code == 409, path
    assert job_state(store, b) == JobState.running.value
    with store.session(write=False) as s:
        assert s.get(JobRow, b).epochs_done == 0
    # A token for a machine the daemon does not know opens nothing (the agent exits on a 401): no work,
    # no renewal, no hello.
    ghost = machine_auth(API_TOKEN, "inst-0000000000ff", sim_clock)
    assert http.get("/v1/agent/work", headers=ghost).status_code == 401
    assert http.post("/v1/agent/token", headers=ghost).status_code == 401
    assert http.post("/v1/agent/hello", headers=ghost, json={"gpu_count": 1, "source": "nvml"}).status_code == 401
    # Forged, expired, or the daemon's own token: not a machine's.
    forged = machine_auth("another-daemon-token-0123456789", "inst-00000000000a", sim_clock)
    expired = {"Authorization": "Bearer " + agent_token.issue(
        agent_token.signing_key(API_TOKEN), "inst-00000000000a", sim_clock.now() - timedelta(hours=3),
        timedelta(hours=1))}
    for auth in (forged, expired, {"Authorization": f"Bearer {API_TOKEN}"}, {}):
        assert http.get("/v1/agent/work", headers=auth).status_code == 401
        assert http.post("/v1/agent/finished", headers=auth, json={"job_id": a, "attempt": 1, "ok": True}
                         ).status_code == 401
    assert job_state(store, a) == JobState.running.value


def test_the_agent_renews_its_token_and_pushes_the_machines_shutdown_with_it(store, sim_clock):
    http = TestClient(create_app(store, sim_clock, Settings(_env_file=None, api_token=API_TOKEN)))
    job = service.submit(store, sim_clock, job_spec(), source="a.yaml").id
    inst = put_on_machine(store, sim_clock, job)
    pushed = []
    cfg = AgentConfig(api="http://testserver", instance_id=inst, token=machine_token(API_TOKEN, inst, sim_clock, 20))
    link = DaemonLink(cfg, http, sim_clock, on_renew=pushed.append)
    assert link.renew_if_due() is False  # 20 h left: not yet
    sim_clock.advance(timedelta(hours=9))
    assert link.renew_if_due() is True
    assert agent_token.expires_at(link.token) == sim_clock.now() + timedelta(hours=24) == pushed[0]
    assert http.get("/v1/agent/work", headers={"Authorization": f"Bearer {link.token}"}).json()["job_id"] == job
    with store.session() as s:  # the machine is being terminated: no more renewals
        s.get(InstanceRow, inst).state = "terminating"
    sim_clock.advance(timedelta(hours=13))
    with pytest.raises(Stale):
        link.renew_if_due()
    assert http.get("/v1/agent/work", headers={"Authorization": f"Bearer {link.token}"}).json() == {"action": "exit"}


# --- failures: reported once, never re-run ----------------------------------------------------


def test_a_failed_job_is_reported_once_and_not_rerun_after_an_agent_restart(store, sim_clock, tmp_path):
    http = TestClient(create_app(store, sim_clock, Settings(_env_file=None, api_token=API_TOKEN)))
    job = service.submit(store, sim_clock, job_spec(), source="a.yaml").id
    inst = put_on_machine(store, sim_clock, job)
    cfg = AgentConfig(api="http://testserver", instance_id=inst, token=machine_token(API_TOKEN, inst, sim_clock),
                      workdir=str(tmp_path / "work"), poll_seconds=0.02)
    launch = Launcher("import sys; print('CUDA error: an illegal memory access'); sys.exit(3)")
    agent = AgentThread(cfg, http, launch, sim_clock)
    wait_for(lambda: job_state(store, job) == JobState.failed.value, what="the failure report")
    time.sleep(0.2)  # it goes on asking for work: the failure does not end the agent
    assert agent.thread.is_alive()
    agent.halt()
    restarted = AgentThread(cfg, http, launch, sim_clock)  # systemd restarts an agent (say it crashed after reporting)
    time.sleep(0.3)
    restarted.halt()
    assert len(launch.argvs) == 1  # the job ran once
    assert len(events(store, "job_finished", job_id=job)) == 1
    assert len(events(store, "agent_hello", instance_id=inst)) == 2  # each start says hello
    with store.session(write=False) as s:
        assert "exit status 3" in s.get(JobRow, job).reason


def test_a_cancelled_job_is_stopped_on_its_machine_and_the_machine_waits_for_work(store, sim_clock, tmp_path):
    settings = Settings(_env_file=None, api_token=API_TOKEN)
    http = TestClient(create_app(store, sim_clock, settings))
    job = service.submit(store, sim_clock, job_spec(), source="a.yaml").id
    inst = put_on_machine(store, sim_clock, job)
    cfg = AgentConfig(api="http://testserver", instance_id=inst, token=machine_token(API_TOKEN, inst, sim_clock),
                      workdir=str(tmp_path / "work"), poll_seconds=0.02)
    launch = Launcher("import time; time.sleep(60)")
    agent = AgentThread(cfg, http, launch, sim_clock)
    wait_for(lambda: launch.procs, what="the launch")
    service.cancel(store, sim_clock, job)
    release_cancelled(TickContext(store=store, providers={}, clock=sim_clock, settings=settings), sim_clock.now())
    # The next heartbeat is answered 409: the job's process is stopped, nothing is reported.
    wait_for(lambda: launch.procs[0].poll() is not None, what="the job's process stopped")
    assert launch.procs[0].returncode != 0
    time.sleep(0.1)
    assert agent.thread.is_alive()  # and it waits for its next job
    agent.halt()
    assert job_state(store, job) == JobState.cancelled.value
    assert not events(store, "job_finished", job_id=job)


# --- hello: what the machine really is --------------------------------------------------------


def test_hello_with_a_gpu_that_disagrees_with_the_offer_is_recorded_and_warned(store, sim_clock):
    http = TestClient(create_app(store, sim_clock, Settings(_env_file=None, api_token=API_TOKEN)))
    job = service.submit(store, sim_clock, job_spec(), source="a.yaml").id
    inst = put_on_machine(store, sim_clock, job, gpu="A10G", gpu_count=4)
    auth = machine_auth(API_TOKEN, inst, sim_clock)
    with capture_logs() as logs:
        r = http.post("/v1/agent/hello", headers=auth, json={
            "gpu_name": "Tesla T4", "gpu_model": "T4", "gpu_count": 4, "gpu_memory_mib": 15360, "source": "nvidia-smi"})
    assert r.status_code == 200 and r.json()["instance_id"] == inst
    [event] = events(store, "agent_hello", instance_id=inst)
    assert event.message == "agent up: 4 x Tesla T4, 15.0 GiB each (nvidia-smi); the offer sold 4 x A10G"
    [warning] = [e for e in logs if e["event"] == "agent_gpu_mismatch"]
    assert warning["log_level"] == "warning" and warning["offer_gpu"] == "A10G" and warning["seen_model"] == "T4"
    with store.session(write=False) as s:
        assert s.get(InstanceRow, inst).last_heartbeat_at == sim_clock.now()
    # What the offer sold, as sold: an event, no warning.
    with capture_logs() as logs:
        http.post("/v1/agent/hello", headers=auth, json={
            "gpu_name": "NVIDIA A10G", "gpu_model": "A10G", "gpu_count": 4, "source": "nvml"})
    assert not [e for e in logs if e["event"] == "agent_gpu_mismatch"]
    assert events(store, "agent_hello", instance_id=inst)[-1].message == "agent up: 4 x NVIDIA A10G (nvml)"
    r = http.post("/v1/agent/hello", headers=auth, json={"gpu_count": 1, "source": "nvml", "shell": "rm -rf /"})
    assert r.status_code == 400  # closed bodies


def test_the_agent_runs_jobs_with_the_gpus_its_machine_has(store, sim_clock, tmp_path):
    http = TestClient(create_app(store, sim_clock, Settings(_env_file=None, api_token=API_TOKEN)))
    spec = job_spec()
    job = service.submit(store, sim_clock, spec.model_copy(update={"train": spec.train.model_copy(
        update={"epochs": 1})}), source="a.yaml").id
    inst = put_on_machine(store, sim_clock, job, gpu="A10", gpu_count=1)
    cfg = AgentConfig(api="http://testserver", instance_id=inst, token=machine_token(API_TOKEN, inst, sim_clock),
                      workdir=str(tmp_path / "work"), poll_seconds=0.02, gpu="A10", gpu_count=1)
    launch = Launcher()
    two = MachineGpus("NVIDIA A10G", "A10G", 2, 23028, "nvml")
    agent = AgentThread(cfg, http, launch, sim_clock, discover=lambda: two)
    wait_for(lambda: job_state(store, job) == JobState.succeeded.value, what="the job")
    agent.halt()
    argv = launch.argvs[0]
    assert argv[argv.index("--device") + 1] == "0,1"  # two GPUs seen: both used, one process each
    assert argv[argv.index("--nproc_per_node") + 1] == "2" and "torch.distributed.launch" in argv
    assert argv[argv.index("--batch") + 1] == "64"  # 32 per A10G, two of them


@pytest.mark.parametrize("seen, gpu, count", [
    (MachineGpus("NVIDIA A10G", "A10G", 4, 23028, "nvml"), "A10G", 4),
    # A GPU we have no model for: its count is the machine's, the offer's model sizes the batch.
    (MachineGpus("NVIDIA H20", None, 8, 97871, "nvidia-smi"), "A10", 8),
    # The driver was not asked, or sees nothing: the offer's figures stand (a GPU machine never trains on its CPU).
    (MachineGpus("A10", "A10", 2, 23552, "user-data"), "A10", 1),
    (MachineGpus("", None, 0, None, "nvml"), "A10", 1),
])
def test_jobs_run_with_the_gpu_count_the_driver_reports(seen, gpu, count):
    from scheduler.agent.runner import with_machine_gpus

    cfg = with_machine_gpus(AgentConfig(api="http://d", instance_id="inst-1", token="t", gpu="A10", gpu_count=1), seen)
    assert (cfg.gpu, cfg.gpu_count) == (gpu, count)


# --- the silence watch ------------------------------------------------------------------------


@pytest.mark.parametrize("heard, up, says", [
    (None, 9, None), (None, 10, "never said hello in 10 min after boot"),
    (5, 20, None), (10, 30, "silent for 10 min"),
    # Heard only before the machine last came up (a stopped machine started again): counted from boot.
    (30, 5, None), (30, 20, "never said hello in 20 min after boot"),
])
def test_silence_is_measured_from_the_last_word_or_from_boot(sim_clock, heard, up, says):
    now = sim_clock.now()
    last = None if heard is None else now - timedelta(minutes=heard)
    why = silence(last, now - timedelta(minutes=up), now, timedelta(minutes=10))
    assert (why is None) if says is None else (says in why)


def test_a_silent_agent_gets_its_job_requeued_and_its_machine_terminated(store, sim_clock):
    w = World(store, sim_clock)
    job = w.submit(job_spec())
    w.run_until(lambda: w.job(job).state == JobState.running.value and w.job(job).epochs_done >= 3)
    [first] = w.instances()
    w.agents.silent.add(first.id)  # the machine hangs: no word from its agent, no progress
    silent_since = sim_clock.now()
    w.run_until(lambda: w.job(job).state == JobState.queued.value or w.job(job).attempt > 1, limit=30)
    assert sim_clock.now() - silent_since >= timedelta(minutes=10)
    attempt = w.attempts(job)[0]
    assert attempt.state == "preempted" and "silent for 10 min" in attempt.reason
    assert w.job(job).preemptions == 1  # counted against max_restarts, like a reclaim
    [event] = events(store, "agent_silent")
    assert event.instance_id == first.id and event.job_id == job
    assert event.message.endswith("machine terminated, its job requeued")
    w.run_until(lambda: w.job(job).state == JobState.succeeded.value)
    assert w.attempts(job)[1].start_epoch >= 3  # resumed from its last checkpoint
    with store.session(write=False) as s:
        row = s.get(InstanceRow, first.id)
        assert row.state == "terminated" and "silent" in row.reason
    assert w.cloud.all_instances()[0].state is InstanceState.terminated


def test_an_agent_that_never_says_hello_is_handled_the_same_and_fails_the_job_past_max_restarts(store, sim_clock):
    w = World(store, sim_clock)
    job = w.submit(job_spec(max_restarts=0))
    for _ in range(20):  # the daemon alone: no agent ever speaks
        lifecycle.tick(w.ctx)
        sim_clock.advance(STEP)
        if w.job(job).state == JobState.failed.value:
            break
    job_row, [inst] = w.job(job), w.instances()
    assert job_row.state == JobState.failed.value and "max_restarts 0" in job_row.reason
    assert sim_clock.now() - inst.running_at >= timedelta(minutes=10)
    [event] = events(store, "agent_silent")
    assert "never said hello in 10 min after boot" in event.message
    assert inst.state in ("terminating", "terminated")


def test_silent_agents_never_fire_while_the_simulated_agents_speak(store, sim_clock):
    w = World(store, sim_clock)
    job = w.submit(job_spec())
    w.run_until(lambda: w.job(job).state == JobState.succeeded.value)
    w.step(30)  # warm, then stopped by the reaper, not by the watch
    with store.session(write=False) as s:
        assert s.scalar(select(func.count()).select_from(EventRow).where(EventRow.kind == "agent_silent")) == 0
        assert events(store, "idle_stop")


def test_the_watch_can_be_turned_off(store, sim_clock):
    w = World(store, sim_clock)
    w.settings = w.settings.model_copy(update={"agent_silence_minutes": 0})
    w.ctx = w.new_ctx()
    job = w.submit(job_spec())
    for _ in range(30):
        lifecycle.tick(w.ctx)
        sim_clock.advance(STEP)
    assert w.job(job).state == JobState.running.value and not events(store, "agent_silent")

