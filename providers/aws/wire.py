"""Between our types and EC2's: a launch request as RunInstances parameters, an EC2 instance as ours."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from providers.aws.config import NAME, AwsConfig
from providers.base import (
    Instance,
    InstanceRef,
    InstanceRequest,
    InstanceState,
    InvalidRequest,
    ProviderUnavailable,
)
from scheduler.models import Capacity
from scheduler.times import utc

__all__ = ["PREEMPTION_REASON_CODES", "run_instances_params", "to_instance"]

# StateReason codes with which AWS reports that it reclaimed a spot instance.
PREEMPTION_REASON_CODES = frozenset({"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"})

_STATES: dict[str, InstanceState] = {
    "pending": InstanceState.pending,
    "running": InstanceState.running,
    "stopping": InstanceState.stopping,
    "stopped": InstanceState.stopped,
    "shutting-down": InstanceState.terminating,
    "terminated": InstanceState.terminated,
}


def run_instances_params(request: InstanceRequest, config: AwsConfig) -> dict[str, Any]:
    """The RunInstances parameters for ``request``: one instance, tagged at creation, idempotent."""
    offer = request.offer
    region = offer.region
    image = request.image or config.image_ids.get(region, "")
    if not image:
        raise InvalidRequest(
            f"no AMI to launch in {region}", provider=NAME, code="MissingImage",
            fix=f'set GPUSCHED_AWS_IMAGE_IDS, e.g. {{"{region}": "ami-..."}}',
        )
    tags = [{"Key": key, "Value": value} for key, value in request.tags.items()]
    if request.name and "Name" not in request.tags:
        tags.append({"Key": "Name", "Value": request.name})
    params: dict[str, Any] = {
        "ImageId": image,
        "InstanceType": offer.instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "ClientToken": request.client_token,
        "Placement": {"AvailabilityZone": offer.zone},
        # Tagging the volumes too lets the sweeper and the bill attribute them.
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        # A job that powers the machine off must not leave a stopped, billed volume behind.
        "InstanceInitiatedShutdownBehavior": "terminate",
    }
    if request.capacity is Capacity.spot:
        spot: dict[str, Any] = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
        if request.max_price is not None:
            spot["MaxPrice"] = str(_max_price(request.max_price))
        params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
    if request.user_data:
        params["UserData"] = request.user_data  # botocore base64-encodes it
    subnet = config.subnet_ids.get(offer.zone)
    if subnet:
        params["SubnetId"] = subnet
    groups = config.security_group_ids.get(region)
    if groups:
        params["SecurityGroupIds"] = list(groups)
    if config.key_name:
        params["KeyName"] = config.key_name
    if config.instance_profile:
        key = "Arn" if config.instance_profile.startswith("arn:") else "Name"
        params["IamInstanceProfile"] = {key: config.instance_profile}
    return params


def _max_price(text: str) -> Decimal:
    try:
        amount = Decimal(text)
    except InvalidOperation:
        amount = Decimal("NaN")
    if not amount.is_finite() or amount <= 0:
        raise InvalidRequest(f"max_price {text!r} is not a positive number of USD per hour", provider=NAME,
                             code="InvalidMaxPrice")
    return amount


def to_instance(region: str, raw: Mapping[str, Any]) -> Instance:
    """One instance of a DescribeInstances or RunInstances answer, as ours."""
    state_name = str(raw.get("State", {}).get("Name", ""))
    state = _STATES.get(state_name)
    if state is None:
        raise ProviderUnavailable(
            f"AWS reported instance {raw.get('InstanceId')} in unknown state {state_name!r}",
            provider=NAME, code="UnknownState",
        )
    spot = raw.get("InstanceLifecycle") == "spot"
    reason = raw.get("StateReason") or {}
    reason_code = str(reason.get("Code") or "")
    preempted = spot and (
        reason_code in PREEMPTION_REASON_CODES
        # Any other service-initiated end of a spot machine is a reclaim too.
        or (state in (InstanceState.terminating, InstanceState.terminated) and reason_code.startswith("Server."))
    )
    launched = raw.get("LaunchTime")
    return Instance(
        ref=InstanceRef(provider=NAME, region=region, instance_id=str(raw["InstanceId"])),
        zone=str(raw.get("Placement", {}).get("AvailabilityZone", "")),
        instance_type=str(raw.get("InstanceType", "")),
        capacity=Capacity.spot if spot else Capacity.on_demand,
        state=state,
        tags=_tag_dict(raw.get("Tags") or []),
        client_token=raw.get("ClientToken") or None,
        launched_at=utc(launched) if isinstance(launched, datetime) else None,
        preempted=preempted,
        preempt_reason=(str(reason.get("Message") or reason_code) if preempted else None),
    )


def _tag_dict(tags: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    return {str(t["Key"]): str(t.get("Value", "")) for t in tags}
