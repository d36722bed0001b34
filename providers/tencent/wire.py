"""Between our types and CVM's: a launch request as RunInstances parameters, a CVM instance as ours."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping

from providers.base import Instance, InstanceRef, InstanceRequest, InstanceState, InvalidRequest
from providers.tencent.config import NAME, TencentConfig
from scheduler.models import Capacity

__all__ = [
    "MAX_TAG_FILTERS",
    "PREEMPT_REASON",
    "check_same_request",
    "launch_capacity",
    "run_instances_params",
    "to_instance",
]

PREEMPT_REASON = "spot instance reclaimed by Tencent Cloud (destroyed without a TerminateInstances from its owner)"
MAX_TAG_FILTERS = 10  # DescribeInstances takes at most 10 filters; further tags are matched here
INSTANCE_NAME_CHARS = 60
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

_STATES = {
    "PENDING": InstanceState.pending,
    "STARTING": InstanceState.pending,
    "RUNNING": InstanceState.running,
    "REBOOTING": InstanceState.running,
    "STOPPING": InstanceState.stopping,
    "STOPPED": InstanceState.stopped,
    "TERMINATING": InstanceState.terminating,
    "SHUTDOWN": InstanceState.terminated,
    "TERMINATED": InstanceState.terminated,
    "LAUNCH_FAILED": InstanceState.terminated,
}
_DESTROYED = frozenset({"TERMINATING", "SHUTDOWN", "TERMINATED"})
_CAPACITIES = {"SPOTPAID": Capacity.spot, "POSTPAID_BY_HOUR": Capacity.on_demand, "PREPAID": Capacity.reserved}


def run_instances_params(request: InstanceRequest, config: TencentConfig, now: datetime) -> dict[str, Any]:
    """The RunInstances parameters for ``request``: one instance, tagged at creation, idempotent."""
    offer = request.offer
    image = request.image or config.image_id
    if not image:
        raise InvalidRequest("no image to launch: the request names none and none is configured",
                             provider=NAME, fix="set GPUSCHED_TENCENT_IMAGE_ID (img-...)")
    params: dict[str, Any] = {
        "Placement": {"Zone": offer.zone},
        "InstanceType": offer.instance_type,
        "ImageId": image,
        "InstanceChargeType": _charge_type(request.capacity),
        "InstanceCount": 1,
        "ClientToken": request.client_token,
        "TagSpecification": [{
            "ResourceType": "instance",
            "Tags": [{"Key": k, "Value": v} for k, v in request.tags.items()],
        }],
    }
    if request.name:
        params["InstanceName"] = request.name[:INSTANCE_NAME_CHARS]
    if request.user_data:
        params["UserData"] = base64.b64encode(request.user_data.encode("utf-8")).decode("ascii")
    if request.capacity is Capacity.spot:
        bid = _spot_bid(request, config)
        if bid is not None:
            params["InstanceMarketOptions"] = {
                "MarketType": "spot", "SpotOptions": {"MaxPrice": str(bid), "SpotInstanceType": "one-time"},
            }
    if config.vpc_id:
        subnet = config.subnet_ids.get(offer.zone)
        if subnet is None:
            raise InvalidRequest(f"no subnet configured for zone {offer.zone}", provider=NAME,
                                 fix="add the zone to GPUSCHED_TENCENT_SUBNET_IDS (zone -> subnet id)")
        params["VirtualPrivateCloud"] = {"VpcId": config.vpc_id, "SubnetId": subnet}
    if config.security_group_ids:
        params["SecurityGroupIds"] = list(config.security_group_ids)
    if config.key_ids:
        params["LoginSettings"] = {"KeyIds": list(config.key_ids)}
    if config.cam_role_name:
        params["CamRoleName"] = config.cam_role_name
    if config.public_bandwidth_mbps:
        params["InternetAccessible"] = {
            "InternetChargeType": "TRAFFIC_POSTPAID_BY_HOUR",
            "InternetMaxBandwidthOut": config.public_bandwidth_mbps,
            "PublicIpAssigned": True,
        }
    if config.system_disk_gb:
        params["SystemDisk"] = {"DiskType": "CLOUD_PREMIUM", "DiskSize": config.system_disk_gb}
    if config.max_lifetime_hours:
        # A backstop on the machine itself: CVM destroys it even if gpusched is gone. Counted from
        # the intent (stored with its token), so every retry of one launch sends the same time.
        when = (request.requested_at or now).astimezone(timezone.utc) + timedelta(hours=config.max_lifetime_hours)
        params["ActionTimer"] = {"TimerAction": "TerminateInstances", "ActionTime": when.strftime(_TIME_FORMAT)}
    return params


def _spot_bid(request: InstanceRequest, config: TencentConfig) -> Decimal | None:
    """The spot MaxPrice: the request's limit, else the on-demand price, else none (CVM bids the market)."""
    if request.max_price is not None:
        try:
            bid = Decimal(request.max_price)
        except InvalidOperation:
            raise InvalidRequest(f"max_price {request.max_price!r} is not a number", provider=NAME) from None
        if not bid.is_finite() or bid <= 0:
            raise InvalidRequest(f"max_price {request.max_price!r} must be a positive number", provider=NAME)
        return bid
    od = request.offer.on_demand
    if od is not None and od.per_hour.currency == config.billing_currency:
        return od.per_hour.amount
    return None


def _charge_type(capacity: Capacity) -> str:
    # Reserved capacity on CVM is a reserved-instance discount on pay-as-you-go machines.
    return "SPOTPAID" if capacity is Capacity.spot else "POSTPAID_BY_HOUR"


def launch_capacity(capacity: Capacity) -> Capacity:
    """What a launch at ``capacity`` makes on CVM: spot, or a pay-as-you-go (on-demand) machine."""
    return Capacity.spot if capacity is Capacity.spot else Capacity.on_demand


def check_same_request(made: Instance, request: InstanceRequest) -> None:
    """Raise InvalidRequest if ``made`` (what the request's client token made before) is not what it asks for."""
    offer = request.offer
    asked = (offer.zone, offer.instance_type, launch_capacity(request.capacity))
    got = (made.zone, made.instance_type, launch_capacity(made.capacity))
    if asked != got:
        raise InvalidRequest(
            f"client token {request.client_token!r} already made {made.ref.instance_id} "
            f"({got[0]} {got[1]} {got[2].value}), not {asked[0]} {asked[1]} {asked[2].value}",
            provider=NAME, code="IdempotentParameterMismatch",
            fix="derive the client token from everything that defines the request",
        )


def to_instance(region: str, raw: Mapping[str, Any]) -> Instance:
    """One instance of a DescribeInstances answer, as ours."""
    state_text = str(raw.get("InstanceState") or "")
    capacity = _CAPACITIES.get(str(raw.get("InstanceChargeType") or ""), Capacity.on_demand)
    # An unknown state (rescue mode, live migration...) is neither usable nor gone: pending.
    state = _STATES.get(state_text, InstanceState.pending)
    preempted = (
        capacity is Capacity.spot
        and state_text in _DESTROYED
        and raw.get("LatestOperation") != "TerminateInstances"
    )
    return Instance(
        ref=InstanceRef(provider=NAME, region=region, instance_id=str(raw.get("InstanceId"))),
        zone=str((raw.get("Placement") or {}).get("Zone") or ""),
        instance_type=str(raw.get("InstanceType") or ""),
        capacity=capacity,
        state=state,
        tags={str(t.get("Key")): str(t.get("Value")) for t in raw.get("Tags") or []},
        launched_at=_parse_time(raw.get("CreatedTime")),
        preempted=preempted,
        preempt_reason=PREEMPT_REASON if preempted else None,
        # Stopped in the default mode: CVM bills its compute on.
        stop_keeps_billing=state_text == "STOPPED" and raw.get("StopChargingMode") == "KEEP_CHARGING",
    )


def _parse_time(text: object) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None
