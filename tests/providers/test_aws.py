"""The providers.aws package beyond the contract: error translation, launch parameters, prices, paging.

The Provider contract itself runs in tests/contract/ (``-k aws``). Everything
here goes through the real boto3 client over HTTP to the local moto server of
tests/contract/harness_aws.py, whose wire plays what moto lacks (AWS error
bodies, stock-outs, token idempotency), except the pure functions, which are
called directly.
"""

from __future__ import annotations

import base64
import itertools
import math
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from pydantic import ValidationError

pytest.importorskip("moto", reason="the AWS adapter tests need moto[server]: pip install '.[test]' (from the checkout)")

from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)
from botocore.parsers import ResponseParserError

from providers.aws.adapter import AwsProvider, from_config
from providers.aws.client import make_ec2_client
from providers.aws.config import AwsConfig
from providers.aws.errors import translate_error
from providers.aws.prices import SPOT_PRICE_SOURCE, currency_for, latest_spot_prices
from providers.aws.wire import run_instances_params
from providers.base import (
    TAG_JOB,
    TAG_MANAGED,
    AuthFailed,
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
from scheduler.clock import SimClock
from scheduler.models import Capacity, Offer
from tests.contract.harness_aws import (
    GOOD_KEY,
    SECRET,
    AwsHarness,
    harness_config,
    shared_session,
)

_clusters = itertools.count(1)


@pytest.fixture(scope="module")
def shared() -> Iterator[AwsHarness]:
    """One harness (and EC2 client per region) for the module; cases are kept apart by cluster tag."""
    yield AwsHarness()


@pytest.fixture
def aws(shared: AwsHarness) -> AwsHarness:
    """The shared harness with a fresh cluster tag: a case sees only the instances it launched."""
    shared.cluster = f"unit-{next(_clusters)}"
    return shared


def _request(harness: AwsHarness, offer: Offer, capacity: Capacity, token: str, **extra: Any) -> InstanceRequest:
    fields: dict[str, Any] = {
        "offer": offer,
        "capacity": capacity,
        "client_token": f"{harness.cluster}-{token}",
        "tags": {TAG_MANAGED: harness.cluster, TAG_JOB: token},
        "name": f"unit-{token}",
    }
    fields.update(extra)
    return InstanceRequest(**fields)


def _catalog_offer(harness: AwsHarness, region: str = "us-east-1") -> Offer:
    return next(o for o in harness.catalog if o.region == region and o.spot is not None)


# --- error translation ------------------------------------------------------------

ERROR_TABLE = [
    ("InsufficientInstanceCapacity", 500, NoCapacity),
    ("InsufficientCapacity", 500, NoCapacity),
    ("SpotMaxPriceTooLow", 400, NoCapacity),
    ("Unsupported", 400, NoCapacity),
    ("MaxSpotInstanceCountExceeded", 400, QuotaExceeded),
    ("VcpuLimitExceeded", 400, QuotaExceeded),
    ("InstanceLimitExceeded", 400, QuotaExceeded),
    ("RequestLimitExceeded", 503, Throttled),
    ("Throttling", 400, Throttled),
    ("AuthFailure", 401, AuthFailed),
    ("UnauthorizedOperation", 403, AuthFailed),
    ("InvalidClientTokenId", 403, AuthFailed),
    ("SignatureDoesNotMatch", 403, AuthFailed),
    ("InvalidInstanceID.NotFound", 400, NotFound),
    ("InvalidInstanceID.Malformed", 400, NotFound),
    ("IdempotentParameterMismatch", 400, InvalidRequest),
    ("InvalidParameterValue", 400, InvalidRequest),
    ("InvalidParameterCombination", 400, InvalidRequest),
    ("InternalError", 500, ProviderUnavailable),
    ("Unavailable", 503, ProviderUnavailable),
    # Codes we have never seen: the HTTP status decides.
    ("SomethingNew", 503, ProviderUnavailable),
    ("SomethingNew", 403, AuthFailed),
    ("SomethingNew", 400, InvalidRequest),
]


@pytest.mark.parametrize(("code", "status", "expected"), ERROR_TABLE)
def test_aws_error_replies_become_our_errors_with_code_and_request_id(
    aws: AwsHarness, code: str, status: int, expected: type[ProviderError]
) -> None:
    aws.wire.fail_next("RunInstances", code, status, message=f"the cloud says {code}")
    before = aws.wire.calls["RunInstances"]

    with pytest.raises(ProviderError) as caught:
        aws.provider.launch(_request(aws, _catalog_offer(aws), Capacity.on_demand, f"err-{code}-{status}"))

    error = caught.value
    assert type(error) is expected
    assert (error.provider, error.code) == ("aws", code)
    assert error.request_id.startswith("wire-")
    assert f"the cloud says {code}" in error.message
    assert error.retryable is (expected in (Throttled, ProviderUnavailable))
    # Exactly one request: botocore's own retryer is off, retries are ours.
    assert aws.wire.calls["RunInstances"] == before + 1


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"RequestId": "r-1", "HTTPStatusCode": status}},
        "RunInstances",
    )


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com"), ProviderUnavailable),
        (ConnectTimeoutError(endpoint_url="https://ec2.us-east-1.amazonaws.com"), ProviderUnavailable),
        (ReadTimeoutError(endpoint_url="https://ec2.us-east-1.amazonaws.com"), ProviderUnavailable),
        (ResponseParserError("garbled XML"), ProviderUnavailable),
        (NoCredentialsError(), AuthFailed),
        (ParamValidationError(report="MinCount: invalid type"), InvalidRequest),
        (_client_error("InsufficientInstanceCapacity", 500), NoCapacity),
    ],
)
def test_botocore_exceptions_are_translated(exc: Exception, expected: type[ProviderError]) -> None:
    error = translate_error(exc, operation="RunInstances", region="us-east-1")

    assert type(error) is expected
    assert error.provider == "aws"
    assert error.code
    assert "RunInstances" in error.message and "us-east-1" in error.message


def test_an_unreachable_endpoint_is_provider_unavailable() -> None:
    with socket.socket() as probe:  # a port that nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = harness_config(f"http://127.0.0.1:{port}", connect_timeout_seconds=2)
    provider = AwsProvider(lambda region: make_ec2_client(region, config, shared_session()), config,
                           SimClock(datetime(2026, 11, 2, tzinfo=UTC)), [])

    with pytest.raises(ProviderUnavailable) as caught:
        provider.instances({TAG_MANAGED: "unreachable"})

    assert caught.value.code == "EndpointConnectionError"


def test_a_wrong_secret_reads_as_a_credentials_problem_and_names_the_settings(aws: AwsHarness) -> None:
    wrong = aws.provider_with_wrong_secret()
    assert wrong is not None

    with pytest.raises(AuthFailed) as caught:
        wrong.instances({TAG_MANAGED: aws.cluster})

    error = caught.value
    assert error.code == "AuthFailure"
    assert "credentials" in error.message
    assert error.fix is not None and "GPUSCHED_AWS_SECRET_ACCESS_KEY" in error.fix
    assert SECRET not in str(error)


def test_stop_and_start_of_an_unknown_instance_are_not_found(aws: AwsHarness) -> None:
    unknown = InstanceRef(provider="aws", region="us-east-1", instance_id="i-0123456789abcdef0")

    with pytest.raises(NotFound):
        aws.provider.stop(unknown)
    with pytest.raises(NotFound):
        aws.provider.start(unknown)
    aws.provider.terminate(unknown)  # gone is what terminate wants


# --- launching -----------------------------------------------------------------------


def test_run_instances_params_for_spot_carry_everything_aws_needs(aws: AwsHarness) -> None:
    offer = _catalog_offer(aws)
    config = aws.config.model_copy(
        update={
            "subnet_ids": {offer.zone: "subnet-0a", "us-east-1z": "subnet-0z"},
            "security_group_ids": {offer.region: ("sg-1", "sg-2")},
            "key_name": "ops",
            "instance_profile": "gpusched-worker",
        }
    )
    request = _request(aws, offer, Capacity.spot, "spot-1", max_price="0.3000", user_data="#!/bin/sh\necho hi\n")

    params = run_instances_params(request, config)

    tags = [{"Key": k, "Value": v} for k, v in request.tags.items()] + [{"Key": "Name", "Value": request.name}]
    assert params["TagSpecifications"] == [
        {"ResourceType": "instance", "Tags": tags},
        {"ResourceType": "volume", "Tags": tags},
    ]
    assert (params["MinCount"], params["MaxCount"], params["ClientToken"]) == (1, 1, request.client_token)
    assert (params["InstanceType"], params["Placement"]) == (offer.instance_type, {"AvailabilityZone": offer.zone})
    assert params["ImageId"] == config.image_ids[offer.region]
    assert params["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate",
                        "MaxPrice": "0.3000"},
    }
    assert params["MetadataOptions"]["HttpTokens"] == "required"
    assert params["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert params["UserData"] == request.user_data
    assert (params["SubnetId"], params["SecurityGroupIds"], params["KeyName"]) == ("subnet-0a", ["sg-1", "sg-2"], "ops")
    assert params["IamInstanceProfile"] == {"Name": "gpusched-worker"}


@pytest.mark.parametrize("capacity", [Capacity.on_demand, Capacity.reserved])
def test_run_instances_params_without_spot_or_optional_settings(aws: AwsHarness, capacity: Capacity) -> None:
    params = run_instances_params(_request(aws, _catalog_offer(aws), capacity, "od-1", image="ami-own"), aws.config)

    assert "InstanceMarketOptions" not in params  # a reservation covers an on-demand instance
    assert params["ImageId"] == "ami-own"
    for absent in ("SubnetId", "SecurityGroupIds", "KeyName", "IamInstanceProfile", "UserData"):
        assert absent not in params


def test_an_instance_profile_arn_is_passed_as_arn(aws: AwsHarness) -> None:
    arn = "arn:aws:iam::123456789012:instance-profile/gpusched-worker"
    config = aws.config.model_copy(update={"instance_profile": arn})

    params = run_instances_params(_request(aws, _catalog_offer(aws), Capacity.on_demand, "arn-1"), config)

    assert params["IamInstanceProfile"] == {"Arn": arn}


@pytest.mark.parametrize(
    ("change", "fix_mentions"),
    [
        ({"config": {"image_ids": {}}}, "GPUSCHED_AWS_IMAGE_IDS"),
        ({"request": {"max_price": "cheap"}}, None),
        ({"request": {"max_price": "-1"}}, None),
    ],
)
def test_launch_requests_aws_would_refuse_are_invalid_request(
    aws: AwsHarness, change: dict[str, dict[str, Any]], fix_mentions: str | None
) -> None:
    config = aws.config.model_copy(update=change.get("config", {}))
    request = _request(aws, _catalog_offer(aws), Capacity.spot, "bad-1", **change.get("request", {}))

    with pytest.raises(InvalidRequest) as caught:
        run_instances_params(request, config)

    if fix_mentions is not None:
        assert caught.value.fix is not None and fix_mentions in caught.value.fix


def test_launch_refuses_foreign_offers_and_unserved_regions(aws: AwsHarness) -> None:
    offer = _catalog_offer(aws)
    unserved = next(o for o in aws.catalog if o.region not in aws.config.regions)
    before = aws.wire.calls["RunInstances"]

    with pytest.raises(InvalidRequest):
        aws.provider.launch(_request(aws, offer.model_copy(update={"provider": "alibaba"}), Capacity.spot, "foreign"))
    with pytest.raises(InvalidRequest) as caught:
        aws.provider.launch(_request(aws, unserved, Capacity.spot, "unserved"))
    assert caught.value.fix is not None and "GPUSCHED_AWS_REGIONS" in caught.value.fix
    with pytest.raises(InvalidRequest):
        aws.provider.terminate(InstanceRef(provider="tencent", region="us-east-1", instance_id="i-1"))
    assert aws.wire.calls["RunInstances"] == before


def test_a_spot_launch_reaches_aws_tagged_spot_and_with_imdsv2(aws: AwsHarness) -> None:
    offer = _catalog_offer(aws)
    request = _request(aws, offer, Capacity.spot, "wire-spot", max_price="0.5", user_data="echo ready")

    launched = aws.provider.launch(request)

    sent = aws.wire.last_params["RunInstances"]
    assert sent["InstanceMarketOptions.MarketType"] == "spot"
    assert sent["InstanceMarketOptions.SpotOptions.SpotInstanceType"] == "one-time"
    assert sent["InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior"] == "terminate"
    assert sent["InstanceMarketOptions.SpotOptions.MaxPrice"] == "0.5"
    assert base64.b64decode(sent["UserData"]).decode() == "echo ready"
    assert launched.capacity is Capacity.spot
    assert launched.tags["Name"] == request.name

    # What AWS (moto) now holds, read without the adapter.
    ec2 = make_ec2_client(offer.region, aws.config, shared_session())
    held = ec2.describe_instances(InstanceIds=[launched.ref.instance_id])["Reservations"][0]["Instances"][0]
    assert held["MetadataOptions"]["HttpTokens"] == "required"
    volumes = ec2.describe_volumes(Filters=[{"Name": f"tag:{TAG_JOB}", "Values": ["wire-spot"]}])["Volumes"]
    assert [a["InstanceId"] for v in volumes for a in v["Attachments"]] == [launched.ref.instance_id]


def test_a_reserved_launch_is_an_on_demand_instance(aws: AwsHarness) -> None:
    launched = aws.provider.launch(_request(aws, _catalog_offer(aws), Capacity.reserved, "reserved-1"))

    assert "InstanceMarketOptions.MarketType" not in aws.wire.last_params["RunInstances"]
    assert launched.capacity is Capacity.on_demand


def test_a_spot_instance_we_terminate_is_not_preempted(aws: AwsHarness) -> None:
    ref = aws.provider.launch(_request(aws, _catalog_offer(aws), Capacity.spot, "spot-ours")).ref

    aws.provider.terminate(ref)

    listed = {i.ref.instance_id: i for i in aws.provider.instances({TAG_MANAGED: aws.cluster})}
    assert listed[ref.instance_id].state is InstanceState.terminated
    assert listed[ref.instance_id].preempted is False
    assert listed[ref.instance_id].preempt_reason is None


# --- listing -------------------------------------------------------------------------


def test_listing_fetches_one_page_per_call_per_region(aws: AwsHarness) -> None:
    provider = aws.build(aws.config.model_copy(update={"page_size": 5}))
    counts = {"us-east-1": 12, "us-west-2": 2}
    for region, count in counts.items():
        offer = _catalog_offer(aws, region)
        for n in range(count):
            provider.launch(_request(aws, offer, Capacity.on_demand, f"page-{region}-{n}"))
    before = aws.wire.calls["DescribeInstances"]

    listed = provider.instances({TAG_MANAGED: aws.cluster})

    pages = sum(math.ceil(count / 5) for count in counts.values())
    assert aws.wire.calls["DescribeInstances"] - before == pages
    assert aws.wire.last_params["DescribeInstances"]["MaxResults"] == "5"
    assert len({i.ref.instance_id for i in listed}) == sum(counts.values())
    assert {i.ref.region for i in listed} == set(counts)


def test_listing_matches_tags_exactly_not_as_wildcards(aws: AwsHarness) -> None:
    offer = _catalog_offer(aws)
    aws.provider.launch(_request(aws, offer, Capacity.on_demand, "job-a1"))
    aws.provider.launch(_request(aws, offer, Capacity.on_demand, "job-ab"))

    # '?' is a wildcard to EC2's filter; to us it is just a character.
    assert aws.provider.instances({TAG_MANAGED: aws.cluster, TAG_JOB: "job-a?"}) == []
    exact = aws.provider.instances({TAG_MANAGED: aws.cluster, TAG_JOB: "job-a1"})
    assert [i.tags[TAG_JOB] for i in exact] == ["job-a1"]


# --- prices ---------------------------------------------------------------------------


def _history(harness: AwsHarness, region: str, types: list[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """What DescribeSpotPriceHistory says, asked without the adapter."""
    ec2 = make_ec2_client(region, harness.config, shared_session())
    records = ec2.describe_spot_price_history(InstanceTypes=types, ProductDescriptions=["Linux/UNIX"])
    return {(r["InstanceType"], r["AvailabilityZone"]): r for r in records["SpotPriceHistory"]}


def test_offers_take_spot_prices_from_describe_spot_price_history(aws: AwsHarness) -> None:
    before = aws.wire.calls["DescribeSpotPriceHistory"]

    offers = aws.provider.offers(["us-east-1"])

    catalog = {o.key: o for o in aws.catalog if o.region == "us-east-1"}
    assert {o.key for o in offers} == set(catalog)
    history = _history(aws, "us-east-1", sorted({o.instance_type for o in offers}))
    live = [o for o in offers if (o.instance_type, o.zone) in history]
    assert live, "moto knows none of the catalog's instance types: nothing was priced live"
    for offer in live:
        record = history[(offer.instance_type, offer.zone)]
        assert offer.spot is not None
        assert offer.spot.per_hour.amount == Decimal(record["SpotPrice"])
        assert offer.spot.per_hour.currency == "USD"
        assert offer.spot.source.startswith(f"{SPOT_PRICE_SOURCE} ")
        assert offer.spot.as_of == record["Timestamp"].astimezone(UTC).date()
        assert offer.on_demand == catalog[offer.key].on_demand
    sent = aws.wire.last_params["DescribeSpotPriceHistory"]
    assert sent["ProductDescription.1"] == "Linux/UNIX"
    assert "StartTime" in sent
    asked = {v for k, v in sent.items() if k.startswith("InstanceType.")}
    assert asked == {o.instance_type for o in catalog.values()}
    assert aws.wire.calls["DescribeSpotPriceHistory"] - before == 1


def test_offers_fall_back_to_the_catalog_when_prices_are_unavailable(aws: AwsHarness) -> None:
    aws.wire.fail_next("DescribeSpotPriceHistory", "Unavailable", 503)

    offers = aws.provider.offers()

    east = [o for o in offers if o.region == "us-east-1"]
    west = [o for o in offers if o.region == "us-west-2"]
    assert east == [o for o in aws.catalog if o.region == "us-east-1"]
    assert west and any(o.spot is not None and o.spot.source.startswith(SPOT_PRICE_SOURCE) for o in west)


def test_offers_do_not_hide_refused_credentials_behind_the_catalog(aws: AwsHarness) -> None:
    aws.wire.fail_next("DescribeSpotPriceHistory", "UnauthorizedOperation", 403)

    with pytest.raises(AuthFailed):
        aws.provider.offers()


def test_offers_only_for_served_regions(aws: AwsHarness) -> None:
    assert aws.provider.offers(["ap-northeast-1"]) == []
    assert {o.region for o in aws.provider.offers(["us-west-2", "ap-northeast-1"])} == {"us-west-2"}


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        # The newest record per type and zone wins, whatever the order.
        (
            [("g5.xlarge", "us-east-1a", "0.40", 1), ("g5.xlarge", "us-east-1a", "0.38", 3),
             ("g5.xlarge", "us-east-1a", "0.45", 2)],
            {("g5.xlarge", "us-east-1a"): ("0.38", 3)},
        ),
        (
            [("g5.xlarge", "us-east-1a", "0.40", 1), ("g5.xlarge", "us-east-1b", "0.41", 1),
             ("g4dn.xlarge", "us-east-1a", "0.21", 1)],
            {("g5.xlarge", "us-east-1a"): ("0.40", 1), ("g5.xlarge", "us-east-1b"): ("0.41", 1),
             ("g4dn.xlarge", "us-east-1a"): ("0.21", 1)},
        ),
        # A garbled or non-positive price says nothing.
        ([("g5.xlarge", "us-east-1a", "n/a", 1), ("g5.xlarge", "us-east-1b", "0", 1)], {}),
    ],
)
def test_latest_spot_prices(
    records: list[tuple[str, str, str, int]], expected: dict[tuple[str, str], tuple[str, int]]
) -> None:
    def stamp(day: int) -> datetime:
        return datetime(2026, 11, day, 12, 0, tzinfo=UTC)

    prices = latest_spot_prices(
        ({"InstanceType": t, "AvailabilityZone": z, "SpotPrice": p, "Timestamp": stamp(d)} for t, z, p, d in records),
        "USD",
    )

    assert {k: (str(v.per_hour.amount), v.as_of.day) for k, v in prices.items()} == expected
    assert all(v.per_hour.currency == "USD" and v.source.startswith(SPOT_PRICE_SOURCE) for v in prices.values())


@pytest.mark.parametrize(
    ("region", "currency"),
    [("us-east-1", "USD"), ("ap-northeast-1", "USD"), ("cn-north-1", "CNY"), ("cn-northwest-1", "CNY")],
)
def test_china_regions_are_priced_in_yuan(region: str, currency: str) -> None:
    assert currency_for(region) == currency


# --- wiring and configuration ------------------------------------------------------------


def test_clients_have_botocore_retries_off_and_the_endpoint_override(aws: AwsHarness) -> None:
    client = make_ec2_client("us-west-2", aws.config, shared_session())

    assert client.meta.config.retries["total_max_attempts"] == 1  # type: ignore[attr-defined]
    assert client.meta.endpoint_url == aws.endpoint  # type: ignore[attr-defined]
    assert client.meta.region_name == "us-west-2"  # type: ignore[attr-defined]


def test_from_config_wires_a_working_provider(aws: AwsHarness) -> None:
    provider = from_config(aws.config, aws.clock, aws.catalog, shared_session())

    assert provider.name == "aws"
    assert provider.capabilities == {Capability.stop_charging, Capability.preemption_events, Capability.live_prices,
                                     Capability.bills_from_running}
    assert Capability.spot_stop not in provider.capabilities
    launched = provider.launch(_request(aws, _catalog_offer(aws), Capacity.on_demand, "wired"))
    assert [i.ref for i in provider.instances({TAG_MANAGED: aws.cluster})] == [launched.ref]


@pytest.mark.parametrize(
    "fields",
    [
        {"access_key_id": GOOD_KEY},  # a key without its secret
        {"secret_access_key": SECRET},  # a secret without its key
        {"session_token": "t"},  # a session token without keys
        {"regions": ()},
        {"page_size": 4},  # DescribeInstances takes 5..1000
        {"surprise": 1},
    ],
)
def test_config_rejects_incomplete_or_unknown_settings(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        AwsConfig(**fields)


def test_config_keeps_secrets_out_of_its_repr() -> None:
    config = AwsConfig(access_key_id=GOOD_KEY, secret_access_key=SECRET, session_token="session-token-value")

    assert SECRET not in repr(config) and "session-token-value" not in repr(config)


