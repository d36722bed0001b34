"""The Huawei ECS emulator's signature checks and wire rules, and the Huawei adapter beyond the contract suite.

Everything goes through the real huaweicloudsdkecs over real HTTP to the emulator on
127.0.0.1, except the signer cross-check (the SDK's own Signer against the emulator's
verifier) and the error table (the SDK's own exception classes).
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import requests
from pydantic import ValidationError

pytest.importorskip("huaweicloudsdkecs.v2", reason="the Huawei SDK is optional: pip install '.[huawei]'")

from huaweicloudsdkcore.auth.credentials import BasicCredentials
from huaweicloudsdkcore.exceptions.exceptions import (
    ClientRequestException,
    ConnectionException,
    SdkError,
    ServerResponseException,
)
from huaweicloudsdkcore.sdk_request import SdkRequest
from huaweicloudsdkcore.signer.signer import Signer
from huaweicloudsdkecs.v2 import (
    CreatePostPaidServersRequest,
    CreatePostPaidServersRequestBody,
    ListServersDetailsRequest,
)

from providers.base import (
    TAG_JOB,
    TAG_MANAGED,
    AuthFailed,
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
from providers.emulators.huawei_ecs import HuaweiEcsEmulator, canonical_request, sign, string_to_sign
from providers.huawei import error_codes
from providers.huawei.adapter import HuaweiProvider, from_config
from providers.huawei.config import HuaweiConfig
from providers.huawei.errors import FIXES, classify, translate_error
from providers.huawei.wire import PREEMPT_REASON, TAG_INTENT, intent_id, post_paid_server
from providers.registry import build_live
from scheduler.clock import SimClock, SystemClock
from scheduler.models import Capacity, Offer, Stock
from scheduler.settings import Settings, load_cloud_config
from tests.contract.harness_huawei import (
    ACCESS_KEY,
    PROJECTS,
    SECRET_KEY,
    HuaweiHarness,
    local_client_factory,
)

S = InstanceState
NORTH = "cn-north-4"


@pytest.fixture
def h() -> Iterator[HuaweiHarness]:
    made = HuaweiHarness()
    try:
        yield made
    finally:
        made.close()


def offer_in(h: HuaweiHarness, zone: str = "cn-north-4a", flavor: str = "pi2.2xlarge.4") -> Offer:
    return next(o for o in h.provider.offers() if o.zone == zone and o.instance_type == flavor)


def req(h: HuaweiHarness, offer: Offer, capacity: Capacity, purpose: str, **extra: Any) -> InstanceRequest:
    tags = {TAG_MANAGED: h.cluster, TAG_JOB: purpose, **extra.pop("tags", {})}
    return InstanceRequest(offer=offer, capacity=capacity, client_token=f"t-{purpose}", tags=tags,
                           name=f"gpusched-{purpose}", **extra)


def created(h: HuaweiHarness) -> list[dict[str, Any]]:
    """The bodies of every CreatePostPaidServers the emulator answered with 200."""
    return [json.loads(c.body) for c in h.emulator.calls_of("CreatePostPaidServers") if c.status == 200]


def raw_client(h: HuaweiHarness, region: str = NORTH, **config: Any):  # type: ignore[no-untyped-def]
    return local_client_factory(h.make_config(**config))(region)


def send(h: HuaweiHarness, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", h.emulator.port, timeout=10)
    try:
        conn.request(method, path, body=body or None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if data else {}
    finally:
        conn.close()


# --- SDK-HMAC-SHA256 ---------------------------------------------------------------------


def test_the_emulators_verifier_agrees_with_the_sdks_own_signer() -> None:
    request = SdkRequest(
        method="POST", schema="https", host="ecs.cn-north-4.myhuaweicloud.com",
        resource_path="/v1/0a1b2c/cloudservers/detail", query_params=[("tags", "gpusched:cluster=a b"), ("limit", 3)],
        header_params={"Content-Type": "application/json", "X-Sdk-Date": "20261102T090000Z",
                       "X-Project-Id": "0a1b2c"},
        body=b'{"server": {"name": "x"}}',
    )
    Signer(BasicCredentials("AK123", "the-secret")).sign(request)
    authorization = request.header_params["Authorization"]
    signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    headers = {k.lower(): v for k, v in request.header_params.items()}
    query = request.uri.partition("?")[2]

    canonical = canonical_request("POST", request.resource_path, query, headers, signed,
                                  hashlib.sha256(request.body).hexdigest())
    ours = sign("the-secret", string_to_sign(canonical, "20261102T090000Z"))

    assert signed == ["content-type", "host", "x-project-id", "x-sdk-date"]
    assert authorization == f"SDK-HMAC-SHA256 Access=AK123, SignedHeaders={';'.join(signed)}, Signature={ours}"
    assert sign("other-secret", string_to_sign(canonical, "20261102T090000Z")) != ours


def _list_request(h: HuaweiHarness):  # type: ignore[no-untyped-def]
    h.provider.instances({TAG_MANAGED: "x"}, regions=[NORTH])
    return h.emulator.calls_of("ListServersDetails")[-1]


@pytest.mark.parametrize(
    ("tamper", "status", "code"),
    [
        (lambda m, p, hd, b: (m, p, hd, b), 200, None),  # the SDK's own request, replayed as it was
        (lambda m, p, hd, b: (m, p.replace("limit=200", "limit=199"), hd, b), 401, "APIGW.0301"),
        (lambda m, p, hd, b: (m, p, {**hd, "host": "127.0.0.2:1"}, b), 401, "APIGW.0301"),
        (lambda m, p, hd, b: (m, p, {**hd, "x-sdk-date": "20200101T000000Z"}, b), 401, "APIGW.0301"),
        (lambda m, p, hd, b: (m, p, {**hd, "authorization": "Bearer abc"}, b), 401, "APIGW.0301"),
        (lambda m, p, hd, b: (m, p, {**hd, "authorization": hd["authorization"].replace(ACCESS_KEY, "NOBODY")}, b),
         401, "APIGW.0301"),
        (lambda m, p, hd, b: (m, p.replace(PROJECTS[NORTH], "f" * 32), hd, b), 401, "APIGW.0301"),
    ],
    ids=["replayed", "query", "host", "old-date", "not-sdk-hmac", "unknown-ak", "other-project"],
)
def test_replayed_sdk_request_is_verified_exactly(h: HuaweiHarness, tamper, status: int,  # type: ignore[no-untyped-def]
                                                  code: str | None) -> None:
    original = _list_request(h)
    method, path, headers, body = tamper("GET", original.target, dict(original.headers), original.body)
    headers.pop("content-length", None)

    got, answer = send(h, method, path, headers, body)

    assert got == status
    assert answer.get("error_code") == code
    if code:
        assert answer["error_msg"].startswith("Incorrect IAM authentication information")
        assert answer["request_id"]


def test_a_body_changed_after_signing_is_refused(h: HuaweiHarness) -> None:
    h.provider.launch(req(h, offer_in(h), Capacity.on_demand, "signed"))
    original = h.emulator.calls_of("CreatePostPaidServers")[-1]
    headers = dict(original.headers)
    headers.pop("content-length", None)

    tampered = original.body.replace(b"pi2.2xlarge.4", b"pi2.8xlarge.4")
    status, answer = send(h, "POST", original.target, headers, tampered)

    assert (status, answer["error_code"]) == (401, "APIGW.0301")
    assert "signature" in answer["error_msg"]


@pytest.mark.parametrize("which", ["secret", "access"])
def test_wrong_credentials_are_auth_failed_with_a_readable_fix(h: HuaweiHarness, which: str) -> None:
    change = {"secret_key": "not-the-secret"} if which == "secret" else {"access_key": "NOBODY0000"}
    wrong = h.build(h.make_config(**change))

    with pytest.raises(AuthFailed) as caught:
        wrong.instances({TAG_MANAGED: "contract"})

    assert caught.value.code == "APIGW.0301"
    assert caught.value.provider == "huawei"
    assert caught.value.request_id
    assert "GPUSCHED_HUAWEI_SECRET_KEY" in (caught.value.fix or "")
    assert "not-the-secret" not in str(caught.value)


def test_an_sdk_date_off_by_more_than_fifteen_minutes_is_refused() -> None:
    harness = HuaweiHarness()
    try:
        late_clock = SimClock(SystemClock().now() + timedelta(minutes=16))
        late = HuaweiEcsEmulator(harness.cloud, harness.clock, {ACCESS_KEY: SECRET_KEY},
                                 {p: r for r, p in PROJECTS.items()}, signing_clock=late_clock)
        try:
            provider = harness.build(harness.make_config(endpoint=late.endpoint))
            with pytest.raises(AuthFailed) as caught:
                provider.offers()
        finally:
            late.close()
    finally:
        harness.close()
    assert "15 minutes" in caught.value.message


# --- the create: spot, tags, intent, idempotency ------------------------------------------


def test_a_spot_create_carries_market_type_bid_tags_intent_and_user_data() -> None:
    harness = HuaweiHarness(security_group_ids=("sg-1",), key_name="ops", agency_name="gpusched-obs")
    try:
        offer = offer_in(harness)
        request = req(harness, offer, Capacity.spot, "spot", max_price="7.5", user_data="#!/bin/sh\necho hi\n")
        made = harness.provider.launch(request)
        call = harness.emulator.calls_of("CreatePostPaidServers")[-1]
        server = json.loads(call.body)["server"]
        listed = harness.provider.instances({TAG_MANAGED: "contract"})
    finally:
        harness.close()

    assert server["extendparam"] == {"chargingMode": 0, "regionID": NORTH, "marketType": "spot", "spotPrice": "7.5"}
    assert server["flavorRef"] == "pi2.2xlarge.4" and server["availability_zone"] == "cn-north-4a"
    assert {t["key"]: t["value"] for t in server["server_tags"]} == {
        TAG_MANAGED: "contract", TAG_JOB: "spot", TAG_INTENT: intent_id("t-spot")}
    assert call.headers["x-client-token"] == intent_id("t-spot")
    assert server["security_groups"] == [{"id": "sg-1"}] and server["key_name"] == "ops"
    assert server["metadata"] == {"agency_name": "gpusched-obs"}
    assert server["nics"] == [{"subnet_id": harness.config.subnet_ids["cn-north-4a"]}]
    assert server["root_volume"] == {"volumetype": "SSD", "size": 100}
    assert base64.b64decode(server["user_data"]).decode() == "#!/bin/sh\necho hi\n"
    assert made.capacity is Capacity.spot and made.state is S.pending
    assert [(i.ref.instance_id, i.capacity, i.tags) for i in listed] == [
        (made.ref.instance_id, Capacity.spot, {TAG_MANAGED: "contract", TAG_JOB: "spot"})]


def test_an_on_demand_create_sends_no_market_type(h: HuaweiHarness) -> None:
    h.provider.launch(req(h, offer_in(h), Capacity.on_demand, "od"))

    assert created(h)[-1]["server"]["extendparam"] == {"chargingMode": 0, "regionID": NORTH}


def test_a_spot_bid_below_the_market_fails_the_job_as_no_capacity(h: HuaweiHarness) -> None:
    with pytest.raises(NoCapacity) as caught:
        h.provider.launch(req(h, offer_in(h), Capacity.spot, "low-bid", max_price="0.01"))

    assert caught.value.code == "Ecs.0319"
    assert len(caught.value.request_id) == 32  # the failed job's id
    assert h.cloud.all_instances() == []
    assert h.provider.instances({TAG_MANAGED: "contract"}) == []


def test_a_retry_after_a_lost_answer_makes_one_server_and_never_a_second_create(h: HuaweiHarness) -> None:
    request = req(h, offer_in(h), Capacity.spot, "lost")
    h.lose_next_launch_response()

    with pytest.raises(ProviderUnavailable) as caught:
        h.provider.launch(request)
    again = h.provider.launch(request)

    assert caught.value.code == "ConnectionException"
    assert [m.instance_id for m in h.cloud.all_instances()] == [h.emulator.sandbox_id(again.ref.instance_id)]
    creates = h.emulator.calls_of("CreatePostPaidServers")
    assert [c.status for c in creates] == [0]  # the lost one; the retry found the server by its intent tag
    lookups = [c.query.get("tags") for c in h.emulator.calls_of("ListServersDetails")]
    assert f"{TAG_INTENT}={intent_id('t-lost')}" in lookups


def test_a_restarted_daemon_finds_the_server_of_its_intent_instead_of_creating_again(h: HuaweiHarness) -> None:
    request = req(h, offer_in(h), Capacity.on_demand, "restart")
    first = h.provider.launch(request)

    fresh = h.build(h.config)  # no memory of the first launch
    h.advance(3600 * 12)  # long after Huawei would have forgotten the X-Client-Token
    second = fresh.launch(request)

    assert second.ref.instance_id == first.ref.instance_id
    assert len(created(h)) == 1


def test_the_same_intent_for_another_offer_is_invalid_request_and_launches_nothing(h: HuaweiHarness) -> None:
    h.provider.launch(req(h, offer_in(h), Capacity.on_demand, "same"))

    with pytest.raises(InvalidRequest) as caught:
        h.provider.launch(req(h, offer_in(h, flavor="p2s.2xlarge.8"), Capacity.on_demand, "same"))

    assert caught.value.code == "IdempotentParameterMismatch"
    assert len(created(h)) == 1


def test_x_client_token_is_deduped_by_the_emulator_as_ecs_documents(h: HuaweiHarness) -> None:
    client = raw_client(h)
    server = post_paid_server(req(h, offer_in(h), Capacity.on_demand, "token"), h.config, intent_id("t-token"))

    def create(token: str, name: str = "gpusched-token") -> dict[str, Any]:
        server.name = name
        body = CreatePostPaidServersRequestBody(server=server)
        answer = client.create_post_paid_servers(CreatePostPaidServersRequest(x_client_token=token, body=body))
        return answer.to_json_object()

    token = intent_id("t-token")
    first, again = create(token), create(token)
    with pytest.raises(ClientRequestException) as changed:
        create(token, name="another-name")
    with pytest.raises(ClientRequestException) as malformed:
        create("not-a-uuid")

    assert first == again and first["serverIds"] and first["job_id"]
    assert len(h.cloud.all_instances()) == 1
    assert (changed.value.status_code, changed.value.error_code) == (400, "Ecs.0122")
    assert (malformed.value.status_code, malformed.value.error_code) == (400, "Ecs.0123")


def test_a_create_job_that_names_no_server_yet_is_polled_on_the_injected_clock(h: HuaweiHarness) -> None:
    h.emulator.hold_next_jobs(3)
    before = h.clock.now()

    made = h.provider.launch(req(h, offer_in(h), Capacity.on_demand, "slow-job"))

    assert len(h.emulator.calls_of("ShowJob")) == 4
    assert h.clock.now() - before == timedelta(seconds=3 * h.config.job_poll_seconds)
    assert made.state is S.pending


def test_a_job_silent_past_the_wait_is_unavailable_and_the_retry_finds_the_server() -> None:
    harness = HuaweiHarness(job_wait_seconds=0)
    try:
        request = req(harness, offer_in(harness), Capacity.on_demand, "silent")
        harness.emulator.hold_next_jobs(5)
        with pytest.raises(ProviderUnavailable) as caught:
            harness.provider.launch(request)
        again = harness.provider.launch(request)
        sandbox = [m.instance_id for m in harness.cloud.all_instances()]
    finally:
        harness.close()
    assert caught.value.code == "JobPending" and caught.value.retryable
    assert sandbox == [harness.emulator.sandbox_id(again.ref.instance_id)]


@pytest.mark.parametrize(
    ("change", "fix"),
    [({"image_id": ""}, "GPUSCHED_HUAWEI_IMAGE_ID"), ({"vpc_id": "", "subnet_ids": {}}, "GPUSCHED_HUAWEI_VPC_ID"),
     ({"subnet_ids": {"cn-north-4b": "s"}}, "GPUSCHED_HUAWEI_SUBNET_IDS")],
)
def test_a_launch_that_cannot_be_built_says_which_setting_and_calls_nothing(change: dict[str, Any], fix: str) -> None:
    harness = HuaweiHarness(**change)
    try:
        offer = offer_in(harness)
        with pytest.raises(InvalidRequest) as caught:
            harness.provider.launch(req(harness, offer, Capacity.on_demand, "unbuildable"))
        creates = harness.emulator.calls_of("CreatePostPaidServers")
    finally:
        harness.close()
    assert fix in (caught.value.fix or "")
    assert creates == []


@pytest.mark.parametrize(
    "tags", [{"gpusched:team": "a=b"}, {"x" * 37: "v"}, {"gpusched:team": "v" * 44},
             {f"k{n}": "v" for n in range(9)}],
    ids=["equals-sign", "long-key", "long-value", "eleven-tags"],
)
def test_tags_ecs_would_refuse_are_refused_before_the_call(h: HuaweiHarness, tags: dict[str, str]) -> None:
    with pytest.raises(InvalidRequest):
        h.provider.launch(req(h, offer_in(h), Capacity.on_demand, "tags", tags=tags))

    assert h.emulator.calls_of("CreatePostPaidServers") == []


# --- listing, paging, tags, states -----------------------------------------------------------


def test_listing_pages_by_page_number_once_per_page_per_region() -> None:
    harness = HuaweiHarness(page_size=3)
    try:
        offer = offer_in(harness)
        made = {harness.provider.launch(req(harness, offer, Capacity.on_demand, f"p{n}")).ref.instance_id
                for n in range(7)}
        before = len(harness.emulator.calls_of("ListServersDetails"))

        listed = harness.provider.instances({TAG_MANAGED: "contract"})

        pages = harness.emulator.calls_of("ListServersDetails")[before:]
    finally:
        harness.close()
    assert {i.ref.instance_id for i in listed} == made
    assert [(c.query["offset"], c.query["limit"]) for c in pages if c.query] == [
        ("1", "3"), ("2", "3"), ("3", "3"), ("1", "3")]  # 3 + 3 + 1 in cn-north-4, nothing in cn-east-3
    assert all(c.query["tags"] == "gpusched:cluster=contract" for c in pages)


def test_listing_matches_every_tag_though_ecs_filters_by_one(h: HuaweiHarness) -> None:
    offer = offer_in(h)
    mine = h.provider.launch(req(h, offer, Capacity.on_demand, "mine", tags={"gpusched:team": "a"}))
    h.provider.launch(req(h, offer, Capacity.on_demand, "theirs", tags={"gpusched:team": "b"}))

    listed = h.provider.instances({TAG_MANAGED: "contract", "gpusched:team": "a"})

    assert [i.ref.instance_id for i in listed] == [mine.ref.instance_id]


def test_every_field_the_emulator_answers_reads_into_the_sdks_models(h: HuaweiHarness) -> None:
    made = h.provider.launch(req(h, offer_in(h), Capacity.spot, "fields"))

    answer = raw_client(h).list_servers_details(ListServersDetailsRequest(server_id=made.ref.instance_id))
    server = answer.servers[0]

    assert (server.id, server.status, server.os_ext_a_zavailability_zone) == (
        made.ref.instance_id, "BUILD", "cn-north-4a")
    assert server.flavor.id == "pi2.2xlarge.4" and server.metadata["charging_mode"] == "2"
    assert server.os_ext_st_stask_state == "spawning"
    assert f"{TAG_JOB}=fields" in server.tags


def test_an_unknown_id_asked_by_id_is_absent_not_an_error(h: HuaweiHarness) -> None:
    answer = raw_client(h).list_servers_details(
        ListServersDetailsRequest(server_id="00000000-0000-4000-8000-000000000000")).to_json_object()

    assert answer["servers"][0]["id"] == "00000000-0000-4000-8000-000000000000"
    assert answer["servers"][0].get("status") is None
    with pytest.raises(NotFound):
        h.provider.start(h.provider.launch(req(h, offer_in(h), Capacity.on_demand, "x")).ref.model_copy(
            update={"instance_id": "00000000-0000-4000-8000-000000000000"}))


def test_stop_then_start_are_idempotent_and_stop_refuses_spot_before_any_call(h: HuaweiHarness) -> None:
    od = h.provider.launch(req(h, offer_in(h), Capacity.on_demand, "idle")).ref
    spot = h.provider.launch(req(h, offer_in(h), Capacity.spot, "spot-idle")).ref
    h.advance(600)

    h.provider.stop(od)
    h.provider.stop(od)  # stopping: nothing more to ask
    h.advance(600)
    with pytest.raises(InvalidRequest) as refused:
        h.provider.stop(spot)
    h.provider.start(od)
    h.provider.start(od)

    actions = [json.loads(c.body) for c in h.emulator.calls_of("BatchServersAction")]
    assert actions == [{"os-stop": {"servers": [{"id": od.instance_id}], "type": "SOFT"}},
                       {"os-start": {"servers": [{"id": od.instance_id}]}}]
    assert refused.value.code == "SpotCannotStop"


@pytest.mark.parametrize(("how", "preempted"), [("reclaim", True), ("terminate", False)])
def test_only_a_cloud_release_of_spot_counts_as_preemption(h: HuaweiHarness, how: str, preempted: bool) -> None:
    made = h.provider.launch(req(h, offer_in(h), Capacity.spot, "gone"))
    h.advance(600)
    assert h.provider.instances({TAG_MANAGED: "contract"})[0].state is S.running

    if how == "reclaim":
        h.emulator.preempt(made.ref.instance_id)
    else:
        h.provider.terminate(made.ref)
    h.advance(900)
    listed = h.provider.instances({TAG_MANAGED: "contract"})

    assert [(i.state, i.preempted, i.preempt_reason) for i in listed] == [
        (S.terminated, preempted, PREEMPT_REASON if preempted else None)]
    h.advance(h.config.tombstone_seconds + 1)
    assert h.provider.instances({TAG_MANAGED: "contract"}) == []


def test_terminate_shows_terminating_then_terminated_and_stays_success(h: HuaweiHarness) -> None:
    made = h.provider.launch(req(h, offer_in(h), Capacity.on_demand, "bye"))
    h.advance(600)
    h.provider.terminate(made.ref)

    assert [i.state for i in h.provider.instances({TAG_MANAGED: "contract"})] == [S.terminating]
    h.advance(60)
    assert [i.state for i in h.provider.instances({TAG_MANAGED: "contract"})] == [S.terminated]
    h.provider.terminate(made.ref)  # gone: Ecs.0114, which terminate takes as done
    assert h.emulator.calls_of("DeleteServers")[-1].code == "Ecs.0114"


# --- offers ------------------------------------------------------------------------------------


def test_offers_carry_catalog_prices_and_the_stock_ecs_reports(h: HuaweiHarness) -> None:
    h.sell_out(offer_in(h), Capacity.spot)
    before = len(h.emulator.calls_of("ListFlavors"))

    offers = {(o.zone, o.instance_type): o for o in h.provider.offers([NORTH])}

    pi2 = offers[("cn-north-4a", "pi2.2xlarge.4")]
    assert (pi2.on_demand_stock, pi2.spot_stock) == (Stock.available, Stock.sold_out)
    assert pi2.on_demand is not None and pi2.on_demand.per_hour.currency == "CNY"
    assert "no Huawei price published" in pi2.on_demand.source
    # Listed, but not on sale in that AZ (cond:operation:az names only cn-north-4a): nothing to launch there.
    assert offers[("cn-north-4b", "pi2.2xlarge.4")].on_demand_stock is Stock.sold_out
    assert offers[("cn-north-4a", "pi2.8xlarge.4")].on_demand_stock is Stock.unknown  # not in ECS's flavor list
    assert len(h.emulator.calls_of("ListFlavors")) == before + 1  # one call for the region


def test_a_flavor_without_a_spot_status_is_not_sold_as_spot() -> None:
    from providers.huawei.prices import flavor_stock

    stock = flavor_stock([
        {"id": "a", "os_extra_specs": {"cond:operation:status": "normal"}},
        {"id": "b", "os_extra_specs": {"cond:operation:status": "abandon", "cond:operation:az": "z1(sellout), z2(obt)",
                                       "cond:spot:operation:status": "normal"}},
    ], ["z1", "z2"])

    assert stock[("z1", "a")] == (Stock.available, Stock.sold_out)
    assert stock[("z1", "b")] == (Stock.sold_out, Stock.available)
    assert stock[("z2", "b")] == (Stock.available, Stock.available)


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(FIXES))
def test_every_fix_belongs_to_a_code_of_the_table_and_rides_on_its_error(code: str) -> None:
    status = 401 if code.startswith("APIGW.03") else 400
    error = translate_error(ClientRequestException(status, SdkError("req-9", code, "vendor says no")),
                            action="create_post_paid_servers", region=NORTH)

    assert code in error_codes.all_codes()
    assert type(error) is error_codes.documented_class(code)
    assert (error.provider, error.code, error.request_id, error.fix) == ("huawei", code, "req-9", FIXES[code])
    assert "create_post_paid_servers" in error.message and NORTH in error.message


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [("Ecs.9999", 400, InvalidRequest), ("Ecs.9999", 404, NotFound), ("Ecs.9999", 503, ProviderUnavailable),
     ("429", 429, Throttled), ("APIGW.0399", 401, AuthFailed), ("IAM.0001", 403, AuthFailed)],
)
def test_unlisted_codes_fall_back_on_the_http_status(code: str, status: int, kind: type[ProviderError]) -> None:
    assert classify(code, status)[0] is kind


def test_no_answer_at_all_is_unavailable_and_retryable() -> None:
    error = translate_error(ConnectionException("connection aborted"), action="show_job", region=NORTH)
    server = translate_error(ServerResponseException(500, SdkError("r", "Common.0001", "boom")),
                             action="show_job", region=NORTH)

    assert type(error) is ProviderUnavailable and error.retryable
    assert type(server) is ProviderUnavailable


@pytest.mark.parametrize(
    ("status", "code", "kind", "gateway"),
    [(400, "Ecs.0001", QuotaExceeded, False), (429, "APIGW.0308", Throttled, True),
     (403, "Ecs.0003", AuthFailed, False), (500, "Common.0001", ProviderUnavailable, False),
     (400, "Ecs.0029", InvalidRequest, False)],
)
def test_vendor_errors_over_http_keep_code_and_request_id(h: HuaweiHarness, status: int, code: str,
                                                          kind: type[ProviderError], gateway: bool) -> None:
    offer = offer_in(h)
    h.emulator.script_error("CreatePostPaidServers", status, code, "scripted refusal", gateway=gateway)

    with pytest.raises(kind) as caught:
        h.provider.launch(req(h, offer, Capacity.on_demand, "refused"))

    assert caught.value.code == code
    assert len(caught.value.request_id) == 32  # the emulator's X-Request-Id
    assert h.cloud.all_instances() == []


def test_a_client_that_retries_by_itself_is_refused(h: HuaweiHarness) -> None:
    def retrying(region: str):  # type: ignore[no-untyped-def]
        client = local_client_factory(h.config)(region)
        client.get_http_client().config.retry_times = 3
        return client

    with pytest.raises(ValueError, match="retry_times"):
        HuaweiProvider(retrying, h.config, h.clock, []).instances({})


# --- configuration and wiring -------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [{"regions": ("cn-north-4", "cn-east-3"), "project_id": "p"},  # one project cannot serve two regions
     {"regions": ("cn-north-4",)},  # no project at all
     {"project_id": "p", "subnet_ids": {"cn-north-4a": "s"}},  # subnets without their VPC
     {"project_id": "p", "endpoint": "127.0.0.1:9"}],  # an endpoint without its scheme
)
def test_config_rejects_what_cannot_work(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        HuaweiConfig(access_key="a", secret_key="s", **fields)


def test_config_reads_huaweis_own_variable_names_and_keeps_secrets_out_of_its_repr(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HUAWEICLOUD_SDK_AK", "AK-FROM-ENV")
    monkeypatch.setenv("HUAWEICLOUD_SDK_SK", "sk-from-env-never-printed")
    monkeypatch.setenv("HUAWEICLOUD_SDK_PROJECT_ID", "proj-1")
    monkeypatch.setenv("GPUSCHED_HUAWEI_IMAGE_ID", "img-1")

    config = load_cloud_config(HuaweiConfig, "huawei", env_file=None)

    assert config.access_key.get_secret_value() == "AK-FROM-ENV"
    assert (config.project_for("cn-north-4"), config.image_id) == ("proj-1", "img-1")
    assert "sk-from-env-never-printed" not in repr(config) + str(config)


def test_the_registry_builds_the_huawei_adapter_from_settings(h: HuaweiHarness,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSCHED_HUAWEI_ACCESS_KEY", ACCESS_KEY)
    monkeypatch.setenv("GPUSCHED_HUAWEI_SECRET_KEY", SECRET_KEY)
    monkeypatch.setenv("GPUSCHED_HUAWEI_REGIONS", json.dumps(list(PROJECTS)))
    monkeypatch.setenv("GPUSCHED_HUAWEI_PROJECT_IDS", json.dumps(PROJECTS))
    monkeypatch.setenv("GPUSCHED_HUAWEI_ENDPOINT", h.emulator.endpoint)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    settings = Settings(_env_file=None, backend="live", providers=["huawei"])  # type: ignore[call-arg]

    providers = build_live(settings, h.clock)

    assert isinstance(providers["huawei"], HuaweiProvider)
    assert providers["huawei"].instances({TAG_MANAGED: "contract"}) == []


def test_a_local_endpoint_is_reached_directly_whatever_the_proxy_variables_say(
        h: HuaweiHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)

    provider = from_config(h.config, h.clock)  # the production client factory, not the harness's

    assert provider.instances({TAG_MANAGED: "contract"}) == []
    assert h.emulator.calls_of("ListServersDetails")


def test_from_config_uses_the_bundled_catalogs_huawei_rows(h: HuaweiHarness) -> None:
    provider = from_config(h.config, h.clock)

    assert {o.region for o in provider.offers()} == set(PROJECTS)


def test_launch_time_survives_from_launch_to_listing(h: HuaweiHarness) -> None:
    made = h.provider.launch(req(h, offer_in(h), Capacity.on_demand, "when"))

    assert made.launched_at == datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)


def test_a_project_that_is_not_the_accounts_is_auth_failed_naming_the_setting(h: HuaweiHarness) -> None:
    wrong = h.build(h.make_config(project_ids={**PROJECTS, NORTH: "1" * 32}))

    with pytest.raises(AuthFailed) as caught:
        wrong.instances({TAG_MANAGED: "contract"}, regions=[NORTH])

    assert caught.value.code == "Ecs.0023"
    assert "GPUSCHED_HUAWEI_PROJECT_IDS" in (caught.value.fix or "")


def test_a_read_timeout_that_escapes_the_sdk_is_unavailable(h: HuaweiHarness) -> None:
    def timing_out(region: str):  # type: ignore[no-untyped-def]
        client = local_client_factory(h.config)(region)

        def get(*args: object, **kwargs: object) -> None:
            raise requests.exceptions.ReadTimeout("read timed out")  # what requests raises past the read timeout

        client.get_http_client()._session.get = get
        return client

    with pytest.raises(ProviderUnavailable) as caught:
        HuaweiProvider(timing_out, h.config, h.clock, []).instances({TAG_MANAGED: "contract"})

    assert caught.value.code == "ReadTimeout" and caught.value.retryable
