"""People, teams and roles at the HTTP API (issue 19): personal tokens, what each role may read and change,
and the audit log of changes and refused calls. Over the real app and a real SQLite store."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from scheduler.app.api import create_app
from scheduler.clock import SimClock
from scheduler.logs import forget_secrets
from scheduler.states import JobState
from scheduler.store.database import Store
from scheduler.store.tables import ApiTokenRow, JobRow
from tests.app.test_api import AUTH, JOB, NOW, clock, migrated_db, settings, store  # noqa: F401 - fixtures

TEAMLESS = {k: v for k, v in JOB.items() if k != "team"}


@pytest.fixture
def client(store: Store, clock: SimClock):  # noqa: F811
    with TestClient(create_app(store, clock, settings())) as c:
        yield c
    forget_secrets()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def make_token(client: TestClient, role: str, *teams: str, name: str = "alice", by: dict[str, str] = AUTH,
               expires_in_seconds: int | None = None) -> tuple[dict[str, str], dict[str, Any]]:
    r = client.post("/v1/tokens", json={"name": name, "role": role, "teams": list(teams),
                                        "expires_in_seconds": expires_in_seconds}, headers=by)
    assert r.status_code == 201, r.text
    made = r.json()
    return bearer(made.pop("token")), made


def submit(client: TestClient, who: dict[str, str], doc: dict[str, Any] = JOB) -> Any:
    return client.post("/v1/jobs", json={"spec": doc, "source": "helmet.yaml"}, headers=who)


def audit_rows(client: TestClient, who: dict[str, str] = AUTH, **params: Any) -> list[dict[str, Any]]:
    r = client.get("/v1/audit", params=params, headers=who)
    assert r.status_code == 200, r.text
    return r.json()


# --- the "done when" ------------------------------------------------------------------------------


def test_a_member_of_team_a_cannot_cancel_team_bs_job_and_the_audit_log_holds_both_calls(
        client: TestClient, store: Store, clock: SimClock) -> None:  # noqa: F811
    alice, alice_token = make_token(client, "member", "team-a", name="alice")
    bob, bob_token = make_token(client, "member", "team-b", name="bob")
    submitted = submit(client, bob, {**JOB, "team": "team-b"})
    assert submitted.status_code == 201, submitted.text
    job = submitted.json()
    assert (job["team"], job["submitted_by"]) == ("team-b", "bob")
    clock.advance(timedelta(minutes=5))

    refused = client.post(f"/v1/jobs/{job['id']}/cancel", headers=alice)
    assert refused.status_code == 403
    assert "team-b" in refused.json()["error"] and "alice" in refused.json()["error"]
    with store.session(write=False) as s:
        assert s.get(JobRow, job["id"]).state == JobState.queued.value  # type: ignore[union-attr]

    rows = [r for r in audit_rows(client) if r["action"].startswith("job.")]
    assert [(r["actor"], r["token_id"], r["action"], r["target"], r["team"], r["outcome"], r["status"], r["at"])
            for r in rows] == [
        ("bob", bob_token["id"], "job.submit", job["id"], "team-b", "allowed", 201, "2026-11-20T08:00:00Z"),
        ("alice", alice_token["id"], "job.cancel", job["id"], "team-b", "refused", 403, "2026-11-20T08:05:00Z"),
    ]
    assert {r["client"] for r in rows} == {"testclient"}  # the caller's address as the daemon saw it
    assert "alice acts for team team-a" in rows[1]["detail"]


def test_the_store_never_holds_a_token_only_its_sha256(client: TestClient, store: Store) -> None:  # noqa: F811
    who, made = make_token(client, "member", "vision-qa")
    token = who["Authorization"].removeprefix("Bearer ")
    assert submit(client, who).status_code == 201  # used, so it went through every path that reads it
    with store.session(write=False) as s:
        row = s.get(ApiTokenRow, made["id"])
        assert row is not None and row.secret_sha256 == hashlib.sha256(token.encode()).hexdigest()
    # The secret is all that follows the row's 12 hex digits: token_urlsafe may put "_" inside it, and a
    # rsplit would keep only the tail after that, a few bytes that a database file can hold by chance.
    secret = token.removeprefix("gps_")[13:].encode()
    assert len(secret) == 43
    database = Path(store.url.database or "")
    files = [p for p in database.parent.iterdir() if p.name.startswith(database.name)]  # the db, its WAL and shm
    assert database in files
    assert all(secret not in p.read_bytes() for p in files)
    assert all(token not in str(r) for r in audit_rows(client))


def test_revoked_and_expired_tokens_get_401_saying_so(client: TestClient, clock: SimClock) -> None:  # noqa: F811
    revoked, r_made = make_token(client, "member", "vision-qa", name="carol")
    expiring, _ = make_token(client, "member", "vision-qa", name="dave", expires_in_seconds=3600)
    assert client.get("/v1/jobs", headers=revoked).status_code == 200
    assert client.get("/v1/jobs", headers=expiring).status_code == 200

    r = client.post(f"/v1/tokens/{r_made['id']}/revoke", headers=AUTH)
    assert r.status_code == 200 and r.json()["state"] == "revoked" and r.json()["revoked_by"] == "api-token"
    answer = client.get("/v1/jobs", headers=revoked)
    assert answer.status_code == 401 and "revoked" in answer.json()["error"]
    assert answer.headers["WWW-Authenticate"] == "Bearer"

    clock.advance(timedelta(hours=1))
    answer = submit(client, expiring)
    assert answer.status_code == 401 and "expired" in answer.json()["error"]

    refusals = [(r["actor"], r["action"], r["outcome"], r["status"]) for r in audit_rows(client) if r["status"] == 401]
    assert refusals == [("carol", "auth", "refused", 401), ("dave", "auth", "refused", 401)]


def test_a_token_the_daemon_never_issued_is_401_and_writes_no_audit_row(client: TestClient) -> None:
    forged = bearer("gps_0123456789ab_" + "x" * 43)
    assert client.get("/v1/jobs", headers=forged).status_code == 401
    assert client.get("/v1/jobs", headers=bearer("anything-at-all")).status_code == 401
    assert audit_rows(client) == []


def test_a_viewer_reads_its_teams_jobs_and_changes_nothing(client: TestClient, store: Store) -> None:  # noqa: F811
    viewer, _ = make_token(client, "viewer", "vision-qa", name="vic")
    job = submit(client, AUTH).json()
    other = submit(client, AUTH, {**JOB, "team": "retail"}).json()

    r = submit(client, viewer)
    assert r.status_code == 403 and "viewer" in r.json()["error"]
    r = client.post("/v1/jobs", content=b"not even yaml: [", headers={**viewer, "Content-Type": "application/yaml"})
    assert r.status_code == 403  # refused before its body is read
    assert client.post(f"/v1/jobs/{job['id']}/cancel", headers=viewer).status_code == 403
    assert client.get(f"/v1/jobs/{job['id']}", headers=viewer).status_code == 200
    assert [j["id"] for j in client.get("/v1/jobs", headers=viewer).json()] == [job["id"]]
    assert client.get(f"/v1/jobs/{other['id']}", headers=viewer).status_code == 403
    with store.session(write=False) as s:
        assert s.query(JobRow).count() == 2
    assert [(r["action"], r["outcome"]) for r in audit_rows(client) if r["actor"] == "vic"] == [
        ("job.submit", "refused"), ("job.submit", "refused"), ("job.cancel", "refused"), ("job.read", "refused")]


# --- submitting for a team --------------------------------------------------------------------------------


def test_a_job_file_without_a_team_is_the_tokens_only_team(client: TestClient) -> None:
    member, _ = make_token(client, "member", "vision-qa")
    r = submit(client, member, TEAMLESS)
    assert r.status_code == 201, r.text
    assert r.json()["team"] == "vision-qa"
    r = client.post("/v1/jobs?source=helmet.yaml", content=yaml.safe_dump(TEAMLESS).encode(),
                    headers={**member, "Content-Type": "application/yaml"})
    assert r.status_code == 201 and r.json()["team"] == "vision-qa"


def test_a_job_file_naming_a_team_the_token_does_not_act_for_is_403_with_why(client: TestClient) -> None:
    member, _ = make_token(client, "member", "vision-qa")
    r = submit(client, member, {**JOB, "team": "retail"})
    assert r.status_code == 403
    assert "retail" in r.json()["error"] and "vision-qa" in r.json()["error"]
    assert r.json()["fix"]


def test_a_token_of_several_teams_submits_for_any_of_them_and_must_name_one(client: TestClient) -> None:
    member, _ = make_token(client, "member", "vision-qa", "retail")
    assert submit(client, member, {**JOB, "team": "retail"}).json()["team"] == "retail"
    r = submit(client, member, TEAMLESS)
    assert r.status_code == 422 and [p["field"] for p in r.json()["problems"]] == ["team"]


def test_the_shared_token_submits_for_any_team_named_in_the_file(client: TestClient) -> None:
    assert submit(client, AUTH, {**JOB, "team": "retail"}).json()["submitted_by"] == "api-token"
    assert submit(client, AUTH, TEAMLESS).status_code == 422  # it has no team of its own


# --- reading ----------------------------------------------------------------------------------------------


def test_members_list_and_read_only_their_teams_jobs(client: TestClient) -> None:
    member, _ = make_token(client, "member", "vision-qa")
    mine = submit(client, member).json()
    theirs = submit(client, AUTH, {**JOB, "team": "retail"}).json()
    assert [j["id"] for j in client.get("/v1/jobs", headers=member).json()] == [mine["id"]]
    assert {j["id"] for j in client.get("/v1/jobs", headers=AUTH).json()} == {mine["id"], theirs["id"]}
    r = client.get("/v1/jobs", params={"team": "retail"}, headers=member)
    assert r.status_code == 403 and "retail" in r.json()["error"]
    r = client.get(f"/v1/jobs/{theirs['id']}", headers=member)
    assert r.status_code == 403 and theirs["id"] in r.json()["error"]
    assert client.get("/v1/jobs/job-000000000000", headers=member).status_code == 404


def test_a_member_cancels_a_teammates_job(client: TestClient) -> None:
    alice, _ = make_token(client, "member", "vision-qa", name="alice")
    bob, _ = make_token(client, "member", "vision-qa", name="bob")
    job = submit(client, alice).json()
    r = client.post(f"/v1/jobs/{job['id']}/cancel", headers=bob)
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    [row] = [r for r in audit_rows(client) if r["action"] == "job.cancel"]
    assert (row["actor"], row["outcome"], row["target"]) == ("bob", "allowed", job["id"])


def test_whoami_names_the_tokens_holder(client: TestClient) -> None:
    member, made = make_token(client, "member", "vision-qa", name="alice@example.com")
    assert client.get("/v1/whoami", headers=member).json() == {
        "name": "alice@example.com", "role": "member", "teams": ["vision-qa"], "token_id": made["id"]}
    assert client.get("/v1/whoami", headers=AUTH).json()["name"] == "api-token"


# --- the shared token --------------------------------------------------------------------------------------


def test_the_shared_token_is_admin_until_a_personal_admin_token_is_live(client: TestClient) -> None:
    make_token(client, "member", "vision-qa")  # a member token does not retire it
    assert client.get("/v1/tokens", headers=AUTH).status_code == 200
    admin, made = make_token(client, "admin", name="root")
    assert made["teams"] == []
    r = client.get("/v1/jobs", headers=AUTH)
    assert r.status_code == 401 and "personal admin tokens" in r.json()["error"]
    assert client.get("/v1/jobs", headers=admin).status_code == 200
    assert client.post(f"/v1/tokens/{made['id']}/revoke", headers=admin).status_code == 200
    assert client.get("/v1/jobs", headers=AUTH).status_code == 200  # no live admin token: never locked out


# --- tokens --------------------------------------------------------------------------------------------


def test_only_admins_and_team_admins_make_tokens(client: TestClient) -> None:
    member, _ = make_token(client, "member", "vision-qa")
    viewer, _ = make_token(client, "viewer", "vision-qa", name="vic")
    for who in (member, viewer):
        r = client.post("/v1/tokens", json={"name": "x", "role": "viewer", "teams": ["vision-qa"]}, headers=who)
        assert r.status_code == 403
        assert client.get("/v1/tokens", headers=who).status_code == 403
        assert client.get("/v1/audit", headers=who).status_code == 403
    assert [r["action"] for r in audit_rows(client) if r["outcome"] == "refused"] == [
        "token.create", "token.list", "audit.read"] * 2


def test_a_team_admin_manages_member_and_viewer_tokens_of_its_own_teams(client: TestClient) -> None:
    lead, _ = make_token(client, "team-admin", "vision-qa", name="lead")
    _, outsider = make_token(client, "member", "retail", name="rita")
    viewer, made = make_token(client, "viewer", "vision-qa", name="vic", by=lead)
    assert made["created_by"] == "lead"
    assert client.get("/v1/jobs", headers=viewer).status_code == 200
    for role, team in (("admin", "vision-qa"), ("team-admin", "vision-qa"), ("member", "retail")):
        r = client.post("/v1/tokens", json={"name": "x", "role": role, "teams": [team]}, headers=lead)
        assert r.status_code == 403, (role, team)
    assert [t["name"] for t in client.get("/v1/tokens", headers=lead).json()] == ["vic"]
    assert client.post(f"/v1/tokens/{outsider['id']}/revoke", headers=lead).status_code == 403
    assert client.post(f"/v1/tokens/{made['id']}/revoke", headers=lead).status_code == 200
    assert client.get("/v1/jobs", headers=viewer).status_code == 401
    assert client.post("/v1/tokens/tok-000000000000/revoke", headers=lead).status_code == 404


def test_a_team_admin_reads_its_teams_audit_log_only(client: TestClient) -> None:
    lead, _ = make_token(client, "team-admin", "vision-qa", name="lead")
    submit(client, AUTH)
    submit(client, AUTH, {**JOB, "team": "retail"})
    assert {r["team"] for r in audit_rows(client, lead)} == {"vision-qa"}
    r = client.get("/v1/audit", params={"team": "retail"}, headers=lead)
    assert r.status_code == 403 and "retail" in r.json()["error"]
    assert {r["team"] for r in audit_rows(client, AUTH, team="retail")} == {"retail"}


@pytest.mark.parametrize(("body", "words"), [
    ({"name": "x", "role": "member"}, "at least one team"),
    ({"name": "api-token", "role": "admin"}, "GPUSCHED_API_TOKEN"),
    ({"name": "x", "role": "owner", "teams": ["a"]}, "role"),
    ({"name": "x y", "role": "member", "teams": ["a"]}, "name"),
    ({"name": "x", "role": "member", "teams": ["Vision"]}, "teams"),
    ({"name": "x", "role": "member", "teams": ["a"], "expires_in_seconds": 5}, "expires_in_seconds"),
])
def test_a_token_request_that_cannot_be_met_is_400_naming_why(client: TestClient, body: dict[str, Any],
                                                               words: str) -> None:
    r = client.post("/v1/tokens", json=body, headers=AUTH)
    assert r.status_code == 400 and words in r.json()["error"], r.text


def test_a_token_listing_holds_no_secret_and_says_each_tokens_state(client: TestClient,
                                                                    clock: SimClock) -> None:  # noqa: F811
    make_token(client, "member", "vision-qa", name="short", expires_in_seconds=60)
    live, _ = make_token(client, "viewer", "vision-qa", name="long")
    clock.advance(timedelta(minutes=2))
    listed = client.get("/v1/tokens", headers=AUTH).json()
    assert {t["name"]: t["state"] for t in listed} == {"short": "expired", "long": "live"}
    assert all("token" not in t and "secret_sha256" not in t for t in listed)
    assert live["Authorization"].removeprefix("Bearer ") not in str(listed)
