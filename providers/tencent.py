"""Tencent Cloud CVM behind the Provider protocol, over tencentcloud-sdk-python (API 2017-03-12).

The SDK client is injected: ``TencentProvider`` takes a factory that builds one
``CvmClient`` per region; ``from_config`` builds the real one from a
``TencentConfig``. Nothing here reads the environment.

Choices, and why:

* Retries are ours, never the SDK's. Its ``StandardRetryer`` keeps a stale error
  and raises it after a later success (docs/gpus-and-clouds.md), so a client with a
  retryer is refused. The adapter does not retry either: the lifecycle wraps
  every call in ``providers.retry.call_with_retry``, and a RunInstances retried
  there carries the same ClientToken, so a lost answer never makes a second
  machine.
* ``launch`` is RunInstances (ClientToken = the request's token, tags on the
  instance at creation) followed by one DescribeInstances of the new id, so it
  returns the cloud's own pending instance. A token CVM has seen before answers
  with the instance it first made; if that instance is not what this request
  asks for, the adapter raises InvalidRequest (CVM documents no error for it).
* A destroyed instance. CVM's documented states end at TERMINATING; a destroyed
  instance is SHUTDOWN until it leaves the list. SHUTDOWN (and LAUNCH_FAILED,
  and a TERMINATED should one appear) map to ``terminated``: none of them runs
  or bills compute again unless an owner renews it by hand.
* Spot reclaims. CVM names a reclaim only inside the instance (metadata
  ``spot/termination-time``). Through the API, a SPOTPAID instance that is
  destroyed (TERMINATING or SHUTDOWN) while its ``LatestOperation`` is not
  ``TerminateInstances`` was destroyed by the cloud, not by its owner: that is
  reported as ``preempted``. No advance notice is visible from the API.
* Spot instances cannot be stopped here (no ``spot_stop``): CVM's stop-charging
  mode is for pay-as-you-go instances, and a stopped spot instance is not
  promised its capacity back. ``stop`` refuses them before calling the cloud.
* Prices: ``DescribeZoneInstanceConfigInfos`` (pay-as-you-go and SPOTPAID in one
  call per region) gives price, SELL / SOLD_OUT and the GPU count; the paid
  price is ``UnitPriceDiscount``. The currency is the account's site: USD on the
  international site (the default), CNY on the China site. The GPU model is not
  in the API: it comes from the bundled catalog's row for the instance type, or
  from the instance family. With ``live_prices`` off, the bundled catalog
  serves as it is.
"""

from __future__ import annotations

import base64
import json
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Literal, Mapping, Sequence

from pydantic import Field, SecretStr, model_validator
from tencentcloud.common import credential
from tencentcloud.common.exception.tencent_cloud_sdk_exception import (
    TencentCloudSDKException,
)
from tencentcloud.common.profile.client_profile import ClientProfile
from tencentcloud.common.profile.http_profile import HttpProfile
from tencentcloud.common.retry import NoopRetryer
from tencentcloud.cvm.v20170312 import cvm_client, models

from providers.base import (
    CAP_LIVE_PRICES,
    CAP_PREEMPTION_EVENTS,
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
from providers.catalog import filter_offers, load_catalog
from scheduler.clock import Clock
from scheduler.gpus import GPUS
from scheduler.models import Capacity, Frozen, Offer, Price, Stock
from scheduler.money import Money

__all__ = [
    "NAME",
    "ClientFactory",
    "CvmClient",
    "TencentConfig",
    "TencentProvider",
    "from_config",
    "sdk_client_factory",
    "translate_error",
]

NAME = "tencent"
CvmClient = cvm_client.CvmClient
ClientFactory = Callable[[str], CvmClient]

PREEMPT_REASON = "spot instance reclaimed by Tencent Cloud (destroyed without a TerminateInstances from its owner)"
MAX_TAG_FILTERS = 10  # DescribeInstances takes at most 10 filters; further tags are matched here
INSTANCE_NAME_CHARS = 60
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_LIVE_SOURCE = "Tencent Cloud DescribeZoneInstanceConfigInfos (live)"
_QUOTE_SOURCE = "Tencent Cloud InquiryPriceRunInstances (live)"

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
# Families whose GPU the catalog may not list (docs/gpus-and-clouds.md, "GPU instance families").
_FAMILY_GPUS = {
    "GN7": "T4", "GN7vi": "T4", "GI3X": "T4", "PNV4": "A10", "GT4": "A100-40G",
    "GN10X": "V100-32G", "GN10Xp": "V100-32G",
}

# --- errors -------------------------------------------------------------------------

_NO_CAPACITY = frozenset({
    "ResourceInsufficient",
    "ResourceInsufficient.SpecifiedInstanceType",
    "ResourceInsufficient.ZoneSoldOutForSpecifiedInstance",
    "ResourceInsufficient.AvailabilityZoneSoldOut",
    "ResourceInsufficient.InsufficientOfferingMinimum",
    "ResourceInsufficient.CloudDiskSoldOut",
    "ResourceUnavailable.InstanceType",
    "InvalidParameterValue.InsufficientOffering",
    "InvalidParameterValue.InsufficientPrice",
})
_QUOTA = frozenset({"InstancesQuotaLimitExceeded", "InvalidAccount.InsufficientBalance"})
_NOT_FOUND = frozenset({"InvalidInstanceId.NotFound", "ResourceNotFound.InvalidInstanceIdNotFound"})
_UNAVAILABLE = frozenset({"ClientNetworkError", "ServerNetworkError", "InternalServerError"})
_OUR_BUG = frozenset({"ClientError", "ClientParamsError"})
_AUTH_REASONS = {
    "AuthFailure.SignatureFailure": (
        "the secret key does not match the SecretId (the request signature is wrong)",
        "check GPUSCHED_TENCENT_SECRET_KEY: it must be the SecretKey of GPUSCHED_TENCENT_SECRET_ID",
    ),
    "AuthFailure.SecretIdNotFound": (
        "Tencent Cloud knows no such SecretId",
        "check GPUSCHED_TENCENT_SECRET_ID (a CAM API key's SecretId, AKID...)",
    ),
    "AuthFailure.InvalidSecretId": (
        "the SecretId is malformed",
        "check GPUSCHED_TENCENT_SECRET_ID (a CAM API key's SecretId, AKID...)",
    ),
    "AuthFailure.SignatureExpire": (
        "the request's timestamp is more than 5 minutes from Tencent Cloud's time",
        "synchronise this machine's clock (NTP)",
    ),
}
_PERMISSION_FIX = (
    "grant the CAM user the CVM actions gpusched calls (RunInstances, DescribeInstances, "
    "Stop/Start/TerminateInstances, DescribeZoneInstanceConfigInfos)"
)


def translate_error(exc: TencentCloudSDKException, *, action: str, region: str) -> ProviderError:
    """One SDK exception as the project's error, keeping CVM's code and request id."""
    code = str(exc.get_code() or "Unknown")
    vendor = str(exc.get_message() or "").strip()
    request_id = str(exc.get_request_id() or "")
    where = f"Tencent Cloud {action} in {region}"
    if code.startswith(("AuthFailure", "UnauthorizedOperation")):
        reason, fix = _AUTH_REASONS.get(code, (vendor or code, _PERMISSION_FIX))
        if code == "AuthFailure.UnauthorizedOperation":
            fix = _PERMISSION_FIX
        return AuthFailed(f"{where} refused the credentials: {reason} ({code})",
                          provider=NAME, code=code, request_id=request_id, fix=fix)
    kind, fix = _classify(code)
    return kind(f"{where} failed: {code}: {vendor}", provider=NAME, code=code, request_id=request_id, fix=fix)


def _classify(code: str) -> tuple[type[ProviderError], str | None]:
    if code.startswith("RequestLimitExceeded"):
        return Throttled, None
    if code in _NO_CAPACITY or code.startswith("ResourcesSoldOut."):
        return NoCapacity, "try another zone, instance type or capacity type"
    if code.startswith(("LimitExceeded.", "ResourceInsufficient.")) or code in _QUOTA:
        return QuotaExceeded, "raise the quota (or top up the account) in the Tencent Cloud console, or free instances"
    if code in _NOT_FOUND:
        return NotFound, None
    if code in _UNAVAILABLE or code.startswith(("InternalError", "ServiceUnavailable")):
        return ProviderUnavailable, None
    if code in _OUR_BUG:
        return InvalidRequest, None
    if "." not in code and code.endswith(("Error", "Exception")):
        # Not a CVM code: the SDK could not read the answer (e.g. JSONDecodeError).
        return ProviderUnavailable, None
    if code == "UnsupportedOperation.StoppedModeStopCharging":
        return InvalidRequest, "this instance cannot stop without charging: terminate it instead"
    return InvalidRequest, None


# --- configuration ---------------------------------------------------------------------


class TencentConfig(Frozen):
    """How to reach Tencent Cloud and what to launch. Settings: GPUSCHED_TENCENT_<FIELD>."""

    secret_id: SecretStr
    secret_key: SecretStr
    regions: tuple[str, ...] = Field(min_length=1)
    image_id: str = ""  # img-...; a request's own image wins
    vpc_id: str = ""
    subnet_ids: dict[str, str] = Field(default_factory=dict)  # zone -> subnet-... (CVM subnets are zonal)
    security_group_ids: tuple[str, ...] = ()
    key_ids: tuple[str, ...] = ()  # SSH key pair ids (skey-...)
    cam_role_name: str = ""  # the instance's role: credentials on the machine, no keys in user-data
    public_bandwidth_mbps: int = Field(default=0, ge=0, le=200)  # 0: no public IP
    system_disk_gb: int | None = Field(default=None, ge=20, le=2048)
    max_lifetime_hours: float | None = Field(default=None, gt=0)  # ActionTimer backstop: destroyed after this
    endpoint: str | None = None  # host[:port]; None: the SDK's cvm.tencentcloudapi.com
    protocol: Literal["https", "http"] = "https"
    currency: Literal["USD", "CNY"] = "USD"  # the account's site: international USD, China CNY
    live_prices: bool = True
    request_timeout_seconds: int = Field(default=30, ge=1, le=600)
    page_size: int = Field(default=100, ge=1, le=100)

    @model_validator(mode="after")
    def _plain_http_only_for_an_explicit_endpoint(self) -> TencentConfig:
        if self.protocol == "http" and not self.endpoint:
            raise ValueError("protocol http needs an explicit endpoint (a local emulator); the cloud is https")
        if self.subnet_ids and not self.vpc_id:
            raise ValueError("subnet_ids need vpc_id")
        return self


def sdk_client_factory(config: TencentConfig) -> ClientFactory:
    """Builds one real CvmClient per region, with the SDK's retries off."""

    def build(region: str) -> CvmClient:
        http = HttpProfile(
            protocol=config.protocol,
            endpoint=config.endpoint,
            reqMethod="POST",
            reqTimeout=config.request_timeout_seconds,
            keepAlive=True,
        )
        # The profile must be complete before the client is built: the client reads it once.
        profile = ClientProfile(httpProfile=http, language="en-US", retryer=None)
        cred = credential.Credential(config.secret_id.get_secret_value(), config.secret_key.get_secret_value())
        return cvm_client.CvmClient(cred, region, profile)

    return build


def from_config(config: TencentConfig, clock: Clock, *, catalog: Sequence[Offer] | None = None) -> TencentProvider:
    """The real provider: SDK clients from ``config``, the bundled catalog unless one is given."""
    offers = list(catalog) if catalog is not None else filter_offers(load_catalog(), providers=[NAME])
    return TencentProvider(sdk_client_factory(config), config, clock, offers)


# --- the provider ------------------------------------------------------------------------


class TencentProvider:
    """``providers.base.Provider`` for Tencent Cloud CVM (see the module docstring for the contract choices)."""

    name = NAME

    def __init__(
        self, client_factory: ClientFactory, config: TencentConfig, clock: Clock, catalog: Sequence[Offer]
    ) -> None:
        self.capabilities = frozenset(
            {CAP_STOP_CHARGING, CAP_PREEMPTION_EVENTS} | ({CAP_LIVE_PRICES} if config.live_prices else set())
        )
        self._factory = client_factory
        self._config = config
        self._clock = clock
        self._catalog = [o for o in catalog if o.provider == NAME]
        self._clients: dict[str, CvmClient] = {}

    # --- Provider ------------------------------------------------------------------

    def offers(self, regions: Sequence[str] | None = None) -> list[Offer]:
        wanted = self._regions(regions)
        if not self._config.live_prices:
            return filter_offers(self._catalog, regions=wanted)
        out: list[Offer] = []
        for region in wanted:
            answer = self._call(region, "DescribeZoneInstanceConfigInfos", {
                "Filters": [{"Name": "instance-charge-type", "Values": ["POSTPAID_BY_HOUR", "SPOTPAID"]}],
            })
            out.extend(self._live_offers(region, answer.get("InstanceTypeQuotaSet") or []))
        return out

    def launch(self, request: InstanceRequest) -> Instance:
        offer = request.offer
        if offer.provider != NAME:
            raise InvalidRequest(f"offer {offer.key} belongs to {offer.provider!r}, not {NAME!r}", provider=NAME)
        if offer.region not in self._config.regions:
            raise InvalidRequest(
                f"region {offer.region} is not configured for Tencent Cloud ({', '.join(self._config.regions)})",
                provider=NAME, fix="add it to GPUSCHED_TENCENT_REGIONS",
            )
        answer = self._call(offer.region, "RunInstances", self._run_parameters(request))
        ids = answer.get("InstanceIdSet") or []
        if len(ids) != 1:
            raise ProviderUnavailable(
                f"Tencent Cloud RunInstances answered {len(ids)} instance ids, expected one",
                provider=NAME, code="UnexpectedAnswer", request_id=str(answer.get("RequestId") or ""),
            )
        described = self._describe_ids(offer.region, ids)
        if not described:
            # Not listed yet (CVM lists eventually): what we asked for, pending, time unknown.
            return Instance(
                ref=InstanceRef(provider=NAME, region=offer.region, instance_id=ids[0]),
                zone=offer.zone, instance_type=offer.instance_type, capacity=_launch_capacity(request.capacity),
                state=InstanceState.pending, tags=dict(request.tags), client_token=request.client_token,
            )
        made = described[0]
        _check_same_request(made, request)
        return made.model_copy(update={"client_token": request.client_token})

    def instances(self, tags: Mapping[str, str], regions: Sequence[str] | None = None) -> list[Instance]:
        wanted = dict(tags)
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in list(wanted.items())[:MAX_TAG_FILTERS]]
        found: list[Instance] = []
        for region in self._regions(regions):
            offset = 0
            while True:
                params: dict[str, Any] = {"Offset": offset, "Limit": self._config.page_size}
                if filters:
                    params["Filters"] = filters
                answer = self._call(region, "DescribeInstances", params)
                page = answer.get("InstanceSet") or []
                for raw in page:
                    instance = _instance(region, raw)
                    if all(instance.tags.get(k) == v for k, v in wanted.items()):
                        found.append(instance)
                offset += len(page)
                if not page or offset >= int(answer.get("TotalCount") or 0):
                    break
        return found

    def stop(self, ref: InstanceRef) -> None:
        current = self._one(ref)
        if current.capacity is Capacity.spot:
            raise InvalidRequest(
                f"Tencent Cloud cannot stop spot instance {ref.instance_id}: "
                "spot instances here can only be terminated",
                provider=NAME, code="SpotCannotStop",
                fix="terminate the instance instead (ask for the spot_stop capability before stopping spot)",
            )
        if current.state in (InstanceState.stopping, InstanceState.stopped):
            return
        try:
            self._call(ref.region, "StopInstances", {
                "InstanceIds": [ref.instance_id], "StoppedMode": "STOP_CHARGING", "StopType": "SOFT_FIRST",
            })
        except InvalidRequest as exc:
            if exc.code not in ("UnsupportedOperation.InstanceStateStopping",
                                "UnsupportedOperation.InstanceStateStopped"):
                raise

    def start(self, ref: InstanceRef) -> None:
        self._check_ref(ref)
        try:
            self._call(ref.region, "StartInstances", {"InstanceIds": [ref.instance_id]})
        except InvalidRequest as exc:
            already = ("UnsupportedOperation.InstanceStateRunning", "UnsupportedOperation.InstanceStateStarting",
                       "UnsupportedOperation.InstanceStatePending")
            if exc.code not in already:
                raise

    def terminate(self, ref: InstanceRef) -> None:
        self._check_ref(ref)
        try:
            self._call(ref.region, "TerminateInstances", {"InstanceIds": [ref.instance_id]})
        except NotFound:
            return  # already gone: what terminate wants
        except InvalidRequest as exc:
            # A malformed id names no instance; one being (or already) destroyed needs nothing more.
            gone = ("InvalidInstanceId.Malformed", "UnsupportedOperation.InstanceStateTerminating",
                    "UnsupportedOperation.InstanceStateTerminated")
            if exc.code not in gone:
                raise

    # --- beyond the protocol ---------------------------------------------------------

    def quote(self, offer: Offer, capacity: Capacity) -> Price:
        """The price CVM would charge per hour to launch ``offer`` now (InquiryPriceRunInstances)."""
        image = self._config.image_id
        if not image:
            raise InvalidRequest("a price inquiry names an image and none is configured", provider=NAME,
                                 fix="set GPUSCHED_TENCENT_IMAGE_ID")
        answer = self._call(offer.region, "InquiryPriceRunInstances", {
            "Placement": {"Zone": offer.zone}, "ImageId": image, "InstanceType": offer.instance_type,
            "InstanceChargeType": _charge_type(capacity), "InstanceCount": 1,
        })
        item = (answer.get("Price") or {}).get("InstancePrice") or {}
        amount = _paid_amount(item)
        if amount is None:
            raise ProviderUnavailable(f"Tencent Cloud quoted no hourly price for {offer.key}", provider=NAME,
                                      code="UnexpectedAnswer", request_id=str(answer.get("RequestId") or ""))
        return Price(per_hour=Money(amount=amount, currency=self._config.currency), source=_QUOTE_SOURCE,
                     as_of=self._clock.now().date())

    # --- inside ----------------------------------------------------------------------

    def _client(self, region: str) -> CvmClient:
        client = self._clients.get(region)
        if client is None:
            client = self._factory(region)
            retryer = getattr(getattr(client, "profile", None), "retryer", None)
            if retryer is not None and not isinstance(retryer, NoopRetryer):
                raise ValueError(
                    "the CvmClient has an SDK retryer; build it with ClientProfile(retryer=None): "
                    "retries belong to providers.retry (the SDK's StandardRetryer raises stale errors)"
                )
            self._clients[region] = client
        return client

    def _call(self, region: str, action: str, params: Mapping[str, Any]) -> dict[str, Any]:
        request = getattr(models, f"{action}Request")()
        request.from_json_string(json.dumps(params))
        try:
            response = getattr(self._client(region), action)(request)
        except TencentCloudSDKException as exc:
            raise translate_error(exc, action=action, region=region) from None
        answer: dict[str, Any] = json.loads(response.to_json_string())
        return answer

    def _regions(self, regions: Sequence[str] | None) -> tuple[str, ...]:
        return tuple(regions) if regions is not None else self._config.regions

    def _check_ref(self, ref: InstanceRef) -> None:
        if ref.provider != NAME:
            raise InvalidRequest(f"instance {ref.instance_id} belongs to {ref.provider!r}, not {NAME!r}", provider=NAME)

    def _one(self, ref: InstanceRef) -> Instance:
        self._check_ref(ref)
        found = self._describe_ids(ref.region, [ref.instance_id])
        if not found:
            raise NotFound(f"Tencent Cloud has no instance {ref.instance_id} in {ref.region}", provider=NAME,
                           code="InvalidInstanceId.NotFound")
        return found[0]

    def _describe_ids(self, region: str, ids: Sequence[str]) -> list[Instance]:
        answer = self._call(region, "DescribeInstances", {"InstanceIds": list(ids), "Limit": len(ids)})
        return [_instance(region, raw) for raw in answer.get("InstanceSet") or []]

    def _run_parameters(self, request: InstanceRequest) -> dict[str, Any]:
        cfg = self._config
        offer = request.offer
        image = request.image or cfg.image_id
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
            bid = self._spot_bid(request)
            if bid is not None:
                params["InstanceMarketOptions"] = {
                    "MarketType": "spot", "SpotOptions": {"MaxPrice": str(bid), "SpotInstanceType": "one-time"},
                }
        if cfg.vpc_id:
            subnet = cfg.subnet_ids.get(offer.zone)
            if subnet is None:
                raise InvalidRequest(f"no subnet configured for zone {offer.zone}", provider=NAME,
                                     fix="add the zone to GPUSCHED_TENCENT_SUBNET_IDS (zone -> subnet id)")
            params["VirtualPrivateCloud"] = {"VpcId": cfg.vpc_id, "SubnetId": subnet}
        if cfg.security_group_ids:
            params["SecurityGroupIds"] = list(cfg.security_group_ids)
        if cfg.key_ids:
            params["LoginSettings"] = {"KeyIds": list(cfg.key_ids)}
        if cfg.cam_role_name:
            params["CamRoleName"] = cfg.cam_role_name
        if cfg.public_bandwidth_mbps:
            params["InternetAccessible"] = {
                "InternetChargeType": "TRAFFIC_POSTPAID_BY_HOUR",
                "InternetMaxBandwidthOut": cfg.public_bandwidth_mbps,
                "PublicIpAssigned": True,
            }
        if cfg.system_disk_gb:
            params["SystemDisk"] = {"DiskType": "CLOUD_PREMIUM", "DiskSize": cfg.system_disk_gb}
        if cfg.max_lifetime_hours:
            # A backstop on the machine itself: CVM destroys it even if gpusched is gone.
            when = self._clock.now().astimezone(timezone.utc) + timedelta(hours=cfg.max_lifetime_hours)
            params["ActionTimer"] = {"TimerAction": "TerminateInstances", "ActionTime": when.strftime(_TIME_FORMAT)}
        return params

    def _spot_bid(self, request: InstanceRequest) -> Decimal | None:
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
        if od is not None and od.per_hour.currency == self._config.currency:
            return od.per_hour.amount
        return None

    def _live_offers(self, region: str, items: Sequence[Mapping[str, Any]]) -> list[Offer]:
        grouped: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
        for item in items:
            key = (str(item.get("Zone") or ""), str(item.get("InstanceType") or ""))
            grouped.setdefault(key, {})[str(item.get("InstanceChargeType") or "")] = item
        today = self._clock.now().date()
        offers = []
        for (zone, instance_type), by_charge in sorted(grouped.items()):
            offer = self._live_offer(region, zone, instance_type, by_charge, today)
            if offer is not None:
                offers.append(offer)
        return offers

    def _live_offer(self, region: str, zone: str, instance_type: str,
                    by_charge: Mapping[str, Mapping[str, Any]], today: date) -> Offer | None:
        any_item = next(iter(by_charge.values()))
        gpu_count = int(any_item.get("Gpu") or 0) or int(float(any_item.get("GpuCount") or 0))
        known = self._catalog_row(region, zone, instance_type)
        gpu = known.gpu if known is not None else _FAMILY_GPUS.get(instance_type.split(".")[0])
        if gpu_count < 1 or not zone or gpu is None or (known is None and gpu not in GPUS):
            return None  # not a whole-GPU type, or one whose GPU model we cannot name
        vcpus = int(any_item.get("Cpu") or 0) or (known.vcpus if known is not None else 0)
        mem_gib = float(any_item.get("Memory") or 0) or (known.mem_gib if known is not None else 0.0)
        if vcpus < 1 or mem_gib <= 0:
            return None  # a size we cannot plan with
        od_item, spot_item = by_charge.get("POSTPAID_BY_HOUR"), by_charge.get("SPOTPAID")
        catalog_od = known.on_demand if known is not None and known.zone == zone else None
        catalog_spot = known.spot if known is not None and known.zone == zone else None
        fields: dict[str, Any] = {}
        if known is not None:
            fields["spot_interruptions_per_hour"] = known.spot_interruptions_per_hour
        return Offer(
            provider=NAME, region=region, zone=zone, instance_type=instance_type, gpu=gpu, gpu_count=gpu_count,
            gpu_mem_gib=known.gpu_mem_gib if known is not None else GPUS[gpu].mem_gib,
            vcpus=vcpus,
            mem_gib=mem_gib,
            on_demand=None if od_item is None else (self._live_price(od_item, today) or catalog_od),
            spot=None if spot_item is None else (self._live_price(spot_item, today) or catalog_spot),
            on_demand_stock=_stock(od_item), spot_stock=_stock(spot_item),
            **fields,
        )

    def _live_price(self, item: Mapping[str, Any] | None, today: date) -> Price | None:
        amount = _paid_amount((item or {}).get("Price") or {})
        if amount is None:
            return None
        return Price(per_hour=Money(amount=amount, currency=self._config.currency), source=_LIVE_SOURCE, as_of=today)

    def _catalog_row(self, region: str, zone: str, instance_type: str) -> Offer | None:
        """The catalog's row for this type: same zone first, then same region, then anywhere."""
        rows = [o for o in self._catalog if o.instance_type == instance_type]
        for same in (lambda o: o.zone == zone, lambda o: o.region == region, lambda o: True):
            match = next((o for o in rows if same(o)), None)
            if match is not None:
                return match
        return None


# --- wire <-> ours -------------------------------------------------------------------------


def _charge_type(capacity: Capacity) -> str:
    # Reserved capacity on CVM is a reserved-instance discount on pay-as-you-go machines.
    return "SPOTPAID" if capacity is Capacity.spot else "POSTPAID_BY_HOUR"


def _launch_capacity(capacity: Capacity) -> Capacity:
    return Capacity.spot if capacity is Capacity.spot else Capacity.on_demand


def _check_same_request(made: Instance, request: InstanceRequest) -> None:
    offer = request.offer
    asked = (offer.zone, offer.instance_type, _launch_capacity(request.capacity))
    got = (made.zone, made.instance_type, _launch_capacity(made.capacity))
    if asked != got:
        raise InvalidRequest(
            f"client token {request.client_token!r} already made {made.ref.instance_id} "
            f"({got[0]} {got[1]} {got[2].value}), not {asked[0]} {asked[1]} {asked[2].value}",
            provider=NAME, code="IdempotentParameterMismatch",
            fix="derive the client token from everything that defines the request",
        )


def _instance(region: str, raw: Mapping[str, Any]) -> Instance:
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
    )


def _parse_time(text: object) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _paid_amount(item: Mapping[str, Any]) -> Decimal | None:
    """What one hour costs: the discounted unit price where CVM gives one, else the list unit price."""
    for name in ("UnitPriceDiscount", "UnitPrice"):
        value = item.get(name)
        if value is None:
            continue
        try:
            amount = Decimal(str(value))  # the SDK hands a float; its repr is the wire's number
        except InvalidOperation:
            continue
        if amount.is_finite() and amount > 0:
            return amount
    return None


def _stock(item: Mapping[str, Any] | None) -> Stock:
    if item is None:
        return Stock.unknown
    if item.get("Status") == "SOLD_OUT" or item.get("StatusCategory") == "WithoutStock":
        return Stock.sold_out
    if item.get("StatusCategory") == "UnderStock":
        return Stock.low
    return Stock.available if item.get("Status") == "SELL" else Stock.unknown
