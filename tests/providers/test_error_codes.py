"""Every error code each cloud documents for the calls its adapter makes: mapped, translated, and on the page.

The tables are ``providers/<cloud>/error_codes.py``; docs/error-codes.md is written from them
(``scripts/error-codes``) and must match them. Each code is sent over HTTP by the cloud's emulator (or,
for AWS, by the wire in front of moto) and must reach the caller as its table's class; the classes
must also agree with what the codes' names say (sold out, quota, balance, throttling ...).
"""

from __future__ import annotations

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
    NoCapacity,
    NotFound,
    ProviderError,
    QuotaExceeded,
    Throttled,
)
from providers.tencent import error_codes as tencent_codes
from scheduler.models import Capacity

TABLES: dict[str, ModuleType] = {"alibaba": alibaba_codes, "tencent": tencent_codes, "aws": aws_codes}
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


# --- each code through the SDK's own exception ---------------------------------------------------


@pytest.mark.parametrize("code", alibaba_codes.all_codes())
def test_alibaba_sdk_errors_translate_to_the_tables_class(code: str) -> None:
    exceptions = pytest.importorskip("aliyunsdkcore.acs_exception.exceptions")
    from providers.alibaba.errors import translate_error

    error = translate_error(exceptions.ServerException(code, "msg", http_status=400, request_id="R"), "RunInstances")

    assert type(error) is alibaba_codes.documented_class(code)
    assert (error.code, error.request_id) == (code, "R")


@pytest.mark.parametrize("code", tencent_codes.all_codes())
def test_tencent_sdk_errors_translate_to_the_tables_class(code: str) -> None:
    sdk = pytest.importorskip("tencentcloud.common.exception.tencent_cloud_sdk_exception")
    from providers.tencent.errors import translate_error

    error = translate_error(sdk.TencentCloudSDKException(code, "msg", "R"), action="RunInstances",
                            region="ap-guangzhou")

    assert type(error) is tencent_codes.documented_class(code)
    assert (error.code, error.request_id) == (code, "R")


@pytest.mark.parametrize("code", aws_codes.all_codes())
def test_aws_client_errors_translate_to_the_tables_class(code: str) -> None:
    botocore = pytest.importorskip("botocore.exceptions")
    from providers.aws.errors import translate_error

    response = {"Error": {"Code": code, "Message": "msg"},
                "ResponseMetadata": {"HTTPStatusCode": 400, "RequestId": "R"}}
    error = translate_error(botocore.ClientError(response, "RunInstances"), operation="RunInstances",
                            region="us-east-1")

    assert type(error) is aws_codes.documented_class(code)
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
