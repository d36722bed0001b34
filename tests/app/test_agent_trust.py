"""A machine's token is trusted only as far as its job and attempt allow (issue 16): regression tests for
every case found by trying the agent routes as a hostile machine would, through the daemon's real API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from typer.testing import CliRunner

from scheduler.app import cli
from scheduler.app.api import create_app
from scheduler.clock import SimClock
from scheduler.jobs.jobfile import parse_job
from scheduler.lifecycle import service
from scheduler.lifecycle.service import JobView
from scheduler.logs import forget_secrets
from scheduler.settings import Settings
from scheduler.store.database import Store
from scheduler.store.tables import EventRow, InstanceRow, JobRow
from tests.agent.machines import machine_auth, put_on_machine
from tests.lifecycle.test_gang import RANK0_ADDR, running_gang
from tests.lifecycle.test_gang import bearer as gang_bearer

TOKEN = "trust-test-api-token-0123456789"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
JOB: dict[str, Any] = {
    "name": "helmet-v3", "team": "vision-qa", "kind": "train", "model": "yolov9-s",
    "data": {"uri": "s3://bucket/datasets/helmet", "train_images": 12000},
    "train": {"epochs": 100},
}
RUN = "s3://bucket/datasets/helmet/runs/helmet-v3/"  # the job's own output prefix
INFER: dict[str, Any] = {
    "name": "nightly", "team": "retail", "kind": "infer", "model": "yolov9-s",
    "infer": {"source": "oss://shop/images/2026-11/", "images": 100_000, "weights": "oss://shop/w/best.pt"},
}


@pytest.fixture
def http(store: Store, sim_clock: SimClock) -> Iterator[TestClient]:
    settings = Settings(_env_file=None, api_token=SecretStr(TOKEN))  # type: ignore[call-arg]
    with TestClient(create_app(store, sim_clock, settings)) as c:
        yield c
    forget_secrets()


def running(store: Store, clock: SimClock, doc: dict[str, Any] = JOB,
            instance_id: str = "inst-00000000000a") -> tuple[str, dict[str, str], dict[str, Any]]:
    """A job whose attempt 1 runs on a machine: its id, the machine's auth header, and a report's job/attempt."""
    job = service.submit(store, clock, parse_job(doc, "job.yaml"), source="job.yaml")
    put_on_machine(store, clock, job.id, instance_id=instance_id)
    return job.id, machine_auth(TOKEN, instance_id, clock), {"job_id": job.id, "attempt": 1}


def job_row(store: Store, job_id: str) -> JobRow:
    with store.session(write=False) as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        s.expunge(row)
        return row


def refusals(store: Store, job_id: str) -> list[str]:
    with store.session(write=False) as s:
        return [e.message for e in s.query(EventRow).filter_by(job_id=job_id, kind="agent_refused")]


# --- what an agent may write: URIs only under the job's own output prefix


@pytest.mark.parametrize("uri", [
    "s3://another-teams-bucket/runs/helmet-v3/weights/last.pt",
    "s3://bucket/datasets/helmet/runs/other-job/weights/last.pt",  # the same bucket, another job's folder
    RUN + "../other-job/weights/last.pt",
    RUN + "weights/./../../x/last.pt",
    "s3://bucket/datasets/helmet/runs/helmet-v3-evil/weights/last.pt",  # the folder's name, then more
    "oss://bucket/datasets/helmet/runs/helmet-v3/weights/last.pt",
])
def test_a_checkpoint_outside_the_jobs_prefix_is_refused_and_logged(http, store, sim_clock, uri):
    job_id, auth, mine = running(store, sim_clock)
    r = http.post("/v1/agent/progress", headers=auth, json={**mine, "epochs_done": 3, "checkpoint_uri": uri})
    assert r.status_code == 403
    assert "outside job helmet-v3's output prefix" in r.json()["error"] and RUN in r.json()["fix"]
    row = job_row(store, job_id)
    assert (row.epochs_done, row.checkpoint_uri) == (0, None)  # no new resume point, no progress
    assert len(refusals(store, job_id)) == 1 and uri in refusals(store, job_id)[0]
    ok = http.post("/v1/agent/progress", headers=auth,
                   json={**mine, "epochs_done": 3, "checkpoint_uri": RUN + "weights/last.pt"})
    assert ok.status_code == 204 and job_row(store, job_id).checkpoint_uri == RUN + "weights/last.pt"
    assert http.get("/v1/agent/work", headers=auth).json()["checkpoint_uri"] == RUN + "weights/last.pt"


def test_outputs_outside_the_prefix_are_refused_and_the_job_does_not_finish(http, store, sim_clock):
    job_id, auth, mine = running(store, sim_clock)
    r = http.post("/v1/agent/finished", headers=auth, json={**mine, "ok": True, "outputs": "s3://elsewhere/runs/"})
    assert r.status_code == 403 and "outputs s3://elsewhere/runs/" in r.json()["error"]
    assert job_row(store, job_id).state == "running" and job_row(store, job_id).outputs_uri is None
    r = http.post("/v1/agent/finished", headers=auth, json={**mine, "ok": True, "outputs": RUN})
    assert r.status_code == 204 and job_row(store, job_id).outputs_uri == RUN


def test_an_inference_jobs_prefix_is_its_output_folder(http, store, sim_clock):
    job_id, auth, mine = running(store, sim_clock, INFER)
    labels = "oss://shop/runs/nightly/"  # infer.output's default: runs/<name>/ at the top of the source's bucket
    assert http.post("/v1/agent/progress", headers=auth,
                     json={**mine, "epochs_done": 1, "checkpoint_uri": "oss://shop/images/2026-11/"}).status_code == 403
    assert http.post("/v1/agent/progress", headers=auth,
                     json={**mine, "epochs_done": 1, "checkpoint_uri": labels}).status_code == 204
    # 100,000 images run in 5 shards: a sixth is more than the job has.
    r = http.post("/v1/agent/progress", headers=auth, json={**mine, "epochs_done": 6, "checkpoint_uri": labels})
    assert r.status_code == 400 and "5 shards" in r.json()["error"]
    assert job_row(store, job_id).epochs_done == 1


# --- progress: forward, and within the job's epochs


@pytest.mark.parametrize(("done", "status"), [(101, 400), (1_000_000, 400), (2**63, 400), (10**30, 400), (-1, 400)])
def test_progress_beyond_the_jobs_epochs_is_refused_never_a_500(http, store, sim_clock, done, status):
    job_id, auth, mine = running(store, sim_clock)
    r = http.post("/v1/agent/progress", headers=auth,
                  json={**mine, "epochs_done": done, "checkpoint_uri": RUN + "weights/last.pt"})
    assert r.status_code == status and r.json()["error"]
    assert job_row(store, job_id).epochs_done == 0


def test_progress_only_goes_forward_and_a_retry_is_harmless(http, store, sim_clock):
    job_id, auth, mine = running(store, sim_clock)
    last = RUN + "weights/last.pt"
    post = lambda done: http.post("/v1/agent/progress", headers=auth,  # noqa: E731
                                  json={**mine, "epochs_done": done, "checkpoint_uri": last})
    assert post(40).status_code == 204
    assert post(40).status_code == 204  # the same report again (its answer was lost): nothing changes
    r = post(12)
    assert r.status_code == 400 and "only goes forward" in r.json()["error"]
    assert post(100).status_code == 204  # the last epoch of 100
    assert job_row(store, job_id).epochs_done == 100
    # Units that finished need the resume point they were uploaded to.
    job2, auth2, mine2 = running(store, sim_clock, {**JOB, "name": "helmet-v4"}, instance_id="inst-00000000000b")
    r = http.post("/v1/agent/progress", headers=auth2, json={**mine2, "epochs_done": 5})
    assert r.status_code == 400 and "checkpoint_uri" in r.json()["error"]


# --- rendezvous: a multi-node job's rank 0, once per attempt, at a routable address


def test_a_single_node_job_has_no_rendezvous(http, store, sim_clock):
    job_id, auth, mine = running(store, sim_clock)
    for _ in range(3):
        r = http.post("/v1/agent/rendezvous", headers=auth, json={**mine, "node_rank": 0, "addr": "10.0.0.5"})
        assert r.status_code == 400 and "runs on one node" in r.json()["error"]
    with store.session(write=False) as s:
        assert s.query(EventRow).filter_by(job_id=job_id, kind="rendezvous").count() == 0
    assert http.get("/v1/agent/work", headers=auth).json()["master_addr"] is None


@pytest.mark.parametrize("addr", [
    "169.254.169.254", "169.254.0.23", "127.0.0.1", "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "::",
    "fe80::1", "ff02::1", "::ffff:169.254.169.254", "::ffff:127.0.0.1", "100.100.100.200", "fd00:ec2::254",
    "240.0.0.1",
])
def test_rank_zero_may_not_point_the_gang_at_an_unroutable_or_metadata_address(store, sim_clock, addr):
    job, http, machines = running_gang(store, sim_clock)
    auth = gang_bearer(machines[1][0])
    r = http.post("/v1/agent/rendezvous", headers=auth,
                  json={"job_id": job.id, "attempt": 1, "node_rank": 0, "addr": addr})
    assert r.status_code == 400 and "cannot reach rank 0" in r.json()["error"]
    assert http.get("/v1/agent/work", headers=auth).json()["master_addr"] is None
    assert len(refusals(store, job.id)) == 1


def test_the_rendezvous_is_said_once_per_attempt(store, sim_clock):
    job, http, machines = running_gang(store, sim_clock)
    auth, mine = gang_bearer(machines[1][0]), {"job_id": job.id, "attempt": 1, "node_rank": 0}
    for _ in range(41):  # a retried report says the same: taken once
        assert http.post("/v1/agent/rendezvous", headers=auth, json={**mine, "addr": RANK0_ADDR}).status_code == 204
    r = http.post("/v1/agent/rendezvous", headers=auth, json={**mine, "addr": "10.0.9.9"})
    assert r.status_code == 409 and "already has its rendezvous" in r.json()["error"]
    assert http.get("/v1/agent/work", headers=gang_bearer(machines[1][1])).json()["master_addr"] == RANK0_ADDR
    with store.session(write=False) as s:
        assert s.query(EventRow).filter_by(job_id=job.id, kind="rendezvous").count() == 1


# --- tokens of ended attempts and terminated machines


def test_a_cancelled_jobs_machine_reads_and_writes_nothing_of_it(http, store, sim_clock):
    job_id, auth, mine = running(store, sim_clock)
    assert http.get("/v1/agent/work", headers=auth).json()["action"] == "run"
    assert http.post(f"/v1/jobs/{job_id}/cancel", headers=ADMIN).status_code == 200
    work = http.get("/v1/agent/work", headers=auth).json()  # the attempt ends on the next tick; already now:
    assert work["action"] == "wait" and "spec" not in work
    for path, extra in (("/progress", {"epochs_done": 1, "checkpoint_uri": RUN + "weights/last.pt"}),
                        ("/finished", {"ok": True}), ("/heartbeat", {})):
        assert http.post(f"/v1/agent{path}", headers=auth, json={**mine, **extra}).status_code == 409, path
    row = job_row(store, job_id)
    assert (row.state, row.epochs_done, row.reason) == ("cancelled", 0, "cancelled by the user")


def test_a_finished_attempts_token_gets_no_job_back(http, store, sim_clock):
    job_id, auth, mine = running(store, sim_clock)
    r = http.post("/v1/agent/finished", headers=auth, json={**mine, "ok": False, "message": "boom"})
    assert r.status_code == 204
    assert http.get("/v1/agent/work", headers=auth).json() == {"action": "wait", "poll_seconds": 30}
    assert http.post("/v1/agent/progress", headers=auth,
                     json={**mine, "epochs_done": 1, "checkpoint_uri": RUN + "weights/last.pt"}).status_code == 409
    assert job_row(store, job_id).state == "failed"


def test_a_terminated_machines_token_opens_nothing(http, store, sim_clock):
    job_id, auth, mine = running(store, sim_clock)
    with store.session() as s:
        s.get(InstanceRow, "inst-00000000000a").state = "terminated"
    assert http.get("/v1/agent/work", headers=auth).status_code == 401
    assert http.post("/v1/agent/token", headers=auth).status_code == 401
    r = http.post("/v1/agent/progress", headers=auth,
                  json={**mine, "epochs_done": 1, "checkpoint_uri": RUN + "weights/last.pt"})
    assert r.status_code == 401 and job_row(store, job_id).epochs_done == 0


def test_a_reclaim_notice_far_from_now_or_beyond_the_calendar_is_400(http, store, sim_clock):
    job_id, auth, mine = running(store, sim_clock)
    for at in ("0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00", "2020-01-01T00:00:00Z",
               (sim_clock.now() + timedelta(days=2)).isoformat()):
        r = http.post("/v1/agent/reclaiming", headers=auth, json={**mine, "at": at})
        assert r.status_code == 400, at
    assert job_row(store, job_id).state == "running"
    soon = (sim_clock.now() + timedelta(minutes=2)).isoformat()
    assert http.post("/v1/agent/reclaiming", headers=auth, json={**mine, "at": soon}).status_code == 204


# --- text from machines is shown as text


MARKUP = "[/x] [bold red]pwned[/bold red] [link=http://x]y[/link] \x1b[2J\x00 \u202e done"


def test_a_finish_message_with_markup_and_control_characters_prints_literally(http, store, sim_clock, monkeypatch):
    job_id, auth, mine = running(store, sim_clock)
    lone = json.dumps({**mine, "ok": False, "message": "a lone surrogate \ud800"}).encode()  # \\ud800-escaped
    r = http.post("/v1/agent/finished", headers={**auth, "Content-Type": "application/json"}, content=lone)
    assert r.status_code == 400  # not JSON text anyone can store or print
    r = http.post("/v1/agent/finished", headers=auth, json={**mine, "ok": False, "message": MARKUP})
    assert r.status_code == 204
    reason = job_row(store, job_id).reason
    assert reason is not None and not {"\x1b", "\x00", "\u202e"} & set(reason)  # stored without control characters
    assert "[/x] [bold red]pwned[/bold red]" in reason

    listed = [JobView.model_validate(j) for j in http.get("/v1/jobs", headers=ADMIN).json()]
    detail = http.get(f"/v1/jobs/{job_id}", headers=ADMIN).json()

    class Daemon:  # the CLI's client, answering with what the daemon's API just answered
        def list_jobs(self, **_: Any) -> list[JobView]:
            return listed

        def get_job(self, _id: str) -> Any:
            return service.JobDetail.model_validate(detail)

    monkeypatch.setattr(cli, "_client", lambda settings: Daemon())
    monkeypatch.setenv("COLUMNS", "400")
    for args in (["status"], ["status", job_id]):
        result = CliRunner().invoke(cli.app, args)
        assert result.exit_code == 0, result.output
        assert "[/x] [bold red]pwned[/bold red]" in result.output.replace("\\u", "")  # as sent, not styled
