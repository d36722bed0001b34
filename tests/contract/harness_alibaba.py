"""The Alibaba Cloud adapter under the contract suite: the real SDK over real HTTP to the ECS emulator.

Each test gets a fresh ``SandboxCloud`` on a SimClock, the ECS emulator
(``providers/emulators/alibaba_ecs.py``) serving it on 127.0.0.1, and an
``AlibabaProvider`` built by ``from_config`` with the endpoint pointed there,
so the SDK signs, sends and parses every call as it would against ECS.

The harness's levers go to the sandbox behind the emulator. A spot reclaim
starts at once and runs ECS's five-minute notice: the instance carries the
``Recycling`` lock during it and is released when it ends. Random reclaims are
off (``interruption_scale=0``): the suite scripts the ones it wants.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from providers.base import Instance, Provider, ProviderError
from providers.emulators.faults import FaultPlan
from providers.sandbox.provider import SandboxCloud
from scheduler.clock import SimClock
from scheduler.models import Capacity, Offer, Price, Stock
from scheduler.money import Money
from tests.optional import missing

_MISSING = [m for m in ("aliyunsdkcore", "aliyunsdkecs") if importlib.util.find_spec(m) is None]
if not _MISSING:
    from pydantic import SecretStr

    from providers.alibaba.adapter import AlibabaProvider, from_config
    from providers.alibaba.client import make_client_factory
    from providers.alibaba.config import AlibabaConfig
    from providers.emulators.alibaba_ecs import AlibabaEcsEmulator

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
REGIONS = ("cn-hangzhou", "cn-shanghai")
ACCESS_KEY_ID = "LTAIgpuschedHarness01"
SECRET = "harness-secret-not-a-real-one"
NOTICE_SECONDS = 300  # ECS announces a spot reclaim five minutes ahead (docs/gpus-and-clouds.md)


def _price(amount: str, source: str) -> Price:
    return Price(per_hour=Money(amount=Decimal(amount), currency="CNY"), source=source, as_of=date(2026, 11, 1))


def alibaba_offer(region: str, zone: str, itype: str, gpu: str, mem: float, vcpus: int, ram: float,
           od: str, spot: str) -> Offer:
    return Offer(
        provider="alibaba", region=region, zone=zone, instance_type=itype, gpu=gpu, gpu_count=1,
        gpu_mem_gib=mem, vcpus=vcpus, mem_gib=ram,
        on_demand=_price(od, "docs/prices.md list price"),
        spot=_price(spot, "contract test catalog"),
        on_demand_stock=Stock.available, spot_stock=Stock.available, spot_interruptions_per_hour=0.05,
    )


# On-demand figures from docs/prices.md; spot figures are illustrative.
CATALOG = (
    alibaba_offer("cn-hangzhou", "cn-hangzhou-i", "ecs.gn6i-c4g1.xlarge", "T4", 15.0, 4, 15, "11.63", "4.65"),
    alibaba_offer("cn-hangzhou", "cn-hangzhou-i", "ecs.gn7i-c8g1.2xlarge", "A10", 22.0, 8, 30, "9.5326", "3.81"),
    alibaba_offer("cn-shanghai", "cn-shanghai-l", "ecs.gn7i-c8g1.2xlarge", "A10", 22.0, 8, 30, "9.5326", "3.95"),
)


class AlibabaHarness:
    """A fresh sandbox cloud behind the ECS emulator, and the real adapter pointed at it."""

    def __init__(
        self,
        *,
        catalog: tuple[Offer, ...] = CATALOG,
        adapter_catalog: tuple[Offer, ...] | None = None,
        gpu_quota: int | None = None,
        page_size: int = 100,
        emulator: Mapping[str, Any] | None = None,
        **config: Any,
    ) -> None:
        self.clock = SimClock(START)
        self.cloud = SandboxCloud(
            self.clock, catalog, seed=11, interruption_scale=0.0, notice_seconds=NOTICE_SECONDS,
            gpu_quota=gpu_quota, id_prefix="i",
        )
        # ``emulator``: options of the ECS emulator itself (faults, keep-charging types, page sizes).
        self.emulator = AlibabaEcsEmulator(self.cloud, {ACCESS_KEY_ID: SECRET}, **dict(emulator or {}))
        self.config = AlibabaConfig(
            access_key_id=ACCESS_KEY_ID,
            access_key_secret=SecretStr(SECRET),
            regions=REGIONS,
            image_id="m-gpusched-yolov9",
            endpoint=self.emulator.endpoint,
            protocol="http",
            **config,
        )
        self._adapter_catalog = catalog if adapter_catalog is None else adapter_catalog
        self.provider: Provider = AlibabaProvider(
            make_client_factory(self.config), self.config, self.clock, self._adapter_catalog, page_size=page_size
        )
        self.currency = "CNY"
        self.cluster = "contract"

    def advance(self, seconds: float) -> None:
        self.clock.advance(timedelta(seconds=seconds))

    def sell_out(self, offer: Offer, capacity: Capacity) -> None:
        self.cloud.sell_out(offer, capacity)

    def preempt(self, instance: Instance) -> None:
        # The reclaim starts now; ECS releases the machine when the notice runs out.
        self.cloud.preempt(instance.ref.instance_id, at=self.clock.now() + timedelta(seconds=NOTICE_SECONDS))

    def fail_next(self, operation: str, error: ProviderError, times: int = 1) -> None:
        self.cloud.fail_next(operation, error, times)

    def lose_next_launch_response(self) -> None:
        self.cloud.lose_next_launch_response()

    def offer(self, gpu: str | None = None) -> Offer:
        for o in self.provider.offers():
            if (gpu is None or o.gpu == gpu) and o.on_demand is not None and o.spot is not None:
                return o
        raise LookupError(f"the test catalog has no offer with gpu={gpu!r}")

    def provider_with_wrong_secret(self) -> Provider | None:
        config = self.config.model_copy(update={"access_key_secret": SecretStr("not-the-secret")})
        return from_config(config, self.clock, self._adapter_catalog)

    def machines(self) -> list[tuple[Mapping[str, str], str]]:
        return [(dict(m.tags), m.state.value) for m in self.cloud.all_instances()]

    def faults_dealt(self) -> dict[str, int]:
        return dict(self.emulator.faults.drawn)

    def close(self) -> None:
        self.emulator.close()


def _make(faults: FaultPlan | None = None) -> AlibabaHarness:
    if _MISSING:
        missing(f"the Alibaba Cloud SDK is not installed ({', '.join(_MISSING)}): "
                    "pip install '.[alibaba]' (from the checkout)")
    if faults is None:
        return AlibabaHarness()
    # Under faults the release backstop is on too: a retried launch must send the same AutoReleaseTime.
    return AlibabaHarness(emulator={"faults": faults}, auto_release_hours=24)


HARNESSES: dict[str, Callable[..., AlibabaHarness]] = {"alibaba": _make}
