"""Issue 20 on Tencent CVM, over real HTTP to the emulator: terminating what is already on its way
out, errors behind a charset, the codes that mean "quota", "sold out", "pay first" or "busy", the
currency of prices, the recycle bin, throttling waits and random faults.

Each case here failed against the adapter before its fix (see the commit that added it).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

pytest.importorskip("tencentcloud.cvm.v20170312", reason="the Tencent SDK is optional: pip install '.[tencent]'")

from providers.base import (
    TAG_JOB,
    TAG_MANAGED,
    BillingStopped,
    InstanceRequest,
    InstanceState,
    NoCapacity,
    NotFound,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    ResourceBusy,
    Throttled,
)
from providers.emulators.faults import FaultPlan
from providers.retry import call_with_retry
from providers.tencent.config import TencentConfig
from scheduler.errors import SettingsError
from scheduler.models import Capacity, Offer
from scheduler.settings import load_cloud_config
from tests.contract.harness_tencent import SECRET_ID, SECRET_KEY, TencentHarness

S = InstanceState
CHARSET = "application/json; charset=utf-8"


@pytest.fixture
def h() -> Iterator[TencentHarness]:
    made = TencentHarness(record_requests=True)
    try:
        yield made
    finally:
        made.close()


def req(h: TencentHarness, offer: Offer, capacity: Capacity, purpose: str, **extra: Any) -> InstanceRequest:
    return InstanceRequest(offer=offer, capacity=capacity, client_token=f"t-{purpose}",
                           tags={TAG_MANAGED: h.cluster, TAG_JOB: purpose}, **extra)


# --- terminate: already on its way out is success ------------------------------------------------


def test_terminating_an_instance_whose_launch_failed_is_success(h: TencentHarness) -> None:
    ref = h.provider.launch(req(h, h.offer(), Capacity.on_demand, "failed")).ref
    h.emulator.fail_launch(ref.instance_id)

    h.provider.terminate(ref)
    (seen,) = h.provider.instances({TAG_MANAGED: "contract"})

    assert (seen.state, seen.preempted) == (S.terminated, False)


@pytest.mark.parametrize("code", [
    "UnsupportedOperation.InstanceStateShutdown", "UnsupportedOperation.InstanceStateLaunchFailed",
    "UnsupportedOperation.InstanceStateTerminated", "UnsupportedOperation.InstanceStateTerminating",
    "UnsupportedOperation.InstanceStateIsolating", "InvalidInstanceId.NotFound",
])
def test_terminate_answered_with_a_gone_or_going_state_is_success(h: TencentHarness, code: str) -> None:
    ref = h.provider.launch(req(h, h.offer(), Capacity.on_demand, "going")).ref
    h.emulator.script_error("TerminateInstances", code, "the instance is already gone or going")

    h.provider.terminate(ref)

    assert h.emulator.action_counts["TerminateInstances"] == 1


def test_the_recycle_bin_keeps_a_terminated_instance_until_a_second_terminate(h: TencentHarness) -> None:
    ref = h.provider.launch(req(h, h.offer(), Capacity.on_demand, "recycled")).ref
    h.advance(600)
    h.provider.terminate(ref)
    h.advance(60)

    (in_bin,) = h.provider.instances({TAG_MANAGED: "contract"})
    h.provider.terminate(ref)  # destroys it for good
    after = h.provider.instances({TAG_MANAGED: "contract"})
    h.provider.terminate(ref)  # nothing left: still success

    assert (in_bin.state, in_bin.preempted) == (S.terminated, False)
    assert after == []
    with pytest.raises(NotFound):
        h.provider.stop(ref)


@pytest.mark.parametrize(("mode", "keeps_billing"), [("STOP_CHARGING", False), ("KEEP_CHARGING", True)])
def test_a_stopped_instance_says_whether_it_still_bills(h: TencentHarness, mode: str, keeps_billing: bool) -> None:
    from tests.providers.test_tencent import raw_client

    ref = h.provider.launch(req(h, h.offer(), Capacity.on_demand, "stopped")).ref
    h.advance(600)
    raw_client(h).call_json("StopInstances", {"InstanceIds": [ref.instance_id], "StoppedMode": mode})
    h.advance(600)

    (seen,) = h.provider.instances({TAG_MANAGED: "contract"})

    assert (seen.state, seen.stop_keeps_billing) == (S.stopped, keeps_billing)


# --- errors behind a Content-Type with a charset ------------------------------------------------


@pytest.fixture
def charset() -> Iterator[TencentHarness]:
    made = TencentHarness(emulator={"content_type": CHARSET})
    try:
        yield made
    finally:
        made.close()


def test_with_a_charset_a_sold_out_launch_still_reads_as_sold_out(charset: TencentHarness) -> None:
    charset.emulator.script_error("RunInstances", "ResourceInsufficient.SpecifiedInstanceType", "sold out")

    with pytest.raises(NoCapacity) as caught:
        charset.provider.launch(req(charset, charset.offer(), Capacity.spot, "sold"))

    assert caught.value.code == "ResourceInsufficient.SpecifiedInstanceType"
    assert len(caught.value.request_id) == 36


def test_with_a_charset_a_failed_listing_is_an_error_not_an_empty_list(charset: TencentHarness) -> None:
    charset.provider.launch(req(charset, charset.offer(), Capacity.on_demand, "listed"))
    charset.emulator.script_error("DescribeInstances", "InternalError", "the backend fell over")

    with pytest.raises(ProviderUnavailable) as caught:
        charset.provider.instances({TAG_MANAGED: "contract"}, ["ap-guangzhou"])

    assert caught.value.code == "InternalError"
    assert len(charset.provider.instances({TAG_MANAGED: "contract"}, ["ap-guangzhou"])) == 1


def test_with_a_charset_answers_still_parse(charset: TencentHarness) -> None:
    launched = charset.provider.launch(req(charset, charset.offer(), Capacity.on_demand, "fine"))

    assert [i.ref.instance_id for i in charset.provider.instances({TAG_MANAGED: "contract"})] == [
        launched.ref.instance_id]


# --- vendor codes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("LimitExceeded.SpotQuota", QuotaExceeded),
        ("LimitExceeded.CvmInstanceQuota", QuotaExceeded),
        ("LimitExceeded.PrepayQuota", QuotaExceeded),
        ("ResourceInsufficient.CloudDiskUnavailable", NoCapacity),
        ("ResourceInsufficient.CloudDiskSoldOut", NoCapacity),
        ("ResourcesSoldOut.EipInsufficient", NoCapacity),
        ("InvalidParameterValue.ZoneNotSupported", NoCapacity),
        ("InvalidAccount.InsufficientBalance", BillingStopped),
        ("InvalidAccount.UnpaidOrder", BillingStopped),
        ("MutexOperation.TaskRunning", ResourceBusy),
        ("OperationDenied.InstanceOperationInProgress", ResourceBusy),
    ],
)
def test_launch_refusals_arrive_as_the_right_class(h: TencentHarness, code: str, kind: type[ProviderError]) -> None:
    h.emulator.script_error("RunInstances", code, "scripted refusal")

    with pytest.raises(kind) as caught:
        h.provider.launch(req(h, h.offer(), Capacity.spot, "refused"))

    assert type(caught.value) is kind and caught.value.code == code
    assert h.cloud.all_instances() == []


def test_a_busy_instance_is_retried_until_the_other_operation_ends(h: TencentHarness) -> None:
    ref = h.provider.launch(req(h, h.offer(), Capacity.on_demand, "busy")).ref
    h.emulator.script_error("TerminateInstances", "MutexOperation.TaskRunning", "another task runs", times=2)

    call_with_retry(lambda: h.provider.terminate(ref), clock=h.clock, rng=random.Random(4))

    assert h.emulator.action_counts["TerminateInstances"] == 3
    (gone,) = h.provider.instances({TAG_MANAGED: "contract"})
    assert gone.state in (S.terminating, S.terminated)


def test_throttling_with_retry_after_is_honoured(h: TencentHarness) -> None:
    h.emulator.script_error("DescribeInstances", "RequestLimitExceeded", "slow down", retry_after=6)
    waits: list[float] = []
    before = h.clock.now()

    call_with_retry(lambda: h.provider.instances({TAG_MANAGED: "contract"}, ["ap-guangzhou"]),
                    clock=h.clock, rng=random.Random(5), base_seconds=0.01,
                    on_retry=lambda n, error, delay: waits.append(delay))

    assert waits and waits[0] >= 6
    assert h.clock.now() - before >= timedelta(seconds=6)


# --- the currency of prices ------------------------------------------------------------------------


def test_without_a_currency_or_site_the_config_refuses_and_names_the_setting() -> None:
    with pytest.raises(ValidationError) as caught:
        TencentConfig(secret_id="AKID1", secret_key="s", regions=("ap-guangzhou",))

    assert "GPUSCHED_TENCENT_CURRENCY" in str(caught.value)


def test_the_settings_loader_refuses_to_start_without_a_currency(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"SECRET_ID": SECRET_ID, "SECRET_KEY": SECRET_KEY, "REGIONS": '["ap-guangzhou"]'}.items():
        monkeypatch.setenv(f"GPUSCHED_TENCENT_{name}", value)
    monkeypatch.setenv("GPUSCHED_TENCENT_CURRENCY", "")  # blank, as .env.example lists it: not set
    monkeypatch.delenv("GPUSCHED_TENCENT_SITE", raising=False)

    with pytest.raises(SettingsError) as caught:
        load_cloud_config(TencentConfig, "tencent", env_file=None)

    assert "GPUSCHED_TENCENT_CURRENCY" in str(caught.value) and "Value error" not in str(caught.value)
    monkeypatch.setenv("GPUSCHED_TENCENT_SITE", "china")
    assert load_cloud_config(TencentConfig, "tencent", env_file=None).billing_currency == "CNY"


@pytest.mark.parametrize(
    ("fields", "currency"),
    [
        ({"currency": "CNY"}, "CNY"),
        ({"currency": "USD"}, "USD"),
        ({"site": "china"}, "CNY"),
        ({"site": "international"}, "USD"),
        ({"endpoint": "cvm.intl.tencentcloudapi.com"}, "USD"),
    ],
)
def test_the_currency_comes_from_the_setting_or_the_site(fields: dict[str, str], currency: str) -> None:
    config = TencentConfig(secret_id="AKID1", secret_key="s", regions=("ap-guangzhou",), **fields)

    assert config.billing_currency == currency


def test_a_currency_that_contradicts_the_site_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        TencentConfig(secret_id="AKID1", secret_key="s", regions=("ap-guangzhou",), currency="USD", site="china")

    assert "GPUSCHED_TENCENT_SITE" in str(caught.value)


def test_live_prices_carry_the_accounts_currency() -> None:
    harness = TencentHarness(currency=None, site="china")
    try:
        offers = harness.provider.offers(["ap-guangzhou"])
    finally:
        harness.close()

    assert offers and {o.on_demand.per_hour.currency for o in offers} == {"CNY"}


# --- random faults ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "acted", "cls"), [("throttle", False, Throttled), ("5xx", False, ProviderUnavailable),
                                                    ("timeout", False, ProviderUnavailable),
                                                    ("lost", True, ProviderUnavailable)])
def test_each_fault_kind_fails_the_call_and_acts_only_when_lost(kind: str, acted: bool,
                                                                cls: type[ProviderError]) -> None:
    harness = TencentHarness(emulator={"faults": FaultPlan(rate=1.0, seed=2, kinds=(kind,), retry_after_seconds=3)})
    try:
        offer = harness.cloud.offers(["ap-guangzhou"])[0]  # the catalog's own: no price call to fault
        with pytest.raises(ProviderError) as caught:
            harness.provider.launch(req(harness, offer, Capacity.on_demand, f"fault-{kind}"))
        made = harness.cloud.all_instances()
    finally:
        harness.close()

    assert type(caught.value) is cls
    assert caught.value.retry_after == (3 if kind == "throttle" else None)
    assert len(made) == (1 if acted else 0)


def test_a_lost_launch_is_found_by_its_token_when_retried() -> None:
    harness = TencentHarness(emulator={"faults": FaultPlan(rate=1.0, seed=2, kinds=("lost",))})
    try:
        offer = harness.cloud.offers(["ap-guangzhou"])[0]
        request = req(harness, offer, Capacity.on_demand, "lost")
        with pytest.raises(ProviderUnavailable):
            harness.provider.launch(request)
        harness.emulator.faults = FaultPlan().dice()
        again = harness.provider.launch(request)
        made = harness.cloud.all_instances()
    finally:
        harness.close()

    assert [harness.emulator.sandbox_id(again.ref.instance_id)] == [m.instance_id for m in made]
