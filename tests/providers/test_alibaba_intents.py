"""One launch intent, one machine: the daemon's tick against the ECS emulator when an answer is lost.

The intent (job, attempt, client token) is written ahead; the launch is retried with the same token,
in the same tick and again in the next. ECS refuses a reused ClientToken whose parameters differ
(IdempotentParameterMismatch), so a parameter computed from the clock at each call (the AutoReleaseTime
backstop) turned a retry in the next hour into a refusal, and the next attempt into a second machine.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient

from providers.base import ProviderUnavailable
from providers.catalog import filter_offers, load_catalog
from providers.registry import build_live
from providers.sandbox.provider import SandboxCloud
from scheduler.app.api import create_app
from scheduler.clock import SimClock
from scheduler.jobs.jobfile import load_job_file
from scheduler.lifecycle import tick as lifecycle
from scheduler.lifecycle.context import TickContext
from scheduler.settings import Settings
from scheduler.store.database import Store

pytest.importorskip("aliyunsdkcore", reason="the Alibaba Cloud SDK is an extra: pip install '.[alibaba]'")

from providers.emulators.alibaba_ecs import AlibabaEcsEmulator  # noqa: E402

START = datetime(2026, 11, 2, 9, 58, tzinfo=timezone.utc)  # two minutes before an hour turns
TOKEN = "intent-api-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
KEY_ID, SECRET = "intent-key-id", "intent-secret-value"


def test_a_launch_whose_answer_was_lost_before_the_hour_turned_makes_one_machine(tmp_path) -> None:
    clock = SimClock(START)
    offers = filter_offers(load_catalog(), providers=["alibaba"], regions=["cn-hangzhou"])
    # ECS lists new instances after a while; by id it finds them at once.
    sandbox = SandboxCloud(clock, offers, seed=5, interruption_scale=0.0, list_delay_seconds=600)
    emulator = AlibabaEcsEmulator(sandbox, {KEY_ID: SECRET})
    settings = Settings(_env_file=None, backend="live", providers=["alibaba"], cluster="intent",
                        api_token=TOKEN, sim_agents=True, data_dir=tmp_path)
    config = {"access_key_id": KEY_ID, "access_key_secret": SECRET, "endpoint": emulator.endpoint,
              "protocol": "http", "regions": ("cn-hangzhou",), "image_id": "m-intent", "auto_release_hours": 24}
    store = Store(settings.db_url)
    store.migrate()
    api = TestClient(create_app(store, clock, settings))
    try:
        ctx = TickContext(store=store, providers=build_live(settings, clock, alibaba=config), clock=clock,
                          settings=settings)
        spec = load_job_file("examples/helmet-s-train.yaml").model_dump(mode="json")
        spec["where"] = {"providers": ["alibaba"], "regions": ["cn-hangzhou"]}
        reply = api.post("/v1/jobs", json={"spec": spec, "source": "helmet.yaml"}, headers=AUTH)
        assert reply.status_code == 201, reply.text
        job_id = reply.json()["id"]

        # Tick 1 (09:58): four launches fail outright, the fifth is carried out and its answer lost.
        sandbox.fail_next("launch", ProviderUnavailable("the service is down", code="ServiceUnavailable"), times=4)
        sandbox.lose_next_launch_response()
        lifecycle.tick(ctx)
        assert len(sandbox.all_instances()) == 1
        # Tick 2 (10:00:30): the intent is re-issued with the same token in the next hour.
        clock.advance(timedelta(seconds=150))
        lifecycle.tick(ctx)
        clock.advance(timedelta(minutes=1))
        lifecycle.tick(ctx)

        job = api.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
        runs = emulator.calls_of("RunInstances")
    finally:
        api.close()
        store.dispose()
        emulator.close()

    assert len(sandbox.all_instances()) == 1  # never a second machine for the intent
    assert len(job["attempts"]) == 1, job["attempts"]
    assert job["state"] in ("provisioning", "running"), job
    assert len({c.params["AutoReleaseTime"] for c in runs}) == 1
    assert len({c.params["ClientToken"] for c in runs}) == 1 and len(runs) == 6  # 5 in tick 1, 1 re-issued


def test_a_launch_refused_for_an_unpaid_account_is_given_up_not_retried(tmp_path) -> None:
    from tests.providers.emulated_daemon import EmulatedDaemon

    world = EmulatedDaemon("alibaba", tmp_path, START, agents=False)
    try:
        job_id = world.submit()
        world.emulator.script_error("RunInstances", "InsufficientBalance", status=403,
                                    message="Your account does not have enough balance.", times=50)
        world.step()
        runs = world.emulator.calls_of("RunInstances")
        job = world.job(job_id)
    finally:
        world.close()

    # Refused, nothing made: no retry of the same call, the offer given up, the job planned again.
    assert runs and len(runs) == len({c.params["ClientToken"] for c in runs})
    assert world.sandbox.all_instances() == []
    assert job["state"] in ("queued", "planned")
    assert all(a["state"] == "launch_failed" for a in job["attempts"])
    assert "BillingStopped" in (job.get("reason") or "") or any(
        "BillingStopped" in (a.get("reason") or "") for a in job["attempts"]), job
