"""The ECS emulator's wire (signature v1, error shapes) and what the Alibaba adapter adds to the contract.

The shared Provider contract runs in tests/contract (``-k alibaba``). Here: the
signature check against Alibaba's published example and raw HTTP, and the
adapter's own promises (SDK retries off, launch parameters on the wire, error
translation, paging, reclaim notices, released-instance memory, live prices).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

import pytest

pytest.importorskip("aliyunsdkcore", reason="the Alibaba Cloud SDK is an extra: pip install '.[alibaba]'")

from aliyunsdkcore.acs_exception.exceptions import ClientException, ServerException
from pydantic import SecretStr, ValidationError

from providers.alibaba.adapter import AlibabaProvider
from providers.alibaba.client import make_client_factory
from providers.alibaba.config import AlibabaConfig
from providers.alibaba.errors import translate_error
from providers.alibaba.wire import PREEMPT_REASON
from providers.base import (
    TAG_JOB,
    TAG_MANAGED,
    AuthFailed,
    InstanceRef,
    InstanceRequest,
    InstanceState,
    InvalidRequest,
    NoCapacity,
    NotFound,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    Throttled,
)
from providers.emulators.alibaba_ecs import (
    API_VERSION,
    AlibabaEcsEmulator,
    percent_encode,
    rpc_signature,
    string_to_sign,
)
from scheduler.clock import SimClock
from scheduler.models import Capacity, Offer, Stock
from tests.contract.harness_alibaba import (
    ACCESS_KEY_ID,
    CATALOG,
    NOTICE_SECONDS,
    SECRET,
    START,
    AlibabaHarness,
    alibaba_offer,
)

S = InstanceState

# Alibaba Cloud's documented signing example (DescribeRegions, AccessKeySecret "testsecret").
PUBLISHED_PARAMS = {
    "AccessKeyId": "testid",
    "Action": "DescribeRegions",
    "Format": "XML",
    "SignatureMethod": "HMAC-SHA1",
    "SignatureNonce": "3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf",
    "SignatureVersion": "1.0",
    "Timestamp": "2016-02-23T12:46:24Z",
    "Version": "2014-05-26",
}
PUBLISHED_STRING_TO_SIGN = (
    "GET&%2F&AccessKeyId%3Dtestid%26Action%3DDescribeRegions%26Format%3DXML%26SignatureMethod%3DHMAC-SHA1"
    "%26SignatureNonce%3D3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf%26SignatureVersion%3D1.0"
    "%26Timestamp%3D2016-02-23T12%253A46%253A24Z%26Version%3D2014-05-26"
)
PUBLISHED_SIGNATURE = "OLeaidS1JvxuMvnyHOwuJ+uX5qY="


@pytest.fixture
def harness() -> Iterator[AlibabaHarness]:
    made = AlibabaHarness()
    yield made
    made.close()


def request(h: AlibabaHarness, offer: Offer, capacity: Capacity, purpose: str, **extra: Any) -> InstanceRequest:
    return InstanceRequest(offer=offer, capacity=capacity, client_token=f"t-{purpose}",
                           tags={TAG_MANAGED: h.cluster, TAG_JOB: purpose}, name=f"job-{purpose}", **extra)


def settle(h: AlibabaHarness, seconds: float = 600) -> None:
    h.advance(seconds)


# --- signature v1 --------------------------------------------------------------


def test_signature_reproduces_the_published_example() -> None:
    assert string_to_sign("GET", PUBLISHED_PARAMS) == PUBLISHED_STRING_TO_SIGN
    assert rpc_signature("GET", PUBLISHED_PARAMS, "testsecret") == PUBLISHED_SIGNATURE
    # The signature itself is never part of what is signed.
    assert rpc_signature("GET", {**PUBLISHED_PARAMS, "Signature": "x"}, "testsecret") == PUBLISHED_SIGNATURE


@pytest.mark.parametrize(
    ("text", "encoded"),
    [(" ", "%20"), ("*", "%2A"), ("~", "~"), ("/", "%2F"), ("a+b", "a%2Bb"), ("é", "%C3%A9"), ("-_.", "-_.")],
)
def test_percent_encoding_is_rfc3986_over_utf8(text: str, encoded: str) -> None:
    assert percent_encode(text) == encoded


class Wire:
    """Raw, hand-signed HTTP to the emulator: what an SDK would send, with every part under test control."""

    def __init__(self, emulator: AlibabaEcsEmulator, now: datetime) -> None:
        self.emulator = emulator
        self.now = now
        self.nonce = 0

    def params(self, action: str, **extra: str) -> dict[str, str]:
        self.nonce += 1
        return {
            "Action": action, "Version": API_VERSION, "Format": "JSON", "AccessKeyId": ACCESS_KEY_ID,
            "SignatureMethod": "HMAC-SHA1", "SignatureVersion": "1.0", "SignatureType": "",
            "SignatureNonce": f"nonce-{self.nonce}", "Timestamp": self.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "RegionId": "cn-hangzhou", **extra,
        }

    def send(self, method: str, params: dict[str, str], secret: str = SECRET,
             tamper: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        signed = {**params, "Signature": rpc_signature(method, params, secret), **(tamper or {})}
        conn = http.client.HTTPConnection("127.0.0.1", self.emulator.port, timeout=5)
        try:
            conn.request(method, "/?" + urlencode(signed), body=b"" if method == "POST" else None)
            answer = conn.getresponse()
            return answer.status, json.loads(answer.read())
        finally:
            conn.close()


@pytest.fixture
def wire(harness: AlibabaHarness) -> Iterator[Wire]:
    # The emulator checks Timestamp against a clock of its own: give it one the test controls.
    emulator = AlibabaEcsEmulator(harness.cloud, {ACCESS_KEY_ID: SECRET}, wall_clock=SimClock(START))
    yield Wire(emulator, START)
    emulator.close()


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_correctly_signed_request_is_answered(wire: Wire, method: str) -> None:
    status, body = wire.send(method, wire.params("DescribeInstances"))

    assert status == 200, body
    assert body["Instances"] == {"Instance": []}
    assert body["RequestId"]


def test_a_tampered_parameter_fails_the_signature_and_says_what_the_server_signed(wire: Wire) -> None:
    params = wire.params("DescribeInstances", PageSize="10")
    status, body = wire.send("POST", params, tamper={"PageSize": "100"})

    assert status == 400
    assert body["Code"] == "SignatureDoesNotMatch"
    assert body["Message"].endswith("server string to sign is:" + string_to_sign("POST", {**params, "PageSize": "100"}))
    assert set(body) == {"RequestId", "HostId", "Code", "Message", "Recommend"}


def test_a_wrong_secret_fails_the_signature(wire: Wire) -> None:
    status, body = wire.send("POST", wire.params("DescribeInstances"), secret="not-the-secret")

    assert (status, body["Code"]) == (400, "SignatureDoesNotMatch")


def test_an_unknown_access_key_is_not_found(wire: Wire) -> None:
    status, body = wire.send("POST", {**wire.params("DescribeInstances"), "AccessKeyId": "LTAIsomebodyelse"})

    assert (status, body["Code"], body["Message"]) == (
        404, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")


def test_blank_parameters_are_part_of_what_is_signed(wire: Wire) -> None:
    params = wire.params("DescribeInstances")
    assert params["SignatureType"] == ""
    unsigned = {k: v for k, v in params.items() if k != "SignatureType"}

    ok, _ = wire.send("POST", params)
    # Signed without the blank parameter but sent with it: the server keeps it and disagrees.
    status, body = wire.send("POST", unsigned, tamper={"SignatureType": ""})

    assert ok == 200
    assert (status, body["Code"]) == (400, "SignatureDoesNotMatch")


def test_a_reused_nonce_is_refused(wire: Wire) -> None:
    params = wire.params("DescribeInstances")
    first, _ = wire.send("POST", params)
    status, body = wire.send("POST", params)

    assert first == 200
    assert (status, body["Code"]) == (400, "SignatureNonceUsed")


@pytest.mark.parametrize(("skew_minutes", "code"), [(1, None), (-14, None), (16, "InvalidTimeStamp.Expired"),
                                                    (-20, "InvalidTimeStamp.Expired")])
def test_the_timestamp_must_be_within_fifteen_minutes(wire: Wire, skew_minutes: int, code: str | None) -> None:
    wire.now = START + timedelta(minutes=skew_minutes)
    status, body = wire.send("POST", wire.params("DescribeInstances"))

    assert body.get("Code") == code
    assert status == (200 if code is None else 400)


@pytest.mark.parametrize("missing", ["Signature", "SignatureNonce", "Timestamp", "AccessKeyId"])
def test_a_missing_common_parameter_is_named(wire: Wire, missing: str) -> None:
    params = wire.params("DescribeInstances")
    signed = {**params, "Signature": rpc_signature("POST", params, SECRET)}
    del signed[missing]
    conn = http.client.HTTPConnection("127.0.0.1", wire.emulator.port, timeout=5)
    conn.request("POST", "/?" + urlencode(signed), body=b"")
    answer = conn.getresponse()
    body = json.loads(answer.read())
    conn.close()

    assert (answer.status, body["Code"]) == (400, "MissingParameter")
    assert f'"{missing}"' in body["Message"]


def test_sold_out_is_http_403_with_the_ecs_code(wire: Wire, harness: AlibabaHarness) -> None:
    offer = CATALOG[0]
    harness.cloud.sell_out(offer, Capacity.on_demand)
    status, body = wire.send("POST", wire.params(
        "RunInstances", InstanceType=offer.instance_type, ZoneId=offer.zone, ImageId="m-1", ClientToken="t1"))

    assert (status, body["Code"]) == (403, "OperationDenied.NoStock")
    assert body["RequestId"] in body["Recommend"]


# --- error translation -------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("OperationDenied.NoStock", 403, NoCapacity),
        ("Zone.NotOnSale", 403, NoCapacity),
        ("InvalidResourceType.NotSupported", 400, NoCapacity),
        ("InvalidSpotPriceLimit.LowerThanPublicPrice", 400, NoCapacity),
        ("QuotaExceed.ElasticQuota", 403, QuotaExceeded),
        ("InvalidParameter.QuotaExceed", 400, QuotaExceeded),
        ("Throttling", 400, Throttled),
        ("Throttling.User", 400, Throttled),
        ("InvalidAccessKeyId.NotFound", 404, AuthFailed),
        ("InvalidAccessKeySecret", 400, AuthFailed),
        ("SignatureDoesNotMatch", 400, AuthFailed),
        ("Forbidden.RAM", 403, AuthFailed),
        ("InvalidInstanceId.NotFound", 404, NotFound),
        ("InvalidImageId.NotFound", 404, InvalidRequest),  # a bad image is the request's fault, not a gone instance
        ("IdempotentParameterMismatch", 400, InvalidRequest),
        ("InvalidParameter", 400, InvalidRequest),
        ("IncorrectInstanceStatus", 403, InvalidRequest),
        ("ServiceUnavailable", 503, ProviderUnavailable),
        ("InternalError", 500, ProviderUnavailable),
        ("SomethingNew", 502, ProviderUnavailable),
    ],
)
def test_server_errors_become_the_project_errors_with_code_and_request_id(
    code: str, status: int, expected: type[ProviderError]
) -> None:
    error = translate_error(ServerException(code, "vendor says no", http_status=status, request_id="REQ-1"),
                            "RunInstances")

    assert type(error) is expected
    assert (error.provider, error.code, error.request_id) == ("alibaba", code, "REQ-1")
    assert "vendor says no" in error.message and "RunInstances" in error.message


@pytest.mark.parametrize(
    ("code", "expected"),
    [("SDK.HttpError", ProviderUnavailable), ("SDK.ServerUnreachable", ProviderUnavailable),
     ("SDK.InvalidCredential", AuthFailed), ("SDK.InvalidRegionId", InvalidRequest)],
)
def test_client_errors_become_the_project_errors(code: str, expected: type[ProviderError]) -> None:
    error = translate_error(ClientException(code, "local trouble"), "DescribeInstances")

    assert type(error) is expected
    assert error.code == code


# --- the adapter over the wire -------------------------------------------------------


def test_sdk_retries_are_off_so_one_throttle_is_one_call(harness: AlibabaHarness) -> None:
    client = make_client_factory(harness.config)("cn-hangzhou")
    harness.fail_next("launch", Throttled("slow down", code="Throttling"))

    with pytest.raises(Throttled) as caught:
        harness.provider.launch(request(harness, CATALOG[0], Capacity.spot, "once"))

    assert client.is_auto_retry() is False
    assert len(harness.emulator.calls_of("RunInstances")) == 1
    assert caught.value.request_id  # the gateway's request id survives translation


@pytest.mark.parametrize(
    ("capacity", "max_price", "expected"),
    [
        (Capacity.on_demand, None, {"SpotStrategy": "NoSpot"}),
        (Capacity.reserved, None, {"SpotStrategy": "NoSpot"}),
        (Capacity.spot, None, {"SpotStrategy": "SpotAsPriceGo", "SpotDuration": "0",
                               "SpotInterruptionBehavior": "Terminate"}),
        (Capacity.spot, "5.12349", {"SpotStrategy": "SpotWithPriceLimit", "SpotPriceLimit": "5.123"}),
    ],
)
def test_launch_parameters_on_the_wire(
    harness: AlibabaHarness, capacity: Capacity, max_price: str | None, expected: dict[str, str]
) -> None:
    launched = harness.provider.launch(
        request(harness, CATALOG[0], capacity, "wire", max_price=max_price, user_data="#cloud-config\n")
    )

    sent = harness.emulator.calls_of("RunInstances")[-1].params
    assert {k: sent.get(k) for k in expected} == expected
    assert sent["ClientToken"] == "t-wire"
    assert sent["InstanceChargeType"] == "PostPaid"
    assert (sent["InstanceType"], sent["ZoneId"], sent["ImageId"]) == (
        CATALOG[0].instance_type, CATALOG[0].zone, "m-gpusched-yolov9")
    assert {sent[f"Tag.{n}.Key"]: sent[f"Tag.{n}.Value"] for n in (1, 2)} == {TAG_MANAGED: "contract", TAG_JOB: "wire"}
    assert sent["UserData"] == "I2Nsb3VkLWNvbmZpZwo="
    assert sent["HttpTokens"] == "required"
    assert (launched.state, launched.capacity, launched.client_token) == (S.pending, capacity, "t-wire")


def test_a_spot_limit_below_the_market_is_no_capacity_and_no_instance(harness: AlibabaHarness) -> None:
    with pytest.raises(NoCapacity) as caught:
        harness.provider.launch(request(harness, CATALOG[0], Capacity.spot, "cheap", max_price="1.00"))

    assert caught.value.code == "InvalidSpotPriceLimit.LowerThanPublicPrice"
    assert harness.cloud.all_instances() == []


def test_quota_refusal_is_quota_exceeded() -> None:
    h = AlibabaHarness(gpu_quota=1)
    try:
        h.provider.launch(request(h, CATALOG[0], Capacity.on_demand, "first"))
        with pytest.raises(QuotaExceeded) as caught:
            h.provider.launch(request(h, CATALOG[0], Capacity.on_demand, "second"))
    finally:
        h.close()

    assert caught.value.code == "QuotaExceed.ElasticQuota"
    assert caught.value.fix


def test_an_unknown_access_key_is_auth_failed_with_a_readable_fix(harness: AlibabaHarness) -> None:
    config = harness.config.model_copy(update={"access_key_id": "LTAInobody"})
    stranger = AlibabaProvider(make_client_factory(config), config, harness.clock, CATALOG)

    with pytest.raises(AuthFailed) as caught:
        stranger.instances({TAG_MANAGED: "contract"})

    assert caught.value.code == "InvalidAccessKeyId.NotFound"
    assert "refused the credentials" in caught.value.message
    assert "GPUSCHED_ALIBABA_ACCESS_KEY_ID" in (caught.value.fix or "")


def test_a_wrong_secret_is_recognised_by_the_sdk_from_the_string_to_sign(harness: AlibabaHarness) -> None:
    wrong = harness.provider_with_wrong_secret()
    assert wrong is not None

    with pytest.raises(AuthFailed) as caught:
        wrong.instances({TAG_MANAGED: "contract"})

    # The SDK turns SignatureDoesNotMatch into InvalidAccessKeySecret only when the server's
    # string to sign equals its own: proof that both sides canonicalise the same way.
    assert caught.value.code == "InvalidAccessKeySecret"


def test_listing_pages_inside_the_adapter() -> None:
    h = AlibabaHarness(page_size=2)
    try:
        made = {h.provider.launch(request(h, CATALOG[0], Capacity.on_demand, f"p{n}")).ref.instance_id
                for n in range(5)}
        before = len(h.emulator.calls_of("DescribeInstances"))
        listed = h.provider.instances({TAG_MANAGED: "contract"}, regions=["cn-hangzhou"])
        pages = h.emulator.calls_of("DescribeInstances")[before:]
    finally:
        h.close()

    assert {i.ref.instance_id for i in listed} == made
    assert len(pages) == 3  # 2 + 2 + 1
    assert all(p.params["MaxResults"] == "2" for p in pages)
    assert [bool(p.params.get("NextToken")) for p in pages] == [False, True, True]


def test_stop_asks_ecs_to_stop_charging(harness: AlibabaHarness) -> None:
    ref = harness.provider.launch(request(harness, CATALOG[0], Capacity.spot, "stop")).ref
    settle(harness)

    harness.provider.stop(ref)
    settle(harness)

    assert harness.emulator.calls_of("StopInstances")[-1].params["StoppedMode"] == "StopCharging"
    (listed,) = harness.provider.instances({TAG_MANAGED: "contract"})
    assert (listed.state, listed.capacity) == (S.stopped, Capacity.spot)


def test_a_restarted_instance_reads_as_pending_while_ecs_says_starting(harness: AlibabaHarness) -> None:
    ref = harness.provider.launch(request(harness, CATALOG[0], Capacity.on_demand, "restart")).ref
    settle(harness)
    harness.provider.stop(ref)
    settle(harness)

    harness.provider.start(ref)
    (listed,) = harness.provider.instances({TAG_MANAGED: "contract"})

    hangzhou = [c for c in harness.emulator.calls_of("DescribeInstances") if c.params["RegionId"] == "cn-hangzhou"]
    (raw,) = hangzhou[-1].answer["Instances"]["Instance"]
    assert raw["Status"] == "Starting"
    assert listed.state is S.pending


def test_a_spot_reclaim_shows_during_the_notice_and_after_the_release(harness: AlibabaHarness) -> None:
    launched = harness.provider.launch(request(harness, CATALOG[0], Capacity.spot, "reclaim"))
    settle(harness)
    harness.preempt(launched)

    (noticed,) = harness.provider.instances({TAG_MANAGED: "contract"})
    harness.advance(NOTICE_SECONDS + 1)
    (released,) = harness.provider.instances({TAG_MANAGED: "contract"})

    assert (noticed.state, noticed.preempted, noticed.preempt_reason) == (S.running, True, PREEMPT_REASON)
    assert (released.state, released.preempted, released.preempt_reason) == (S.terminated, True, PREEMPT_REASON)
    assert harness.cloud.get(launched.ref.instance_id).state is S.terminated


def test_released_instances_are_remembered_for_a_while_then_forgotten() -> None:
    h = AlibabaHarness(tombstone_seconds=1800)
    try:
        ref = h.provider.launch(request(h, CATALOG[0], Capacity.on_demand, "gone")).ref
        h.provider.terminate(ref)
        h.advance(60)
        soon = h.provider.instances({TAG_MANAGED: "contract"})
        other_job = h.provider.instances({TAG_MANAGED: "contract", TAG_JOB: "someone-else"})
        h.advance(1800)
        later = h.provider.instances({TAG_MANAGED: "contract"})
    finally:
        h.close()

    assert [(i.ref.instance_id, i.state, i.preempted) for i in soon] == [(ref.instance_id, S.terminated, False)]
    assert other_job == []
    assert later == []


def test_terminate_of_a_released_or_unknown_instance_is_success(harness: AlibabaHarness) -> None:
    ref = harness.provider.launch(request(harness, CATALOG[0], Capacity.on_demand, "twice")).ref
    harness.provider.terminate(ref)
    settle(harness)
    harness.provider.terminate(ref)
    harness.provider.terminate(InstanceRef(provider="alibaba", region="cn-hangzhou", instance_id="i-nothere"))

    codes = [c.code for c in harness.emulator.calls_of("DeleteInstances")]
    assert codes == ["", "InvalidInstanceId.NotFound", "InvalidInstanceId.NotFound"]
    assert all(c.params["Force"] == "true" for c in harness.emulator.calls_of("DeleteInstances"))


def test_offers_carry_live_prices_and_stock_and_fall_back_to_the_catalog() -> None:
    unsold = alibaba_offer("cn-shanghai", "cn-shanghai-l", "ecs.gn7e-c16g1.4xlarge", "A100", 80.0, 16, 125,
                           "34.74", "13.9")
    h = AlibabaHarness(adapter_catalog=CATALOG + (unsold,))
    try:
        h.cloud.sell_out(CATALOG[1], Capacity.spot)
        offers = {(o.zone, o.instance_type): o for o in h.provider.offers()}
    finally:
        h.close()

    live = offers[(CATALOG[0].zone, CATALOG[0].instance_type)]
    assert (live.on_demand.per_hour.amount, live.spot.per_hour.amount) == (Decimal("11.63"), Decimal("4.65"))
    assert "DescribePrice" in live.on_demand.source and "DescribeSpotPriceHistory" in live.spot.source
    assert live.provider == "alibaba"
    assert (live.on_demand_stock, live.spot_stock) == (Stock.available, Stock.available)
    sold = offers[(CATALOG[1].zone, CATALOG[1].instance_type)]
    assert (sold.on_demand_stock, sold.spot_stock) == (Stock.available, Stock.sold_out)
    fallback = offers[(unsold.zone, unsold.instance_type)]
    assert (fallback.on_demand, fallback.spot) == (unsold.on_demand, unsold.spot)
    assert fallback.spot_stock is Stock.unknown


@pytest.mark.parametrize(
    ("change", "fix_mentions"),
    [
        ({"vswitch_ids": {"cn-hangzhou-x": "vsw-1"}}, "GPUSCHED_ALIBABA_VSWITCH_IDS"),
        ({"image_id": ""}, "GPUSCHED_ALIBABA_IMAGE_ID"),
        ({"regions": ("cn-beijing",)}, "GPUSCHED_ALIBABA_REGIONS"),
    ],
)
def test_launches_the_config_cannot_place_are_refused_before_any_call(
    harness: AlibabaHarness, change: dict[str, Any], fix_mentions: str
) -> None:
    config = harness.config.model_copy(update=change)
    provider = AlibabaProvider(make_client_factory(config), config, harness.clock, CATALOG)
    before = len(harness.emulator.calls)

    with pytest.raises(InvalidRequest) as caught:
        provider.launch(request(harness, CATALOG[0], Capacity.on_demand, "misplaced"))

    assert fix_mentions in (caught.value.fix or "")
    assert len(harness.emulator.calls) == before


def test_placement_and_backstop_parameters_reach_the_wire() -> None:
    h = AlibabaHarness(vswitch_ids={"cn-hangzhou-i": "vsw-hz-i"}, security_group_ids={"cn-hangzhou": "sg-hz"},
                       ram_role_name="gpusched-agent", auto_release_hours=48)
    try:
        h.advance(25 * 60)  # 09:25: the release time is counted from the next whole hour
        h.provider.launch(request(h, CATALOG[0], Capacity.on_demand, "placed"))
        sent = h.emulator.calls_of("RunInstances")[-1].params
    finally:
        h.close()

    assert (sent["VSwitchId"], sent["SecurityGroupId"], sent["RamRoleName"]) == ("vsw-hz-i", "sg-hz", "gpusched-agent")
    assert sent["AutoReleaseTime"] == (START.replace(minute=0) + timedelta(hours=49)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert datetime.strptime(sent["AutoReleaseTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC) > (
        START + timedelta(hours=48))


def test_config_keeps_the_secret_out_of_reprs_and_refuses_unknown_fields() -> None:
    config = AlibabaConfig(access_key_id="LTAIx", access_key_secret=SecretStr("s3cr3t-value"))

    assert "s3cr3t-value" not in repr(config) and "s3cr3t-value" not in str(config.model_dump())
    with pytest.raises(ValidationError):
        AlibabaConfig(access_key_id="LTAIx", access_key_secret=SecretStr("s"), access_key="typo")
    with pytest.raises(ValidationError):
        AlibabaConfig(access_key_id="LTAIx", access_key_secret=SecretStr("s"), spot_duration_hours=2)
