"""Issue 20 on Alibaba ECS, over real HTTP to the emulator: retried launches, paged prices, the codes
that mean "busy", "not here", "pay first" or "not allowed", stops that keep billing, and faults.

Each case here failed against the adapter before its fix (see the commit that added it).
"""

from __future__ import annotations

import http.client
import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

import pytest

pytest.importorskip("aliyunsdkcore", reason="the Alibaba Cloud SDK is an extra: pip install '.[alibaba]'")

from providers.base import (
    TAG_JOB,
    TAG_MANAGED,
    AuthFailed,
    BillingStopped,
    InstanceRequest,
    InstanceState,
    InvalidRequest,
    NoCapacity,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    ResourceBusy,
    Throttled,
)
from providers.emulators.alibaba_ecs import API_VERSION, AlibabaEcsEmulator, rpc_signature
from providers.emulators.faults import FaultPlan
from providers.retry import call_with_retry
from scheduler.models import Capacity, Offer
from tests.contract.harness_alibaba import ACCESS_KEY_ID, CATALOG, SECRET, START, AlibabaHarness, alibaba_offer

S = InstanceState
TIMESTAMP = "%Y-%m-%dT%H:%M:%SZ"


@pytest.fixture
def harness() -> Iterator[AlibabaHarness]:
    made = AlibabaHarness()
    yield made
    made.close()


def request(h: AlibabaHarness, offer: Offer, capacity: Capacity, purpose: str, **extra: Any) -> InstanceRequest:
    return InstanceRequest(offer=offer, capacity=capacity, client_token=f"t-{purpose}",
                           tags={TAG_MANAGED: h.cluster, TAG_JOB: purpose}, name=f"job-{purpose}", **extra)


def run_instances(emulator: AlibabaEcsEmulator, nonce: str, **extra: str) -> tuple[int, dict[str, Any]]:
    """One hand-signed RunInstances (the emulator's timestamp check runs on real time)."""
    params = {
        "Action": "RunInstances", "Version": API_VERSION, "Format": "JSON", "AccessKeyId": ACCESS_KEY_ID,
        "SignatureMethod": "HMAC-SHA1", "SignatureVersion": "1.0", "SignatureType": "", "SignatureNonce": nonce,
        "Timestamp": datetime.now(UTC).strftime(TIMESTAMP), "RegionId": "cn-hangzhou",
        "InstanceType": CATALOG[0].instance_type, "ZoneId": CATALOG[0].zone, "ImageId": "m-1", **extra,
    }
    signed = {**params, "Signature": rpc_signature("POST", params, SECRET)}
    conn = http.client.HTTPConnection("127.0.0.1", emulator.port, timeout=5)
    try:
        conn.request("POST", "/?" + urlencode(signed), body=b"")
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        conn.close()


# --- one intent, one set of parameters -----------------------------------------------------


def test_the_emulator_refuses_a_reused_client_token_with_other_parameters(harness: AlibabaHarness) -> None:
    first, made = run_instances(harness.emulator, "n1", ClientToken="tok", AutoReleaseTime="2026-11-03T10:00:00Z")
    same, again = run_instances(harness.emulator, "n2", ClientToken="tok", AutoReleaseTime="2026-11-03T10:00:00Z")
    other, refused = run_instances(harness.emulator, "n3", ClientToken="tok", AutoReleaseTime="2026-11-03T11:00:00Z")

    assert (first, same) == (200, 200)
    assert again["InstanceIdSets"] == made["InstanceIdSets"]
    assert (other, refused["Code"]) == (400, "IdempotentParameterMismatch")
    assert len(harness.cloud.all_instances()) == 1


def test_a_launch_retried_in_the_next_hour_sends_the_same_release_time_and_gets_the_same_machine() -> None:
    h = AlibabaHarness(auto_release_hours=24)
    try:
        h.advance(59 * 60 + 58)  # 09:59:58: the intent is written now
        req = request(h, CATALOG[0], Capacity.on_demand, "hour", requested_at=h.clock.now())
        h.lose_next_launch_response()
        with pytest.raises(ProviderUnavailable):
            h.provider.launch(req)
        h.advance(5)  # 10:00:03: the retry runs in the next hour
        again = h.provider.launch(req)
        sent = [c.params["AutoReleaseTime"] for c in h.emulator.calls_of("RunInstances")]
        made = h.cloud.all_instances()
    finally:
        h.close()

    assert [m.instance_id for m in made] == [again.ref.instance_id]
    assert len(sent) == 2 and sent[0] == sent[1]
    # Counted from the intent's hour (09:00), as the first call sent it.
    assert sent[0] == (START + timedelta(hours=25)).strftime(TIMESTAMP)


def test_the_same_token_for_another_hour_is_refused_and_launches_nothing_more() -> None:
    h = AlibabaHarness(auto_release_hours=24)
    try:
        first = h.provider.launch(request(h, CATALOG[0], Capacity.on_demand, "moved", requested_at=START))
        with pytest.raises(InvalidRequest) as caught:
            h.provider.launch(request(h, CATALOG[0], Capacity.on_demand, "moved",
                                      requested_at=START + timedelta(hours=2)))
        made = h.cloud.all_instances()
    finally:
        h.close()

    assert caught.value.code == "IdempotentParameterMismatch"
    assert [m.instance_id for m in made] == [first.ref.instance_id]


# --- spot prices: every page -----------------------------------------------------------------


def test_spot_prices_come_from_the_last_page_of_the_history() -> None:
    h = AlibabaHarness(emulator={"spot_history_page_size": 5})
    try:
        offer = CATALOG[0]
        now = h.clock.now()
        # The day's old price, then a new one for the last two hours: the newest points are on the last page.
        history = {now - timedelta(hours=n): Decimal("4.10") for n in range(2, 25)}
        history.update({now - timedelta(hours=1): Decimal("5.20"), now: Decimal("5.20")})
        h.emulator.script_spot_history(offer.instance_type, offer.zone, history)
        offers = {(o.zone, o.instance_type): o for o in h.provider.offers(["cn-hangzhou"])}
        pages = [c for c in h.emulator.calls_of("DescribeSpotPriceHistory")
                 if c.params["InstanceType"] == offer.instance_type]
    finally:
        h.close()

    assert offers[(offer.zone, offer.instance_type)].spot.per_hour.amount == Decimal("5.20")
    assert len(pages) == 5  # 25 hourly points, 5 a page
    assert [int(p.params.get("Offset") or 0) for p in pages] == [0, 5, 10, 15, 20]
    assert pages[-1].answer["NextOffset"] == 0


# --- vendor codes -----------------------------------------------------------------------------


@pytest.mark.parametrize("code", ["OperationConflict", "LastTokenProcessing"])
def test_an_operation_in_progress_is_retried_with_back_off_not_final(harness: AlibabaHarness, code: str) -> None:
    harness.emulator.script_error("RunInstances", code, status=403, message="another operation is running")
    retried: list[ProviderError] = []

    launched = call_with_retry(
        lambda: harness.provider.launch(request(harness, CATALOG[0], Capacity.on_demand, "busy")),
        clock=harness.clock, rng=random.Random(1), on_retry=lambda n, error, delay: retried.append(error),
    )

    assert [type(e) for e in retried] == [ResourceBusy] and retried[0].code == code
    assert [m.instance_id for m in harness.cloud.all_instances()] == [launched.ref.instance_id]


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("InstanceType.Offline", 403, NoCapacity),
        ("Zone.NotOnSale", 403, NoCapacity),
        ("InvalidZoneId.NotSupported", 400, NoCapacity),
        ("InvalidInstanceType.ZoneNotSupported", 403, NoCapacity),
        ("InvalidOperation.PublicIpAddressNoStock", 403, NoCapacity),
        ("OperationDenied.NoStock", 403, NoCapacity),
        ("InsufficientBalance", 403, BillingStopped),
        ("InvalidAccountStatus.NotEnoughBalance", 403, BillingStopped),
        ("Account.Arrearage", 400, BillingStopped),
        ("InvalidUser.PassRoleForbidden", 403, AuthFailed),
        ("QuotaExceed.ElasticQuota", 403, QuotaExceeded),
    ],
)
def test_launch_refusals_arrive_as_the_right_class(harness: AlibabaHarness, code: str, status: int,
                                                   kind: type[ProviderError]) -> None:
    harness.emulator.script_error("RunInstances", code, status=status, message="scripted refusal")

    with pytest.raises(kind) as caught:
        harness.provider.launch(request(harness, CATALOG[0], Capacity.spot, "refused"))

    assert type(caught.value) is kind
    assert caught.value.code == code and caught.value.request_id
    assert kind is not BillingStopped or "top up" in (caught.value.fix or "")
    assert harness.cloud.all_instances() == []


def test_throttling_with_retry_after_is_honoured_by_the_retry_helper(harness: AlibabaHarness) -> None:
    harness.emulator.script_error("DescribeInstances", "Throttling", message="slow down", retry_after=7)
    waits: list[float] = []
    before = harness.clock.now()

    listed = call_with_retry(lambda: harness.provider.instances({TAG_MANAGED: "contract"}, ["cn-hangzhou"]),
                             clock=harness.clock, rng=random.Random(2), base_seconds=0.01,
                             on_retry=lambda n, error, delay: waits.append(delay))

    assert listed == []
    assert waits and waits[0] >= 7
    assert harness.clock.now() - before >= timedelta(seconds=7)


def test_a_throttle_carries_the_wait_the_cloud_asked_for(harness: AlibabaHarness) -> None:
    harness.emulator.script_error("RunInstances", "Throttling.User", message="slow down", retry_after=3)

    with pytest.raises(Throttled) as caught:
        harness.provider.launch(request(harness, CATALOG[0], Capacity.spot, "throttled"))

    assert caught.value.retry_after == 3


# --- stops that keep billing -------------------------------------------------------------------


LOCAL_DISK = alibaba_offer("cn-hangzhou", "cn-hangzhou-i", "ecs.gn5-c4g1.xlarge", "P100", 16.0, 4, 30,
                           "12.00", "5.00")


@pytest.mark.parametrize(("offer", "keeps_billing"), [(CATALOG[0], False), (LOCAL_DISK, True)])
def test_a_stop_that_keeps_billing_is_reported(offer: Offer, keeps_billing: bool) -> None:
    h = AlibabaHarness(catalog=CATALOG + (LOCAL_DISK,))
    try:
        ref = h.provider.launch(request(h, offer, Capacity.on_demand, "stop")).ref
        h.advance(600)
        h.provider.stop(ref)
        h.advance(600)
        (listed,) = h.provider.instances({TAG_MANAGED: "contract"}, ["cn-hangzhou"])
        (raw,) = h.emulator.calls_of("DescribeInstances")[-1].answer["Instances"]["Instance"]
    finally:
        h.close()

    assert h.emulator.calls_of("StopInstances")[-1].params["StoppedMode"] == "StopCharging"
    assert raw["StoppedMode"] == ("KeepCharging" if keeps_billing else "StopCharging")
    assert (listed.state, listed.stop_keeps_billing) == (S.stopped, keeps_billing)


# --- random faults ------------------------------------------------------------------------------


def test_a_lost_answer_after_the_launch_is_found_again_by_its_token() -> None:
    h = AlibabaHarness(emulator={"faults": FaultPlan(rate=1.0, seed=3, kinds=("lost",))})
    try:
        req = request(h, CATALOG[0], Capacity.spot, "lost")
        with pytest.raises(ProviderUnavailable):
            h.provider.launch(req)
        h.emulator.faults = FaultPlan().dice()  # the retry gets through
        again = h.provider.launch(req)
        made = h.cloud.all_instances()
    finally:
        h.close()

    assert [m.instance_id for m in made] == [again.ref.instance_id]
    assert again.client_token == req.client_token


@pytest.mark.parametrize(("kind", "acted"), [("throttle", False), ("5xx", False), ("timeout", False),
                                             ("lost", True)])
def test_each_fault_kind_fails_the_call_and_acts_only_when_lost(kind: str, acted: bool) -> None:
    h = AlibabaHarness(emulator={"faults": FaultPlan(rate=1.0, seed=5, kinds=(kind,), retry_after_seconds=2)})
    try:
        with pytest.raises(ProviderError) as caught:
            h.provider.launch(request(h, CATALOG[0], Capacity.on_demand, f"fault-{kind}"))
        made = h.cloud.all_instances()
    finally:
        h.close()

    assert caught.value.retryable
    assert (type(caught.value) is Throttled) == (kind == "throttle")
    assert caught.value.retry_after == (2 if kind == "throttle" else None)
    assert len(made) == (1 if acted else 0)


def test_the_same_seed_fails_the_same_calls() -> None:
    def run(seed: int) -> list[str]:
        h = AlibabaHarness(emulator={"faults": FaultPlan(rate=0.5, seed=seed)})
        try:
            outcomes = []
            for _ in range(12):
                try:
                    h.provider.instances({TAG_MANAGED: "contract"}, ["cn-hangzhou"])
                    outcomes.append("ok")
                except ProviderError as exc:
                    outcomes.append(exc.code)
            return outcomes
        finally:
            h.close()

    first, again, other = run(9), run(9), run(10)
    assert first == again
    assert first != other
    assert {"ok"} < set(first)


def test_signature_checks_run_before_any_fault() -> None:
    h = AlibabaHarness(emulator={"faults": FaultPlan(rate=1.0, seed=1)})
    try:
        wrong = h.provider_with_wrong_secret()
        assert wrong is not None
        with pytest.raises(AuthFailed):
            wrong.instances({TAG_MANAGED: "contract"}, ["cn-hangzhou"])
        dealt = dict(h.emulator.faults.drawn)
    finally:
        h.close()
    assert dealt == {}
