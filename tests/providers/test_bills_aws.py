"""AWS's bill reader (Cost Explorer ``GetCostAndUsage``) over real HTTP to moto in server mode.

moto's Cost Explorer answers from results queued through ``/moto-api/static/ce/cost-and-usage-results``
(``providers/emulators/aws_ce.py`` builds them from what a sandbox cloud ran, by AWS's rules: per
second, 60 s at least per start). Authentication is moto's own: with its IAM checks switched on
(``/moto-api/reset-auth``) it verifies the SigV4 signature and the user's policy, so a wrong secret and
a missing ``ce:GetCostAndUsage`` are refused by moto, not by the test. Throttling, which moto never
does, is played at the HTTP layer (botocore's ``before-send``), as the contract harness does for EC2.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import pytest

from providers.base import TAG_INSTANCE, TAG_MANAGED, AuthFailed, Throttled
from providers.sandbox.billing import AWS_RULES, hourly_charges
from providers.sandbox.cloud import SandboxCloud
from scheduler.clock import SimClock
from scheduler.errors import UserError
from scheduler.models import Capacity
from tests.contract.harness_aws import _MISSING, START, moto_endpoint, reset_moto

if _MISSING:
    pytest.skip(f"the AWS bill cases need {' and '.join(_MISSING)}: pip install '.[test]'", allow_module_level=True)

from providers.aws.bills import CE_FIX, AwsBills, make_ce_client  # noqa: E402
from providers.aws.config import AwsConfig  # noqa: E402
from providers.catalog import filter_offers, load_catalog  # noqa: E402
from providers.emulators.aws_ce import ExtraGroup, ce_pages, load_into_moto  # noqa: E402

CATALOG = tuple(o for o in filter_offers(load_catalog(), providers=["aws"]) if o.region == "us-east-1")
OFFER = next(o for o in CATALOG if o.instance_type == "g4dn.xlarge" and o.on_demand is not None)


def _post(endpoint: str, path: str, body: bytes) -> int:
    parts = urlsplit(endpoint)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


class World:
    def __init__(self) -> None:
        self.endpoint = moto_endpoint()
        reset_moto(self.endpoint)  # Cost Explorer's queued results and remembered answers go too
        self.clock = SimClock(START)
        # Boots take 90 s flat; AWS bills from running, so a boot costs nothing.
        self.cloud = SandboxCloud(self.clock, CATALOG, seed=9, boot_seconds=90, boot_jitter=0, terminate_seconds=5,
                                  interruption_scale=0, id_prefix="i")

    def config(self, key: str = "AKIAGPUSCHEDBILLS001", secret: str = "bills-secret") -> AwsConfig:
        return AwsConfig(access_key_id=key, secret_access_key=secret, endpoint_url=self.endpoint,  # type: ignore[arg-type]
                         regions=("us-east-1",))

    def reader(self, **config: Any) -> AwsBills:
        return AwsBills(make_ce_client(self.config(**config)), self.clock)

    def launch(self, seconds: float, tag: str, capacity: Capacity = Capacity.on_demand) -> str:
        made = self.cloud.launch(region=OFFER.region, zone=OFFER.zone, instance_type=OFFER.instance_type,
                                 capacity=capacity, client_token=tag, tags={TAG_MANAGED: "bills", TAG_INSTANCE: tag})
        self.clock.advance(timedelta(seconds=90 + seconds))  # running 90 s after launch, for ``seconds``
        self.cloud.terminate(made.instance_id)
        return made.instance_id

    def publish(self, month: str = "2026-11", **kwargs: Any) -> None:
        charges = hourly_charges(self.cloud, AWS_RULES, month=month)
        load_into_moto(self.endpoint, ce_pages(charges, month, **kwargs))


@pytest.fixture
def world() -> Iterator[World]:
    yield World()


def test_a_month_is_read_per_gpusched_instance_tag_per_second_with_the_minute_minimum(world: World) -> None:
    world.launch(5400, "gi-long")
    world.launch(30, "gi-short")  # ran 30 s, billed 60
    world.publish()
    lines = {line.gpusched_instance: line for line in world.reader().read("2026-11")}
    price = OFFER.on_demand.per_hour.amount  # type: ignore[union-attr]
    assert lines["gi-long"].amount.amount == (Decimal(5400) * price / 3600).quantize(Decimal("1E-10"))
    assert lines["gi-short"].amount.amount == (Decimal(60) * price / 3600).quantize(Decimal("1E-10"))
    assert lines["gi-long"].amount.currency == "USD"
    assert lines["gi-long"].cluster == "bills"
    assert lines["gi-long"].instance_id is None  # Cost Explorer names tags, not instances, at month grain


def test_pages_are_followed_by_next_page_token(world: World) -> None:
    for n in range(3):
        world.launch(600, f"gi-{n}")
    world.publish(page_size=1)
    seen: list[dict[str, Any]] = []
    reader = world.reader()
    reader._client.meta.events.register(  # type: ignore[attr-defined]
        "before-send.ce", lambda request, **_: seen.append(json.loads(request.body)))
    lines = reader.read("2026-11")
    assert sorted(line.gpusched_instance or "" for line in lines) == ["gi-0", "gi-1", "gi-2"]
    assert [s.get("NextPageToken") for s in seen] == [None, "page-2", "page-3"]
    first = seen[0]
    assert first["TimePeriod"]["Start"] == "2026-11-01"
    assert first["Granularity"] == "MONTHLY" and first["Metrics"] == ["UnblendedCost"]
    assert first["GroupBy"] == [{"Type": "TAG", "Key": TAG_INSTANCE}, {"Type": "TAG", "Key": TAG_MANAGED}]
    assert first["Filter"] == {"Dimensions": {"Key": "SERVICE", "Values": ["Amazon Elastic Compute Cloud - Compute"]}}


def test_a_month_in_progress_ends_tomorrow_and_says_it_is_estimated(world: World) -> None:
    world.launch(600, "gi-0")
    world.publish(estimated=True)
    seen: list[dict[str, Any]] = []
    reader = world.reader()
    reader._client.meta.events.register(  # type: ignore[attr-defined]
        "before-send.ce", lambda request, **_: seen.append(json.loads(request.body)))
    [line] = reader.read("2026-11")
    assert seen[0]["TimePeriod"]["End"] == (world.clock.now().date() + timedelta(days=1)).isoformat()
    assert line.estimated


def test_untagged_usage_is_a_line_without_tags(world: World) -> None:
    world.launch(600, "gi-0")
    world.publish(extra=[ExtraGroup(amount=Decimal("3.5"))])
    lines = world.reader().read("2026-11")
    untagged = [line for line in lines if not line.tags]
    assert len(untagged) == 1 and untagged[0].amount.amount == Decimal("3.5")
    assert untagged[0].key == "(untagged)"


def test_a_month_that_has_not_begun_is_refused_before_any_call(world: World) -> None:
    with pytest.raises(UserError, match="has not begun"):
        world.reader().read("2027-01")


@pytest.fixture
def iam_users(world: World) -> Iterator[dict[str, tuple[str, str]]]:
    """Two moto IAM users (one may read Cost Explorer, one may not); moto's authentication on meanwhile."""
    import boto3

    iam = boto3.client("iam", region_name="us-east-1", endpoint_url=world.endpoint, aws_access_key_id="setup",
                       aws_secret_access_key="setup")
    keys = {}
    for user, allowed in (("bills-reader", True), ("no-billing", False)):
        iam.create_user(UserName=user)
        key = iam.create_access_key(UserName=user)["AccessKey"]
        keys[user] = (key["AccessKeyId"], key["SecretAccessKey"])
        if allowed:
            iam.put_user_policy(UserName=user, PolicyName="ce", PolicyDocument=json.dumps({
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "ce:GetCostAndUsage", "Resource": "*"}]}))
    assert _post(world.endpoint, "/moto-api/reset-auth", b"0") == 200
    try:
        yield keys
    finally:
        assert _post(world.endpoint, "/moto-api/reset-auth", b"inf") == 200


def test_the_right_key_passes_moto_s_signature_and_policy_checks(world: World,
                                                                 iam_users: dict[str, tuple[str, str]]) -> None:
    world.launch(600, "gi-0")
    world.publish()
    key, secret = iam_users["bills-reader"]
    assert len(world.reader(key=key, secret=secret).read("2026-11")) == 1


def test_a_wrong_secret_fails_the_signature_and_is_auth_failed(world: World,
                                                               iam_users: dict[str, tuple[str, str]]) -> None:
    key, _ = iam_users["bills-reader"]
    with pytest.raises(AuthFailed) as refused:
        world.reader(key=key, secret="not-the-secret").read("2026-11")
    assert refused.value.code == "SignatureDoesNotMatch"
    assert refused.value.fix == CE_FIX
    assert "not-the-secret" not in str(refused.value)


def test_a_user_without_ce_permission_is_told_which_permission(world: World,
                                                               iam_users: dict[str, tuple[str, str]]) -> None:
    key, secret = iam_users["no-billing"]
    with pytest.raises(AuthFailed) as refused:
        world.reader(key=key, secret=secret).read("2026-11")
    assert refused.value.code == "AccessDenied"
    assert "ce:GetCostAndUsage" in (refused.value.fix or "")


def _throttle(times: int) -> Any:
    from botocore.awsrequest import AWSResponse

    left = [times]

    class Body:
        def __init__(self, data: bytes) -> None:
            self._data = data

        def stream(self, **_: Any) -> Iterator[bytes]:
            yield self._data

    def hook(request: Any, **_: Any) -> Any:
        if left[0] <= 0:
            return None
        left[0] -= 1
        body = json.dumps({"__type": "LimitExceededException", "message": "Rate exceeded"}).encode()
        return AWSResponse(request.url, 400, {"Content-Type": "application/x-amz-json-1.1"}, Body(body))

    return hook, left


def test_throttling_is_retried_with_back_off(world: World) -> None:
    world.launch(600, "gi-0")
    world.publish()
    reader = world.reader()
    hook, left = _throttle(2)
    reader._client.meta.events.register("before-send.ce", hook)  # type: ignore[attr-defined]
    before = world.clock.now()
    assert len(reader.read("2026-11")) == 1
    assert left[0] == 0
    assert world.clock.now() > before


def test_throttling_past_the_retries_is_throttled(world: World) -> None:
    reader = world.reader()
    hook, _ = _throttle(99)
    reader._client.meta.events.register("before-send.ce", hook)  # type: ignore[attr-defined]
    with pytest.raises(Throttled) as throttled:
        reader.read("2026-11")
    assert throttled.value.code == "LimitExceededException"
