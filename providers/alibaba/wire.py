"""Between our types and ECS's: a launch request as a RunInstancesRequest, an ECS instance as ours.

ECS's JSON wraps every list twice (``{"Instances": {"Instance": [...]}}``):
``items`` unwraps one, ``parse_time`` reads its two timestamp forms.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import ROUND_DOWN, Decimal, InvalidOperation
from typing import Any

from aliyunsdkecs.request.v20140526.RunInstancesRequest import RunInstancesRequest

from providers.alibaba.config import NAME, AlibabaConfig
from providers.base import Instance, InstanceRef, InstanceRequest, InstanceState, InvalidRequest
from scheduler.models import Capacity, Offer

__all__ = [
    "MAX_TAGS",
    "PAGE_SIZE",
    "PREEMPT_REASON",
    "TIMESTAMP",
    "items",
    "parse_time",
    "run_instances_request",
    "to_instance",
]

PREEMPT_REASON = "spot-interruption (Recycling)"
PAGE_SIZE = 100  # DescribeInstances' MaxResults ceiling
MAX_TAGS = 20
MAX_USER_DATA = 32 * 1024  # bytes of base64, ECS's limit
TIMESTAMP = "%Y-%m-%dT%H:%M:%SZ"

_S = InstanceState
_STATES = {
    "Pending": _S.pending,
    "Starting": _S.pending,
    "Running": _S.running,
    "Stopping": _S.stopping,
    "Stopped": _S.stopped,
}
_SPOT_STRATEGIES = frozenset({"SpotAsPriceGo", "SpotWithPriceLimit"})
_NAME_OK = re.compile(r"^[A-Za-z\u4e00-\u9fa5][\w.:\-\u4e00-\u9fa5]{1,127}$")


def items(body: Mapping[str, Any], outer: str, inner: str) -> list[Any]:
    """ECS's JSON wraps lists twice: ``{"Instances": {"Instance": [...]}}``."""
    wrapped = body.get(outer) or {}
    found = wrapped.get(inner) if isinstance(wrapped, Mapping) else wrapped
    return list(found or [])


def parse_time(text: str) -> datetime | None:
    for fmt in ("%Y-%m-%dT%H:%MZ", TIMESTAMP):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def to_instance(region: str, raw: Mapping[str, Any]) -> Instance:
    """One instance of a DescribeInstances answer, as ours."""
    # An unknown status is read as pending: it never closes billing or triggers a terminate.
    state = _STATES.get(str(raw.get("Status", "")), _S.pending)
    locks = {str(lock.get("LockReason", "")) for lock in items(raw, "OperationLocks", "LockReason")}
    preempted = "Recycling" in locks
    # A stop ECS could not make economical (local disks, or the account's default) bills on.
    keeps_billing = state is _S.stopped and raw.get("StoppedMode") == "KeepCharging"
    return Instance(
        ref=InstanceRef(provider=NAME, region=str(raw.get("RegionId") or region),
                        instance_id=str(raw["InstanceId"])),
        zone=str(raw.get("ZoneId", "")),
        instance_type=str(raw.get("InstanceType", "")),
        capacity=Capacity.spot if raw.get("SpotStrategy") in _SPOT_STRATEGIES else Capacity.on_demand,
        state=state,
        tags={str(t.get("TagKey")): str(t.get("TagValue", "")) for t in items(raw, "Tags", "Tag")},
        launched_at=parse_time(str(raw.get("CreationTime", ""))),
        preempted=preempted,
        preempt_reason=PREEMPT_REASON if preempted else None,
        stop_keeps_billing=keeps_billing,
    )


def run_instances_request(request: InstanceRequest, config: AlibabaConfig, now: datetime) -> RunInstancesRequest:
    """The RunInstances call for ``request``: one PostPaid instance, tagged at creation, idempotent.

    Time-derived parameters come from ``request.requested_at`` (the intent's time, stored with its
    client token) when it is given, else from ``now``: every retry of one intent sends the same.
    """
    offer = request.offer
    run = RunInstancesRequest()
    run.set_ClientToken(request.client_token)
    run.set_InstanceType(offer.instance_type)
    run.set_ZoneId(offer.zone)
    run.set_ImageId(_image(request, config))
    run.set_InstanceChargeType("PostPaid")
    run.set_Amount(1)
    _set_capacity(run, request, config)
    run.set_Tags(_tag_list(request.tags))
    if _NAME_OK.match(request.name):
        run.set_InstanceName(request.name)  # cosmetic: a name ECS would refuse is left out, tags identify
    if request.user_data:
        encoded = base64.b64encode(request.user_data.encode()).decode()
        if len(encoded) > MAX_USER_DATA:
            raise InvalidRequest(
                f"user data is {len(encoded)} bytes in base64; ECS takes at most {MAX_USER_DATA}", provider=NAME
            )
        run.set_UserData(encoded)
    _set_placement(run, offer, config, request.requested_at or now)
    return run


def _image(request: InstanceRequest, config: AlibabaConfig) -> str:
    image = request.image or config.image_id
    if not image:
        raise InvalidRequest(
            "no image to launch: the request names none and no default is configured",
            provider=NAME, fix="set GPUSCHED_ALIBABA_IMAGE_ID to an ECS image id (m-...)",
        )
    return image


def _set_capacity(run: RunInstancesRequest, request: InstanceRequest, config: AlibabaConfig) -> None:
    if request.capacity is not Capacity.spot:
        run.set_SpotStrategy("NoSpot")  # reserved: ECS applies reserved-instance coupons by itself
        return
    run.set_SpotDuration(config.spot_duration_hours)
    run.set_SpotInterruptionBehavior("Terminate")
    if request.max_price is None:
        run.set_SpotStrategy("SpotAsPriceGo")
        return
    try:
        limit = Decimal(request.max_price).quantize(Decimal("0.001"), rounding=ROUND_DOWN)
    except InvalidOperation:
        raise InvalidRequest(f"max_price {request.max_price!r} is not a number", provider=NAME) from None
    if limit <= 0:
        raise InvalidRequest(f"max_price {request.max_price!r} must be above 0.001", provider=NAME)
    run.set_SpotStrategy("SpotWithPriceLimit")
    run.set_SpotPriceLimit(str(limit))


def _set_placement(run: RunInstancesRequest, offer: Offer, config: AlibabaConfig, intent_at: datetime) -> None:
    if config.vswitch_ids:
        vswitch = config.vswitch_ids.get(offer.zone)
        if vswitch is None:
            raise InvalidRequest(
                f"no VSwitch configured for zone {offer.zone}", provider=NAME,
                fix="add the zone to GPUSCHED_ALIBABA_VSWITCH_IDS (a VSwitch belongs to one zone)",
            )
        run.set_VSwitchId(vswitch)
    if offer.region in config.security_group_ids:
        run.set_SecurityGroupId(config.security_group_ids[offer.region])
    if config.key_pair_name:
        run.set_KeyPairName(config.key_pair_name)
    if config.ram_role_name:
        run.set_RamRoleName(config.ram_role_name)
    if config.imds_tokens_required:
        run.set_HttpTokens("required")
    run.set_SystemDiskCategory(config.system_disk_category)
    run.set_SystemDiskSize(str(config.system_disk_size_gib))
    if config.internet_max_bandwidth_out:
        run.set_InternetChargeType("PayByTraffic")
        run.set_InternetMaxBandwidthOut(config.internet_max_bandwidth_out)
    if config.auto_release_hours is not None:
        # Counted from the intent, never from the call: a retry in the next hour must send the same
        # value (another under the same ClientToken is IdempotentParameterMismatch, and the next
        # attempt a second machine). Whole hours past the intent's hour, at least the configured span.
        hour = intent_at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        release = hour + timedelta(hours=config.auto_release_hours + 1)
        run.set_AutoReleaseTime(release.strftime(TIMESTAMP))


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    if len(tags) > MAX_TAGS:
        raise InvalidRequest(f"ECS takes at most {MAX_TAGS} tags per instance, not {len(tags)}", provider=NAME)
    return [{"Key": k, "Value": v} for k, v in tags.items()]
