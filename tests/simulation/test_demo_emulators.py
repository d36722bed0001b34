"""`gpusched demo --via-emulators`: Huawei Cloud joins through its real adapter and SDK over HTTP to its emulator.

The whole emulated demo takes minutes; these cases build its clouds the way ``run_demo`` does and drive the
Huawei one through a launch, a listing and the scenario's reclaim lever.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

for _sdk in ("huaweicloudsdkecs.v2", "aliyunsdkcore", "tencentcloud.cvm.v20170312"):
    pytest.importorskip(_sdk, reason="the emulated demo needs every cloud SDK: pip install '.[clouds]'")

from providers.base import TAG_MANAGED, InstanceRequest, InstanceState  # noqa: E402
from providers.emulators.huawei_ecs import HuaweiEcsEmulator  # noqa: E402
from providers.huawei.adapter import HuaweiProvider  # noqa: E402
from providers.registry import build_sandbox  # noqa: E402
from scheduler.clock import SimClock  # noqa: E402
from scheduler.models import Capacity  # noqa: E402
from scheduler.simulation.demo import (  # noqa: E402
    EMULATED_PROVIDERS,
    PROVIDERS,
    START,
    attach_emulators,
    demo_settings,
)


@pytest.fixture
def emulated(tmp_path: Path) -> Iterator[tuple[SimClock, dict, dict, HuaweiEcsEmulator]]:
    settings = demo_settings(tmp_path, 7, EMULATED_PROVIDERS)
    clock = SimClock(START)
    providers, clouds = build_sandbox(settings, clock)
    emulators: list = []
    preempt = attach_emulators(settings, clock, providers, clouds, emulators)
    try:
        yield clock, providers, preempt, next(e for e in emulators if isinstance(e, HuaweiEcsEmulator))
    finally:
        for emulator in emulators:
            emulator.close()


def test_only_the_emulated_demo_adds_huawei() -> None:
    assert "huawei" not in PROVIDERS
    assert set(EMULATED_PROVIDERS) == {*PROVIDERS, "huawei"}


def test_huawei_is_reached_over_http_and_the_scenarios_reclaim_reaches_it(emulated) -> None:  # type: ignore[no-untyped-def]
    clock, providers, preempt, emulator = emulated
    huawei = providers["huawei"]
    offers = huawei.offers()
    offer = next(o for o in offers if o.spot is not None)

    made = huawei.launch(InstanceRequest(offer=offer, capacity=Capacity.spot, client_token="demo-huawei-a1",
                                         tags={TAG_MANAGED: "demo"}, name="demo-huawei"))
    clock.advance(timedelta(minutes=5))
    running = huawei.instances({TAG_MANAGED: "demo"})
    preempt["huawei"](made.ref.instance_id, at=clock.now())
    clock.advance(timedelta(minutes=5))
    gone = huawei.instances({TAG_MANAGED: "demo"})

    assert isinstance(huawei, HuaweiProvider)
    assert offers and {o.provider for o in offers} == {"huawei"}
    assert {o.region for o in offers} == {"cn-north-4", "cn-east-3"}  # a project per region, each answered
    assert [(i.ref.instance_id, i.state) for i in running] == [(made.ref.instance_id, InstanceState.running)]
    assert [(i.state, i.preempted) for i in gone] == [(InstanceState.terminated, True)]
    assert [c.status for c in emulator.calls_of("CreatePostPaidServers")] == [200]
