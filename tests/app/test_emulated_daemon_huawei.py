"""The daemon's parts configured for the Huawei ECS emulator: real adapter, real SDK, real HTTP.

The same two scenarios ``test_emulated_daemon.py`` runs for Alibaba and Tencent, for the fourth
cloud: a job submitted through the HTTP API runs to completion through the tick (create job,
intent tag, listing by tag, stop-charging by the reaper), and a steady tick over 100 running
servers lists them with one call per page. Nothing in the scheduler knows which cloud it is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from scheduler.jobs.jobfile import load_job_file
from scheduler.lifecycle import tick as lifecycle
from scheduler.models import Offer
from tests.app.emulated_world import AUTH, KEY_ID, SECRET, DaemonOnEmulator

pytest.importorskip("huaweicloudsdkecs", reason="the Huawei SDK (gpusched[huawei]) is not installed")

from providers.emulators.huawei_ecs import HuaweiEcsEmulator  # noqa: E402

REGION, PROJECT = "cn-north-4", "e2e0000000000000000000000000a0b1"


class EmulatedHuawei(DaemonOnEmulator):
    def __init__(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        super().__init__("huawei", REGION, tmp_path)

    def serve(self, offers: Sequence[Offer]) -> dict[str, Any]:
        self.emulator = HuaweiEcsEmulator(self.sandbox, self.clock, {KEY_ID: SECRET}, {PROJECT: REGION}, seed=5)
        # The keys go by their setting names: they also answer to HUAWEICLOUD_SDK_AK / _SK.
        return {"GPUSCHED_HUAWEI_ACCESS_KEY": KEY_ID, "GPUSCHED_HUAWEI_SECRET_KEY": SECRET,
                "GPUSCHED_HUAWEI_PROJECT_ID": PROJECT, "endpoint": self.emulator.endpoint, "regions": (REGION,),
                "image_id": "00000000-0000-4000-8000-0000000e2e01", "vpc_id": "vpc-e2e",
                "subnet_ids": {o.zone: f"subnet-{o.zone}" for o in offers}}

    def connected(self) -> None:
        # Tests talk to 127.0.0.1 only, whatever HTTP(S)_PROXY says.
        self.providers["huawei"]._client(REGION).get_http_client()._session.trust_env = False  # type: ignore[attr-defined]

    def requests(self) -> Counter:
        return Counter(c.route for c in self.emulator.calls)

    def close(self) -> None:
        self.api.close()
        self.store.dispose()
        self.emulator.close()


@pytest.fixture
def emulated(tmp_path):  # type: ignore[no-untyped-def]
    world = EmulatedHuawei(tmp_path)
    yield world
    world.close()


def _job() -> dict:
    spec = load_job_file("examples/helmet-s-train.yaml").model_dump(mode="json")
    spec["where"] = {"providers": ["huawei"], "regions": [REGION]}
    spec["resources"] = {"gpus": ["T4", "V100", "V100-32G", "A100-80G"], "gpu_count": 1, "nodes": 1}
    spec["train"]["epochs"] = 20
    return spec


@pytest.mark.parametrize("capacity", ["spot", "on-demand"])
def test_a_job_runs_to_completion_on_huawei_through_the_daemon(emulated: EmulatedHuawei, capacity: str) -> None:
    spec = _job()
    spec["policy"]["capacity"] = capacity
    r = emulated.api.post("/v1/jobs", json={"spec": spec, "source": "helmet.yaml"}, headers=AUTH)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    for _ in range(1000):
        state = emulated.api.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
        if state["state"] in ("succeeded", "failed"):
            break
        emulated.step()
    assert state["state"] == "succeeded", state
    assert state["epochs_done"] == 20
    [attempt] = state["attempts"]
    assert (attempt["provider"], attempt["capacity"]) == ("huawei", capacity)
    calls = emulated.requests()
    assert calls["CreatePostPaidServers"] == 1 and calls["ShowJob"] >= 1
    for _ in range(10):  # then the machine goes idle and the reaper lets it go
        emulated.step()
    stops = [c for c in emulated.emulator.calls if c.route == "BatchServersAction" and b'"os-stop"' in c.body]
    deletes = emulated.requests()["DeleteServers"]
    if capacity == "spot":  # Huawei spot servers are not stopped: terminated instead
        assert (len(stops), deletes) == (0, 1)
    else:  # pay-per-use: stop-charging
        assert (len(stops), deletes) == (1, 0)


def test_one_list_call_per_page_for_100_running_servers(emulated: EmulatedHuawei) -> None:
    spec = _job()
    spec.update(kind="export", export={"weights": "s3://bucket/best.pt", "formats": ["onnx"]})
    for key in ("train", "data"):
        spec.pop(key)
    spec["policy"] = {"capacity": "on-demand", "idle_stop_minutes": 600}
    for i in range(100):
        spec["name"] = f"export-{i}"
        assert emulated.api.post("/v1/jobs", json={"spec": spec}, headers=AUTH).status_code == 201
    for _ in range(3):
        emulated.step(minutes=1)
    assert len(emulated.sandbox.all_instances()) == 100
    emulated.clock.advance(timedelta(minutes=3))
    before = emulated.requests()
    lifecycle.tick(emulated.ctx)  # one steady tick: nothing to plan, nothing to launch
    after = emulated.requests()
    per_tick = {route: after[route] - before.get(route, 0) for route in after if after[route] != before.get(route, 0)}
    assert per_tick == {"ListServersDetails": 1}, per_tick  # 100 servers fit one page of 200
