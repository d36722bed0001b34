"""Alibaba Cloud ECS behind the Provider protocol (aliyun-python-sdk-core + aliyun-python-sdk-ecs).

The SDK client is injected: ``AlibabaProvider`` takes a factory that builds one
``AcsClient`` per region; ``from_config`` builds the production one. Nothing
here reads the environment.

Choices, and why:

* Retries. The SDK's own are off (``auto_retry=False``, ``max_retry_time=0``):
  its retry of RunInstances after Throttling goes out without the ClientToken,
  a duplicate launch (docs/gpus-and-clouds.md). The adapter does not retry either:
  each call is made once and its failure translated. The lifecycle wraps calls
  in ``providers.retry.call_with_retry``, which backs off on what says it is
  retryable (Throttled, ProviderUnavailable); a second loop here would multiply
  the waits and hide throttling from that back-off.
* Idempotency. Every RunInstances carries ``ClientToken = request.client_token``;
  ECS answers a repeated token with the instance it first made.
* Spot. ``SpotAsPriceGo``, or ``SpotWithPriceLimit`` when the request names a
  ``max_price`` (rounded down to the three decimals ECS takes, so the limit is
  never above what was asked). ``SpotDuration`` comes from the config, default
  0: no protected first hour. A protected hour is sold at a higher price, and
  the planner models reclaims as a constant hourly rate, which is what an
  unprotected instance has; jobs resume from checkpoints either way.
  ``SpotInterruptionBehavior=Terminate``: a reclaimed machine is released and
  the job moves on. Spot prices are asked with the same SpotDuration.
* Stop. ``StoppedMode=StopCharging``: compute billing stops (the disk still
  bills). ECS can stop spot instances that way too (``spot_stop``); starting
  one again can fail for lack of stock, which reads as NoCapacity.
* Released instances. ECS forgets an instance the moment it is released:
  DescribeInstances no longer lists it and there is no "terminated" status.
  The adapter remembers the instances it released (and those it saw carrying a
  ``Recycling`` lock, ECS's notice of a spot reclaim) and reports them as
  terminated, the reclaimed ones ``preempted``, once the cloud stops listing
  them, for ``tombstone_seconds``. After a restart that memory is gone and the
  lifecycle's own rule for instances missing from the list takes over.
* Prices. On-demand from DescribePrice (the instance-type line, PostPaid, per
  hour), spot from DescribeSpotPriceHistory (latest point per zone), stock from
  DescribeAvailableResource; a price the API will not give for a type falls
  back to the bundled catalog's, whose source says where it came from.
* Reserved capacity launches as plain PostPaid: ECS applies reserved-instance
  coupons to matching pay-as-you-go instances by itself. A listing cannot tell
  such an instance from on-demand, so it reports on-demand.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import ROUND_DOWN, Decimal, InvalidOperation
from typing import Any, Literal

from aliyunsdkcore.acs_exception.exceptions import ClientException, ServerException
from aliyunsdkcore.client import AcsClient
from aliyunsdkcore.request import RpcRequest
from aliyunsdkecs.request.v20140526.DeleteInstancesRequest import DeleteInstancesRequest
from aliyunsdkecs.request.v20140526.DescribeAvailableResourceRequest import (
    DescribeAvailableResourceRequest,
)
from aliyunsdkecs.request.v20140526.DescribeInstancesRequest import (
    DescribeInstancesRequest,
)
from aliyunsdkecs.request.v20140526.DescribePriceRequest import DescribePriceRequest
from aliyunsdkecs.request.v20140526.DescribeSpotPriceHistoryRequest import (
    DescribeSpotPriceHistoryRequest,
)
from aliyunsdkecs.request.v20140526.RunInstancesRequest import RunInstancesRequest
from aliyunsdkecs.request.v20140526.StartInstancesRequest import StartInstancesRequest
from aliyunsdkecs.request.v20140526.StopInstancesRequest import StopInstancesRequest
from pydantic import Field, SecretStr, field_validator

from providers.base import (
    CAP_LIVE_PRICES,
    CAP_PREEMPTION_EVENTS,
    CAP_SPOT_STOP,
    CAP_STOP_CHARGING,
    AuthFailed,
    Instance,
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
from providers.catalog import load_catalog
from scheduler.clock import Clock
from scheduler.models import Capacity, Frozen, Offer, Price, Stock
from scheduler.money import Money

__all__ = [
    "CAPABILITIES",
    "NAME",
    "PREEMPT_REASON",
    "AlibabaConfig",
    "AlibabaProvider",
    "ClientFactory",
    "from_config",
    "make_client_factory",
    "translate_error",
]

NAME = "alibaba"
CAPABILITIES = frozenset({CAP_STOP_CHARGING, CAP_SPOT_STOP, CAP_PREEMPTION_EVENTS, CAP_LIVE_PRICES})
PREEMPT_REASON = "spot-interruption (Recycling)"
PAGE_SIZE = 100  # DescribeInstances' MaxResults ceiling
MAX_TAGS = 20
MAX_USER_DATA = 32 * 1024  # bytes of base64, ECS's limit

ClientFactory = Callable[[str], AcsClient]

_S = InstanceState
_STATES = {
    "Pending": _S.pending,
    "Starting": _S.pending,
    "Running": _S.running,
    "Stopping": _S.stopping,
    "Stopped": _S.stopped,
}
_SPOT_STRATEGIES = frozenset({"SpotAsPriceGo", "SpotWithPriceLimit"})
_STOCK = {"WithStock": Stock.available, "ClosedWithStock": Stock.low,
          "WithoutStock": Stock.sold_out, "ClosedWithoutStock": Stock.sold_out}
_NAME_OK = re.compile(r"^[A-Za-z\u4e00-\u9fa5][\w.:\-\u4e00-\u9fa5]{1,127}$")
_TIMESTAMP = "%Y-%m-%dT%H:%M:%SZ"
_CREDENTIALS_FIX = (
    "check GPUSCHED_ALIBABA_ACCESS_KEY_ID and GPUSCHED_ALIBABA_ACCESS_KEY_SECRET, and that the key's RAM "
    "policy allows ecs:RunInstances, DescribeInstances, StopInstances, StartInstances, DeleteInstances, "
    "DescribePrice, DescribeSpotPriceHistory and DescribeAvailableResource"
)


class AlibabaConfig(Frozen):
    """How to reach Alibaba Cloud ECS and what to launch there."""

    access_key_id: str = Field(min_length=1)
    access_key_secret: SecretStr
    regions: tuple[str, ...] = Field(default=("cn-hangzhou",), min_length=1)
    image_id: str = ""  # used when a request names no image
    security_group_ids: Mapping[str, str] = Field(default_factory=dict)  # region -> sg-...
    vswitch_ids: Mapping[str, str] = Field(default_factory=dict)  # zone -> vsw-... (a VSwitch lives in one zone)
    key_pair_name: str = ""
    ram_role_name: str = ""  # instance role: credentials from the metadata service, no keys on the machine
    imds_tokens_required: bool = True  # HttpTokens=required: metadata only with a session token
    system_disk_category: str = "cloud_essd"
    system_disk_size_gib: int = Field(default=100, ge=20, le=2048)
    internet_max_bandwidth_out: int = Field(default=0, ge=0, le=100)  # Mbit/s; 0 = no public IP
    spot_duration_hours: int = Field(default=0, ge=0, le=1)  # protected hours of a spot instance
    auto_release_hours: int | None = Field(default=None, ge=1, le=24 * 365)  # backstop: ECS releases by itself
    endpoint: str = ""  # "host[:port]" override (tests, VPC endpoints); empty: the SDK's regional endpoint
    protocol: Literal["https", "http"] = "https"
    connect_timeout_seconds: int = Field(default=5, ge=1)
    read_timeout_seconds: int = Field(default=10, ge=1)
    tombstone_seconds: int = Field(default=3600, ge=0)

    @field_validator("regions")
    @classmethod
    def _no_blank_region(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not all(r.strip() for r in v):
            raise ValueError("a region id cannot be blank")
        return v


def _split_endpoint(endpoint: str) -> tuple[str, int | None]:
    if not endpoint:
        return "", None
    host, sep, port = endpoint.rpartition(":")
    if sep and port.isdigit() and host:
        return host, int(port)
    return endpoint, None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def make_client_factory(config: AlibabaConfig) -> ClientFactory:
    """One AcsClient per region, SDK retries off; an endpoint override sets the port."""
    host, port = _split_endpoint(config.endpoint)
    # The SDK logs every refusal at ERROR, expected ones too (a terminate of an instance already
    # gone); the adapter translates each and its caller logs it once, with the request id.
    logging.getLogger("aliyunsdkcore.client").setLevel(logging.CRITICAL)
    # A loopback endpoint is reached directly, whatever HTTP(S)_PROXY says.
    proxy = {"http": None, "https": None} if host and _is_loopback(host) else None

    def build(region: str) -> AcsClient:
        return AcsClient(
            config.access_key_id,
            config.access_key_secret.get_secret_value(),
            region,
            auto_retry=False,
            max_retry_time=0,
            port=port or (443 if config.protocol == "https" else 80),
            connect_timeout=config.connect_timeout_seconds,
            timeout=config.read_timeout_seconds,
            proxy=proxy,
        )

    return build


def from_config(config: AlibabaConfig, clock: Clock, catalog: Sequence[Offer] | None = None) -> AlibabaProvider:
    """The production adapter: real AcsClients, the bundled catalog unless one is given."""
    return AlibabaProvider(make_client_factory(config), config, clock, load_catalog() if catalog is None else catalog)


def _classify(code: str, status: int | None) -> tuple[type[ProviderError], str | None]:
    if (
        code in ("SignatureDoesNotMatch", "InvalidAccessKeySecret", "IncompleteSignature", "SDK.InvalidCredential")
        or code.startswith(("InvalidAccessKeyId", "Forbidden", "InvalidSecurityToken", "NoPermission"))
    ):
        return AuthFailed, _CREDENTIALS_FIX
    if code.endswith(".NoStock") or code in (
        "InvalidResourceType.NotSupported", "Zone.NotOnSale",
        "InvalidSpotPriceLimit.LowerThanPublicPrice", "OperationDenied.SpotPriceLowerThanPublicPrice",
    ):
        return NoCapacity, None
    if code.startswith("QuotaExceed") or ".QuotaExceed" in code:
        return QuotaExceeded, "raise the quota in Alibaba Cloud's Quota Center, or release unused instances"
    if code in ("Account.Arrearage", "InvalidAccountStatus.NotEnoughBalance"):
        return QuotaExceeded, "top up the Alibaba Cloud account"
    if code.startswith("Throttling"):
        return Throttled, None
    if code in ("InvalidInstanceId.NotFound", "InvalidInstanceIds.NotFound"):
        return NotFound, None
    if code in ("SDK.HttpError", "SDK.ServerUnreachable", "ServiceUnavailable", "InternalError", "UnknownError") or (
        status is not None and status >= 500
    ):
        return ProviderUnavailable, None
    if code in ("SDK.InvalidRegionId", "SDK.EndpointResolvingError", "InvalidRegionId.NotFound"):
        return InvalidRequest, "check GPUSCHED_ALIBABA_REGIONS (and GPUSCHED_ALIBABA_ENDPOINT)"
    if code.startswith("InvalidTimeStamp"):
        return InvalidRequest, "synchronise this machine's clock (NTP): requests are signed with its time"
    return InvalidRequest, None


def translate_error(exc: ServerException | ClientException, action: str) -> ProviderError:
    """An SDK exception as the project's error, vendor code and request id kept."""
    if isinstance(exc, ServerException):
        code, message = exc.get_error_code() or "", exc.get_error_msg() or ""
        status, request_id = exc.get_http_status(), exc.get_request_id() or ""
    else:
        code, message, status, request_id = exc.get_error_code() or "", exc.get_error_msg() or "", None, ""
    cls, fix = _classify(code, status)
    if cls is AuthFailed:
        text = f"Alibaba Cloud refused the credentials on {action}: {message} ({code})"
    else:
        text = f"Alibaba Cloud {action} failed: {message} ({code})"
    return cls(text, provider=NAME, code=code, request_id=request_id, fix=fix)


def _carries(tags: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(tags.get(k) == v for k, v in wanted.items())


def _parse_time(text: str) -> datetime | None:
    for fmt in ("%Y-%m-%dT%H:%MZ", _TIMESTAMP):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def _items(body: Mapping[str, Any], outer: str, inner: str) -> list[Any]:
    """ECS's JSON wraps lists twice: ``{"Instances": {"Instance": [...]}}``."""
    wrapped = body.get(outer) or {}
    found = wrapped.get(inner) if isinstance(wrapped, Mapping) else wrapped
    return list(found or [])


class AlibabaProvider:
    """``providers.base.Provider`` for Alibaba Cloud ECS."""

    name = NAME
    capabilities = CAPABILITIES

    def __init__(
        self,
        client_factory: ClientFactory,
        config: AlibabaConfig,
        clock: Clock,
        catalog: Sequence[Offer],
        *,
        page_size: int = PAGE_SIZE,
    ) -> None:
        if not 1 <= page_size <= PAGE_SIZE:
            raise ValueError(f"page_size must be between 1 and {PAGE_SIZE}")
        self._factory = client_factory
        self._config = config
        self._clock = clock
        self._catalog = tuple(o for o in catalog if o.provider == NAME and o.region in config.regions)
        self._page_size = page_size
        self._host, _ = _split_endpoint(config.endpoint)
        self._clients: dict[str, AcsClient] = {}
        self._lock = threading.Lock()
        # Instances ECS will stop listing: the ones we released, the ones it is reclaiming.
        self._releasing: dict[str, Instance] = {}
        self._reclaiming: dict[str, Instance] = {}
        self._gone: dict[str, tuple[Instance, datetime]] = {}

    # --- the Provider protocol ------------------------------------------------

    def offers(self, regions: Sequence[str] | None = None) -> list[Offer]:
        out: list[Offer] = []
        for region in self._served(regions):
            rows = [o for o in self._catalog if o.region == region]
            if not rows:
                continue
            on_demand_stock = self._stock(region, Capacity.on_demand)
            spot_stock = self._stock(region, Capacity.spot)
            on_demand: dict[str, Price | None] = {}
            spot: dict[str, dict[str, Price]] = {}
            for instance_type in sorted({o.instance_type for o in rows}):
                on_demand[instance_type] = self._on_demand_price(region, instance_type)
                spot[instance_type] = self._spot_prices(region, instance_type)
            for o in rows:
                key = (o.zone, o.instance_type)
                out.append(o.model_copy(update={
                    "on_demand": on_demand[o.instance_type] or o.on_demand,
                    "spot": spot[o.instance_type].get(o.zone) or o.spot,
                    "on_demand_stock": on_demand_stock.get(key, Stock.unknown),
                    "spot_stock": spot_stock.get(key, Stock.unknown),
                }))
        return out

    def launch(self, request: InstanceRequest) -> Instance:
        offer = request.offer
        if offer.provider != NAME:
            raise InvalidRequest(f"offer {offer.key} belongs to {offer.provider!r}, not {NAME!r}", provider=NAME)
        self._check_region(offer.region)
        run = RunInstancesRequest()
        run.set_ClientToken(request.client_token)
        run.set_InstanceType(offer.instance_type)
        run.set_ZoneId(offer.zone)
        run.set_ImageId(self._image(request))
        run.set_InstanceChargeType("PostPaid")
        run.set_Amount(1)
        self._set_capacity(run, request)
        run.set_Tags(self._tag_list(request.tags))
        if _NAME_OK.match(request.name):
            run.set_InstanceName(request.name)  # cosmetic: a name ECS would refuse is left out, tags identify
        if request.user_data:
            encoded = base64.b64encode(request.user_data.encode()).decode()
            if len(encoded) > MAX_USER_DATA:
                raise InvalidRequest(
                    f"user data is {len(encoded)} bytes in base64; ECS takes at most {MAX_USER_DATA}", provider=NAME
                )
            run.set_UserData(encoded)
        self._set_placement(run, offer)
        body = self._call(offer.region, run)
        ids = _items(body, "InstanceIdSets", "InstanceIdSet")
        if len(ids) != 1:
            raise ProviderUnavailable(
                f"Alibaba Cloud RunInstances answered with {len(ids)} instance ids, not 1", provider=NAME,
                request_id=str(body.get("RequestId", "")),
            )
        instance_id = str(ids[0])
        try:
            described = self._describe(offer.region, [instance_id])
        except ProviderError:
            described = []  # the launch itself succeeded; the next listing fills in the rest
        if described:
            return described[0].model_copy(update={"client_token": request.client_token, "capacity": request.capacity})
        return Instance(
            ref=InstanceRef(provider=NAME, region=offer.region, instance_id=instance_id),
            zone=offer.zone,
            instance_type=offer.instance_type,
            capacity=request.capacity,
            state=_S.pending,
            tags=dict(request.tags),
            client_token=request.client_token,
        )

    def instances(self, tags: Mapping[str, str], regions: Sequence[str] | None = None) -> list[Instance]:
        if len(tags) > MAX_TAGS:
            raise InvalidRequest(f"ECS filters by at most {MAX_TAGS} tags, not {len(tags)}", provider=NAME)
        found: list[Instance] = []
        for region in self._served(regions):
            listed = list(self._list(region, tags))
            found.extend(self._remember(region, tags, listed))
        return found

    def stop(self, ref: InstanceRef) -> None:
        self._check_ref(ref)
        stop = StopInstancesRequest()
        stop.set_InstanceIds([ref.instance_id])
        stop.set_StoppedMode("StopCharging")
        stop.set_ForceStop("false")
        self._check_batch(self._call(ref.region, stop), "StopInstances")

    def start(self, ref: InstanceRef) -> None:
        self._check_ref(ref)
        start = StartInstancesRequest()
        start.set_InstanceIds([ref.instance_id])
        self._check_batch(self._call(ref.region, start), "StartInstances")

    def terminate(self, ref: InstanceRef) -> None:
        self._check_ref(ref)
        # Described first: once released, ECS cannot say what the instance was.
        last = self._describe(ref.region, [ref.instance_id])
        delete = DeleteInstancesRequest()
        delete.set_InstanceIds([ref.instance_id])
        delete.set_Force("true")  # release a running instance too: terminate means gone
        try:
            self._call(ref.region, delete)
        except NotFound:
            gone = True  # already released (or never there): what terminate wants
        else:
            gone = False
        if not last:
            return
        with self._lock:
            if gone:
                self._bury(last[0], self._clock.now())
            else:
                self._releasing[ref.instance_id] = last[0]

    # --- the wire ---------------------------------------------------------------

    def _client(self, region: str) -> AcsClient:
        with self._lock:
            client = self._clients.get(region)
            if client is None:
                client = self._clients[region] = self._factory(region)
            return client

    def _call(self, region: str, request: RpcRequest) -> dict[str, Any]:
        action = request.get_action_name()
        if self._host:
            request.set_endpoint(self._host)
        request.set_protocol_type(self._config.protocol)
        request.set_accept_format("JSON")
        request.add_query_param("RegionId", region)
        try:
            raw = self._client(region).do_action_with_exception(request)
        except (ServerException, ClientException) as exc:
            raise translate_error(exc, action) from exc
        except OSError as exc:  # the SDK wraps network errors; this is the belt to its braces
            raise ProviderUnavailable(f"Alibaba Cloud {action} failed: {exc}", provider=NAME) from exc
        try:
            body = json.loads(raw, parse_float=Decimal)
        except (TypeError, ValueError):
            body = None
        if not isinstance(body, dict):
            raise ProviderUnavailable(f"Alibaba Cloud {action} answered with something that is not JSON", provider=NAME)
        return body

    def _check_batch(self, body: Mapping[str, Any], action: str) -> None:
        for answer in _items(body, "InstanceResponses", "InstanceResponse"):
            code = str(answer.get("Code", "200"))
            if code != "200":
                failure = ServerException(code, str(answer.get("Message", "")), request_id=body.get("RequestId"))
                raise translate_error(failure, action)

    def _describe(self, region: str, instance_ids: list[str]) -> list[Instance]:
        describe = DescribeInstancesRequest()
        describe.set_InstanceIds(json.dumps(instance_ids))
        describe.set_PageSize(PAGE_SIZE)
        body = self._call(region, describe)
        return [self._instance(region, raw) for raw in _items(body, "Instances", "Instance")]

    def _list(self, region: str, tags: Mapping[str, str]) -> Iterator[Instance]:
        token = ""
        while True:
            describe = DescribeInstancesRequest()
            describe.set_MaxResults(self._page_size)
            if token:
                describe.set_NextToken(token)
            if tags:
                describe.set_Tags([{"Key": k, "Value": v} for k, v in tags.items()])
            body = self._call(region, describe)
            for raw in _items(body, "Instances", "Instance"):
                yield self._instance(region, raw)
            token = str(body.get("NextToken") or "")
            if not token:
                return

    def _instance(self, region: str, raw: Mapping[str, Any]) -> Instance:
        # An unknown status is read as pending: it never closes billing or triggers a terminate.
        state = _STATES.get(str(raw.get("Status", "")), _S.pending)
        locks = {str(lock.get("LockReason", "")) for lock in _items(raw, "OperationLocks", "LockReason")}
        preempted = "Recycling" in locks
        return Instance(
            ref=InstanceRef(provider=NAME, region=str(raw.get("RegionId") or region),
                            instance_id=str(raw["InstanceId"])),
            zone=str(raw.get("ZoneId", "")),
            instance_type=str(raw.get("InstanceType", "")),
            capacity=Capacity.spot if raw.get("SpotStrategy") in _SPOT_STRATEGIES else Capacity.on_demand,
            state=state,
            tags={str(t.get("TagKey")): str(t.get("TagValue", "")) for t in _items(raw, "Tags", "Tag")},
            launched_at=_parse_time(str(raw.get("CreationTime", ""))),
            preempted=preempted,
            preempt_reason=PREEMPT_REASON if preempted else None,
        )

    # --- launch parameters --------------------------------------------------------

    def _image(self, request: InstanceRequest) -> str:
        image = request.image or self._config.image_id
        if not image:
            raise InvalidRequest(
                "no image to launch: the request names none and no default is configured",
                provider=NAME, fix="set GPUSCHED_ALIBABA_IMAGE_ID to an ECS image id (m-...)",
            )
        return image

    def _set_capacity(self, run: RunInstancesRequest, request: InstanceRequest) -> None:
        if request.capacity is not Capacity.spot:
            run.set_SpotStrategy("NoSpot")  # reserved: ECS applies reserved-instance coupons by itself
            return
        run.set_SpotDuration(self._config.spot_duration_hours)
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

    def _set_placement(self, run: RunInstancesRequest, offer: Offer) -> None:
        config = self._config
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
            # Whole hours, so a retry of the same launch within the hour sends the same parameters
            # (a different value under the same ClientToken would be IdempotentParameterMismatch).
            now = self._clock.now().astimezone(UTC).replace(minute=0, second=0, microsecond=0)
            release = now + timedelta(hours=config.auto_release_hours + 1)
            run.set_AutoReleaseTime(release.strftime(_TIMESTAMP))

    @staticmethod
    def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
        if len(tags) > MAX_TAGS:
            raise InvalidRequest(f"ECS takes at most {MAX_TAGS} tags per instance, not {len(tags)}", provider=NAME)
        return [{"Key": k, "Value": v} for k, v in tags.items()]

    # --- prices and stock -------------------------------------------------------

    def _stock(self, region: str, capacity: Capacity) -> dict[tuple[str, str], Stock]:
        ask = DescribeAvailableResourceRequest()
        ask.set_DestinationResource("InstanceType")
        ask.set_InstanceChargeType("PostPaid")
        if capacity is Capacity.spot:
            ask.set_SpotStrategy("SpotAsPriceGo")
            ask.set_SpotDuration(self._config.spot_duration_hours)
        else:
            ask.set_SpotStrategy("NoSpot")
        body = self._call(region, ask)
        stock: dict[tuple[str, str], Stock] = {}
        for zone in _items(body, "AvailableZones", "AvailableZone"):
            for resource in _items(zone, "AvailableResources", "AvailableResource"):
                for supported in _items(resource, "SupportedResources", "SupportedResource"):
                    if supported.get("Status") == "SoldOut":
                        level = Stock.sold_out
                    else:
                        level = _STOCK.get(str(supported.get("StatusCategory", "")), Stock.unknown)
                    stock[(str(zone.get("ZoneId")), str(supported.get("Value")))] = level
        return stock

    def _on_demand_price(self, region: str, instance_type: str) -> Price | None:
        ask = DescribePriceRequest()
        ask.set_ResourceType("instance")
        ask.set_InstanceType(instance_type)
        ask.set_PriceUnit("Hour")
        try:
            body = self._call(region, ask)
        except (InvalidRequest, NotFound, NoCapacity):
            return None  # not priced here: the catalog's figure stands
        price = (body.get("PriceInfo") or {}).get("Price") or {}
        lines = [d for d in _items(price, "DetailInfos", "DetailInfo") if d.get("Resource") == "instanceType"]
        amount = lines[0].get("TradePrice") if lines else price.get("TradePrice")
        if amount is None or not price.get("Currency"):
            return None
        return Price(
            per_hour=Money(amount=Decimal(str(amount)), currency=str(price["Currency"])),
            source="Alibaba Cloud DescribePrice (PostPaid, instance type only)",
            as_of=self._clock.now().date(),
        )

    def _spot_prices(self, region: str, instance_type: str) -> dict[str, Price]:
        ask = DescribeSpotPriceHistoryRequest()
        ask.set_NetworkType("vpc")
        ask.set_InstanceType(instance_type)
        ask.set_OSType("linux")
        ask.set_SpotDuration(self._config.spot_duration_hours)
        ask.set_StartTime((self._clock.now().astimezone(UTC) - timedelta(days=1)).strftime(_TIMESTAMP))
        try:
            body = self._call(region, ask)
        except (InvalidRequest, NotFound, NoCapacity):
            return {}
        currency = str(body.get("Currency") or "")
        latest: dict[str, tuple[datetime, Decimal]] = {}
        for point in _items(body, "SpotPrices", "SpotPriceType"):
            when = _parse_time(str(point.get("Timestamp", "")))
            if when is None or point.get("SpotPrice") is None:
                continue
            zone = str(point.get("ZoneId"))
            if zone not in latest or when > latest[zone][0]:
                latest[zone] = (when, Decimal(str(point["SpotPrice"])))
        if not currency:
            return {}
        source = f"Alibaba Cloud DescribeSpotPriceHistory (SpotDuration={self._config.spot_duration_hours})"
        return {
            zone: Price(per_hour=Money(amount=amount, currency=currency), source=source, as_of=when.date())
            for zone, (when, amount) in latest.items()
        }

    # --- memory of instances ECS forgets ------------------------------------------

    def _remember(self, region: str, tags: Mapping[str, str], listed: list[Instance]) -> list[Instance]:
        now = self._clock.now()
        keep = timedelta(seconds=self._config.tombstone_seconds)
        with self._lock:
            self._gone = {k: (inst, since) for k, (inst, since) in self._gone.items() if now - since < keep}
            seen = {i.ref.instance_id for i in listed}
            out = []
            for inst in listed:
                instance_id = inst.ref.instance_id
                if instance_id in self._releasing:
                    inst = inst.model_copy(update={"state": _S.terminating})
                if inst.preempted:
                    self._reclaiming[instance_id] = inst
                out.append(inst)
            for book in (self._releasing, self._reclaiming):
                for instance_id, last in list(book.items()):
                    if last.ref.region == region and instance_id not in seen and _carries(last.tags, tags):
                        self._bury(last, now)
            out.extend(
                inst for instance_id, (inst, _) in self._gone.items()
                if inst.ref.region == region and instance_id not in seen and _carries(inst.tags, tags)
            )
            return out

    def _bury(self, last: Instance, now: datetime) -> None:
        """Caller holds the lock."""
        instance_id = last.ref.instance_id
        self._releasing.pop(instance_id, None)
        reclaimed = self._reclaiming.pop(instance_id, None)
        gone = (reclaimed or last).model_copy(update={"state": _S.terminated})
        self._gone[instance_id] = (gone, now)

    # --- checks -----------------------------------------------------------------

    def _served(self, regions: Sequence[str] | None) -> list[str]:
        if regions is None:
            return list(self._config.regions)
        return [r for r in regions if r in self._config.regions]

    def _check_region(self, region: str) -> None:
        if region not in self._config.regions:
            raise InvalidRequest(
                f"region {region} is not served by {NAME} ({', '.join(self._config.regions)})",
                provider=NAME, fix="add it to GPUSCHED_ALIBABA_REGIONS",
            )

    def _check_ref(self, ref: InstanceRef) -> None:
        if ref.provider != NAME:
            raise InvalidRequest(f"instance {ref.instance_id} belongs to {ref.provider!r}, not {NAME!r}",
                                 provider=NAME)
        self._check_region(ref.region)
