"""The Huawei adapter in the contract suite: the real SDK, over real HTTP, against the ECS emulator.

Each harness starts its own ``HuaweiEcsEmulator`` on 127.0.0.1 (port 0) over a fresh
SandboxCloud on a SimClock, and a ``HuaweiProvider`` whose SDK clients point at it. The
cloud's catalog is the bundled catalog's Huawei rows for two markets, with no random
reclaims (the tests reclaim on purpose). A ``faults`` plan (``providers.emulators.faults``)
makes the emulator fail calls as it deals them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Callable

from providers.catalog import filter_offers, load_catalog
from providers.emulators.faults import FaultPlan
from providers.sandbox.provider import SandboxCloud
from scheduler.clock import SimClock
from scheduler.models import Offer, Stock
from tests.contract.emulated import EmulatedHarness
from tests.optional import missing

try:  # the Huawei SDK is an optional dependency (gpusched[huawei])
    from providers.emulators.huawei_ecs import HuaweiEcsEmulator
    from providers.huawei.adapter import HuaweiProvider
    from providers.huawei.client import ClientFactory, sdk_client_factory
    from providers.huawei.config import HuaweiConfig
except ImportError as missing_sdk:
    _SDK_MISSING: ImportError | None = missing_sdk
else:
    _SDK_MISSING = None

START = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
ACCESS_KEY = "HPUACONTRACT0000000"
SECRET_KEY = "contract-secret-key-00000000000000000000"
PROJECTS = {"cn-north-4": "0a1b2c3d4e5f40718293a4b5c6d7e8f9", "cn-east-3": "9f8e7d6c5b4a40312f1e0d9c8b7a6f5e"}
IMAGE = "5c9d3a1e-0000-4000-8000-00000000c0de"
VPC = "7f1d0a2e-0000-4000-8000-0000000000aa"
SUBNETS = {"cn-north-4a": "11111111-0000-4000-8000-000000000001", "cn-north-4b": "11111111-0000-4000-8000-000000000002",
           "cn-east-3a": "11111111-0000-4000-8000-000000000003", "cn-east-3b": "11111111-0000-4000-8000-000000000004"}
_CONTRACT_MARKETS = {
    ("cn-north-4a", "pi2.2xlarge.4"), ("cn-north-4a", "p2s.2xlarge.8"), ("cn-east-3a", "pi2.2xlarge.4"),
}


def contract_catalog(markets: set[tuple[str, str]] | None = None) -> tuple[Offer, ...]:
    """The bundled Huawei rows for ``markets`` (zone, flavor), in stock, with no random reclaims."""
    wanted = _CONTRACT_MARKETS if markets is None else markets
    return tuple(
        row.model_copy(update={"spot_interruptions_per_hour": 0.0, "on_demand_stock": Stock.available,
                               "spot_stock": Stock.available})
        for row in filter_offers(load_catalog(), providers=["huawei"]) if (row.zone, row.instance_type) in wanted
    )


def local_client_factory(config: HuaweiConfig) -> ClientFactory:
    """The real SDK clients, told to ignore HTTP(S)_PROXY: tests talk to 127.0.0.1 and nowhere else."""
    build = sdk_client_factory(config)

    def local(region: str):  # type: ignore[no-untyped-def]
        client = build(region)
        client.get_http_client()._session.trust_env = False
        return client

    return local


class HuaweiHarness(EmulatedHarness):
    """One emulator, one sandbox cloud and one HuaweiProvider per test."""

    title = "the Huawei contract catalog"

    def __init__(self, *, catalog: tuple[Offer, ...] | None = None, emulator: Mapping[str, Any] | None = None,
                 **config_overrides: object) -> None:
        self.clock = SimClock(START)
        self.cloud = SandboxCloud(
            self.clock, catalog if catalog is not None else contract_catalog(), seed=11,
            forget_terminated_seconds=3600, id_prefix="hw",
        )
        # ``emulator``: options of the ECS emulator itself (faults).
        self.emulator = HuaweiEcsEmulator(self.cloud, self.clock, {ACCESS_KEY: SECRET_KEY},
                                          {p: r for r, p in PROJECTS.items()}, seed=11, **dict(emulator or {}))
        self.config = self.make_config(**config_overrides)
        self.provider: HuaweiProvider = self.build(self.config)
        self.currency = "CNY"
        self.cluster = "contract"

    def make_config(self, **overrides: object) -> HuaweiConfig:
        fields: dict[str, object] = {
            "access_key": ACCESS_KEY, "secret_key": SECRET_KEY, "regions": tuple(PROJECTS),
            "project_ids": dict(PROJECTS), "image_id": IMAGE, "vpc_id": VPC, "subnet_ids": dict(SUBNETS),
            "endpoint": self.emulator.endpoint, "request_timeout_seconds": 10,
        }
        fields.update(overrides)
        return HuaweiConfig(**fields)  # type: ignore[arg-type]

    def build(self, config: HuaweiConfig) -> HuaweiProvider:
        return HuaweiProvider(local_client_factory(config), config, self.clock,
                              filter_offers(load_catalog(), providers=["huawei"]))

    def offers_in_the_cloud(self, offer: Offer) -> bool:
        return (offer.zone, offer.instance_type) in {(c.zone, c.instance_type) for c in self.cloud.offers()}


def _huawei(faults: FaultPlan | None = None) -> HuaweiHarness:
    if _SDK_MISSING is not None:
        missing(f"the Huawei SDK is not installed ({_SDK_MISSING}); pip install '.[huawei]' (from the checkout)")
    return HuaweiHarness() if faults is None else HuaweiHarness(emulator={"faults": faults})


HARNESSES: dict[str, Callable[..., HuaweiHarness]] = {"huawei": _huawei}
