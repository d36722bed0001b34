"""Extreme and hostile job values at the HTTP API and the CLI: refused with the job file's own words
(422 and ``problems``), never a 500; a job already stored out of bounds breaks no listing; /healthz
tells a failing tick from a healthy one and /metrics counts what the tick set aside."""

from __future__ import annotations

import copy
import json
import threading
import time
from datetime import datetime
from decimal import Decimal
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from scheduler.app.api import create_app
from scheduler.clock import SimClock, SystemClock
from scheduler.errors import JobFileError
from scheduler.jobs.jobfile import parse_job
from scheduler.lifecycle.context import TickReport
from scheduler.logs import forget_secrets
from scheduler.states import JobState
from scheduler.store.database import Store
from scheduler.store.tables import JobRow
from tests.app.test_api import AUTH, JOB, NOW, TOKEN, clock, migrated_db, settings, store  # noqa: F401 - fixtures
from tests.app.test_cli import gpusched
from tests.app.test_daemon import _answers, daemons, free_port, make_daemon  # noqa: F401 - fixture
from tests.jobs.test_jobfile_limits import BOMB


@pytest.fixture
def client(store: Store, clock: SimClock):  # noqa: F811
    with TestClient(create_app(store, clock, settings())) as c:
        yield c
    forget_secrets()


def with_policy(**policy: Any) -> dict[str, Any]:
    doc = copy.deepcopy(JOB)
    doc["policy"] = {**doc["policy"], **policy}
    return doc


def validator_problems(doc: Any) -> list[dict[str, Any]]:
    with pytest.raises(JobFileError) as caught:
        parse_job(doc, "helmet.yaml")
    return [{"field": p.field, "message": p.message, "example": p.example} for p in caught.value.problems]


@pytest.mark.parametrize("policy", [
    {"budget": "99999999999999999999 CNY"},
    {"budget": {"amount": "1e999999999", "currency": "CNY"}},
    {"budget": {"amount": -5, "currency": "CNY"}},
    {"budget": {"amount": "NaN", "currency": "USD"}},
    {"budget": "0 CNY"},
    {"deadline": "999999999d"},
    {"deadline": "9" * 5000 + "h"},
    {"deadline": "9999-12-31T23:00:00-05:00"},
])
def test_an_extreme_value_is_422_with_the_validators_own_message(client: TestClient, policy: dict) -> None:
    doc = with_policy(**policy)
    r = client.post("/v1/jobs", json={"spec": doc, "source": "helmet.yaml"}, headers=AUTH)
    assert r.status_code == 422, r.text
    assert r.json()["problems"] == validator_problems(doc)
    [field] = {p["field"] for p in r.json()["problems"]}
    assert field.startswith("policy.")


def test_a_deadline_more_than_a_year_ahead_is_refused_at_submit(client: TestClient) -> None:
    far = with_policy(deadline="2028-01-01T00:00:00+00:00")  # valid as a file; too far from NOW to submit
    r = client.post("/v1/jobs", json={"spec": far}, headers=AUTH)
    assert r.status_code == 422
    [problem] = r.json()["problems"]
    assert problem["field"] == "policy.deadline" and "at most 366 days after submission" in problem["message"]
    ok = client.post("/v1/jobs", json={"spec": with_policy(deadline="2027-06-01T00:00:00+00:00")}, headers=AUTH)
    assert ok.status_code == 201, ok.text


def test_json_nested_100000_deep_is_422_not_a_500(client: TestClient) -> None:
    body = '{"spec": {"name": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    r = client.post("/v1/jobs", content=body, headers=AUTH | {"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert "nests deeper than 12 levels" in r.json()["problems"][0]["message"]
    shallow = with_policy(budget={"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": {"j": {"k": 1}}}}}}}}}}})
    r = client.post("/v1/jobs", json={"spec": shallow}, headers=AUTH)  # under the decoder's limit: ours says it
    assert r.status_code == 422 and "nests deeper" in r.json()["problems"][0]["message"]


@pytest.mark.parametrize(("text", "says"), [
    ("name: " + "[" * 5000 + "]" * 5000 + "\n", "nests deeper than 12 levels"),
    (BOMB, "aliases (*name) are not accepted"),
    ("name: x\nteam: " + "9" * 4301 + "\n", "a number with 4,301 digits"),
    ('name: "\\ud800"\nteam: x\n', "lone UTF-16 surrogate"),
    ("name: " + "x" * 70_000 + "\n", "larger than 64 KiB"),
])
def test_hostile_yaml_is_422_fast(client: TestClient, text: str, says: str) -> None:
    started = time.perf_counter()
    r = client.post("/v1/jobs?source=bad.yaml", content=text.encode(),
                    headers=AUTH | {"content-type": "application/yaml"})
    took = time.perf_counter() - started
    assert r.status_code == 422, r.text
    assert says in r.json()["problems"][0]["message"]
    assert took < 2.0, f"{took:.2f} s to refuse"  # the alias bomb took 8-12 s before


def test_a_lone_surrogate_in_json_is_422_and_the_answer_is_valid_json(client: TestClient) -> None:
    body = json.dumps({"spec": {**JOB, "project": "\ud800"}})  # json.dumps escapes it: \ud800
    r = client.post("/v1/jobs", content=body, headers=AUTH | {"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["problems"][0]["field"] == "project"
    r = client.post("/v1/jobs", content=json.dumps({"spec": {**JOB, "\udc80x": 1}}),
                    headers=AUTH | {"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["problems"][0]["field"] == "\\udc80x"


@pytest.mark.parametrize("source", ["\ud800.yaml", "x" * 5000])
def test_a_source_name_that_cannot_be_shown_or_stored_is_400(client: TestClient, source: str) -> None:
    for spec in (JOB, {**JOB, "name": "Not Valid"}):
        r = client.post("/v1/jobs", content=json.dumps({"spec": spec, "source": source}),
                        headers=AUTH | {"content-type": "application/json"})
        assert r.status_code == 400 and "\"source\" must be a file name" in r.json()["error"]


def _legacy_row(store: Store, now: datetime) -> None:  # noqa: F811
    """A job as the API stored it before the bounds: a budget SQLite keeps as infinity."""
    spec = parse_job(JOB, "x.yaml").model_dump(mode="json")
    spec["policy"]["budget"] = "1E+999999999 CNY"
    with store.session() as s:
        s.add(JobRow(id="job-legacy", name="legacy", team="vision-qa", kind="train", model="yolov9-s",
                     spec_json=spec, state=JobState.queued.value, priority=50, submitted_at=now, updated_at=now,
                     budget_amount=Decimal("1e999999999"), budget_currency="CNY", attempt=0, preemptions=0,
                     epochs_done=0, epochs_total=30))


def test_listing_survives_a_job_stored_out_of_bounds(client: TestClient, store: Store) -> None:  # noqa: F811
    _legacy_row(store, NOW)
    listed = client.get("/v1/jobs", headers=AUTH)
    assert listed.status_code == 200 and [j["id"] for j in listed.json()] == ["job-legacy"]
    assert listed.json()[0]["budget"] is None
    detail = client.get("/v1/jobs/job-legacy", headers=AUTH)
    assert detail.status_code == 200 and detail.json()["spec"]["policy"]["budget"] == "1E+999999999 CNY"


def test_healthz_is_503_with_the_error_once_ticks_keep_failing(store: Store, clock: SimClock,  # noqa: F811
                                                                daemons: list) -> None:  # noqa: F811
    def tick() -> None:
        raise ArithmeticError("a job broke the tick")

    d = make_daemon(store, clock, tick=tick, settings=settings().model_copy(update={"tick_seconds": 3600}))
    daemons.append(d)
    with TestClient(create_app(store, clock, settings(), health=d.health, metrics=d.metrics)) as c:
        d.start_jobs()  # its first tick runs at once, and fails
        deadline = time.monotonic() + 10
        while d.health()["ticks"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        d.run_tick()
        assert c.get("/healthz").status_code == 200  # two in a row may be a passing cloud outage
        d.run_tick()
        r = c.get("/healthz")
        live = c.get("/livez")
        metrics = c.get("/metrics").text
        d.shutdown()
        stopped = c.get("/livez")
    forget_secrets()
    assert r.status_code == 503
    assert r.json()["status"] == "failing" and r.json()["last_error"] == "ArithmeticError: a job broke the tick"
    assert live.status_code == 200  # liveness: a restart would not bring a failing cloud API back
    assert stopped.status_code == 503 and stopped.json()["status"] == "stopped"
    assert "gpusched_tick_errors_total 3.0" in metrics and "gpusched_tick_errors_in_a_row 3.0" in metrics


def test_metrics_count_the_jobs_a_tick_set_aside(store: Store, clock: SimClock) -> None:  # noqa: F811
    d = make_daemon(store, clock, tick=lambda: TickReport(at=NOW, set_aside=2))
    d.run_tick()
    d.run_tick()
    assert "gpusched_jobs_set_aside_total 4.0" in d.metrics()
    assert d.health()["jobs_set_aside"] == 4


def test_gpusched_status_lists_a_job_stored_out_of_bounds(store: Store, daemons: list) -> None:  # noqa: F811
    port = free_port()
    s = settings().model_copy(update={"api_port": port, "tick_seconds": 3600})
    d = make_daemon(store, SystemClock(), settings=s)
    daemons.append(d)
    d.app = create_app(store, SystemClock(), s)
    _legacy_row(store, SystemClock().now())
    threading.Thread(target=d.serve, daemon=True).start()
    deadline = time.monotonic() + 15
    while not _answers(f"http://127.0.0.1:{port}/healthz") and time.monotonic() < deadline:
        time.sleep(0.05)
    r = gpusched("status", env={"GPUSCHED_API_URL": f"http://127.0.0.1:{port}", "GPUSCHED_API_TOKEN": TOKEN})
    assert r.returncode == 0, r.stderr
    assert "job-legacy" in r.stdout and "Traceback" not in r.stderr
    assert httpx.get(f"http://127.0.0.1:{port}/v1/jobs", headers=AUTH).status_code == 200
