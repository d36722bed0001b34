"""Every error code each cloud documents for the calls its adapter makes: mapped, translated, and on the page.

The tables are ``providers/<cloud>/error_codes.py``; docs/error-codes.md is written from them
(``scripts/error-codes``) and must match them. Each code is sent over HTTP by the cloud's emulator (or,
for AWS, by the wire in front of moto) and must reach the caller as its table's class; the classes
must also agree with what the codes' names say (sold out, quota, balance, throttling ...), or, for
Huawei's numbered codes, with what Huawei's reference says each one means.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from providers import error_table
from providers.alibaba import error_codes as alibaba_codes
from providers.aws import error_codes as aws_codes
from providers.base import (
    TAG_MANAGED,
    AuthFailed,
    BillingStopped,
    InstanceRef,
    InstanceRequest,
    InvalidRequest,
    NoCapacity,
    NotFound,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    ResourceBusy,
    Throttled,
)
from providers.huawei import error_codes as huawei_codes
from providers.tencent import error_codes as tencent_codes
from scheduler.models import Capacity
from tests.optional import missing

TABLES: dict[str, ModuleType] = {"alibaba": alibaba_codes, "tencent": tencent_codes, "aws": aws_codes,
                                  "huawei": huawei_codes}
PAGE = Path(__file__).resolve().parents[2] / "docs" / "error-codes.md"


def documented(table: ModuleType, action: str | None = None) -> list[str]:
    if action is None:
        return table.all_codes()  # type: ignore[no-any-return]
    return sorted(table.DOCUMENTED.get(action, frozenset()) | table.DOCUMENTED.get("common", frozenset()))


# --- the tables themselves ------------------------------------------------------------------------


def test_the_page_in_docs_is_what_the_tables_say() -> None:
    assert PAGE.read_text() == error_table.render(), "docs/error-codes.md is stale: run scripts/error-codes"


@pytest.mark.parametrize("cloud", sorted(TABLES))
def test_every_code_of_a_class_set_is_a_code_of_the_table(cloud: str) -> None:
    table = TABLES[cloud]
    listed = set(table.all_codes())
    for cls, codes in table.CLASS_SETS:
        assert codes <= listed, f"{cloud} {cls.__name__}: {sorted(codes - listed)} named but not documented"


@pytest.mark.parametrize("cloud", sorted(TABLES))
def test_also_known_codes_are_only_those_the_reference_lacks(cloud: str) -> None:
    table = TABLES[cloud]
    in_reference = set().union(*table.DOCUMENTED.values())
    assert not set(table.ALSO_KNOWN) & in_reference
    assert all(reason.strip() for reason in table.ALSO_KNOWN.values())


# What a code's name says, checked against the table: written independently of the class sets.
_NAME_RULES: tuple[tuple[re.Pattern[str], type[ProviderError]], ...] = (
    (re.compile(r"NoStock|SoldOut|InstanceType\.Offline|NotOnSale|ZoneNotSupported"
                r"|^Insufficient(Instance|Host|Reserved)?Capacity"), NoCapacity),
    (re.compile(r"^QuotaExceed|^LimitExceeded\.(Cvm|Instance|Spot|UserSpot|Prepay)|^InstanceLimitExceeded$|VcpuLimit"),
     QuotaExceeded),
    (re.compile(r"Balance|Arrearage|UnpaidOrder|UnPaidOrder"), BillingStopped),
    (re.compile(r"^Throttling|^RequestLimitExceeded"), Throttled),
    (re.compile(r"^AuthFailure|^UnauthorizedOperation|PassRoleForbidden|^InvalidAccessKeyId|^Forbidden\.RAM$"),
     AuthFailed),
    (re.compile(r"^InvalidInstanceI[dD]\.NotFound$"), NotFound),
)


@pytest.mark.parametrize("cloud", sorted(TABLES))
def test_each_code_is_the_class_its_name_says(cloud: str) -> None:
    table = TABLES[cloud]
    wrong = []
    for code in table.all_codes():
        for pattern, cls in _NAME_RULES:
            if pattern.search(code) and table.documented_class(code) is not cls:
                wrong.append((code, table.documented_class(code).__name__, cls.__name__))
    assert wrong == []


# What Huawei's references say a numbered code means, written from them independently of the table's sets.
_HUAWEI_SAYS: dict[str, type[ProviderError]] = {
    "Ecs.0018": NoCapacity,  # the flavor has been sold out
    "Ecs.0019": NoCapacity,  # the flavor has been taken off sale
    "Ecs.0044": NoCapacity,  # the disk type has been sold out
    "Ecs.0319": NoCapacity,  # insufficient resources for this flavor
    "Ecs.0703": NoCapacity,  # the bid is under the spot price
    "Ecs.0001": QuotaExceeded,  # the ECS quota
    "Ecs.0021": QuotaExceeded,  # the EVS disk quota
    "Ecs.0067": BillingStopped,  # insufficient account balance
    "Ecs.0070": BillingStopped,  # the enterprise department's budget is used up
    "APIGW.0502": BillingStopped,  # frozen: the balance is insufficient
    "APIGW.0308": Throttled,  # the throttling threshold has been reached
    "Common.0024": Throttled,  # flow control
    "Common.1503": Throttled,  # API flow control
    "Ecs.0603": ResourceBusy,  # another command is running: retry in a minute
    "APIGW.0301": AuthFailed,  # incorrect IAM authentication information
    "APIGW.0302": AuthFailed,  # the IAM user may not call the API
    "Pdp.0001": AuthFailed,  # the policy does not allow it
    "Ecs.0066": AuthFailed,  # real-name authentication not completed
    "Ecs.0114": NotFound,  # the ECS does not exist
    "Common.0001": ProviderUnavailable,  # a system exception
    "Ecs.1002": ProviderUnavailable,  # OpenStack timed out
    "APIGW.0613": ProviderUnavailable,  # IAM is unavailable
    "Ecs.0029": InvalidRequest,  # the flavor does not exist
    "Ecs.0031": InvalidRequest,  # the image does not exist
    "Ecs.0005": InvalidRequest,  # invalid parameters
}


def test_huaweis_codes_are_the_class_its_reference_says() -> None:
    assert {code: huawei_codes.documented_class(code) for code in _HUAWEI_SAYS} == _HUAWEI_SAYS


def test_huaweis_gateway_backend_failures_are_unavailable_and_its_bad_requests_are_not() -> None:
    assert huawei_codes.classify("APIGW.0201", 502) is ProviderUnavailable
    assert huawei_codes.classify("APIGW.0201", 504) is ProviderUnavailable
    assert huawei_codes.classify("APIGW.0201", 400) is InvalidRequest


# --- each code through the SDK's own exception ---------------------------------------------------


def _sdk(module: str, extra: str) -> ModuleType:
    """The SDK module, or a skip naming the extra to install (a failure in CI: tests/optional.py)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing(f"{module} is not installed ({exc}): pip install '.[{extra}]'")
        raise AssertionError("unreachable") from exc  # missing() skips or fails


@pytest.mark.parametrize("code", alibaba_codes.all_codes())
def test_alibaba_sdk_errors_translate_to_the_tables_class(code: str) -> None:
    exceptions = _sdk("aliyunsdkcore.acs_exception.exceptions", "alibaba")
    from providers.alibaba.errors import translate_error

    error = translate_error(exceptions.ServerException(code, "msg", http_status=400, request_id="R"), "RunInstances")

    assert type(error) is alibaba_codes.documented_class(code)
    assert (error.code, error.request_id) == (code, "R")


@pytest.mark.parametrize("code", tencent_codes.all_codes())
def test_tencent_sdk_errors_translate_to_the_tables_class(code: str) -> None:
    sdk = _sdk("tencentcloud.common.exception.tencent_cloud_sdk_exception", "tencent")
    from providers.tencent.errors import translate_error

    error = translate_error(sdk.TencentCloudSDKException(code, "msg", "R"), action="RunInstances",
                            region="ap-guangzhou")

    assert type(error) is tencent_codes.documented_class(code)
    assert (error.code, error.request_id) == (code, "R")


@pytest.mark.parametrize("code", aws_codes.all_codes())
def test_aws_client_errors_translate_to_the_tables_class(code: str) -> None:
    botocore = _sdk("botocore.exceptions", "aws")
    from providers.aws.errors import translate_error

    response = {"Error": {"Code": code, "Message": "msg"},
                "ResponseMetadata": {"HTTPStatusCode": 400, "RequestId": "R"}}
    error = translate_error(botocore.ClientError(response, "RunInstances"), operation="RunInstances",
                            region="us-east-1")

    assert type(error) is aws_codes.documented_class(code)
    assert (error.code, error.request_id) == (code, "R")


@pytest.mark.parametrize("code", huawei_codes.all_codes())
def test_huawei_sdk_errors_translate_to_the_tables_class(code: str) -> None:
    sdk = _sdk("huaweicloudsdkcore.exceptions.exceptions", "huawei")
    from providers.huawei.errors import translate_error

    error = translate_error(sdk.ClientRequestException(400, sdk.SdkError("R", code, "msg")),
                            action="create_post_paid_servers", region="cn-north-4")

    assert type(error) is huawei_codes.documented_class(code)
    assert (error.code, error.request_id) == (code, "R")


# --- each code over HTTP, as the emulators send it -------------------------------------------------


@pytest.fixture(scope="module")
def alibaba() -> Iterator[object]:
    pytest.importorskip("aliyunsdkcore", reason="the Alibaba Cloud SDK is an extra: pip install '.[alibaba]'")
    from tests.contract.harness_alibaba import AlibabaHarness

    made = AlibabaHarness()
    yield made
    made.close()


@pytest.mark.parametrize("code", documented(alibaba_codes, "RunInstances"))
def test_alibaba_launch_refusals_over_http(alibaba, code: str) -> None:  # type: ignore[no-untyped-def]
    from tests.contract.harness_alibaba import CATALOG

    alibaba.emulator.script_error("RunInstances", code, status=403, message="documented refusal")
    request = InstanceRequest(offer=CATALOG[0], capacity=Capacity.spot, client_token=f"codes-{code}"[:64],
                              tags={TAG_MANAGED: "codes"})

    with pytest.raises(ProviderError) as caught:
        alibaba.provider.launch(request)

    assert type(caught.value) is alibaba_codes.documented_class(code)
    assert caught.value.code == code or {caught.value.code, code} <= {"SignatureDoesNotMatch", "InvalidAccessKeySecret"}


@pytest.mark.parametrize("code", documented(alibaba_codes, "DeleteInstance"))
def test_alibaba_terminate_answers_over_http(alibaba, code: str) -> None:  # type: ignore[no-untyped-def]
    from tests.contract.harness_alibaba import CATALOG

    launched = alibaba.provider.launch(InstanceRequest(offer=CATALOG[0], capacity=Capacity.on_demand,
                                                       client_token=f"del-{code}"[:64], tags={TAG_MANAGED: "codes"}))
    alibaba.emulator.script_error("DeleteInstances", code, status=403, message="documented refusal")
    expected = alibaba_codes.documented_class(code)

    if expected is NotFound:
        alibaba.provider.terminate(launched.ref)  # already gone: success
    else:
        with pytest.raises(expected):
            alibaba.provider.terminate(launched.ref)


@pytest.fixture(scope="module")
def tencent() -> Iterator[object]:
    pytest.importorskip("tencentcloud.cvm.v20170312", reason="the Tencent SDK is optional: pip install '.[tencent]'")
    from tests.contract.harness_tencent import TencentHarness

    made = TencentHarness()
    yield made
    made.close()


@pytest.mark.parametrize("code", documented(tencent_codes, "RunInstances"))
def test_tencent_launch_refusals_over_http(tencent, code: str) -> None:  # type: ignore[no-untyped-def]
    tencent.emulator.script_error("RunInstances", code, "documented refusal")
    offer = tencent.cloud.offers(["ap-guangzhou"])[0]

    with pytest.raises(ProviderError) as caught:
        tencent.provider.launch(InstanceRequest(offer=offer, capacity=Capacity.on_demand,
                                                client_token=f"codes-{code}"[:64], tags={TAG_MANAGED: "codes"}))

    assert type(caught.value) is tencent_codes.documented_class(code)
    assert caught.value.code == code


@pytest.mark.parametrize("code", documented(tencent_codes, "TerminateInstances"))
def test_tencent_terminate_answers_over_http(tencent, code: str) -> None:  # type: ignore[no-untyped-def]
    tencent.emulator.script_error("TerminateInstances", code, "documented answer")
    ref = InstanceRef(provider="tencent", region="ap-guangzhou", instance_id="ins-00000000")

    if code in tencent_codes.GONE_ON_TERMINATE:
        tencent.provider.terminate(ref)  # destroyed, recycled, going, never created: success
    else:
        with pytest.raises(ProviderError) as caught:
            tencent.provider.terminate(ref)
        assert type(caught.value) is tencent_codes.documented_class(code)


@pytest.mark.parametrize("code", documented(tencent_codes, "DescribeInstances"))
def test_tencent_listing_failures_over_http(tencent, code: str) -> None:  # type: ignore[no-untyped-def]
    tencent.emulator.script_error("DescribeInstances", code, "documented refusal")

    with pytest.raises(ProviderError) as caught:
        tencent.provider.instances({TAG_MANAGED: "codes"}, ["ap-guangzhou"])

    assert type(caught.value) is tencent_codes.documented_class(code)


@pytest.fixture(scope="module")
def aws() -> Iterator[object]:
    pytest.importorskip("moto", reason="the AWS cases need moto: pip install '.[test]'")
    from tests.contract.harness_aws import AwsHarness

    yield AwsHarness()


@pytest.mark.parametrize("code", documented(aws_codes, "RunInstances"))
def test_aws_launch_refusals_over_http(aws, code: str) -> None:  # type: ignore[no-untyped-def]
    offer = next(o for o in aws.catalog if o.region == "us-east-1")
    status = 503 if aws_codes.documented_class(code).retryable else 400
    aws.wire.fail_next("RunInstances", code, status, "documented refusal")

    with pytest.raises(ProviderError) as caught:
        aws.provider.launch(InstanceRequest(offer=offer, capacity=Capacity.on_demand,
                                            client_token=f"codes-{code}"[:64], tags={TAG_MANAGED: aws.cluster}))

    assert type(caught.value) is aws_codes.documented_class(code)
    assert caught.value.code == code


@pytest.fixture(scope="module")
def huawei() -> Iterator[object]:
    pytest.importorskip("huaweicloudsdkecs.v2", reason="the Huawei SDK is optional: pip install '.[huawei]'")
    from tests.contract.harness_huawei import HuaweiHarness

    made = HuaweiHarness()
    yield made
    made.close()


def _huawei_status(code: str) -> int:
    """The HTTP status Huawei answers ``code`` with, near enough: its class's usual one, 202 for flow control."""
    if code == "Common.0024":
        return 202  # as documented; the SDK takes it for a success and the adapter reads the body
    cls = huawei_codes.documented_class(code)
    return {Throttled: 429, AuthFailed: 403, NotFound: 404, ProviderUnavailable: 500}.get(cls, 400)


def _huawei_request(huawei, purpose: str) -> InstanceRequest:  # type: ignore[no-untyped-def]
    offer = next(o for o in huawei.cloud.offers(["cn-north-4"]) if o.zone == "cn-north-4a")
    return InstanceRequest(offer=offer, capacity=Capacity.on_demand, client_token=f"codes-{purpose}"[:64],
                           tags={TAG_MANAGED: "codes"}, name="codes")


@pytest.mark.parametrize("code", documented(huawei_codes, "CreatePostPaidServers"))
def test_huawei_launch_refusals_over_http(huawei, code: str) -> None:  # type: ignore[no-untyped-def]
    huawei.emulator.script_error("CreatePostPaidServers", _huawei_status(code), code, "documented refusal",
                                 gateway=code.startswith("APIGW."))

    with pytest.raises(ProviderError) as caught:
        huawei.provider.launch(_huawei_request(huawei, code))

    assert type(caught.value) is huawei_codes.classify(code, _huawei_status(code))
    assert caught.value.code == code


@pytest.mark.parametrize("code", sorted(huawei_codes.DOCUMENTED["CreatePostPaidServers"]))
def test_huawei_create_jobs_that_fail_are_refusals_over_http(huawei, code: str) -> None:  # type: ignore[no-untyped-def]
    huawei.emulator.fail_next_jobs(code, "documented failure")
    before = len(huawei.cloud.all_instances())

    with pytest.raises(ProviderError) as caught:
        huawei.provider.launch(_huawei_request(huawei, f"job-{code}"))

    table = huawei_codes.documented_class(code)
    refusals = (NoCapacity, QuotaExceeded, BillingStopped, InvalidRequest)
    assert type(caught.value) is (table if table in refusals else NoCapacity)
    assert not caught.value.retryable and caught.value.code == code
    assert len(huawei.cloud.all_instances()) == before  # the failed create made nothing


@pytest.mark.parametrize("code", documented(huawei_codes, "DeleteServers"))
def test_huawei_terminate_answers_over_http(huawei, code: str) -> None:  # type: ignore[no-untyped-def]
    launched = huawei.provider.launch(_huawei_request(huawei, f"del-{code}"))
    status = _huawei_status(code)
    huawei.emulator.script_error("DeleteServers", status, code, "documented answer", gateway=code.startswith("APIGW."))
    expected = huawei_codes.classify(code, status)

    if expected is NotFound:
        huawei.provider.terminate(launched.ref)  # already gone: success
    else:
        with pytest.raises(expected):
            huawei.provider.terminate(launched.ref)


@pytest.mark.parametrize("code", documented(huawei_codes, "ListServersDetails"))
def test_huawei_listing_failures_over_http(huawei, code: str) -> None:  # type: ignore[no-untyped-def]
    status = _huawei_status(code)
    huawei.emulator.script_error("ListServersDetails", status, code, "documented refusal",
                                 gateway=code.startswith("APIGW."))

    with pytest.raises(ProviderError) as caught:
        huawei.provider.instances({TAG_MANAGED: "codes"}, ["cn-north-4"])

    assert type(caught.value) is huawei_codes.classify(code, status)
    assert caught.value.code == code
