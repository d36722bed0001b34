"""The Tencent adapter in the contract suite: the real SDK, over real HTTP, against the CVM emulator.

Each harness starts its own ``TencentCvmEmulator`` on 127.0.0.1 (port 0) over a
fresh SandboxCloud on a SimClock, and a ``TencentProvider`` whose SDK clients
point at it. The cloud's catalog is the bundled catalog's Tencent rows for two
regions, with illustrative spot prices added (the bundled rows have none).
"""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any, Callable, Mapping

from providers.catalog import filter_offers, load_catalog
from providers.emulators.faults import FaultPlan
from providers.sandbox.provider import SandboxCloud
from scheduler.clock import SimClock
from scheduler.models import Offer, Price, Stock
from tests.contract.emulated import EmulatedHarness
from tests.optional import missing

try:  # the Tencent SDK is an optional dependency (gpusched[tencent])
    from providers.emulators.tencent_cvm import TencentCvmEmulator
    from providers.tencent.adapter import TencentProvider
    from providers.tencent.client import ClientFactory, sdk_client_factory
    from providers.tencent.config import TencentConfig
except ImportError as missing:
    _SDK_MISSING: ImportError | None = missing
else:
    _SDK_MISSING = None

START = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
SECRET_ID = "AKIDcontract0000000000000000000000"
SECRET_KEY = "contract-secret-key-0000000000000"
REGIONS = ("ap-guangzhou", "ap-shanghai")
IMAGE = "img-contract"
SPOT_SHARE = Decimal("0.35")  # illustrative: spot at 35% of the list price
_CONTRACT_MARKETS = {
    ("ap-guangzhou-3", "GN7.2XLARGE32"),
    ("ap-guangzhou-3", "GN10Xp.2XLARGE40"),
    ("ap-shanghai-4", "GN7.2XLARGE32"),
}


def contract_catalog(markets: set[tuple[str, str]] | None = None) -> tuple[Offer, ...]:
    """The bundled Tencent rows for ``markets`` (zone, type), with a spot price, no random reclaims."""
    wanted = _CONTRACT_MARKETS if markets is None else markets
    out = []
    for row in filter_offers(load_catalog(), providers=["tencent"]):
        if (row.zone, row.instance_type) not in wanted or row.on_demand is None:
            continue
        spot = Price(per_hour=row.on_demand.per_hour * SPOT_SHARE,
                     source="contract test catalog: illustrative 35% of the list price", as_of=date(2026, 11, 1))
        # No random reclaims: the tests reclaim on purpose, and a stray one would make them flaky.
        out.append(row.model_copy(update={"spot": spot, "spot_interruptions_per_hour": 0.0,
                                          "on_demand_stock": Stock.available, "spot_stock": Stock.available}))
    return tuple(out)


def local_client_factory(config: TencentConfig) -> ClientFactory:
    """The real SDK clients, told to ignore HTTP(S)_PROXY: tests talk to 127.0.0.1 and nowhere else."""
    build = sdk_client_factory(config)

    def local(region: str):  # type: ignore[no-untyped-def]
        client = build(region)
        client.request.conn.proxy = None
        client.request.conn._session.trust_env = False
        return client

    return local


class TencentHarness(EmulatedHarness):
    """One emulator, one sandbox cloud and one TencentProvider per test."""

    title = "the Tencent contract catalog"

    def __init__(self, *, catalog: tuple[Offer, ...] | None = None, record_requests: bool = False,
                 emulator: Mapping[str, Any] | None = None, **config_overrides: object) -> None:
        self.clock = SimClock(START)
        self.cloud = SandboxCloud(
            self.clock, catalog if catalog is not None else contract_catalog(), seed=11,
            spot_can_stop=False, forget_terminated_seconds=3600, id_prefix="cvm",
        )
        # ``emulator``: options of the CVM emulator itself (faults, the Content-Type it answers with).
        self.emulator = TencentCvmEmulator(self.cloud, self.clock, {SECRET_ID: SECRET_KEY}, seed=11,
                                           record_requests=record_requests, **dict(emulator or {}))
        self.config = self.make_config(**config_overrides)
        self.provider: TencentProvider = self.build(self.config)
        self.currency = self.config.billing_currency
        self.cluster = "contract"

    def make_config(self, **overrides: object) -> TencentConfig:
        fields: dict[str, object] = {
            "secret_id": SECRET_ID, "secret_key": SECRET_KEY, "regions": REGIONS, "image_id": IMAGE,
            "endpoint": self.emulator.endpoint, "protocol": "http", "request_timeout_seconds": 10,
            # The bundled Tencent rows are the international site's list prices: an international account.
            "currency": "USD",
        }
        fields.update(overrides)
        return TencentConfig(**fields)  # type: ignore[arg-type]

    def build(self, config: TencentConfig) -> TencentProvider:
        return TencentProvider(local_client_factory(config), config, self.clock,
                               filter_offers(load_catalog(), providers=["tencent"]))



def _tencent(faults: FaultPlan | None = None) -> TencentHarness:
    if _SDK_MISSING is not None:
        missing(f"the Tencent SDK is not installed ({_SDK_MISSING}); pip install '.[tencent]' (from the checkout)")
    if faults is None:
        return TencentHarness()
    # Under faults the ActionTimer backstop is on too: a retried launch must send the same ActionTime.
    return TencentHarness(emulator={"faults": faults}, max_lifetime_hours=24)


HARNESSES: dict[str, Callable[..., TencentHarness]] = {"tencent": _tencent}
