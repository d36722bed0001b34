"""Spot reclaim notices, end to end: the machine's agent reads the cloud's notice from the metadata
service (tests/fakes/metadata.py serves each cloud's format), uploads the newest complete checkpoint,
tells the daemon (``POST /v1/agent/reclaiming``, through the real API), stops the job and asks for work;
the daemon requeues the job at once, terminates the machine on its next tick, and counts the
preemption once when the cloud's own listing shows the reclaim later.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from scheduler.agent.process import job_launcher, log_path_for
from scheduler.agent.runner import run_agent
from scheduler.app.api import create_app
from scheduler.settings import Settings
from scheduler.states import JobState
from scheduler.store.tables import InstanceRow, UsageIntervalRow
from tests.agent.harness import AUTH, TOKEN, Machine, example
from tests.agent.machines import machine_auth
from tests.agent.test_agent import PREFIX, held
from tests.agent.test_machine_agent import events, wait_for
from tests.fakes.metadata import MetadataServer
from tests.lifecycle.test_lifecycle import World, job_spec


@pytest.fixture
def metadata():
    server = MetadataServer()
    yield server
    server.close()


def recording_launcher(m: Machine, procs: list):
    base = job_launcher(m.cfg, log_path_for(m.cfg, m.spec.name, 1))

    def launch(argv):
        procs.append(base(argv))
        return procs[-1]
    return launch


# --- the machine's side ---------------------------------------------------------------------


@pytest.mark.parametrize("cloud", ["aws", "alibaba", "tencent"])
def test_a_reclaim_notice_keeps_the_newest_checkpoint_requeues_the_job_and_stops_it(
        store, sim_clock, tmp_path, monkeypatch, metadata, cloud):
    monkeypatch.setenv("FAKE_EPOCH_SECONDS", "0.1")
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=200), capacity="spot",
                cloud=cloud, metadata_url=metadata.url, reclaim_poll_seconds=0.02)
    m.cfg = replace(m.cfg, poll_seconds=0.5)  # a slow poll: the notice must cut it short
    procs: list = []
    done: dict[str, bool] = {}
    agent = threading.Thread(target=lambda: done.update(
        ok=run_agent(m.cfg, m.http, launch=recording_launcher(m, procs), stores=m.bucket)), daemon=True)
    agent.start()
    wait_for(lambda: m.detail()["epochs_done"] >= 2, what="two epochs reported")
    at = sim_clock.now() + timedelta(minutes=2)
    metadata.notify(cloud, at)
    agent.join(20)
    assert not agent.is_alive() and done["ok"] is False
    assert procs[0].poll() is not None  # the job's process was stopped

    # The newest complete epoch went up and was reported before the daemon heard the notice.
    paths = [path for path, _, status in m.http.reports if status < 300 and path != "/logs"]
    assert paths[-1] == "/reclaiming" and paths[-2] == "/progress"
    [notice] = m.http.bodies("/reclaiming")
    assert notice["attempt"] == 1 and notice["at"].startswith(at.strftime("%Y-%m-%dT%H:%M:%S"))
    detail = m.detail()
    assert held(m.bucket.objects[PREFIX + "weights/last.pt"]) == detail["epochs_done"] - 1
    assert detail["checkpoint_uri"] == PREFIX + "weights/last.pt"
    # The daemon took the preemption at once: requeued to resume from that checkpoint, one restart counted.
    assert detail["state"] == "queued" and detail["preemptions"] == 1
    [attempt] = detail["attempts"]
    assert attempt["state"] == "preempted" and attempt["reason"].startswith("spot reclaim notice")
    assert f"resumes from epoch {detail['epochs_done']}" in detail["reason"]
    assert [e["kind"] for e in detail["events"]].count("reclaim_notice") == 1
    # The machine works for nobody now, and its agent is told to go.
    assert m.api.get("/v1/agent/work", headers=machine_auth(TOKEN, m.instance, sim_clock)).json() == \
        {"action": "exit"}
    with store.session(write=False) as s:
        row = s.get(InstanceRow, m.instance)
        assert row.job_id is None and row.preempted and row.state == "running"


def test_an_on_demand_machine_never_asks_for_reclaim_notices(store, sim_clock, tmp_path, metadata):
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=2), cloud="aws",
                metadata_url=metadata.url, reclaim_poll_seconds=0.01)
    assert run_agent(m.cfg, m.http, stores=m.bucket) is True
    assert metadata.requests == []


def test_a_metadata_service_that_fails_never_ends_the_job(store, sim_clock, tmp_path, metadata):
    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=3), capacity="spot",
                cloud="aws", metadata_url=metadata.url + "/broken", reclaim_poll_seconds=0.01)
    assert run_agent(m.cfg, m.http, stores=m.bucket) is True
    assert m.detail()["state"] == "succeeded" and metadata.requests  # asked, answered nonsense, went on


def test_a_notice_that_came_while_the_inputs_were_fetched_starts_nothing(store, sim_clock, tmp_path):
    from scheduler.agent.reclaim import ReclaimNotice

    m = Machine(store, sim_clock, tmp_path, example("helmet-s-train.yaml", epochs=3), capacity="spot")
    notice = ReclaimNotice(cloud="aws", action="terminate", at=sim_clock.now() + timedelta(minutes=2))
    assert run_agent(m.cfg, m.http, stores=m.bucket, reclaim_check=lambda: notice) is False
    assert m.log == "" and m.detail()["state"] == "queued" and m.detail()["preemptions"] == 1


# --- the daemon's side ------------------------------------------------------------------------


def spot_world(store, sim_clock) -> tuple[World, TestClient, str, InstanceRow]:
    """A spot training job running on the sandbox cloud, three epochs in (the simulated agent reports them)."""
    w = World(store, sim_clock)
    api = TestClient(create_app(store, sim_clock, Settings(_env_file=None, api_token=TOKEN)))
    job = w.submit(job_spec(capacity="spot"))
    w.run_until(lambda: w.job(job).state == JobState.running.value and w.job(job).epochs_done >= 3)
    [row] = w.instances()
    assert row.capacity == "spot"
    return w, api, job, row


def notify(api: TestClient, row: InstanceRow, job: str, clock, attempt: int = 1):
    return api.post("/v1/agent/reclaiming", headers=machine_auth(TOKEN, row.id, clock),
                    json={"job_id": job, "attempt": attempt, "at": (clock.now() + timedelta(minutes=2)).isoformat()})


def test_the_cloud_reporting_the_reclaim_later_counts_nothing_twice(store, sim_clock):
    w, api, job, row = spot_world(store, sim_clock)
    done = w.job(job).epochs_done
    assert notify(api, row, job, sim_clock).status_code == 204
    assert w.job(job).state == JobState.queued.value and w.job(job).preemptions == 1
    assert notify(api, row, job, sim_clock).status_code == 409  # said twice (a retried report): refused
    w.cloud.preempt(row.cloud_id)  # the cloud's own listing shows the reclaim a tick later
    w.step()
    assert w.job(job).preemptions == 1 and len(events(store, "job_preempted", job_id=job)) == 1
    assert events(store, "instance_lost", instance_id=row.id)
    w.run_until(lambda: w.job(job).state == JobState.succeeded.value)
    assert w.job(job).preemptions == 1
    second = w.attempts(job)[1]
    assert second.start_epoch >= done and second.instance_id != row.id  # never back on the doomed machine


def test_the_tick_terminates_the_machine_whose_agent_passed_the_notice_on(store, sim_clock):
    w, api, job, row = spot_world(store, sim_clock)
    assert notify(api, row, job, sim_clock).status_code == 204
    w.step()
    [event] = events(store, "reclaim_terminate", instance_id=row.id)
    assert event.message.startswith("spot reclaim notice: the cloud takes the machine at")
    with store.session(write=False) as s:
        assert s.get(InstanceRow, row.id).state in ("terminating", "terminated")
        assert not s.scalars(select(UsageIntervalRow).where(UsageIntervalRow.instance_id == row.id,
                                                            UsageIntervalRow.end.is_(None))).all()
    w.run_until(lambda: w.job(job).state == JobState.succeeded.value)
    assert w.job(job).preemptions == 1
    with store.session(write=False) as s:
        assert s.get(InstanceRow, row.id).state == "terminated"


def test_a_notice_for_work_that_is_not_the_machines_is_refused(store, sim_clock):
    w, api, job, row = spot_world(store, sim_clock)
    assert notify(api, row, job, sim_clock, attempt=2).status_code == 409
    r = api.post("/v1/agent/reclaiming", headers=machine_auth(TOKEN, row.id, sim_clock),
                 json={"job_id": job, "attempt": 1, "at": "soon"})
    assert r.status_code == 400
    assert api.post("/v1/agent/reclaiming", headers=AUTH, json={"job_id": job, "attempt": 1,
                                                                "at": sim_clock.now().isoformat()}).status_code == 401
    assert w.job(job).state == JobState.running.value and w.job(job).preemptions == 0
