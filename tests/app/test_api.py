"""The HTTP API through FastAPI's TestClient, on a real store."""

from __future__ import annotations

import io
import json
import logging
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import func, select
from structlog.testing import capture_logs

from scheduler.app.api import MAX_BODY_BYTES, create_app
from scheduler.clock import SimClock
from scheduler.errors import SettingsError
from scheduler.jobs.jobfile import parse_job
from scheduler.logs import configure_logging, forget_secrets, get_logger
from scheduler.settings import Settings
from scheduler.states import InstanceRowState, JobState
from scheduler.store.database import Store
from scheduler.store.tables import JobRow

NOW = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)
TOKEN = "api-token-for-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JOB: dict[str, Any] = {
    "name": "helmet-v3",
    "team": "vision-qa",
    "kind": "train",
    "model": "yolov9-s",
    "data": {"uri": "s3://bucket/datasets/helmet", "train_images": 12000, "val_images": 1500},
    "train": {"epochs": 30},
    "policy": {"budget": "800 CNY"},
}
RUN = "s3://bucket/datasets/helmet/runs/helmet-v3/"  # the job's own output prefix: <data.uri>/runs/<name>/


def settings(token: str | None = TOKEN) -> Settings:
    return Settings(_env_file=None, api_token=SecretStr(token) if token is not None else None)  # type: ignore[call-arg]


@pytest.fixture
def clock() -> SimClock:
    return SimClock(NOW)


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "gpusched.db"
    template = Store(f"sqlite:///{path}")
    template.migrate()
    template.dispose()
    return path


@pytest.fixture
def store(migrated_db: Path, tmp_path: Path) -> Iterator[Store]:
    """A copy of a once-migrated database: a fresh schema without running Alembic for every test."""
    path = tmp_path / "gpusched.db"
    shutil.copy(migrated_db, path)
    s = Store(f"sqlite:///{path}")
    yield s
    s.dispose()


@pytest.fixture
def client(store: Store, clock: SimClock) -> Iterator[TestClient]:
    with TestClient(create_app(store, clock, settings())) as c:
        yield c
    forget_secrets()


def reset_logging() -> None:
    structlog.reset_defaults()
    root = logging.getLogger()
    root.handlers = [h for h in root.handlers if not getattr(h, "_gpusched_handler", False)]
    forget_secrets()


def submit(client: TestClient, doc: dict[str, Any] = JOB, source: str = "helmet.yaml") -> dict[str, Any]:
    r = client.post("/v1/jobs", json={"spec": doc, "source": source}, headers=AUTH)
    assert r.status_code == 201, r.text
    return r.json()


# --- auth


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": TOKEN},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": "Bearer "},
    ],
)
def test_a_missing_or_wrong_token_is_refused(client: TestClient, headers: dict[str, str]) -> None:
    r = client.get("/v1/jobs", headers=headers)
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"] == "Bearer"
    body = r.json()
    assert body["error"] and "GPUSCHED_API_TOKEN" in body["fix"]


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/v1/jobs"), ("GET", "/v1/jobs"), ("GET", "/v1/jobs/job-1"), ("POST", "/v1/jobs/job-1/cancel")],
)
def test_every_v1_route_wants_the_token(client: TestClient, method: str, path: str) -> None:
    assert client.request(method, path).status_code == 401
    assert client.request(method, path, headers={"Authorization": "bearer nope"}).status_code == 401


def test_the_right_token_is_accepted_whatever_the_scheme_case(client: TestClient) -> None:
    assert client.get("/v1/jobs", headers={"Authorization": f"bearer {TOKEN}"}).status_code == 200


@pytest.mark.parametrize("token", [None, "", "   ", "x" * 15])
def test_no_token_configured_means_no_api(store: Store, clock: SimClock, token: str | None) -> None:
    with pytest.raises(SettingsError) as caught:
        create_app(store, clock, settings(token))
    assert "GPUSCHED_API_TOKEN" in (caught.value.fix or "")


def test_the_token_never_reaches_a_log_line(store: Store, clock: SimClock) -> None:
    buf = io.StringIO()
    configure_logging("json", "info", stream=buf)
    try:
        create_app(store, clock, settings())
        get_logger("t").info(f"header was Bearer {TOKEN}")
    finally:
        reset_logging()
    assert TOKEN not in buf.getvalue()
    assert "Bearer ***" in buf.getvalue()


# --- jobs


def test_submit_as_json_then_show_list_and_cancel(client: TestClient) -> None:
    job = submit(client)
    assert job["state"] == "queued" and job["team"] == "vision-qa" and job["epochs_total"] == 30
    assert job["budget"] == {"amount": "800", "currency": "CNY"}

    detail = client.get(f"/v1/jobs/{job['id']}", headers=AUTH).json()
    assert detail["id"] == job["id"] and detail["spec"]["name"] == "helmet-v3"
    assert [e["kind"] for e in detail["events"]] == ["submitted"]

    listed = client.get("/v1/jobs", headers=AUTH).json()
    assert [j["id"] for j in listed] == [job["id"]]

    cancelled = client.post(f"/v1/jobs/{job['id']}/cancel", headers=AUTH)
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"


def test_submit_raw_yaml_names_its_source(client: TestClient) -> None:
    r = client.post(
        "/v1/jobs?source=jobs/helmet.yaml",
        content=yaml.safe_dump(JOB).encode(),
        headers={**AUTH, "Content-Type": "application/yaml"},
    )
    assert r.status_code == 201, r.text
    detail = client.get(f"/v1/jobs/{r.json()['id']}", headers=AUTH).json()
    assert "jobs/helmet.yaml" in detail["events"][0]["message"]


def test_a_relative_deadline_sent_as_the_clis_json_dump_is_understood(client: TestClient) -> None:
    # The CLI sends JobSpec.model_dump(mode="json"), which writes "36h" the way job.yaml does.
    dumped = parse_job({**JOB, "policy": {"deadline": "36h"}}, "h.yaml").model_dump(mode="json")
    assert dumped["policy"]["deadline"] == "1d12h"
    job = submit(client, dumped)
    assert datetime.fromisoformat(job["deadline_at"]) == NOW + timedelta(hours=36)


@pytest.mark.parametrize(
    ("doc", "fields"),
    [
        ({**JOB, "model": "yolov9-x"}, ["model"]),
        ({**JOB, "policy": {"deadline": "2026-11-01T00:00:00+00:00"}}, ["policy.deadline"]),
        ({k: v for k, v in JOB.items() if k != "team"}, ["team"]),
    ],
)
def test_a_bad_job_is_422_with_every_problem(client: TestClient, doc: dict[str, Any], fields: list[str]) -> None:
    r = client.post("/v1/jobs", json={"spec": doc, "source": "bad.yaml"}, headers=AUTH)
    assert r.status_code == 422
    body = r.json()
    assert body["path"] == "bad.yaml" and body["error"].startswith("bad.yaml")
    assert body["fix"]
    assert [p["field"] for p in body["problems"]] == fields
    assert all(set(p) == {"field", "message", "example"} for p in body["problems"])
    assert client.get("/v1/jobs", headers=AUTH).json() == []


def test_broken_yaml_is_422_too(client: TestClient) -> None:
    r = client.post("/v1/jobs", content=b"name: [unclosed", headers={**AUTH, "Content-Type": "text/yaml"})
    assert r.status_code == 422
    assert r.json()["problems"]


@pytest.mark.parametrize(
    ("content", "ctype", "status"),
    [
        (b"{not json", "application/json", 400),
        (json.dumps(JOB).encode(), "application/json", 400),  # the job without its {"spec": ...} envelope
        (json.dumps({"spec": JOB, "extra": 1}).encode(), "application/json", 400),
        (json.dumps({"spec": JOB, "source": 7}).encode(), "application/json", 400),
        (b"\xff\xfe", "application/yaml", 400),
        (b"name: x", "text/plain", 415),
        (b"x" * (MAX_BODY_BYTES + 1), "application/yaml", 413),
    ],
)
def test_malformed_requests_get_an_error_with_a_fix(
    client: TestClient, content: bytes, ctype: str, status: int
) -> None:
    r = client.post("/v1/jobs", content=content, headers={**AUTH, "Content-Type": ctype})
    assert r.status_code == status
    assert set(r.json()) == {"error", "fix"} and r.json()["error"]


def test_list_filters_and_rejects_an_unknown_state(client: TestClient) -> None:
    a = submit(client)
    b = submit(client, {**JOB, "team": "retail"})
    client.post(f"/v1/jobs/{a['id']}/cancel", headers=AUTH)

    def ids(query: str) -> list[str]:
        return [j["id"] for j in client.get(f"/v1/jobs?{query}", headers=AUTH).json()]

    assert ids("state=cancelled") == [a["id"]]
    assert ids("team=retail") == [b["id"]]
    assert ids("state=queued&team=vision-qa") == []
    r = client.get("/v1/jobs?state=sleeping", headers=AUTH)
    assert r.status_code == 400 and "state" in r.json()["error"]
    assert "/openapi.json" in r.json()["fix"]  # where the fields and their bounds are: every error has a fix
    assert client.get("/v1/jobs?limit=0", headers=AUTH).status_code == 400


def test_unknown_ids_are_404_with_a_fix(client: TestClient) -> None:
    for r in (client.get("/v1/jobs/job-404", headers=AUTH), client.post("/v1/jobs/job-404/cancel", headers=AUTH)):
        assert r.status_code == 404
        assert "job-404" in r.json()["error"] and r.json()["fix"]


def test_cancelling_a_finished_job_is_400(client: TestClient, store: Store) -> None:

    job = submit(client)
    with store.session() as s:
        s.get(JobRow, job["id"]).state = JobState.succeeded.value  # type: ignore[union-attr]
    r = client.post(f"/v1/jobs/{job['id']}/cancel", headers=AUTH)
    assert r.status_code == 400
    assert "already succeeded" in r.json()["error"]


def test_a_crash_inside_is_a_json_500_without_library_details(clock: SimClock, tmp_path: Path) -> None:
    unmigrated = Store(f"sqlite:///{tmp_path / 'empty.db'}")  # no tables: every query fails in SQLAlchemy
    buf = io.StringIO()
    configure_logging("json", "info", stream=buf)
    try:
        with TestClient(create_app(unmigrated, clock, settings()), raise_server_exceptions=False) as c:
            r = c.get("/v1/jobs", headers=AUTH)
    finally:
        reset_logging()
    assert r.status_code == 500
    assert r.json() == {"error": "internal error", "fix": "see the daemon's log"}
    crash = [json.loads(line) for line in buf.getvalue().splitlines() if '"api_crash"' in line]
    assert crash and "no such table" in crash[0]["exception"]  # the details go to the log instead


def test_unknown_routes_answer_in_the_same_json_shape(client: TestClient) -> None:
    r = client.get("/v2/anything", headers=AUTH)
    assert r.status_code == 404 and set(r.json()) == {"error", "fix"}


# --- health and metrics


def test_healthz_needs_no_token_and_reports_the_tick(store: Store, clock: SimClock) -> None:
    status = {"status": "ok", "last_tick": "2026-11-20T08:00:00+00:00", "ticks": 4}
    with TestClient(create_app(store, clock, settings(), health=lambda: dict(status))) as c:
        ok = c.get("/healthz")
        status["status"] = "stalled"
        stalled = c.get("/healthz")
    forget_secrets()
    assert ok.status_code == 200 and ok.json() == status | {"status": "ok"}
    assert stalled.status_code == 503 and stalled.json()["status"] == "stalled"


def test_healthz_without_a_daemon_is_ok_with_no_tick(client: TestClient) -> None:
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok", "last_tick": None}


def test_a_failing_health_probe_is_503(store: Store, clock: SimClock) -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("lock poisoned")

    with TestClient(create_app(store, clock, settings(), health=broken)) as c:
        r = c.get("/healthz")
    forget_secrets()
    assert r.status_code == 503
    assert r.json()["status"] == "error" and "lock poisoned" in r.json()["error"]


def test_metrics_count_jobs_and_instances_by_state_and_add_the_daemons_own(store: Store, clock: SimClock) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    extra = "# TYPE gpusched_ticks_total counter\ngpusched_ticks_total 12\n"
    with TestClient(create_app(store, clock, settings(), metrics=lambda: extra)) as c:
        submit(c)
        submit(c)
        r = c.get("/metrics")  # no token: scrapers rarely carry one, and this holds only counts and money
    forget_secrets()
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(r.text) for s in family.samples}
    assert samples[("gpusched_jobs", (("state", "queued"), ("team", "vision-qa")))] == 2
    assert {state for (name, labels) in samples if name == "gpusched_jobs" for k, state in labels if k == "state"} \
        == {s.value for s in JobState}
    assert all(("gpusched_instances", (("state", s.value),)) in samples for s in InstanceRowState)
    assert samples[("gpusched_ticks_total", ())] == 12
    assert r.text.count("# TYPE gpusched_jobs gauge") == 1


# --- the on-instance agent's routes -----------------------------------------------------


def _running_attempt(store: Store, job_id: str, clock: SimClock, attempt: int = 1) -> str:
    """Put the job on a (pretend) machine: attempt ``attempt`` running there, as the tick would; the instance id."""
    from tests.agent.machines import put_on_machine

    return put_on_machine(store, clock, job_id, attempt)


def _agent_auth(instance_id: str, clock: SimClock, api_token: str = TOKEN) -> dict[str, str]:
    from tests.agent.machines import machine_auth

    return machine_auth(api_token, instance_id, clock)


def test_agent_gets_its_work_and_reports_progress_and_finish_with_its_machine_token(
        client: TestClient, store: Store, clock: SimClock) -> None:
    job = submit(client, JOB)
    inst = _running_attempt(store, job["id"], clock)
    auth = _agent_auth(inst, clock)
    r = client.get("/v1/agent/work", headers=auth)
    assert r.status_code == 200
    work = r.json()
    assert work["action"] == "run" and work["job_id"] == job["id"] and work["attempt"] == 1
    assert (work["node_rank"], work["nodes"], work["master_addr"]) == (0, 1, None)
    assert work["spec"]["name"] == "helmet-v3" and work["epochs_done"] == 0
    mine = {"job_id": job["id"], "attempt": 1}
    r = client.post("/v1/agent/progress", json={**mine, "epochs_done": 7, "checkpoint_uri": f"{RUN}weights/last.pt"},
                    headers=auth)
    assert r.status_code == 204
    assert client.get(f"/v1/jobs/{job['id']}", headers=AUTH).json()["epochs_done"] == 7
    r = client.post("/v1/agent/finished", json={**mine, "ok": True}, headers=auth)
    assert r.status_code == 204
    assert client.get(f"/v1/jobs/{job['id']}", headers=AUTH).json()["state"] == "succeeded"
    # The machine is warm: nothing to run, and the finished job is never handed out again.
    assert client.get("/v1/agent/work", headers=auth).json() == {"action": "wait", "poll_seconds": 30}
    r = client.post("/v1/agent/finished", json={**mine, "ok": True}, headers=auth)
    assert r.status_code == 409 and "not this machine's work" in r.json()["error"]


def test_the_agent_reports_the_batch_that_fitted_and_where_the_outputs_went(
        client: TestClient, store: Store, clock: SimClock) -> None:
    job = submit(client, JOB)
    inst = _running_attempt(store, job["id"], clock)
    auth = _agent_auth(inst, clock)
    mine = {"job_id": job["id"], "attempt": 1}
    assert client.get("/v1/agent/work", headers=auth).json()["capacity"] == "on-demand"
    r = client.post("/v1/agent/progress", headers=auth,
                    json={**mine, "epochs_done": 1, "checkpoint_uri": f"{RUN}weights/last.pt",
                          "physical_batch": 8})
    assert r.status_code == 204
    detail = client.get(f"/v1/jobs/{job['id']}", headers=AUTH).json()
    [fitted] = [e for e in detail["events"] if e["kind"] == "batch_fitted"]
    assert "a batch of 8 per GPU" in fitted["message"] and fitted["instance_id"] == inst
    assert detail["outputs"] is None
    for bad in ({"physical_batch": 0}, {"outputs": "/tmp/x"}):
        path = "/progress" if "physical_batch" in bad else "/finished"
        body = {**mine, **({"epochs_done": 2} if path == "/progress" else {"ok": True}), **bad}
        assert client.post(f"/v1/agent{path}", headers=auth, json=body).status_code == 400
    r = client.post("/v1/agent/finished", headers=auth, json={**mine, "ok": True, "message": f"outputs in {RUN}",
                                                            "outputs": RUN})
    assert r.status_code == 204
    detail = client.get(f"/v1/jobs/{job['id']}", headers=AUTH).json()
    assert detail["state"] == "succeeded" and detail["outputs"] == RUN


def test_agent_token_cannot_act_as_admin_and_admin_token_is_not_an_agent_token(client: TestClient, store: Store,
                                                                               clock: SimClock) -> None:
    job = submit(client, JOB)
    inst = _running_attempt(store, job["id"], clock)
    auth = _agent_auth(inst, clock)
    body = {"job_id": job["id"], "attempt": 1, "epochs_done": 1}
    assert client.get("/v1/jobs", headers=auth).status_code == 401
    assert client.post("/v1/agent/progress", json=body, headers=AUTH).status_code == 401
    assert client.get("/v1/agent/work", headers=AUTH).status_code == 401
    forged = _agent_auth(inst, clock, api_token="some-other-daemon-token-000")
    assert client.post("/v1/agent/progress", json=body, headers=forged).status_code == 401
    assert client.get("/v1/agent/work").status_code == 401


def test_a_stale_attempts_report_is_refused(client: TestClient, store: Store, clock: SimClock) -> None:
    job = submit(client, JOB)
    inst = _running_attempt(store, job["id"], clock, attempt=2)
    old = {"job_id": job["id"], "attempt": 1, "epochs_done": 50}
    r = client.post("/v1/agent/progress", json=old, headers=_agent_auth(inst, clock))
    assert r.status_code == 409 and "GET /v1/agent/work" in r.json()["fix"]
    assert client.get(f"/v1/jobs/{job['id']}", headers=AUTH).json()["epochs_done"] == 0
    from scheduler.store.tables import InstanceRow

    with store.session(write=False) as s:  # refused, but heard: the machine's agent is alive
        assert s.get(InstanceRow, inst).last_heartbeat_at == clock.now()


@pytest.mark.parametrize("body", [
    {"epochs_done": 1},  # no job or attempt
    {"job_id": "job-1", "attempt": 0, "epochs_done": 1},
    {"job_id": "job-1; drop table", "attempt": 1, "epochs_done": 1},
    {"job_id": "job-1", "attempt": 1, "epochs_done": 1, "extra": True},
    {"job_id": "job-1", "attempt": 1, "epochs_done": 1, "checkpoint_uri": "s3://" + "x" * 2000},
])
def test_agent_bodies_are_bounded_and_closed(client: TestClient, store: Store, clock: SimClock,
                                             body: dict[str, Any]) -> None:
    job = submit(client, JOB)
    inst = _running_attempt(store, job["id"], clock)
    assert client.post("/v1/agent/progress", json=body, headers=_agent_auth(inst, clock)).status_code == 400


def test_a_store_another_program_has_locked_is_503_with_its_fix(migrated_db: Path, tmp_path: Path,
                                                                clock: SimClock) -> None:
    """It was a 500 "internal error" with a traceback in the log, as for a bug; the job was not taken either way."""
    import sqlite3

    path = tmp_path / "gpusched.db"
    shutil.copy(migrated_db, path)
    store = Store(f"sqlite:///{path}", busy_timeout_ms=100)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with TestClient(create_app(store, clock, settings())) as c, capture_logs() as logs:
            r = c.post("/v1/jobs", headers=AUTH, json={"spec": JOB})
    finally:
        holder.close()
        forget_secrets()
    assert r.status_code == 503
    assert r.json()["error"] == "the daemon's store cannot be used now: database is locked; nothing was changed"
    assert "write lock" in r.json()["fix"]
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["api_store_unavailable"]
    with store.session(write=False) as s:
        assert s.scalar(select(func.count()).select_from(JobRow)) == 0
    store.dispose()
