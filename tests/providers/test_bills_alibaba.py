"""Alibaba Cloud's bill reader (BSS ``QueryInstanceBill``) over real HTTP to the BSS emulator.

The real aliyun SDK signs and sends every page; the emulator checks the signature with the gateway's own
check (``providers/emulators/alibaba_rpc.py``, the one the ECS emulator uses) and answers from what its
sandbox cloud ran, under Alibaba's billing rules (per second, settled per clock hour, each hour rounded
to the cent).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal

import pytest
from pydantic import SecretStr

pytest.importorskip("aliyunsdkbssopenapi", reason="the Alibaba billing SDK is optional: pip install '.[alibaba]'")

from providers.alibaba.bills import AlibabaBills, from_config, parse_tags
from providers.alibaba.client import make_client_factory
from providers.alibaba.config import AlibabaConfig
from providers.base import TAG_INSTANCE, TAG_MANAGED, AuthFailed, Throttled
from providers.emulators.alibaba_bss import AlibabaBssEmulator, PlantedItem
from providers.sandbox.billing import Reservation
from providers.sandbox.cloud import SandboxCloud
from scheduler.clock import SimClock
from scheduler.models import Capacity
from tests.contract.harness_alibaba import ACCESS_KEY_ID, CATALOG, SECRET, START
from tests.providers.bill_runs import run_machines

A10 = CATALOG[1]  # cn-hangzhou ecs.gn7i-c8g1.2xlarge, 9.5326 CNY/h on demand, 3.81 spot


class World:
    def __init__(self, **emulator: object) -> None:
        self.clock = SimClock(START)
        # Boots take a minute flat, so spans are exact: launch at 09:00:00, running at 09:01:00.
        self.cloud = SandboxCloud(self.clock, CATALOG, seed=3, boot_seconds=60, boot_jitter=0, terminate_seconds=5,
                                  interruption_scale=0, id_prefix="i")
        self.bss = AlibabaBssEmulator(self.cloud, {ACCESS_KEY_ID: SECRET}, **emulator)  # type: ignore[arg-type]

    def config(self, secret: str = SECRET) -> AlibabaConfig:
        return AlibabaConfig(access_key_id=ACCESS_KEY_ID, access_key_secret=SecretStr(secret),
                             regions=("cn-hangzhou",), bss_endpoint=self.bss.endpoint, protocol="http")

    def reader(self, secret: str = SECRET, page_size: int = 300) -> AlibabaBills:
        config = self.config(secret)
        client = make_client_factory(config.model_copy(update={"endpoint": config.bss_endpoint}))("cn-hangzhou")
        return AlibabaBills(client, config, self.clock, page_size=page_size)

    def run(self, n: int, minutes: float, capacity: Capacity = Capacity.on_demand) -> list[str]:
        return run_machines(self.cloud, self.clock, A10, n, minutes, capacity)


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    yield w
    w.bss.close()


def test_an_instance_is_billed_per_second_settled_per_hour_each_hour_rounded_to_the_cent(world: World) -> None:
    [instance_id] = world.run(1, minutes=90)
    [line] = world.reader().read("2026-11")
    # Billed from creation, the boot included: 09:00:00 -> 10:30:01 is 3600 s in the 09:00 hour, 1801 s in
    # the 10:00 hour, each hour rounded to the cent on its own.
    first = (Decimal(3600) * Decimal("9.5326") / 3600).quantize(Decimal("0.01"))  # 9.5326 -> 9.53
    second = (Decimal(1801) * Decimal("9.5326") / 3600).quantize(Decimal("0.01"))  # 4.76895 -> 4.77
    assert line.instance_id == instance_id
    assert line.amount.currency == "CNY"
    assert line.amount.amount == first + second == Decimal("14.30")
    # Priced exactly, the same 5,401 s come to 14.3015...: the bill differs by its hourly rounding. The minute
    # of boot is billed (running time alone, 3540 s + 1801 s, would be 9.37 + 4.77).
    assert line.amount.amount != (Decimal(5401) * Decimal("9.5326") / 3600)
    assert line.amount.amount != Decimal("9.37") + Decimal("4.77")
    assert line.tags == {TAG_MANAGED: "bills", TAG_INSTANCE: "gi-0"}
    assert line.month == "2026-11" and line.region == "cn-hangzhou"
    call = world.bss.calls[-1]
    assert (call["Action"], call["BillingCycle"], call["ProductCode"], call["SubscriptionType"],
            call["Granularity"], call["IsBillingItem"]) == (
        "QueryInstanceBill", "2026-11", "ecs", "PayAsYouGo", "MONTHLY", "false")


def test_pages_are_followed_until_total_count(world: World) -> None:
    ids = world.run(5, minutes=30)
    lines = world.reader(page_size=2).read("2026-11")
    assert sorted(line.instance_id or "" for line in lines) == sorted(ids)
    pages = [(c["PageNum"], c["PageSize"]) for c in world.bss.calls]
    assert pages == [("1", "2"), ("2", "2"), ("3", "2")]


def test_a_month_without_machines_is_an_empty_bill_in_one_request(world: World) -> None:
    world.run(1, minutes=30)
    assert world.reader().read("2026-10") == []
    assert len(world.bss.calls) == 1


def test_a_planted_instance_is_on_the_bill_with_its_tags(world: World) -> None:
    world.run(1, minutes=30)
    world.bss.plant(PlantedItem(month="2026-11", instance_id="i-someoneelse", amount=Decimal("123.45"),
                                tags={"owner": "data-team"}))
    lines = {line.instance_id: line for line in world.reader().read("2026-11")}
    assert lines["i-someoneelse"].amount.amount == Decimal("123.45")
    assert lines["i-someoneelse"].tags == {"owner": "data-team"}


def test_a_reservation_pays_its_hours_so_they_owe_nothing() -> None:
    w = World(reservations=[Reservation(region=A10.region, instance_type=A10.instance_type, count=1,
                                        start=START - timedelta(days=30), until=START + timedelta(days=300))])
    try:
        ids = w.run(2, minutes=60)
        lines = {line.instance_id: line for line in w.reader().read("2026-11")}
        # One of the two is covered hour by hour (the first launched), the other pays.
        assert lines[ids[0]].amount.amount == 0
        assert lines[ids[1]].amount.amount > 0
    finally:
        w.bss.close()


def test_a_wrong_secret_is_refused_by_the_signature_check_and_read_as_auth_failed(world: World) -> None:
    world.run(1, minutes=10)
    with pytest.raises(AuthFailed) as refused:
        world.reader(secret="not-the-secret").read("2026-11")
    assert "bss:DescribeBillList" in (refused.value.fix or "")
    assert refused.value.code in ("SignatureDoesNotMatch", "InvalidAccessKeySecret")
    assert "not-the-secret" not in str(refused.value)


def test_throttling_is_retried_with_back_off_on_the_injected_clock(world: World) -> None:
    world.run(1, minutes=10)
    world.bss.script_error("Throttling.User", times=2)
    before = world.clock.now()
    lines = world.reader().read("2026-11")
    assert len(lines) == 1
    assert len(world.bss.calls) == 3  # two throttled, then the page
    assert world.clock.now() > before  # the waits were slept on the SimClock


def test_throttling_past_the_retries_is_throttled(world: World) -> None:
    world.bss.script_error("Throttling.User", times=10)
    with pytest.raises(Throttled):
        world.reader().read("2026-11")
    assert len(world.bss.calls) == 5


def test_from_config_reaches_the_emulator(world: World) -> None:
    world.run(1, minutes=10)
    assert len(from_config(world.config(), world.clock).read("2026-11")) == 1


@pytest.mark.parametrize("text, tags", [
    ("key:a value:1; key:b value:two words", {"a": "1", "b": "two words"}),
    ("key:gpusched:instance value:gi-1", {"gpusched:instance": "gi-1"}),
    ("", {}),
    (None, {}),
    ("key:lonely", {"lonely": ""}),
    ("garbage; key:x value:y", {"x": "y"}),
])
def test_tag_text(text: object, tags: dict[str, str]) -> None:
    assert parse_tags(text) == tags
