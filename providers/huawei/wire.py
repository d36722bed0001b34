"""Between our types and ECS's: a launch request as a CreatePostPaidServers body, a server as ours.

Servers carry their tags as ``server_tags`` (key / value) when created and list them as
``"key=value"`` strings. Every server gpusched creates also carries ``TAG_INTENT``: the
launch's intent id, a UUID derived from the request's client token, which is also the
``X-Client-Token`` header of the create call. Huawei dedupes that header for a while;
the tag lets the adapter find the server of a retried launch whenever it asks again.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from huaweicloudsdkecs.v2 import (
    PostPaidServer,
    PostPaidServerExtendParam,
    PostPaidServerNic,
    PostPaidServerRootVolume,
    PostPaidServerSecurityGroup,
    PostPaidServerTag,
)

from providers.base import Instance, InstanceRef, InstanceRequest, InstanceState, InvalidRequest
from providers.huawei.config import NAME, HuaweiConfig
from scheduler.models import Capacity

__all__ = [
    "MAX_TAGS",
    "PREEMPT_REASON",
    "TAG_INTENT",
    "check_same_request",
    "intent_id",
    "intent_of",
    "job_failure",
    "job_server_ids",
    "launch_capacity",
    "post_paid_server",
    "tag_filter",
    "to_instance",
]

TAG_INTENT = "gpusched:intent"
PREEMPT_REASON = "spot server released by Huawei Cloud (gone from ECS without a delete from gpusched)"
MAX_TAGS = 10  # a server takes at most 10 tags at creation
MAX_TAG_KEY, MAX_TAG_VALUE = 36, 43
MAX_USER_DATA = 32 * 1024  # bytes before base64
_INTENT_NAMESPACE = uuid.UUID("5d0f3b6e-8a52-4c1d-9a57-2f4be6f0c8a1")  # fixed: the same token, the same intent id
_TAG_KEY_FORBIDDEN = re.compile(r'[\x00-\x1f=*<>\\,|/]')
_TAG_VALUE_FORBIDDEN = re.compile(r'[\x00-\x1f=*<>\\,|]')
_NAME_OK = re.compile(r"^[\w.\-\u4e00-\u9fa5]{1,64}$", re.ASCII)
_TIME = "%Y-%m-%dT%H:%M:%SZ"

_S = InstanceState
# OpenStack's status first; the task state (below) refines it.
_STATUS = {
    "BUILD": _S.pending,
    "ACTIVE": _S.running,
    "REBOOT": _S.running,
    "HARD_REBOOT": _S.running,
    "MIGRATING": _S.running,
    "SHUTOFF": _S.stopped,
    "SHELVED": _S.stopped,
    "SHELVED_OFFLOADED": _S.stopped,
    "DELETED": _S.terminated,
    "SOFT_DELETED": _S.terminated,
}
_TASK = {"deleting": _S.terminating, "powering-off": _S.stopping, "powering-on": _S.pending}
# metadata.charging_mode: "0" pay-per-use, "1" yearly/monthly, "2" spot.
_CHARGING = {"0": Capacity.on_demand, "1": Capacity.reserved, "2": Capacity.spot}


def intent_id(client_token: str) -> str:
    """The launch's intent id: a UUID (Huawei's X-Client-Token must be one), the same for the same token."""
    return str(uuid.uuid5(_INTENT_NAMESPACE, client_token))


def tag_filter(key: str, value: str) -> str:
    """ListServersDetails' ``tags`` query value for one tag."""
    return f"{key}={value}"


def launch_capacity(capacity: Capacity) -> Capacity:
    """What a launch at ``capacity`` makes: spot, or a pay-per-use (on-demand) server."""
    return Capacity.spot if capacity is Capacity.spot else Capacity.on_demand


def post_paid_server(request: InstanceRequest, config: HuaweiConfig, intent: str) -> PostPaidServer:
    """The ``server`` of CreatePostPaidServers for ``request``: one pay-per-use or spot server, tagged."""
    offer = request.offer
    image = request.image or config.image_id
    if not image:
        raise InvalidRequest("no image to launch: the request names none and none is configured", provider=NAME,
                             fix="set GPUSCHED_HUAWEI_IMAGE_ID (an IMS image id)")
    if not config.vpc_id:
        raise InvalidRequest("no VPC to launch into", provider=NAME, fix="set GPUSCHED_HUAWEI_VPC_ID")
    subnet = config.subnet_ids.get(offer.zone)
    if subnet is None:
        raise InvalidRequest(f"no subnet configured for zone {offer.zone}", provider=NAME,
                             fix="add the zone to GPUSCHED_HUAWEI_SUBNET_IDS (zone -> subnet id)")
    server = PostPaidServer(
        flavor_ref=offer.instance_type,
        image_ref=image,
        name=request.name if _NAME_OK.match(request.name) else f"gpusched-{intent[:8]}",
        availability_zone=offer.zone,
        vpcid=config.vpc_id,
        nics=[PostPaidServerNic(subnet_id=subnet)],
        root_volume=PostPaidServerRootVolume(volumetype=config.root_volume_type, size=config.root_volume_gb),
        count=1,
        extendparam=_extend_param(request, offer.region),
        server_tags=_server_tags(request.tags, intent),
    )
    if config.security_group_ids:
        server.security_groups = [PostPaidServerSecurityGroup(id=g) for g in config.security_group_ids]
    if config.key_name:
        server.key_name = config.key_name
    if config.agency_name:
        server.metadata = {"agency_name": config.agency_name}  # the server's IAM agency: OBS without keys
    if request.user_data:
        raw = request.user_data.encode("utf-8")
        if len(raw) > MAX_USER_DATA:
            raise InvalidRequest(f"user data is {len(raw)} bytes; ECS takes at most {MAX_USER_DATA}", provider=NAME)
        server.user_data = base64.b64encode(raw).decode("ascii")
    return server


def _extend_param(request: InstanceRequest, region: str) -> PostPaidServerExtendParam:
    param = PostPaidServerExtendParam(charging_mode=0, region_id=region)
    if request.capacity is not Capacity.spot:
        return param  # reserved capacity: Huawei applies a reserved-instance discount to pay-per-use servers
    param.market_type = "spot"
    if request.max_price is not None:
        # Without spotPrice Huawei bids the on-demand price: spot never costs more than on-demand.
        try:
            bid = Decimal(request.max_price)
        except InvalidOperation:
            raise InvalidRequest(f"max_price {request.max_price!r} is not a number", provider=NAME) from None
        if not bid.is_finite() or bid <= 0:
            raise InvalidRequest(f"max_price {request.max_price!r} must be a positive number", provider=NAME)
        param.spot_price = format(bid.normalize(), "f")
    return param


def _server_tags(tags: Mapping[str, str], intent: str) -> list[PostPaidServerTag]:
    every = {**tags, TAG_INTENT: intent}
    if len(every) > MAX_TAGS:
        raise InvalidRequest(f"ECS takes at most {MAX_TAGS} tags per server; this launch needs {len(every)} "
                             f"(gpusched adds {TAG_INTENT})", provider=NAME)
    for key, value in every.items():
        if not key or len(key) > MAX_TAG_KEY or _TAG_KEY_FORBIDDEN.search(key):
            raise InvalidRequest(f"tag key {key!r} is not one ECS takes (1-{MAX_TAG_KEY} characters, "
                                 "none of = * < > \\ , | /)", provider=NAME)
        if len(value) > MAX_TAG_VALUE or _TAG_VALUE_FORBIDDEN.search(value):
            raise InvalidRequest(f"tag {key}'s value {value!r} is not one ECS takes (at most {MAX_TAG_VALUE} "
                                 "characters, none of = * < > \\ , |)", provider=NAME)
    return [PostPaidServerTag(key=k, value=v) for k, v in every.items()]


def to_instance(region: str, raw: Mapping[str, Any]) -> Instance | None:
    """One server of a ListServersDetails answer as ours; None for an id ECS does not know.

    Asked by ``server_id``, ECS answers an unknown id with an entry that has only ``id``
    and ``fault``: that is an absent server, not one in an unknown state.
    """
    status = raw.get("status")
    if not status:
        return None
    task = str(raw.get("OS-EXT-STS:task_state") or "")
    # An unknown status (ERROR, RESIZE, UNKNOWN ...) reads as pending: it neither bills as running work nor
    # counts as gone, so the lifecycle's boot and silence rules decide, and terminate it if it never comes up.
    state = _TASK.get(task) or _STATUS.get(str(status), _S.pending)
    metadata = raw.get("metadata") or {}
    tags: dict[str, str] = {}
    for text in raw.get("tags") or []:
        key, _, value = str(text).partition("=")
        if key != TAG_INTENT:
            tags[key] = value
    return Instance(
        ref=InstanceRef(provider=NAME, region=region, instance_id=str(raw["id"])),
        zone=str(raw.get("OS-EXT-AZ:availability_zone") or ""),
        instance_type=str((raw.get("flavor") or {}).get("id") or ""),
        capacity=_CHARGING.get(str(metadata.get("charging_mode", "0")), Capacity.on_demand),
        state=state,
        tags=tags,
        launched_at=_parse_time(raw.get("created")),
    )


def intent_of(raw: Mapping[str, Any]) -> str | None:
    """The intent id a listed server carries, if any."""
    for text in raw.get("tags") or []:
        key, _, value = str(text).partition("=")
        if key == TAG_INTENT:
            return value
    return None


def check_same_request(made: Instance, request: InstanceRequest) -> None:
    """Raise InvalidRequest if ``made`` (the server of this request's intent) is not what the request asks for."""
    offer = request.offer
    asked = (offer.region, offer.zone, offer.instance_type, launch_capacity(request.capacity))
    got = (made.ref.region, made.zone, made.instance_type, launch_capacity(made.capacity))
    if asked != got:
        raise InvalidRequest(
            f"client token {request.client_token!r} already made {made.ref.instance_id} "
            f"({got[1]} {got[2]} {got[3].value}), not {asked[1]} {asked[2]} {asked[3].value}",
            provider=NAME, code="IdempotentParameterMismatch",
            fix="derive the client token from everything that defines the request",
        )


def job_server_ids(job: Mapping[str, Any]) -> list[str]:
    """The server ids a create job names (its own entity, or its sub-jobs')."""
    entities = job.get("entities") or {}
    ids = [str(entities["server_id"])] if entities.get("server_id") else []
    for sub in entities.get("sub_jobs") or []:
        server_id = (sub.get("entities") or {}).get("server_id")
        if server_id and str(server_id) not in ids:
            ids.append(str(server_id))
    return ids


def job_failure(job: Mapping[str, Any]) -> tuple[str, str]:
    """(error code, reason) of a failed job: a failed sub-job's when the job itself gives none."""
    code, reason = str(job.get("error_code") or ""), str(job.get("fail_reason") or "")
    for sub in (job.get("entities") or {}).get("sub_jobs") or []:
        if sub.get("status") == "FAIL":
            code = code or str(sub.get("error_code") or "")
            reason = reason or str(sub.get("fail_reason") or (sub.get("entities") or {}).get("errorcode_message")
                                   or "")
    return code, reason


def _parse_time(text: object) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.strptime(text, _TIME).replace(tzinfo=UTC)
    except ValueError:
        return None
