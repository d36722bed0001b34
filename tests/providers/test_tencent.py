"""The Tencent CVM emulator's TC3 checks and wire rules, and the Tencent adapter beyond the contract suite.

Everything goes through the real tencentcloud SDK over real HTTP to the
emulator on 127.0.0.1, except the known-answer signature test (Tencent's
published example) and the error table (the SDK's own exception class).
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import warnings
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

pytest.importorskip("tencentcloud.cvm.v20170312", reason="the Tencent SDK is optional: pip install '.[tencent]'")

from tencentcloud.common.exception.tencent_cloud_sdk_exception import (
    TencentCloudSDKException,
)
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.retry import StandardRetryer

from providers.base import (
    TAG_JOB,
    TAG_MANAGED,
    AuthFailed,
    BillingStopped,
    Capability,
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
from providers.emulators.tencent_cvm import (
    JSON_TYPE,
    TencentCvmEmulator,
    canonical_request,
    string_to_sign,
    tc3_signature,
)
from providers.tencent.adapter import TencentProvider, from_config
from providers.tencent.config import TencentConfig
from providers.tencent.errors import translate_error
from providers.tencent.wire import PREEMPT_REASON
from scheduler.clock import SimClock, SystemClock
from scheduler.models import Capacity, Offer, Stock
from tests.contract.harness_tencent import (
    IMAGE,
    SECRET_ID,
    SECRET_KEY,
    TencentHarness,
    contract_catalog,
    local_client_factory,
)

S = InstanceState


@pytest.fixture
def h() -> Iterator[TencentHarness]:
    made = TencentHarness(record_requests=True)
    try:
        yield made
    finally:
        made.close()


def req(h: TencentHarness, offer: Offer, capacity: Capacity, purpose: str, **extra: Any) -> InstanceRequest:
    tags = {TAG_MANAGED: h.cluster, TAG_JOB: purpose, **extra.pop("tags", {})}
    return InstanceRequest(offer=offer, capacity=capacity, client_token=f"t-{purpose}", tags=tags, **extra)


def sent(h: TencentHarness, action: str) -> list[dict[str, Any]]:
    """The JSON bodies of every ``action`` request the emulator received."""
    return [json.loads(r.body) for r in h.emulator.requests if r.headers.get("x-tc-action") == action]


def raw_client(h: TencentHarness, region: str = "ap-guangzhou", **config: Any):  # type: ignore[no-untyped-def]
    return local_client_factory(h.make_config(**config))(region)


def error_code(call) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(TencentCloudSDKException) as caught:
        call()
    return str(caught.value.get_code())


def post(h: TencentHarness, headers: dict[str, str], body: bytes) -> tuple[int, str | None, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", h.emulator.port, timeout=10)
    try:
        conn.request("POST", "/", body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type"), json.loads(resp.read())["Response"]
    finally:
        conn.close()


# --- TC3-HMAC-SHA256 -----------------------------------------------------------------


def test_tc3_matches_tencents_published_example() -> None:
    # The worked example of Tencent's API 3.0 signature documentation (its redacted secret included).
    payload = '{"Limit": 1, "Filters": [{"Values": ["\\u672a\\u547d\\u540d"], "Name": "instance-name"}]}'
    headers = {"content-type": "application/json; charset=utf-8", "host": "cvm.tencentcloudapi.com"}
    payload_hash = hashlib.sha256(payload.encode()).hexdigest()
    canonical = canonical_request("POST", "/", "", headers, ["content-type", "host"], payload_hash)
    to_sign = string_to_sign(1551113065, "2019-02-25", "cvm", canonical)

    assert payload_hash == "35e9c5b0e3ae67532d3c9f17ead6c90222632e5b1ff7f6e89887f1398934f064"
    assert to_sign.endswith("\n5ffe6a04c0664d6b969fab9a13bdab201d63ee709638e2749d62a09ca18d7031")
    assert tc3_signature("Gu5t9xGARNpq86cd98joQYCN3*******", "2019-02-25", "cvm", to_sign) == (
        "2230eefd229f582d8b1b891af7107b91597240707d778ab3738f756258d7652c"
    )


def _tamper_body(headers: dict[str, str], body: bytes) -> tuple[dict[str, str], bytes]:
    return headers, body.replace(b'"Limit": 1', b'"Limit": 2')


def _tamper_header(name: str, value: str):  # type: ignore[no-untyped-def]
    def change(headers: dict[str, str], body: bytes) -> tuple[dict[str, str], bytes]:
        return {**headers, name: value}, body
    return change


@pytest.mark.parametrize(
    ("tamper", "code"),
    [
        (lambda hd, b: (hd, b), None),  # the SDK's own request, replayed as it was
        (_tamper_body, "AuthFailure.SignatureFailure"),
        (lambda hd, b: ({**hd, "x-tc-timestamp": str(int(hd["x-tc-timestamp"]) + 1)}, b),
         "AuthFailure.SignatureFailure"),
        (_tamper_header("host", "127.0.0.2:1"), "AuthFailure.SignatureFailure"),
        (_tamper_header("authorization", "Bearer abc"), "AuthFailure.InvalidAuthorization"),
        (lambda hd, b: ({**hd, "authorization": hd["authorization"].replace(SECRET_ID, "AKIDnobody")}, b),
         "AuthFailure.SecretIdNotFound"),
        (_tamper_header("x-tc-version", "2018-01-01"), "NoSuchVersion"),
        (_tamper_header("x-tc-action", "DescribeNothing"), "InvalidAction"),
        (_tamper_header("x-tc-region", "ap-nowhere"), "UnsupportedRegion"),
    ],
    ids=["replayed", "body", "timestamp", "host", "not-tc3", "unknown-id", "version", "action", "region"],
)
def test_replayed_sdk_request_is_verified_exactly(h: TencentHarness, tamper, code: str | None) -> None:  # type: ignore[no-untyped-def]
    h.provider.instances({TAG_MANAGED: "x"}, regions=["ap-guangzhou"])
    original = h.emulator.requests[-1]
    assert b'"Limit"' in original.body
    headers, body = tamper(dict(original.headers), original.body)
    headers.pop("content-length", None)

    status, content_type, answer = post(h, headers, body)

    assert status == 200
    assert content_type == JSON_TYPE  # exactly: with a charset the SDK would read an error as success
    assert answer["RequestId"]
    assert answer.get("Error", {}).get("Code") == code


@pytest.mark.parametrize(
    ("secret_id", "secret_key", "code", "hint"),
    [
        (SECRET_ID, "not-the-secret", "AuthFailure.SignatureFailure", "GPUSCHED_TENCENT_SECRET_KEY"),
        ("AKIDnobody", SECRET_KEY, "AuthFailure.SecretIdNotFound", "GPUSCHED_TENCENT_SECRET_ID"),
    ],
)
def test_wrong_credentials_are_auth_failed_with_a_readable_fix(
    h: TencentHarness, secret_id: str, secret_key: str, code: str, hint: str
) -> None:
    wrong = h.build(h.make_config(secret_id=secret_id, secret_key=secret_key))

    with pytest.raises(AuthFailed) as caught:
        wrong.offers()

    assert caught.value.code == code
    assert caught.value.provider == "tencent"
    assert caught.value.request_id
    assert hint in (caught.value.fix or "")
    assert secret_key not in str(caught.value)


def test_a_timestamp_off_by_more_than_five_minutes_is_signature_expire() -> None:
    clock = SimClock(SystemClock().now() + timedelta(minutes=6))
    harness = TencentHarness()
    try:
        late = TencentCvmEmulator(harness.cloud, harness.clock, {SECRET_ID: SECRET_KEY}, signing_clock=clock)
        try:
            provider = harness.build(harness.make_config(endpoint=late.endpoint))
            with pytest.raises(AuthFailed) as caught:
                provider.offers()
        finally:
            late.close()
    finally:
        harness.close()

    assert caught.value.code == "AuthFailure.SignatureExpire"
    assert "clock" in (caught.value.fix or "")


# --- the emulator's wire rules ---------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "params", "code"),
    [
        ("DescribeInstances", {"Bogus": 1}, "UnknownParameter"),
        ("DescribeInstances", {"InstanceIds": ["ins-aaaaaaaa"], "Filters": [{"Name": "zone", "Values": ["x"]}]},
         "InvalidParameterCombination"),
        ("DescribeInstances", {"Limit": 101}, "InvalidParameterValueLimit"),
        ("DescribeInstances", {"Filters": [{"Name": "zone", "Values": list("abcdef")}]},
         "InvalidFilterValue.LimitExceeded"),
        ("DescribeInstances", {"Filters": [{"Name": f"tag:k{n}", "Values": ["v"]} for n in range(11)]},
         "InvalidFilterValue.LimitExceeded"),
        ("DescribeInstances", {"InstanceIds": ["i-123"]}, "InvalidInstanceId.Malformed"),
        ("RunInstances", {"Placement": {"Zone": "ap-guangzhou-3"}, "InstanceType": "GN7.2XLARGE32"},
         "MissingParameter"),
        ("RunInstances", {"Placement": {"Zone": "ap-shanghai-4"}, "InstanceType": "GN7.2XLARGE32", "ImageId": IMAGE},
         "InvalidZone.MismatchRegion"),
        ("RunInstances", {"Placement": {"Zone": "ap-guangzhou-3"}, "InstanceType": "GN7.2XLARGE32", "ImageId": IMAGE,
                          "ClientToken": "x" * 65}, "InvalidClientToken.TooLong"),
        ("RunInstances", {"Placement": {"Zone": "ap-guangzhou-3"}, "InstanceType": "GN7.2XLARGE32", "ImageId": IMAGE,
                          "UserData": "not base64!"}, "InvalidParameterValue.InvalidUserDataFormat"),
        ("StopInstances", {"InstanceIds": ["ins-aaaaaaaa"]}, "InvalidInstanceId.NotFound"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_emulator_refuses_what_cvm_refuses(h: TencentHarness, action: str, params: dict[str, Any], code: str) -> None:
    client = raw_client(h)

    assert error_code(lambda: client.call_json(action, params)) == code
    assert h.cloud.all_instances() == []


def test_spot_run_instances_carries_tags_bid_role_user_data_and_timer() -> None:
    harness = TencentHarness(record_requests=True, cam_role_name="gpusched-worker", max_lifetime_hours=48)
    try:
        offer = harness.offer("T4")
        launched = harness.provider.launch(req(harness, offer, Capacity.spot, "spot-1",
                                               user_data="#!/bin/sh\necho hi\n",
                                               name="helmet-v3", tags={"gpusched:team": "vision"}))
        body = sent(harness, "RunInstances")[0]
        inside = harness.cloud.all_instances()[0]
        role = harness.emulator.cam_role_of(launched.ref.instance_id)
        timer = harness.emulator.destroy_at(launched.ref.instance_id)
    finally:
        harness.close()

    assert body["InstanceChargeType"] == "SPOTPAID"
    assert body["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {"MaxPrice": str(offer.on_demand.per_hour.amount), "SpotInstanceType": "one-time"},
    }
    assert body["ClientToken"] == "t-spot-1"
    assert body["ImageId"] == IMAGE
    assert base64.b64decode(body["UserData"]).decode() == "#!/bin/sh\necho hi\n"
    assert inside.tags == {TAG_MANAGED: "contract", TAG_JOB: "spot-1", "gpusched:team": "vision"}
    assert inside.user_data == "#!/bin/sh\necho hi\n" and inside.name == "helmet-v3"
    assert launched.tags == dict(inside.tags)
    assert role == "gpusched-worker"
    assert timer == harness.clock.now() + timedelta(hours=48)


def test_on_demand_run_instances_sends_no_market_options(h: TencentHarness) -> None:
    h.provider.launch(req(h, h.offer(), Capacity.on_demand, "od"))

    body = sent(h, "RunInstances")[0]
    assert body["InstanceChargeType"] == "POSTPAID_BY_HOUR"
    assert "InstanceMarketOptions" not in body


def test_a_spot_limit_below_the_market_is_no_capacity(h: TencentHarness) -> None:
    offer = h.offer()
    below = offer.spot.per_hour.amount / 2

    with pytest.raises(NoCapacity) as caught:
        h.provider.launch(req(h, offer, Capacity.spot, "cheap", max_price=str(below)))

    assert caught.value.code == "InvalidParameterValue.InsufficientPrice"
    assert h.cloud.all_instances() == []


@pytest.mark.parametrize(
    ("change", "fix"),
    [
        ({"provider": "aws"}, None),
        ({"region": "ap-beijing", "zone": "ap-beijing-5"}, "GPUSCHED_TENCENT_REGIONS"),
    ],
)
def test_launch_refuses_offers_it_does_not_serve_without_calling(h: TencentHarness, change: dict[str, str],
                                                                 fix: str | None) -> None:
    offer = h.offer().model_copy(update=change)

    with pytest.raises(InvalidRequest) as caught:
        h.provider.launch(req(h, offer, Capacity.on_demand, "elsewhere"))

    assert fix is None or fix in (caught.value.fix or "")
    assert sent(h, "RunInstances") == []


def test_launch_without_any_image_says_which_setting() -> None:
    harness = TencentHarness(image_id="")
    try:
        with pytest.raises(InvalidRequest) as caught:
            harness.provider.launch(req(harness, harness.offer(), Capacity.on_demand, "no-image"))
    finally:
        harness.close()
    assert "GPUSCHED_TENCENT_IMAGE_ID" in (caught.value.fix or "")


def test_every_field_the_emulator_answers_is_one_the_sdk_models_know(h: TencentHarness) -> None:
    from tencentcloud.cvm.v20170312 import models

    offer = h.offer()
    launched = h.provider.launch(req(h, offer, Capacity.spot, "fields"))
    client = raw_client(h)
    calls = [
        ("DescribeInstances", {"InstanceIds": [launched.ref.instance_id]}),
        ("DescribeZoneInstanceConfigInfos", {"Filters": [{"Name": "instance-charge-type",
                                                          "Values": ["POSTPAID_BY_HOUR", "SPOTPAID"]}]}),
        ("InquiryPriceRunInstances", {"Placement": {"Zone": offer.zone}, "ImageId": IMAGE,
                                      "InstanceType": offer.instance_type, "InstanceChargeType": "SPOTPAID"}),
    ]
    for action, params in calls:
        answer = client.call_json(action, params)["Response"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            getattr(models, f"{action}Response")()._deserialize(answer)
        # The SDK warns "<names> fileds are useless." for any member its model lacks.
        assert [str(w.message) for w in caught] == [], action


# --- vendor errors -> ours ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("ResourceInsufficient.SpecifiedInstanceType", NoCapacity),
        ("ResourceInsufficient.ZoneSoldOutForSpecifiedInstance", NoCapacity),
        ("ResourceInsufficient.AvailabilityZoneSoldOut", NoCapacity),
        ("ResourcesSoldOut.SpecifiedInstanceType", NoCapacity),
        ("InvalidParameterValue.InsufficientOffering", NoCapacity),
        ("LimitExceeded.SpotQuota", QuotaExceeded),
        ("LimitExceeded.UserSpotQuota", QuotaExceeded),
        ("LimitExceeded.InstanceQuota", QuotaExceeded),
        ("InvalidAccount.InsufficientBalance", BillingStopped),
        ("RequestLimitExceeded", Throttled),
        ("RequestLimitExceeded.UinLimitExceeded", Throttled),
        ("AuthFailure.SignatureFailure", AuthFailed),
        ("AuthFailure.UnauthorizedOperation", AuthFailed),
        ("UnauthorizedOperation", AuthFailed),
        ("InvalidInstanceId.NotFound", NotFound),
        ("InvalidParameter", InvalidRequest),
        ("InvalidParameterValue.LimitExceeded", InvalidRequest),
        ("InvalidParameterValue", InvalidRequest),
        ("UnsupportedOperation.InstanceChargeType", InvalidRequest),
        ("InternalError", ProviderUnavailable),
        ("InternalError.TradeUnknownError", ProviderUnavailable),
        ("ClientNetworkError", ProviderUnavailable),
        ("ServerNetworkError", ProviderUnavailable),
        ("JSONDecodeError", ProviderUnavailable),
        ("ClientParamsError", InvalidRequest),
    ],
)
def test_every_vendor_code_maps_to_one_of_ours(code: str, kind: type[ProviderError]) -> None:
    error = translate_error(TencentCloudSDKException(code, "vendor says no", "req-123"),
                            action="RunInstances", region="ap-guangzhou")

    assert type(error) is kind
    assert (error.provider, error.code, error.request_id) == ("tencent", code, "req-123")
    assert "RunInstances" in error.message and "ap-guangzhou" in error.message


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("ResourceInsufficient.ZoneSoldOutForSpecifiedInstance", NoCapacity),
        ("ResourcesSoldOut.SpecifiedInstanceType", NoCapacity),
        ("LimitExceeded.SpotQuota", QuotaExceeded),
        ("RequestLimitExceeded", Throttled),
        ("InternalError", ProviderUnavailable),
    ],
)
def test_vendor_errors_over_http_keep_code_and_request_id(h: TencentHarness, code: str,
                                                          kind: type[ProviderError]) -> None:
    h.emulator.script_error("RunInstances", code, "scripted refusal")

    with pytest.raises(kind) as caught:
        h.provider.launch(req(h, h.offer(), Capacity.spot, "refused"))

    assert caught.value.code == code
    assert len(caught.value.request_id) == 36  # the emulator's RequestId, a UUID
    assert h.cloud.all_instances() == []


def test_a_lost_answer_is_provider_unavailable_and_the_retry_finds_the_same_machine(h: TencentHarness) -> None:
    request = req(h, h.offer(), Capacity.on_demand, "lost")
    h.lose_next_launch_response()

    with pytest.raises(ProviderUnavailable) as caught:
        h.provider.launch(request)
    again = h.provider.launch(request)

    assert caught.value.code == "ClientNetworkError"  # the connection closed with no answer
    assert [i.instance_id for i in h.cloud.all_instances()] == [h.emulator.sandbox_id(again.ref.instance_id)]


def test_a_client_with_an_sdk_retryer_is_refused(h: TencentHarness) -> None:
    def with_retryer(region: str):  # type: ignore[no-untyped-def]
        client = local_client_factory(h.config)(region)
        client.profile = ClientProfile(retryer=StandardRetryer())
        return client

    provider = TencentProvider(with_retryer, h.config, h.clock, [])

    with pytest.raises(ValueError, match="retryer"):
        provider.offers()


# --- listing, states, preemption ---------------------------------------------------------


def test_listing_pages_once_per_page_per_region() -> None:
    harness = TencentHarness(page_size=3)
    try:
        offer = next(o for o in harness.provider.offers() if o.region == "ap-guangzhou")
        made = {harness.provider.launch(req(harness, offer, Capacity.on_demand, f"p{n}")).ref.instance_id
                for n in range(7)}
        before = harness.emulator.action_counts.get("DescribeInstances", 0)

        listed = harness.provider.instances({TAG_MANAGED: "contract"})

        calls = harness.emulator.action_counts["DescribeInstances"] - before
    finally:
        harness.close()
    assert {i.ref.instance_id for i in listed} == made
    assert calls == 3 + 1  # pages of 3, 3 and 1 in ap-guangzhou; one empty page in ap-shanghai


def test_more_tags_than_cvm_filters_are_matched_by_the_adapter(h: TencentHarness) -> None:
    many = {f"gpusched:k{n}": f"v{n}" for n in range(12)}
    offer = h.offer()
    mine = h.provider.launch(req(h, offer, Capacity.on_demand, "many", tags=many))
    h.provider.launch(req(h, offer, Capacity.on_demand, "almost", tags={**many, "gpusched:k11": "other"}))

    listed = h.provider.instances({TAG_MANAGED: "contract", **many})

    assert [i.ref.instance_id for i in listed] == [mine.ref.instance_id]
    assert all(len(body["Filters"]) == 10 for body in sent(h, "DescribeInstances") if "Filters" in body)


def _raw_instance(h: TencentHarness, instance_id: str) -> dict[str, Any]:
    answer = raw_client(h).call_json("DescribeInstances", {"InstanceIds": [instance_id]})
    return answer["Response"]["InstanceSet"][0]


def test_stop_asks_for_stop_charging_and_stop_and_start_are_idempotent(h: TencentHarness) -> None:
    ref = h.provider.launch(req(h, h.offer(), Capacity.on_demand, "idle")).ref
    h.advance(600)

    h.provider.stop(ref)
    h.provider.stop(ref)  # STOPPING: nothing more to do
    h.advance(600)
    h.provider.stop(ref)  # STOPPED: nothing more to do
    stopped = _raw_instance(h, ref.instance_id)
    h.provider.start(ref)
    starting = _raw_instance(h, ref.instance_id)
    h.provider.start(ref)

    assert [b["StoppedMode"] for b in sent(h, "StopInstances")] == ["STOP_CHARGING"]
    assert (stopped["InstanceState"], stopped["StopChargingMode"]) == ("STOPPED", "STOP_CHARGING")
    assert starting["InstanceState"] == "STARTING"
    assert h.provider.instances({TAG_MANAGED: "contract"})[0].state is S.pending
    assert len(sent(h, "StartInstances")) == 2


def test_stopping_spot_is_refused_before_any_stop_call(h: TencentHarness) -> None:
    ref = h.provider.launch(req(h, h.offer(), Capacity.spot, "spot-idle")).ref
    h.advance(600)

    with pytest.raises(InvalidRequest) as caught:
        h.provider.stop(ref)

    assert "terminate" in (caught.value.fix or "")
    assert sent(h, "StopInstances") == []


@pytest.mark.parametrize(("how", "preempted"), [("reclaim", True), ("owner", False), ("timer", False)])
def test_only_a_cloud_reclaim_of_spot_counts_as_preemption(how: str, preempted: bool) -> None:
    harness = TencentHarness(max_lifetime_hours=1)
    try:
        ref = harness.provider.launch(req(harness, harness.offer(), Capacity.spot, how)).ref
        harness.advance(600)
        if how == "reclaim":
            harness.emulator.preempt(ref.instance_id)
        elif how == "owner":
            harness.provider.terminate(ref)
        harness.advance(3000)  # past the one-hour ActionTimer, inside the one-hour SHUTDOWN retention
        harness.provider.instances({TAG_MANAGED: "contract"})  # the emulator applies due timers on a call
        harness.advance(60)
        [seen] = harness.provider.instances({TAG_MANAGED: "contract"})
        raw = _raw_instance(harness, ref.instance_id)
    finally:
        harness.close()

    assert raw["InstanceState"] == "SHUTDOWN"
    assert seen.state is S.terminated
    assert seen.preempted is preempted
    assert seen.preempt_reason == (PREEMPT_REASON if preempted else None)


def test_a_destroyed_instance_leaves_the_list_after_the_retention_and_terminate_stays_success(
    h: TencentHarness,
) -> None:
    ref = h.provider.launch(req(h, h.offer(), Capacity.on_demand, "gone")).ref
    h.provider.terminate(ref)
    h.advance(3700)

    assert h.provider.instances({TAG_MANAGED: "contract"}) == []
    h.provider.terminate(ref)
    with pytest.raises(NotFound):
        h.provider.stop(ref)
    h.provider.terminate(InstanceRef(provider="tencent", region="ap-guangzhou", instance_id="not-an-id"))


# --- offers and prices ---------------------------------------------------------------------


def test_live_offers_carry_the_clouds_prices_stock_and_gpu() -> None:
    harness = TencentHarness(catalog=contract_catalog() + (
        # not in the bundled catalog: the GPU comes from the family (PNV4 is A10)
        contract_catalog()[0].model_copy(update={"instance_type": "PNV4.7XLARGE116", "gpu": "A10", "vcpus": 28}),
        # a GPU the project cannot name (GN8 is a P40): left out
        contract_catalog()[0].model_copy(update={"instance_type": "GN8.LARGE56", "gpu": "P40"}),
    ))
    try:
        inside = {o.instance_type + "@" + o.zone: o for o in harness.cloud.offers()}
        t4 = harness.offer("T4")
        harness.emulator.sell_out(t4, Capacity.spot)
        offers = {o.instance_type + "@" + o.zone: o for o in harness.provider.offers()}
    finally:
        harness.close()

    assert set(offers) == set(inside) - {"GN8.LARGE56@ap-guangzhou-3"}
    for key, offer in offers.items():
        assert offer.on_demand.per_hour.amount == inside[key].on_demand.per_hour.amount
        assert offer.spot.per_hour.amount == inside[key].spot.per_hour.amount
        assert offer.on_demand.per_hour.currency == "USD"
        assert offer.gpu == inside[key].gpu and offer.vcpus == inside[key].vcpus
        assert "DescribeZoneInstanceConfigInfos" in offer.spot.source
    sold = offers[f"{t4.instance_type}@{t4.zone}"]
    assert (sold.spot_stock, sold.on_demand_stock) == (Stock.sold_out, Stock.available)
    assert offers["PNV4.7XLARGE116@ap-guangzhou-3"].gpu_mem_gib == 22.0


def test_without_live_prices_the_bundled_catalog_serves_and_no_price_call_is_made() -> None:
    harness = TencentHarness(live_prices=False, record_requests=True)
    try:
        offers = harness.provider.offers(["ap-shanghai"])
        calls = dict(harness.emulator.action_counts)
    finally:
        harness.close()

    assert offers and {o.region for o in offers} == {"ap-shanghai"}
    assert all(o.provider == "tencent" and "intlcloud-documents" in o.on_demand.source for o in offers)
    assert "DescribeZoneInstanceConfigInfos" not in calls
    assert Capability.live_prices not in harness.provider.capabilities


# --- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"protocol": "http"},  # plain HTTP only towards an explicit (local) endpoint
        {"subnet_ids": {"ap-guangzhou-3": "subnet-1"}},  # subnets need their VPC
        {"regions": ()},
        {"page_size": 101},  # DescribeInstances pages hold at most 100
    ],
)
def test_config_rejects_what_cannot_work(fields: dict[str, Any]) -> None:
    base: dict[str, Any] = {"secret_id": "AKID1", "secret_key": "s3cret", "regions": ("ap-guangzhou",),
                            "currency": "USD"}
    TencentConfig(**base)  # valid as it is: each case below fails for its own field
    with pytest.raises(ValidationError):
        TencentConfig(**{**base, **fields})


def test_config_keeps_secrets_out_of_its_repr() -> None:
    config = TencentConfig(secret_id="AKIDvisible", secret_key="do-not-print", regions=("ap-guangzhou",),
                           currency="CNY")
    assert "do-not-print" not in repr(config) and "AKIDvisible" not in repr(config)
    assert isinstance(config.secret_key, SecretStr)


def test_from_config_builds_a_working_provider(h: TencentHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)  # only 127.0.0.1 is ever reached

    provider = from_config(h.config, h.clock)
    offers = provider.offers()

    assert {(o.zone, o.instance_type) for o in offers} == {(o.zone, o.instance_type) for o in h.cloud.offers()}
    assert provider.capabilities == h.provider.capabilities
    assert isinstance(offers[0].on_demand.per_hour.amount, Decimal)
