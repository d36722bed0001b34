"""Property tests of every agent route (issue 16): whatever body a machine sends, the daemon never answers
5xx, and the job and attempt never reach a state they do not allow (progress beyond the job, backwards,
a resume point or outputs outside the job's output prefix, an unroutable or second rendezvous, text with
control characters, another machine's job touched)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from scheduler.agent.outputs import outputs_prefix
from scheduler.app.api import create_app
from scheduler.clock import SimClock
from scheduler.jobs.jobfile import parse_job
from scheduler.lifecycle import service
from scheduler.lifecycle.agent_reports import address_problem, printable
from scheduler.lifecycle.transitions import current_attempt
from scheduler.logs import forget_secrets
from scheduler.settings import Settings
from scheduler.store.database import Store
from scheduler.store.tables import JobRow
from tests.agent.machines import machine_auth, put_on_machine

TOKEN = "props-test-api-token-0123456789"
TRAIN: dict[str, Any] = {
    "name": "helmet-v3", "team": "vision-qa", "kind": "train", "model": "yolov9-s",
    "data": {"uri": "s3://bucket/datasets/helmet", "train_images": 12000}, "train": {"epochs": 30},
}
GANG: dict[str, Any] = {**TRAIN, "name": "helmet-gang", "resources": {"nodes": 2}}
INFER: dict[str, Any] = {
    "name": "nightly", "team": "retail", "kind": "infer", "model": "yolov9-s",
    "infer": {"source": "oss://shop/images/", "images": 60_000, "weights": "oss://shop/w/best.pt"},
}
EXPORT: dict[str, Any] = {"name": "ship-it", "team": "retail", "kind": "export", "model": "yolov9-s",
                          "export": {"weights": "cos://models/helmet/best.pt"}}
JOBS = {"train": TRAIN, "gang": GANG, "infer": INFER, "export": EXPORT}
ROUTES = ("hello", "heartbeat", "rendezvous", "progress", "finished", "reclaiming", "work", "token")
EXAMPLES = 30  # per route: a few seconds each
_machines = itertools.count(1)

# --- values a machine might send: right ones, wrong ones, hostile ones

WILD_INTS = st.one_of(st.integers(-3, 120), st.sampled_from([2**31, 2**53 + 1, 2**63, 2**64, -(2**63), 10**30]))
HOSTILE_TEXT = st.sampled_from(["[/x]", "[bold red]x[/bold red]", "\x1b[2J\x1b]0;pwned\x07", "a\x00b", "\u202eevil",
                                "\ud800", "'; drop table jobs; --", "../../etc/passwd", "x" * 3000, ""])
TEXT = st.one_of(st.text(max_size=40), HOSTILE_TEXT)
WILD = st.one_of(st.none(), st.booleans(), WILD_INTS, TEXT, st.floats(allow_nan=True),
                 st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
ADDRS = st.one_of(st.ip_addresses().map(str), st.sampled_from(
    ["10.0.3.17", "10.0.3.18", "169.254.169.254", "127.0.0.1", "0.0.0.0", "::ffff:169.254.169.254", "fd00:ec2::254",
     "100.100.100.200", "224.0.0.1", "fe80::1%eth0", "2001:db8::1%" + "x" * 60, "rank0.internal", ""]))
TIMES = st.one_of(st.datetimes(timezones=st.one_of(st.none(), st.timezones())).map(lambda d: d.isoformat()),
                  st.sampled_from(["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00", "now", "2026-13-01"]))


def uris(prefix: str | None) -> st.SearchStrategy[str | None]:
    """Under the job's prefix, beside it, above it, in another bucket or scheme."""
    base = prefix or "s3://bucket/runs/x/"
    starts = st.sampled_from([base, base + "weights/", base + "../", base.rstrip("/") + "-evil/", "s3://other/runs/",
                              base.replace("s3://", "oss://").replace("oss://", "cos://", 1), base + "./..//"])
    rest = st.sampled_from(["", "last.pt", "weights/last.pt", "labels/", "a?b#c", "..\\x", "../../other/last.pt"])
    return st.one_of(st.none(), st.builds(lambda a, b: a + b, starts, rest), TEXT)


def mostly(right: Any, wrong: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``right`` four times in five, else one of ``wrong``: a report must get past the envelope to test
    what the job allows."""
    return st.integers(0, 4).flatmap(lambda i: wrong if i == 0 else st.just(right))


def bodies(route: str, job_id: str, attempt: int, prefix: str | None) -> st.SearchStrategy[Any]:
    """Bodies for ``route``: the route's fields with right and wrong values, now and then one missing or
    one extra; one in six is any JSON at all."""
    common: dict[str, st.SearchStrategy[Any]] = {
        "job_id": mostly(job_id, st.one_of(st.sampled_from(["job-000000000000", "x" * 41, "job-1; drop", ""]), WILD)),
        "attempt": mostly(attempt, st.one_of(st.sampled_from([attempt + 1, 0, -1, 2**63]), WILD)),
    }
    fields: dict[str, dict[str, st.SearchStrategy[Any]]] = {
        "hello": {"gpu_name": TEXT, "gpu_model": st.one_of(st.none(), st.sampled_from(["A10G", "H100"]), TEXT),
                  "gpu_count": WILD_INTS, "gpu_memory_mib": st.one_of(st.none(), WILD_INTS),
                  "source": mostly("nvml", TEXT)},
        "heartbeat": {**common, "progress": TEXT, "epochs_done": st.one_of(st.none(), WILD_INTS),
                      "gpu_util": st.one_of(st.none(), st.floats(allow_nan=True), WILD_INTS)},
        "rendezvous": {**common, "node_rank": mostly(0, WILD_INTS), "addr": ADDRS},
        "progress": {**common, "epochs_done": WILD_INTS, "checkpoint_uri": uris(prefix),
                     "physical_batch": st.one_of(st.none(), WILD_INTS)},
        "finished": {**common, "ok": mostly(True, WILD), "message": TEXT, "outputs": uris(prefix)},
        "reclaiming": {**common, "at": TIMES},
    }[route]

    def mutate(body: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
        drop = st.sampled_from(sorted(body)).map(lambda k: {f: v for f, v in body.items() if f != k})
        return st.integers(0, 9).flatmap(lambda i: drop if i == 0 else st.just({**body, "extra": 1}) if i == 1
                                         else st.just(body))

    shaped = st.fixed_dictionaries(fields).flatmap(mutate)
    json_values = st.recursive(st.one_of(st.none(), st.booleans(), WILD_INTS, TEXT),
                               lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                               max_leaves=10)
    return st.integers(0, 5).flatmap(lambda i: json_values if i == 0 else shaped)


# --- the daemon


@pytest.fixture
def world(store: Store, sim_clock: SimClock) -> Iterator[tuple[Store, SimClock, TestClient, str]]:
    """The API, and a bystander: another team's job on another machine that no report may touch."""
    settings_ = Settings(_env_file=None, api_token=SecretStr(TOKEN))  # type: ignore[call-arg]
    with TestClient(create_app(store, sim_clock, settings_)) as http:
        bystander = service.submit(store, sim_clock, parse_job({**TRAIN, "name": "bystander"}, "b.yaml"), source="b")
        put_on_machine(store, sim_clock, bystander.id, instance_id="inst-0000000bbbbb")
        yield store, sim_clock, http, bystander.id
    forget_secrets()


def snapshot(store: Store, job_id: str) -> dict[str, Any]:
    with store.session(write=False) as s:
        job = s.get(JobRow, job_id)
        assert job is not None
        attempt = current_attempt(s, job_id)
        return {"state": job.state, "epochs_done": job.epochs_done, "epochs_total": job.epochs_total,
                "checkpoint_uri": job.checkpoint_uri, "outputs_uri": job.outputs_uri, "reason": job.reason,
                "attempt": job.attempt, "master_addr": attempt.master_addr if attempt else None,
                "nodes": (job.spec_json.get("resources") or {}).get("nodes", 1)}


def allowed(before: dict[str, Any], after: dict[str, Any], prefix: str | None) -> None:
    """What the job's state may be after any one report of its machine."""
    total = after["epochs_total"] or 0
    assert 0 <= after["epochs_done"] <= total, after
    assert after["epochs_done"] >= before["epochs_done"], (before, after)
    for field in ("checkpoint_uri", "outputs_uri"):
        uri = after[field]
        if uri != before[field]:
            assert prefix is not None and uri is not None and (uri + "/").startswith(prefix), (field, uri)
            assert "/../" not in uri + "/" and "/./" not in uri + "/", uri
    if after["master_addr"] != before["master_addr"]:
        assert before["master_addr"] is None and after["nodes"] > 1, (before, after)
        assert address_problem(after["master_addr"]) is None, after
    if after["reason"] is not None:
        assert printable(after["reason"]) == after["reason"]
    assert after["state"] in ("running", "succeeded", "failed", "queued", "preempted"), after


@pytest.mark.parametrize("route", ROUTES)
# No shrinking: every example writes to the store, and a shrink would replay hundreds of them; a failure
# prints the example as drawn.
@settings(max_examples=EXAMPLES, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate),
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_body_breaks_the_daemon_or_the_job(world, route: str, data: st.DataObject) -> None:
    store, clock, http, bystander = world
    kind = data.draw(st.sampled_from(sorted(JOBS)), label="job")
    job = service.submit(store, clock, parse_job(JOBS[kind], "job.yaml"), source="job.yaml")
    instance = f"inst-{next(_machines):012x}"
    put_on_machine(store, clock, job.id, instance_id=instance)
    prefix = outputs_prefix(parse_job(JOBS[kind], "job.yaml"))
    auth = machine_auth(TOKEN, instance, clock)
    ours = {"job_id": job.id, "attempt": 1}
    if data.draw(st.booleans(), label="some progress first") and kind in ("train", "gang", "infer"):
        r = http.post("/v1/agent/progress", headers=auth, json={**ours, "epochs_done": 2, "checkpoint_uri": prefix})
        assert r.status_code == 204, r.text
    before, others = snapshot(store, job.id), snapshot(store, bystander)

    for _ in range(data.draw(st.integers(1, 3), label="calls")):
        if route == "work":
            r = http.get("/v1/agent/work", headers=auth)
        elif route == "token":
            r = http.post("/v1/agent/token", headers=auth)
        else:
            body = data.draw(bodies(route, job.id, 1, prefix), label="body")
            r = http.post(f"/v1/agent/{route}", headers={**auth, "Content-Type": "application/json"},
                          content=json.dumps(body).encode())  # surrogates and NaN as JSON spells them
        assert r.status_code < 500, r.text
        assert r.status_code in (200, 204, 400, 401, 403, 404, 409, 422), r.text
        if r.status_code >= 400:
            assert set(r.json()) == {"error", "fix"}
        after = snapshot(store, job.id)
        allowed(before, after, prefix)
        before = after

    assert snapshot(store, bystander) == others  # no report of this machine reached another job
    work = http.get("/v1/agent/work", headers=auth)
    assert work.status_code == 200
    if work.json()["action"] == "run":
        assert work.json()["job_id"] == job.id and snapshot(store, job.id)["state"] == "running"
    listed = http.get("/v1/jobs?limit=500", headers={"Authorization": f"Bearer {TOKEN}"})
    assert listed.status_code == 200  # the store still reads back for everyone
