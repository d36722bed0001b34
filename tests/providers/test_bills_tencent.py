"""Tencent Cloud's bill reader (Billing ``DescribeBillDetail``) over real HTTP to the billing emulator.

The real tencentcloud SDK signs (TC3-HMAC-SHA256) and sends every page; the emulator checks it with the
same verifier the CVM emulator uses (``providers/emulators/tencent_tc3.py``, service ``billing``) and
answers one row per instance and clock hour from what its sandbox cloud ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest
from pydantic import SecretStr

pytest.importorskip("tencentcloud.billing.v20180709", reason="the Tencent billing SDK is optional: "
                    "pip install '.[tencent]'")

from providers.base import TAG_INSTANCE, TAG_MANAGED, AuthFailed, Throttled
from providers.emulators.tencent_billing import PlantedRow, TencentBillingEmulator
from providers.sandbox.cloud import SandboxCloud
from providers.tencent.bills import TencentBills, from_config, make_billing_client
from providers.tencent.config import TencentConfig
from scheduler.clock import SimClock
from scheduler.models import Capacity
from tests.contract.harness_tencent import SECRET_ID, SECRET_KEY, START, contract_catalog
from tests.providers.bill_runs import run_machines

CATALOG = contract_catalog()
OFFER = next(o for o in CATALOG if o.spot is not None and o.on_demand is not None)


class World:
    def __init__(self) -> None:
        self.clock = SimClock(START)
        # Boots take a minute flat: launch at 09:00:00, running at 09:01:00, billed from 09:00:00.
        self.cloud = SandboxCloud(self.clock, CATALOG, seed=5, boot_seconds=60, boot_jitter=0, terminate_seconds=5,
                                  interruption_scale=0, id_prefix="ins")
        self.billing = TencentBillingEmulator(self.cloud, {SECRET_ID: SECRET_KEY}, currency="USD")

    def config(self, secret: str = SECRET_KEY) -> TencentConfig:
        return TencentConfig(secret_id=SecretStr(SECRET_ID), secret_key=SecretStr(secret), regions=(OFFER.region,),
                             billing_endpoint=self.billing.endpoint, protocol="http", currency="USD")

    def reader(self, secret: str = SECRET_KEY, page_size: int = 100) -> TencentBills:
        config = self.config(secret)
        return TencentBills(make_billing_client(config), config, self.clock, page_size=page_size)

    def run(self, n: int, minutes: float, capacity: Capacity = Capacity.on_demand) -> list[str]:
        return run_machines(self.cloud, self.clock, OFFER, n, minutes, capacity)


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    yield w
    w.billing.close()


def test_hourly_rows_add_up_to_one_line_per_instance(world: World) -> None:
    [instance_id] = world.run(1, minutes=150)
    [line] = world.reader().read("2026-11")
    price = OFFER.on_demand.per_hour.amount  # type: ignore[union-attr]
    # Billed from creation: 09:00:00 -> 11:30:01 is 3600 s, 3600 s and 1801 s in three clock hours, each hour
    # rounded to the cent on its own.
    expected = sum(((Decimal(s) * price / 3600).quantize(Decimal("0.01")) for s in (3600, 3600, 1801)), Decimal(0))
    assert line.instance_id == instance_id
    assert (line.amount.amount, line.amount.currency) == (expected, "USD")
    assert line.tags == {TAG_MANAGED: "bills", TAG_INSTANCE: "gi-0"}
    [call] = world.billing.calls
    assert (call["Month"], call["BusinessCode"], call["PayMode"], call["Offset"], call["Limit"],
            call["NeedRecordNum"]) == ("2026-11", "p_cvm", "postPay", 0, 100, 1)
    assert "PeriodType" not in call  # deprecated in the SDK


def test_pages_are_followed_by_offset_until_total(world: World) -> None:
    ids = world.run(3, minutes=90)  # 3 instances x 2 clock hours = 6 rows
    lines = world.reader(page_size=4).read("2026-11")
    assert sorted(line.instance_id or "" for line in lines) == sorted(ids)
    assert [(c["Offset"], c["Limit"]) for c in world.billing.calls] == [(0, 4), (4, 4)]


def test_a_spot_instance_is_billed_at_the_spot_price(world: World) -> None:
    [instance_id] = world.run(1, minutes=30, capacity=Capacity.spot)
    [line] = world.reader().read("2026-11")
    spot = OFFER.spot.per_hour.amount  # type: ignore[union-attr]
    assert line.amount.amount == (Decimal(1801) * spot / 3600).quantize(Decimal("0.01"))


def test_a_planted_resource_is_read_with_its_tags(world: World) -> None:
    world.run(1, minutes=10)
    world.billing.plant(PlantedRow(month="2026-11", resource_id="ins-stranger", amount=Decimal("42.10"),
                                   tags={TAG_MANAGED: "another-cluster"}))
    lines = {line.instance_id: line for line in world.reader().read("2026-11")}
    assert lines["ins-stranger"].amount.amount == Decimal("42.10")
    assert lines["ins-stranger"].cluster == "another-cluster"


def test_a_wrong_secret_key_is_refused_by_the_signature_check_and_read_as_auth_failed(world: World) -> None:
    with pytest.raises(AuthFailed) as refused:
        world.reader(secret="wrong-secret-key").read("2026-11")
    assert refused.value.code == "AuthFailure.SignatureFailure"
    assert "SECRET_KEY" in (refused.value.fix or "")
    assert world.billing.calls == []  # refused before the action ran


def test_a_missing_permission_says_which_action_to_grant(world: World) -> None:
    world.billing.script_error("UnauthorizedOperation", "CAM signature/authentication error")
    with pytest.raises(AuthFailed) as refused:
        world.reader().read("2026-11")
    assert "billing:DescribeBillDetail" in (refused.value.fix or "")


def test_request_limit_exceeded_is_retried(world: World) -> None:
    world.run(1, minutes=10)
    world.billing.script_error("RequestLimitExceeded", "too many requests", times=3)
    before = world.clock.now()
    assert len(world.reader().read("2026-11")) == 1
    assert len(world.billing.calls) == 4
    assert world.clock.now() > before


def test_request_limit_past_the_retries_is_throttled(world: World) -> None:
    world.billing.script_error("RequestLimitExceeded", times=10)
    with pytest.raises(Throttled):
        world.reader().read("2026-11")


def test_from_config_reaches_the_emulator(world: World) -> None:
    world.run(1, minutes=10)
    assert len(from_config(world.config(), world.clock).read("2026-11")) == 1
