"""The CLI's API client: requests it sends, errors it turns answers into, and a round trip through the real app."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from scheduler.app.api import create_app
from scheduler.app.client import ApiClient
from scheduler.clock import SimClock
from scheduler.errors import (
    DaemonUnreachable,
    GpuschedError,
    JobFileError,
    NotFoundError,
    StoreUnavailable,
    UserError,
)
from scheduler.jobs.jobfile import parse_job
from scheduler.logs import forget_secrets
from scheduler.settings import Settings
from scheduler.states import JobState
from scheduler.store.database import Store

BASE = "http://127.0.0.1:8642"
TOKEN = "client-test-token-0123456789"
NOW = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)
JOB: dict[str, Any] = {
    "name": "helmet-v3",
    "team": "vision-qa",
    "kind": "train",
    "model": "yolov9-s",
    "data": {"uri": "s3://bucket/datasets/helmet", "train_images": 12000, "val_images": 1500},
    "train": {"epochs": 30},
}
VIEW: dict[str, Any] = {
    "id": "job-0123456789ab", "name": "helmet-v3", "team": "vision-qa", "project": None, "kind": "train",
    "model": "yolov9-s", "state": "queued", "priority": 50, "submitted_at": "2026-11-20T08:00:00Z",
    "deadline_at": None, "budget": None, "attempt": 0, "preemptions": 0, "epochs_done": 0, "epochs_total": 30,
    "reason": None, "finished_at": None, "updated_at": "2026-11-20T08:00:00Z",
}


def client_answering(handler: Callable[[httpx.Request], httpx.Response], token: str | None = TOKEN) -> ApiClient:
    return ApiClient(BASE, token, transport=httpx.MockTransport(handler))


def answer(status: int, body: Any) -> Callable[[httpx.Request], httpx.Response]:
    return lambda _request: httpx.Response(status, json=body)


# --- what the client sends


def test_submit_posts_the_spec_envelope_with_the_bearer_token() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json=VIEW)

    job = client_answering(handler).submit(JOB, source="helmet.yaml")

    assert job.id == VIEW["id"] and job.state is JobState.queued
    [request] = seen
    assert (request.method, request.url.path) == ("POST", "/v1/jobs")
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert json.loads(request.content) == {"spec": JOB, "source": "helmet.yaml"}


def test_list_sends_its_filters_as_query_parameters() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=[VIEW])

    jobs = client_answering(handler).list_jobs(state=JobState.running, team="vision-qa", limit=5)

    assert [j.id for j in jobs] == [VIEW["id"]]
    assert dict(seen[0].url.params) == {"state": "running", "team": "vision-qa", "limit": "5"}


def test_without_a_token_no_authorization_header_is_sent() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"status": "ok", "last_tick": None})

    assert client_answering(handler, token=None).health() == {"status": "ok", "last_tick": None}
    assert "Authorization" not in seen[0].headers


def test_an_id_is_sent_as_one_path_segment() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(404, json={"error": "no job", "fix": None})

    with pytest.raises(NotFoundError):
        client_answering(handler).cancel("job-1?x=1#y")
    assert seen[0].method == "POST"
    assert seen[0].url.raw_path == b"/v1/jobs/job-1%3Fx%3D1%23y/cancel"


def test_an_id_with_a_slash_never_reaches_another_route() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"no request expected, got {request.url}")

    with pytest.raises(NotFoundError):
        client_answering(handler).cancel("job-1/../../healthz")


# --- what the client makes of failures


@pytest.mark.parametrize(
    ("failure", "detail"),
    [
        (httpx.ConnectError("[Errno 111] Connection refused"), ""),
        (httpx.ConnectTimeout("timed out"), " (no answer within 10 s)"),
        (httpx.ReadTimeout("timed out"), " (no answer within 10 s)"),
        (httpx.RemoteProtocolError("Server disconnected without sending a response."), ""),
    ],
)
def test_a_daemon_that_cannot_be_reached_says_how_to_start_it(failure: Exception, detail: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise failure

    with pytest.raises(DaemonUnreachable) as caught:
        client_answering(handler).list_jobs()
    assert caught.value.message == f"cannot reach the gpusched daemon at http://127.0.0.1:8642{detail}"
    assert caught.value.fix == "start it with `gpusched daemon` (or set GPUSCHED_API_URL)"


@pytest.mark.parametrize(("token", "words"), [(TOKEN, "refused the API token"), (None, "none is set")])
def test_401_is_a_user_error_about_the_token(token: str | None, words: str) -> None:
    body = {"error": "missing or wrong API token", "fix": "send a bearer token"}
    with pytest.raises(UserError) as caught:
        client_answering(answer(401, body), token=token).list_jobs()
    assert words in caught.value.message
    assert "GPUSCHED_API_TOKEN" in (caught.value.fix or "")


def test_422_is_rebuilt_into_the_same_job_file_error() -> None:
    body = {
        "error": "bad.yaml: 2 problem(s)", "fix": "correct the fields", "path": "bad.yaml",
        "problems": [
            {"field": "model", "message": "unknown model 'yolov9-x'", "example": "yolov9-s"},
            {"field": "team", "message": "is required", "example": None},
        ],
    }
    with pytest.raises(JobFileError) as caught:
        client_answering(answer(422, body)).submit(JOB, "bad.yaml")
    err = caught.value
    assert err.path == "bad.yaml"
    assert [(p.field, p.message, p.example) for p in err.problems] == [
        ("model", "unknown model 'yolov9-x'", "yolov9-s"),
        ("team", "is required", None),
    ]


@pytest.mark.parametrize(
    ("status", "body", "error", "message"),
    [
        (404, {"error": "no job 'job-9'", "fix": "list jobs"}, NotFoundError, "no job 'job-9'"),
        (400, {"error": "job job-9 already succeeded", "fix": "see status"}, UserError, "job job-9 already succeeded"),
        (413, {"error": "too big", "fix": None}, UserError, "too big"),
    ],
)
def test_4xx_answers_become_user_errors_with_the_daemons_words(
    status: int, body: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        client_answering(answer(status, body)).cancel("job-9")
    assert caught.value.message == message  # type: ignore[attr-defined]


def test_a_500_is_not_blamed_on_the_user() -> None:
    with pytest.raises(GpuschedError) as caught:
        client_answering(answer(500, {"error": "internal error", "fix": "see the daemon's log"})).get_job("job-1")
    assert not isinstance(caught.value, UserError)
    assert "internal error" in caught.value.message and caught.value.fix == "see the daemon's log"


@pytest.mark.parametrize("response", [
    httpx.Response(404, text="<html>404 Not Found</html>"),  # a web server or proxy at that address
    httpx.Response(404, json={"detail": "Not Found"}),  # another FastAPI service
    httpx.Response(502, text="Bad Gateway"),
])
def test_an_error_not_in_the_daemons_shape_blames_the_url_not_the_job(response: httpx.Response) -> None:
    """A 404 from whatever listened at GPUSCHED_API_URL was "HTTP 404; fix: list jobs with `gpusched status`"."""
    with pytest.raises(GpuschedError) as caught:
        client_answering(lambda _request: response).get_job("job-1")
    assert not isinstance(caught.value, NotFoundError | UserError)
    assert caught.value.message == f"{BASE} answered HTTP {response.status_code}, not as the gpusched daemon answers"
    assert "GPUSCHED_API_URL" in (caught.value.fix or "")


def test_a_503_from_a_daemon_whose_store_is_locked_is_a_store_error() -> None:
    """Exit status 3 (what the command needs cannot be used), not 1 (a bug), with the daemon's fix."""
    body = {"error": "the daemon's store cannot be used now: database is locked; nothing was changed",
            "fix": "another program holds the SQLite file's write lock"}
    with pytest.raises(StoreUnavailable) as caught:
        client_answering(answer(503, body)).submit({"name": "x"}, source="job.yaml")
    assert "database is locked; nothing was changed" in caught.value.message
    assert caught.value.fix == body["fix"]


@pytest.mark.parametrize(
    ("response", "hint"),
    [
        (httpx.Response(200, text="<html>not the daemon</html>"), "GPUSCHED_API_URL"),
        (httpx.Response(200, json={"unexpected": "shape"}), "same gpusched version"),
        (httpx.Response(200, json=[{"id": "x"}]), "same gpusched version"),
    ],
)
def test_something_that_is_not_the_daemon_is_reported_plainly(response: httpx.Response, hint: str) -> None:
    with pytest.raises(GpuschedError) as caught:
        client_answering(lambda _r: response).list_jobs()
    assert not isinstance(caught.value, UserError)
    assert hint in (caught.value.fix or "")


def test_an_unhealthy_daemon_still_reports_its_health() -> None:
    body = {"status": "stalled", "last_tick": "2026-11-20T08:00:00+00:00"}
    assert client_answering(answer(503, body)).health() == body


# --- a round trip through the real app


class ViaTestClient(httpx.BaseTransport):
    """Hands each request to the FastAPI app through Starlette's TestClient."""

    def __init__(self, app_client: TestClient) -> None:
        self.app_client = app_client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        r = self.app_client.request(
            request.method, str(request.url), headers=dict(request.headers), content=request.read()
        )
        headers = {k: v for k, v in r.headers.items() if k.lower() not in ("content-length", "content-encoding")}
        return httpx.Response(r.status_code, headers=headers, content=r.content)


@pytest.fixture
def app_client(tmp_path: Path) -> Iterator[TestClient]:
    store = Store(f"sqlite:///{tmp_path / 'gpusched.db'}")
    store.migrate()
    settings = Settings(_env_file=None, api_token=SecretStr(TOKEN))  # type: ignore[call-arg]
    with TestClient(create_app(store, SimClock(NOW), settings)) as c:
        yield c
    forget_secrets()
    store.dispose()


def test_round_trip_submit_list_show_cancel(app_client: TestClient) -> None:
    api = ApiClient(BASE, TOKEN, transport=ViaTestClient(app_client))
    # Exactly what `gpusched submit` sends: the validated spec dumped to JSON.
    spec = parse_job({**JOB, "policy": {"deadline": "36h", "budget": "800 CNY"}}, "helmet.yaml")

    job = api.submit(spec.model_dump(mode="json"), source="helmet.yaml")

    assert job.state is JobState.queued and job.deadline_at == NOW + timedelta(hours=36)
    assert [j.id for j in api.list_jobs(state="queued")] == [job.id]
    detail = api.get_job(job.id)
    assert detail.id == job.id and detail.events[0].kind == "submitted"
    assert api.cancel(job.id).state is JobState.cancelled
    assert api.list_jobs(state=JobState.queued) == []
    assert api.health()["status"] == "ok"


def test_round_trip_errors_match_local_ones(app_client: TestClient) -> None:
    api = ApiClient(BASE, TOKEN, transport=ViaTestClient(app_client))
    bad = {**JOB, "model": "yolov9-x", "train": {"epochs": 0}}
    with pytest.raises(JobFileError) as local:
        parse_job(bad, "bad.yaml")

    with pytest.raises(JobFileError) as remote:
        api.submit(bad, "bad.yaml")

    assert str(remote.value) == str(local.value)
    with pytest.raises(NotFoundError):
        api.get_job("job-000000000000")
    with pytest.raises(UserError, match="refused the API token"):
        ApiClient(BASE, "wrong-token", transport=ViaTestClient(app_client)).list_jobs()


def test_yaml_text_round_trip(app_client: TestClient) -> None:
    api = ApiClient(BASE, TOKEN, transport=ViaTestClient(app_client))
    text = "name: helmet-v3\nteam: vision-qa\nkind: train\nmodel: yolov9-s\n" \
           "data: {uri: 's3://bucket/d', train_images: 100}\ntrain: {epochs: 3}\n"
    job = api.submit_text(text, "helmet.yaml")
    assert job.epochs_total == 3
    with pytest.raises(JobFileError) as caught:
        api.submit_text("name: [", "broken.yaml")
    assert caught.value.path == "broken.yaml"
