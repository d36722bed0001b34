"""The daemon's parts configured for a cloud emulator: real adapter, real SDK, real HTTP.

Settings say ``backend=live`` with the provider's endpoint pointed at the local
emulator (what an operator does with GPUSCHED_<CLOUD>_ENDPOINT); a job submitted
through the HTTP API runs to completion through the tick. The emulators' request
logs also give the API calls one steady tick makes with 100 running instances.
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

pytest.importorskip("aliyunsdkcore", reason="the Alibaba SDK (gpusched[alibaba]) is not installed")
pytest.importorskip("tencentcloud", reason="the Tencent SDK (gpusched[tencent]) is not installed")

from providers.emulators.alibaba_ecs import AlibabaEcsEmulator  # noqa: E402
from providers.emulators.tencent_cvm import TencentCvmEmulator  # noqa: E402

REGION = {"alibaba": "cn-hangzhou", "tencent": "ap-guangzhou"}


class EmulatedCloud(DaemonOnEmulator):
    """The Alibaba ECS or the Tencent CVM emulator, and the daemon's parts configured to use it."""

    def __init__(self, cloud: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
        super().__init__(cloud, REGION[cloud], tmp_path)

    def serve(self, offers: Sequence[Offer]) -> dict[str, Any]:
        if self.name == "alibaba":
            self.emulator = AlibabaEcsEmulator(self.sandbox, {KEY_ID: SECRET})
            config: dict[str, Any] = {"access_key_id": KEY_ID, "access_key_secret": SECRET}
        else:
            self.emulator = TencentCvmEmulator(self.sandbox, self.clock, {KEY_ID: SECRET}, seed=5)
            config = {"secret_id": KEY_ID, "secret_key": SECRET, "currency": "USD"}  # the catalog's intl prices
        config.update(endpoint=self.emulator.endpoint, protocol="http", regions=(REGION[self.name],),
                      image_id="img-yolov9-e2e" if self.name == "tencent" else "m-yolov9-e2e")
        return config

    def requests(self) -> Counter:
        if self.name == "alibaba":
            return Counter(c.action for c in self.emulator.calls)
        return Counter(self.emulator.action_counts)


@pytest.fixture(params=["alibaba", "tencent"])
def emulated(request, tmp_path):
    world = EmulatedCloud(request.param, tmp_path)
    yield world
    world.close()


def job_for(cloud: str) -> dict:
    spec = load_job_file("examples/helmet-s-train.yaml").model_dump(mode="json")
    spec["where"] = {"providers": [cloud], "regions": [REGION[cloud]]}
    spec["train"]["epochs"] = 20
    return spec


def test_job_submitted_to_the_daemon_runs_to_completion_through_the_real_adapter(emulated):
    r = emulated.api.post("/v1/jobs", json={"spec": job_for(emulated.name), "source": "helmet.yaml"}, headers=AUTH)
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
    assert attempt["provider"] == emulated.name
    calls = emulated.requests()
    assert calls["RunInstances"] == 1 and calls["DescribeInstances"] > 0
    for _ in range(10):  # then the machine goes idle and is stopped (stop-charging) by the reaper
        emulated.step()
    detail = emulated.api.get(f"/v1/jobs/{job_id}", headers=AUTH).json()
    assert detail["state"] == "succeeded"
    assert emulated.requests()["StopInstances"] + emulated.requests().get("StopInstance", 0) >= 1


def test_one_list_call_per_region_per_page_for_100_running_instances(emulated):
    spec = job_for(emulated.name)
    spec.update(kind="export", export={"weights": "s3://bucket/best.pt", "formats": ["onnx"]})
    for key in ("train", "data"):
        spec.pop(key)
    spec["policy"] = {"capacity": "on-demand", "idle_stop_minutes": 600}
    for i in range(100):
        spec["name"] = f"export-{i}"
        assert emulated.api.post("/v1/jobs", json={"spec": spec}, headers=AUTH).status_code == 201
    for _ in range(3):
        emulated.step(minutes=1)
    running = emulated.sandbox.all_instances()
    assert len(running) == 100
    emulated.clock.advance(timedelta(minutes=3))
    before = emulated.requests()
    lifecycle.tick(emulated.ctx)  # one steady tick: nothing to plan, nothing to launch
    after = emulated.requests()
    per_tick = {action: after[action] - before.get(action, 0)
                for action in after if after[action] != before.get(action, 0)}
    assert per_tick == {"DescribeInstances": 1}, per_tick
