"""Alibaba Cloud ECS (RPC API, version 2014-05-26) over real HTTP, backed by the sandbox cloud.

One file on purpose: it is one cloud's wire protocol (signing, parameters,
answers and error shapes of every action) in one place, to be read side by side
with that cloud's API reference.

``AlibabaEcsEmulator`` listens on 127.0.0.1 (port 0: the OS picks) and answers
what ``aliyun-python-sdk-core`` sends: ``POST /`` (GET works too) with every
parameter in the query string and an empty body. Signature v1 is verified
exactly as the gateway does it: the parameters but ``Signature``, sorted and
percent-encoded (RFC 3986, UTF-8), string to sign
``METHOD&%2F&percentEncode(canonical query)``, base64 HMAC-SHA1 keyed with
``secret + "&"``. The empty ``SignatureType`` the SDK sends is signed too, so
the query is parsed with blank values kept. Errors are JSON ``{RequestId,
HostId, Code, Message, Recommend}`` with the real HTTP statuses; a signature
mismatch says ``server string to sign is:...`` like the gateway, which is what
the SDK reads to tell a wrong secret (``InvalidAccessKeySecret``) apart.

The market behind it (stock, boot and stop delays, spot reclaims, quotas,
scripted faults, ClientToken dedupe) is a ``providers.sandbox.provider.SandboxCloud``;
this module only translates the wire format and the vendor's codes.

Behaviours picked where they matter to an adapter:

* A released instance (deleted, or a reclaimed spot instance) is gone from
  DescribeInstances at once, and deleting it again answers
  ``InvalidInstanceId.NotFound``, as on ECS. While the sandbox still runs the
  release, it shows ``Stopping``.
* A spot reclaim is announced through the API the way ECS does it: while the
  sandbox's notice runs, the instance carries ``OperationLocks.LockReason`` =
  ``Recycling``; when the notice ends it is released.
* ``Starting`` is shown for an instance booting again after StartInstances,
  ``Pending`` for one booting the first time.
* One instance per RunInstances (``Amount`` 1), PostPaid only, ``ZoneId``
  required; DescribePrice prices the instance type alone (no disk or
  bandwidth lines); DescribeSpotPriceHistory gives one point per zone, the
  sandbox's price of the day.
* A lost response (``SandboxCloud.lose_next_launch_response``, or a scripted
  ``ProviderUnavailable`` with code ``RequestTimeout``) drops the connection
  without an answer: the SDK sees ``SDK.HttpError``.
* ClientToken. A token seen before answers with the instance it first made
  when the parameters are the same, and ``IdempotentParameterMismatch`` (HTTP
  400, nothing launched) when any parameter differs, as ECS does. The common
  parameters (signature, nonce, timestamp) are not compared.
* DescribeSpotPriceHistory answers one point per zone and hour of the window
  (``StartTime``, default ``EndTime`` minus 3 hours, to ``EndTime``, default
  now), oldest first, ``spot_history_page_size`` points a page: ``Offset``
  asks for a page, ``NextOffset`` names the next one and is 0 on the last. The
  newest prices are therefore on the last page. A price is the sandbox's of the
  day unless ``script_spot_history`` set one for that hour.
* Stop modes. ``StoppedMode=StopCharging`` stops billing compute, except for
  the types in ``keep_charging_types`` (prefixes; by default the local-disk GPU
  family gn5), which ECS stops in ``KeepCharging`` mode without an error, as its
  documentation says for instances that do not support the economical mode; the
  default mode is ``KeepCharging``. DescribeInstances reports ``StoppedMode``.
* Faults. ``faults`` (a ``providers.emulators.faults.FaultPlan``) fails a seeded
  share of calls: ``Throttling`` (HTTP 400) with ``Retry-After``,
  ``ServiceUnavailable`` (HTTP 503), no answer, or no answer after acting. A
  scripted ``Throttled`` that carries ``retry_after`` sends that header too.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import parse_qsl

from providers.base import (
    AuthFailed,
    InstanceState,
    InvalidRequest,
    NoCapacity,
    NotFound,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    Throttled,
)
from providers.emulators.alibaba_rpc import (
    LISTEN_HOST,
    RpcAnswer,
    RpcAuthenticator,
    RpcError,
    RpcServer,
    missing_parameter,
    percent_encode,
    rpc_error_body,
    rpc_json,
    rpc_signature,
    string_to_sign,
)
from providers.emulators.faults import FaultPlan
from providers.emulators.local_http import Served
from providers.sandbox.provider import SandboxCloud, SandboxInstance
from scheduler.clock import Clock
from scheduler.models import Capacity, Offer, Stock

__all__ = [
    "API_VERSION",
    "AlibabaEcsEmulator",
    "Call",
    "EcsError",
    "percent_encode",
    "rpc_signature",
    "string_to_sign",
]

API_VERSION = "2014-05-26"
HOST_ID = "ecs.aliyuncs.com"
MAX_PAGE = 100
MAX_TAGS = 20
MAX_USER_DATA = 32 * 1024
_TIMESTAMP = "%Y-%m-%dT%H:%M:%SZ"
_MINUTES = "%Y-%m-%dT%H:%MZ"  # ECS reports instance times to the minute
_SPOT_STRATEGIES = ("NoSpot", "SpotAsPriceGo", "SpotWithPriceLimit")
_S = InstanceState
_TAG_KEY = re.compile(r"^Tag\.(\d+)\.Key$")
_INSTANCE_ID_N = re.compile(r"^InstanceId\.(\d+)$")
# Parameters every request carries whatever it asks: not part of what a ClientToken pins.
_COMMON_PARAMS = frozenset({
    "AccessKeyId", "Signature", "SignatureMethod", "SignatureVersion", "SignatureNonce", "SignatureType",
    "Timestamp", "Version", "Format", "Action",
})
# Types that cannot stop without charging: GPU families with local disks (ECS stops them in
# KeepCharging mode, without an error, when StopCharging is asked).
LOCAL_DISK_GPU_TYPES = ("ecs.gn5-",)
SPOT_HISTORY_PAGE = 1000  # DescribeSpotPriceHistory points per page (the documented NextOffset example)

# Sandbox codes -> (HTTP status, ECS code, ECS message). Messages as the ECS docs give them.
_SANDBOX_CODES: dict[str, tuple[int, str, str]] = {
    "NoStock": (403, "OperationDenied.NoStock",
                ("The requested resource is sold out in the specified zone; "
                 "try other types of resources or other regions and zones.")),
    "SpotMaxPriceTooLow": (400, "InvalidSpotPriceLimit.LowerThanPublicPrice",
                           'The specified parameter "spotPriceLimit" can\'t be lower than current public price.'),
    "QuotaExceeded.GPU": (403, "QuotaExceed.ElasticQuota",
                          "No additional quota is available for the specified ECS instance type."),
    "InvalidInstanceID.NotFound": (404, "InvalidInstanceId.NotFound", "The specified InstanceId does not exist."),
    "IncorrectInstanceState": (403, "IncorrectInstanceStatus",
                               "The current status of the resource does not support this operation."),
    "IdempotentParameterMismatch": (400, "IdempotentParameterMismatch",
                                    ("Request uses a client token in a previous request but is not identical "
                                     "to that request.")),
    "InvalidInstanceType": (400, "InvalidInstanceType.ValueNotSupported",
                            "The specified InstanceType does not exist or beyond the permitted range."),
    "UnsupportedOperation": (403, "OperationDenied", "The specified operation is denied."),
    "InvalidNextToken": (400, "InvalidParameter.NextToken", "The specified NextToken is invalid."),
}
_THROTTLING = (400, "Throttling", "Request was denied due to request throttling.")
_SERVICE_UNAVAILABLE = (503, "ServiceUnavailable", "The request has failed due to a temporary failure of the server.")
# Error class -> (HTTP status, ECS code, ECS message), for scripted faults without an ECS code of their own.
_CLASS_CODES: tuple[tuple[type[ProviderError], tuple[int, str, str]], ...] = (
    (NoCapacity, _SANDBOX_CODES["NoStock"]),
    (QuotaExceeded, _SANDBOX_CODES["QuotaExceeded.GPU"]),
    (Throttled, _THROTTLING),
    (AuthFailed, (403, "Forbidden.RAM",
                  "User not authorized to operate on the specified resource, or this API doesn't support RAM.")),
    (NotFound, _SANDBOX_CODES["InvalidInstanceID.NotFound"]),
    (ProviderUnavailable, _SERVICE_UNAVAILABLE),
    (InvalidRequest, (400, "InvalidParameter", "The specified parameter is invalid.")),
)


# ECS's errors are the gateway's RPC errors; the name stays for readers of this module.
EcsError = RpcError


class _DropConnection(Exception):
    """Close the connection without an answer: a response lost on the way back."""


# One HTTP answer (status, JSON body, any ``Retry-After``): the gateway's, shared with the BSS emulator.
_Answer = RpcAnswer


@dataclass(frozen=True)
class Call:
    """One request as the emulator saw it, for tests to assert on."""

    method: str
    action: str
    params: Mapping[str, str]
    status: int  # 0: the connection was dropped without an answer
    code: str  # "" on success
    answer: Mapping[str, Any] = field(default_factory=dict)  # the JSON sent back


@dataclass
class _Launch:
    """What RunInstances asked for that the sandbox does not keep."""

    spot_strategy: str = "NoSpot"
    spot_price_limit: str = ""
    spot_duration: int = 1
    interruption_behavior: str = "Terminate"
    image_id: str = ""
    vswitch_id: str = ""
    security_group_id: str = ""
    key_pair_name: str = ""
    ram_role_name: str = ""
    http_tokens: str = "optional"
    auto_release_time: str = ""
    stopped_mode: str = "Not-applicable"
    restarted: bool = False
    extra: dict[str, str] = field(default_factory=dict)


class AlibabaEcsEmulator(Served):
    """ECS's RPC API on 127.0.0.1 over one SandboxCloud.

    ``credentials`` maps AccessKeyId -> AccessKeySecret. ``wall_clock`` checks
    the request Timestamp (which the SDK takes from real time, not from the
    sandbox's clock) against ``max_skew_seconds``, as the gateway does.
    """

    def __init__(
        self,
        cloud: SandboxCloud,
        credentials: Mapping[str, str],
        *,
        wall_clock: Clock | None = None,
        max_skew_seconds: float = 900,
        port: int = 0,
        faults: FaultPlan | None = None,
        keep_charging_types: tuple[str, ...] = LOCAL_DISK_GPU_TYPES,
        spot_history_page_size: int = SPOT_HISTORY_PAGE,
    ) -> None:
        if spot_history_page_size < 1:
            raise ValueError("spot_history_page_size must be at least 1")
        self.cloud = cloud
        self._auth = RpcAuthenticator(credentials, wall_clock=wall_clock, max_skew_seconds=max_skew_seconds)
        # Read once, before any test scripts faults into the cloud's offers().
        self._regions = frozenset(o.region for o in cloud.offers())
        self._lock = threading.Lock()
        self._launches: dict[str, _Launch] = {}
        self._token_params: dict[str, dict[str, str]] = {}
        self._calls: list[Call] = []
        self._requests = 0
        self.faults = (faults or FaultPlan()).dice()
        self._keep_charging = tuple(keep_charging_types)
        self._history_page = spot_history_page_size
        self._history: dict[tuple[str, str], dict[datetime, Decimal]] = {}
        self._scripted: dict[str, list[tuple[EcsError, float | None]]] = {}
        self._actions: dict[str, Callable[[dict[str, str]], dict[str, Any]]] = {
            "RunInstances": self._run_instances,
            "DescribeInstances": self._describe_instances,
            "StopInstances": self._stop_instances,
            "StopInstance": self._stop_instances,
            "StartInstances": self._start_instances,
            "StartInstance": self._start_instances,
            "DeleteInstances": self._delete_instances,
            "DeleteInstance": self._delete_instances,
            "DescribePrice": self._describe_price,
            "DescribeSpotPriceHistory": self._describe_spot_price_history,
            "DescribeAvailableResource": self._describe_available_resource,
        }
        self._server = RpcServer(self, port=port, name="alibaba-ecs-emulator")

    # --- lifecycle ----------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:PORT``: what the adapter's endpoint override takes."""
        return f"{LISTEN_HOST}:{self.port}"

    # --- what tests look at ---------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    def calls_of(self, action: str) -> list[Call]:
        return [c for c in self.calls if c.action == action]

    # --- scripting, for tests -------------------------------------------------

    def script_error(self, action: str, code: str, *, status: int = 400, message: str = "scripted",
                     times: int = 1, retry_after: float | None = None) -> None:
        """The next ``times`` calls of ``action`` answer this exact ECS error after authentication, doing
        nothing; ``retry_after`` adds a ``Retry-After`` header (throttling answers)."""
        if action not in self._actions:
            raise ValueError(f"unknown action {action!r}; the emulator speaks {', '.join(sorted(self._actions))}")
        with self._lock:
            self._scripted.setdefault(action, []).extend([(EcsError(status, code, message), retry_after)] * times)

    def script_spot_history(self, instance_type: str, zone: str, points: Mapping[datetime, Decimal]) -> None:
        """Spot prices DescribeSpotPriceHistory gives for these hours (UTC) instead of the sandbox's."""
        with self._lock:
            book = self._history.setdefault((instance_type, zone), {})
            for when, price in points.items():
                book[when.astimezone(UTC).replace(minute=0, second=0, microsecond=0)] = Decimal(price)

    # --- one request ----------------------------------------------------------

    def handle(self, method: str, path: str, query: str, body: bytes, content_type: str) -> _Answer | None:
        """Answer one HTTP request, or None to drop the connection without an answer."""
        params = dict(parse_qsl(query, keep_blank_values=True))
        if body and content_type.startswith("application/x-www-form-urlencoded"):
            params.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        action = params.get("Action", "")
        with self._lock:
            self._requests += 1
            request_id = str(uuid.UUID(int=self._requests)).upper()
            retry_after: float | None = None
            try:
                if path != "/":
                    raise EcsError(404, "InvalidAction.NotFound",
                                   "Specified api is not found, please check your url and method.")
                self._auth.check(method, params)
                run = self._actions.get(action)
                if run is None:
                    raise EcsError(404, "InvalidAction.NotFound",
                                   "Specified api is not found, please check your url and method.")
                if params.get("Version") != API_VERSION:
                    raise EcsError(400, "InvalidVersion", "Specified parameter Version is not valid.")
                scripted = self._scripted.get(action)
                if scripted:
                    error, retry_after = scripted.pop(0)
                    raise error
                fault = self.faults.draw(action)
                if fault == "throttle":
                    retry_after = self.faults.plan.retry_after_seconds
                    raise EcsError(*_THROTTLING)
                if fault == "5xx":
                    raise EcsError(*_SERVICE_UNAVAILABLE)
                if fault == "timeout":
                    raise _DropConnection()
                try:
                    result = run(params)
                except ProviderError as exc:
                    if isinstance(exc, Throttled):
                        retry_after = exc.retry_after
                    raise _vendor_error(exc) from None
                if fault == "lost":
                    raise _DropConnection()
            except _DropConnection:
                self._calls.append(Call(method, action, params, 0, "RequestTimeout"))
                return None
            except EcsError as exc:
                answer = rpc_error_body(exc, request_id, HOST_ID, "Ecs")
                self._calls.append(Call(method, action, params, exc.status, exc.code, answer))
                headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
                return _Answer(exc.status, rpc_json(answer), headers)
            answer = {**result, "RequestId": request_id}
            self._calls.append(Call(method, action, params, 200, "", answer))
            return _Answer(200, rpc_json(answer))

    # --- actions ------------------------------------------------------------------

    def _run_instances(self, p: dict[str, str]) -> dict[str, Any]:
        region = self._region(p)
        instance_type, zone, image = _required(p, "InstanceType"), _required(p, "ZoneId"), _required(p, "ImageId")
        if p.get("InstanceChargeType", "PostPaid") != "PostPaid":
            raise EcsError(400, "InvalidInstanceChargeType.ValueNotSupported",
                           "The emulator sells pay-as-you-go (PostPaid) instances only.")
        if _integer(p, "Amount", 1) != 1 or _integer(p, "MinAmount", 1) != 1:
            raise EcsError(400, "InvalidParameter.Amount", "The emulator launches one instance per call.")
        strategy = p.get("SpotStrategy") or "NoSpot"
        if strategy not in _SPOT_STRATEGIES:
            raise EcsError(400, "InvalidSpotStrategy", "The specified SpotStrategy is not valid.")
        capacity = Capacity.on_demand if strategy == "NoSpot" else Capacity.spot
        limit = _spot_price_limit(p, strategy)
        duration = _integer(p, "SpotDuration", 1)
        if not 0 <= duration <= 6:
            raise EcsError(400, "InvalidSpotDuration", "The specified SpotDuration is not valid.")
        behavior = p.get("SpotInterruptionBehavior") or "Terminate"
        if behavior not in ("Terminate", "Stop"):
            raise EcsError(400, "InvalidSpotInterruptionBehavior",
                           "The specified SpotInterruptionBehavior is not valid.")
        token = p.get("ClientToken") or None
        if token is not None and (len(token) > 64 or not token.isascii()):
            raise EcsError(400, "InvalidClientToken.Malformed", "The specified ClientToken is not valid.")
        pinned = {k: v for k, v in p.items() if k not in _COMMON_PARAMS}
        if token is not None and self._token_params.get(token, pinned) != pinned:
            raise EcsError(*_SANDBOX_CODES["IdempotentParameterMismatch"])
        launch = _Launch(
            spot_strategy=strategy,
            spot_price_limit=p.get("SpotPriceLimit", "") if strategy == "SpotWithPriceLimit" else "",
            spot_duration=duration if capacity is Capacity.spot else 0,
            interruption_behavior=behavior,
            image_id=image,
            vswitch_id=p.get("VSwitchId", ""),
            security_group_id=p.get("SecurityGroupId", ""),
            key_pair_name=p.get("KeyPairName", ""),
            ram_role_name=p.get("RamRoleName", ""),
            http_tokens=p.get("HttpTokens") or "optional",
            auto_release_time=p.get("AutoReleaseTime", ""),
            extra={k: v for k, v in p.items() if k.startswith(("SystemDisk.", "Internet"))},
        )
        try:
            created = self.cloud.launch(
                region=region,
                zone=zone,
                instance_type=instance_type,
                capacity=capacity,
                client_token=token,
                tags=dict(_tag_pairs(p)),
                name=p.get("InstanceName", ""),
                image=image,
                user_data=_user_data(p),
                max_price=limit,
            )
        except ProviderUnavailable as exc:
            if exc.code != "RequestTimeout" or token is None:
                raise
            # Created at the cloud, answer lost: the record is kept so the retry finds it as it was asked.
            lost = next(i for i in self.cloud.all_instances() if i.client_token == token)
            self._launches.setdefault(lost.instance_id, launch)
            self._token_params.setdefault(token, pinned)
            raise _DropConnection() from None
        self._launches.setdefault(created.instance_id, launch)
        if token is not None:
            self._token_params.setdefault(token, pinned)
        return {"InstanceIdSets": {"InstanceIdSet": [created.instance_id]}}

    def _describe_instances(self, p: dict[str, str]) -> dict[str, Any]:
        region = self._region(p)
        wanted = _tag_filter(p)
        exact = {k: v for k, v in wanted.items() if v is not None}
        zone, status = p.get("ZoneId") or None, p.get("Status") or None
        raw_ids = p.get("InstanceIds")
        token_paging = "NextToken" in p or "MaxResults" in p
        next_token = ""
        if raw_ids:
            found = [m for m in (self._lookup(i, region) for i in _instance_id_array(raw_ids)) if m is not None]
        elif token_paging:
            size = _integer(p, "MaxResults", 10)
            if not 1 <= size <= MAX_PAGE:
                raise EcsError(400, "InvalidParameter.MaxResults", "The specified MaxResults is not valid.")
            found, more = self.cloud.instances(
                tags=exact, regions=[region], page_size=size, page_token=p.get("NextToken") or None
            )
            next_token = more or ""
        else:
            found, _ = self.cloud.instances(tags=exact, regions=[region])
        visible = [
            m for m in found
            if m.state is not _S.terminated
            and all(k in m.tags and (v is None or m.tags[k] == v) for k, v in wanted.items())
            and (zone is None or m.zone == zone)
            and (status is None or self._status(m) == status)
        ]
        answer: dict[str, Any] = {"TotalCount": len(visible)}
        if token_paging and not raw_ids:
            answer["NextToken"] = next_token
        else:
            number, size = _integer(p, "PageNumber", 1), _integer(p, "PageSize", 10)
            if number < 1 or not 1 <= size <= MAX_PAGE:
                raise EcsError(400, "InvalidParameter", "The specified PageNumber or PageSize is not valid.")
            visible = visible[(number - 1) * size: number * size]
            answer.update(PageNumber=number, PageSize=size)
        answer["Instances"] = {"Instance": [self._instance_json(m) for m in visible]}
        return answer

    def _stop_instances(self, p: dict[str, str]) -> dict[str, Any]:
        region = self._region(p)
        mode = p.get("StoppedMode") or "KeepCharging"
        if mode not in ("StopCharging", "KeepCharging"):
            raise EcsError(400, "InvalidParameter.StoppedMode", "The specified StoppedMode is not valid.")
        targets = self._targets(p, region)
        before = {m.instance_id: self._status(m) for m in targets}
        for m in targets:
            self.cloud.stop(m.instance_id, region=region)
            # No error for a type that cannot stop without charging: ECS stops it in standard mode.
            charging = mode == "KeepCharging" or m.instance_type.startswith(self._keep_charging)
            self._launch_of(m).stopped_mode = "KeepCharging" if charging else "StopCharging"
        return self._batch_answer(p, region, before)

    def _start_instances(self, p: dict[str, str]) -> dict[str, Any]:
        region = self._region(p)
        targets = self._targets(p, region)
        before = {m.instance_id: self._status(m) for m in targets}
        for m in targets:
            was_stopped = m.state is _S.stopped
            self.cloud.start(m.instance_id, region=region)
            if was_stopped:
                launch = self._launch_of(m)
                launch.restarted, launch.stopped_mode = True, "Not-applicable"
        return self._batch_answer(p, region, before)

    def _delete_instances(self, p: dict[str, str]) -> dict[str, Any]:
        region = self._region(p)
        force = (p.get("Force") or "false").lower() == "true"
        targets = self._targets(p, region)
        for m in targets:
            if not force and m.state not in (_S.stopped, _S.terminating):
                raise EcsError(403, "IncorrectInstanceStatus",
                               "The current status of the resource does not support this operation.")
        for m in targets:
            self.cloud.terminate(m.instance_id, region=region)
        return {}

    def _describe_price(self, p: dict[str, str]) -> dict[str, Any]:
        region = self._region(p)
        if (p.get("ResourceType") or "instance") != "instance":
            raise EcsError(400, "InvalidResourceType.NotSupported", "The emulator prices instances only.")
        if (p.get("PriceUnit") or "Hour") != "Hour":
            raise EcsError(400, "InvalidPriceUnit", "The emulator quotes pay-as-you-go prices per hour only.")
        instance_type, zone = _required(p, "InstanceType"), p.get("ZoneId") or None
        capacity = Capacity.on_demand if (p.get("SpotStrategy") or "NoSpot") == "NoSpot" else Capacity.spot
        prices = [o.price(capacity) for o in self._offers(region, instance_type, zone)]
        price = next((x for x in prices if x is not None), None)
        if price is None:
            raise EcsError(400, "InvalidInstanceType.ValueNotSupported",
                           "The specified InstanceType does not exist or beyond the permitted range.")
        amount = price.per_hour.amount
        line = {"Resource": "instanceType", "OriginalPrice": amount, "DiscountPrice": Decimal(0), "TradePrice": amount}
        return {"PriceInfo": {
            "Price": {
                "OriginalPrice": amount, "DiscountPrice": Decimal(0), "TradePrice": amount,
                "Currency": price.per_hour.currency, "DetailInfos": {"DetailInfo": [line]},
            },
            "Rules": {"Rule": []},
        }}

    def _describe_spot_price_history(self, p: dict[str, str]) -> dict[str, Any]:
        region = self._region(p)
        network = _required(p, "NetworkType")
        if network not in ("vpc", "classic"):
            raise EcsError(400, "InvalidNetworkType.ValueNotSupported", "The specified NetworkType is not valid.")
        end = _optional_time(p, "EndTime") or self.cloud.clock.now().astimezone(UTC)
        start = _optional_time(p, "StartTime") or end - timedelta(hours=3)
        if start > end or end - start > timedelta(days=30):
            raise EcsError(400, "InvalidParams.StartTime", "The specified StartTime is not valid.")
        offset = _integer(p, "Offset", 0)
        if offset < 0:
            raise EcsError(400, "InvalidParams.Offset", "The specified Offset is not valid.")
        # One point per zone and whole hour of the window, oldest first: the newest are on the last page.
        first_hour = start.replace(minute=0, second=0, microsecond=0)
        if first_hour < start:
            first_hour += timedelta(hours=1)
        hours = []
        when = first_hour
        while when <= end:
            hours.append(when)
            when += timedelta(hours=1)
        points, currency = [], ""
        offers = [o for o in self._offers(region, _required(p, "InstanceType"), p.get("ZoneId") or None)
                  if o.spot is not None]
        for hour in hours:
            for offer in offers:
                assert offer.spot is not None
                currency = offer.spot.per_hour.currency
                price = self._history.get((offer.instance_type, offer.zone), {}).get(hour, offer.spot.per_hour.amount)
                points.append({
                    "ZoneId": offer.zone, "InstanceType": offer.instance_type, "IoOptimized": "optimized",
                    "NetworkType": network, "Timestamp": hour.strftime(_TIMESTAMP),
                    "SpotPrice": price,
                    "OriginPrice": offer.on_demand.per_hour.amount if offer.on_demand else price,
                })
        page = points[offset:offset + self._history_page]
        more = offset + self._history_page < len(points)
        return {"SpotPrices": {"SpotPriceType": page}, "Currency": currency or "CNY",
                "NextOffset": offset + self._history_page if more else 0}

    def _describe_available_resource(self, p: dict[str, str]) -> dict[str, Any]:
        region = self._region(p)
        if _required(p, "DestinationResource") != "InstanceType":
            raise EcsError(400, "InvalidParameter.DestinationResource",
                           "The emulator answers DestinationResource=InstanceType only.")
        spot = (p.get("SpotStrategy") or "NoSpot") != "NoSpot"
        zones: dict[str, list[dict[str, str]]] = {}
        for offer in self._offers(region, p.get("InstanceType") or None, p.get("ZoneId") or None):
            stock = offer.spot_stock if spot else offer.on_demand_stock
            if spot and offer.spot is None:
                continue
            status, category = _STOCK_STATUS.get(stock, ("Available", "WithStock"))
            zones.setdefault(offer.zone, []).append({"Value": offer.instance_type, "Status": status,
                                                     "StatusCategory": category})
        listed = []
        for zone, resources in sorted(zones.items()):
            open_ = any(r["Status"] == "Available" for r in resources)
            listed.append({
                "ZoneId": zone, "RegionId": region,
                "Status": "Available" if open_ else "SoldOut",
                "StatusCategory": "WithStock" if open_ else "WithoutStock",
                "AvailableResources": {"AvailableResource": [
                    {"Type": "InstanceType", "SupportedResources": {"SupportedResource": resources}},
                ]},
            })
        return {"AvailableZones": {"AvailableZone": listed}}

    # --- inside -----------------------------------------------------------------

    def _region(self, p: Mapping[str, str]) -> str:
        region = _required(p, "RegionId")
        if region not in self._regions:
            raise EcsError(404, "InvalidRegionId.NotFound", "The specified RegionId does not exist.")
        return region

    def _offers(self, region: str, instance_type: str | None, zone: str | None) -> list[Offer]:
        return [
            o for o in self.cloud.offers([region])
            if (instance_type is None or o.instance_type == instance_type) and (zone is None or o.zone == zone)
        ]

    def _lookup(self, instance_id: str, region: str) -> SandboxInstance | None:
        try:
            found = self.cloud.get(instance_id, region)
        except NotFound:
            return None
        return None if found.state is _S.terminated else found

    def _targets(self, p: Mapping[str, str], region: str) -> list[SandboxInstance]:
        """Every instance the call names; all of them must exist (BatchOptimization=AllTogether)."""
        ids = [v for k, v in sorted(p.items(), key=_index_order) if _INSTANCE_ID_N.match(k)]
        if not ids and p.get("InstanceId"):
            ids = [p["InstanceId"]]
        if not ids:
            raise _missing("InstanceId.1")
        found = []
        for instance_id in ids:
            machine = self._lookup(instance_id, region)
            if machine is None:
                raise EcsError(*_SANDBOX_CODES["InvalidInstanceID.NotFound"])
            found.append(machine)
        return found

    def _batch_answer(self, p: Mapping[str, str], region: str, before: Mapping[str, str]) -> dict[str, Any]:
        if p.get("Action", "").endswith("Instance"):
            return {}  # the singular actions answer with the request id alone
        answers = []
        for instance_id, previous in before.items():
            now = self._lookup(instance_id, region)
            answers.append({"Code": "200", "Message": "success", "InstanceId": instance_id,
                            "PreviousStatus": previous, "CurrentStatus": self._status(now) if now else "Stopped"})
        return {"InstanceResponses": {"InstanceResponse": answers}}

    def _launch_of(self, machine: SandboxInstance) -> _Launch:
        launch = self._launches.get(machine.instance_id)
        if launch is None:  # launched through a lost response: the retry never reached RunInstances' record
            strategy = "SpotAsPriceGo" if machine.capacity is Capacity.spot else "NoSpot"
            launch = self._launches[machine.instance_id] = _Launch(spot_strategy=strategy, image_id=machine.image)
        return launch

    def _status(self, machine: SandboxInstance) -> str:
        if machine.state is _S.pending:
            return "Starting" if self._launch_of(machine).restarted else "Pending"
        return _STATUS[machine.state]

    def _instance_json(self, m: SandboxInstance) -> dict[str, Any]:
        launch = self._launch_of(m)
        spot = m.capacity is Capacity.spot
        locks = []
        reclaiming = m.interruption_notice_at is not None and m.state in (_S.pending, _S.running, _S.stopping)
        if spot and (reclaiming or (m.preempted and m.state is _S.stopped)):
            locks.append({"LockReason": "Recycling", "LockMsg": "The preemptible instance is going to be released."})
        created = m.launched_at.astimezone(UTC).strftime(_MINUTES)
        return {
            "InstanceId": m.instance_id,
            "InstanceName": m.name,
            "RegionId": m.region,
            "ZoneId": m.zone,
            "InstanceType": m.instance_type,
            "InstanceTypeFamily": m.instance_type.rsplit(".", 1)[0],
            "Status": self._status(m),
            "InstanceChargeType": "PostPaid",
            "InternetChargeType": "PayByTraffic",
            "SpotStrategy": launch.spot_strategy if spot else "NoSpot",
            "SpotPriceLimit": Decimal(launch.spot_price_limit or 0),
            "SpotDuration": launch.spot_duration,
            "SpotInterruptionBehavior": launch.interruption_behavior,
            "StoppedMode": launch.stopped_mode if m.state is _S.stopped else "Not-applicable",
            "CreationTime": created,
            "StartTime": created,
            "ExpiredTime": "2099-12-31T15:59Z",
            "AutoReleaseTime": launch.auto_release_time,
            "ImageId": launch.image_id or m.image,
            "KeyPairName": launch.key_pair_name,
            "Cpu": m.offer.vcpus,
            "Memory": int(m.offer.mem_gib * 1024),
            "GPUAmount": m.offer.gpu_count,
            "GPUSpec": f"NVIDIA {m.offer.gpu}",
            "InstanceNetworkType": "vpc",
            "VpcAttributes": {"VSwitchId": launch.vswitch_id, "VpcId": "", "PrivateIpAddress": {"IpAddress": []}},
            "SecurityGroupIds": {"SecurityGroupId": [launch.security_group_id] if launch.security_group_id else []},
            "MetadataOptions": {"HttpEndpoint": "enabled", "HttpTokens": launch.http_tokens},
            "OperationLocks": {"LockReason": locks},
            "Tags": {"Tag": [{"TagKey": k, "TagValue": v} for k, v in m.tags.items()]},
        }


_STATUS = {
    _S.running: "Running",
    _S.stopping: "Stopping",
    _S.stopped: "Stopped",
    _S.terminating: "Stopping",  # a release in progress; ECS has no status of its own for it
}
_STOCK_STATUS = {
    Stock.available: ("Available", "WithStock"),
    Stock.low: ("Available", "ClosedWithStock"),
    Stock.sold_out: ("SoldOut", "WithoutStock"),
}


def _vendor_error(exc: ProviderError) -> EcsError | _DropConnection:
    if isinstance(exc, ProviderUnavailable) and exc.code == "RequestTimeout":
        return _DropConnection()
    if exc.code in _SANDBOX_CODES:
        return EcsError(*_SANDBOX_CODES[exc.code])
    for cls, (status, code, message) in _CLASS_CODES:
        if isinstance(exc, cls):
            # A scripted fault that already names an ECS code keeps it (e.g. Throttling.User).
            return EcsError(status, exc.code or code, exc.message or message)
    return EcsError(500, "InternalError", "The request processing has failed due to some unknown error.")


_missing = missing_parameter


def _required(p: Mapping[str, str], name: str) -> str:
    value = p.get(name)
    if not value:
        raise _missing(name)
    return value


def _integer(p: Mapping[str, str], name: str, default: int) -> int:
    raw = p.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise EcsError(400, f"InvalidParameter.{name}", f"The specified parameter {name} is not valid.") from None


def _optional_time(p: Mapping[str, str], name: str) -> datetime | None:
    raw = p.get(name)
    if not raw:
        return None
    for fmt in (_TIMESTAMP, _MINUTES):
        try:
            return datetime.strptime(raw, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise EcsError(400, f"InvalidParameter.{name}", f"The specified parameter {name} is not valid.")


def _index_order(item: tuple[str, str]) -> tuple[int, str]:
    match = _INSTANCE_ID_N.match(item[0]) or _TAG_KEY.match(item[0])
    return (int(match.group(1)) if match else 0, item[0])


def _tag_pairs(p: Mapping[str, str]) -> list[tuple[str, str]]:
    """``Tag.N.Key`` / ``Tag.N.Value`` in N order; a missing value reads as ""."""
    pairs = []
    for name, key in sorted(p.items(), key=_index_order):
        match = _TAG_KEY.match(name)
        if not match:
            continue
        if not key or key.startswith(("aliyun", "acs:")):
            raise EcsError(400, "InvalidTagKey.Malformed", "The specified Tag.N.Key is not valid.")
        pairs.append((key, p.get(f"Tag.{match.group(1)}.Value") or ""))
    if len(pairs) > MAX_TAGS:
        raise EcsError(400, "InvalidTagCount", f"A request carries at most {MAX_TAGS} tags.")
    return pairs


def _tag_filter(p: Mapping[str, str]) -> dict[str, str | None]:
    """A filter tag without a value matches the key with any value."""
    return {k: (v or None) for k, v in _tag_pairs(p)}


def _instance_id_array(raw: str) -> list[str]:
    try:
        ids = json.loads(raw)
    except ValueError:
        ids = None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or len(ids) > MAX_PAGE:
        raise EcsError(400, "InvalidInstanceIds.Malformed", "The specified InstanceIds is not a valid JSON array.")
    return ids


def _spot_price_limit(p: Mapping[str, str], strategy: str) -> Decimal | None:
    if strategy != "SpotWithPriceLimit":
        return None
    raw = p.get("SpotPriceLimit")
    try:
        limit = Decimal(raw) if raw else None
    except InvalidOperation:
        limit = None
    exponent = limit.as_tuple().exponent if limit is not None and limit.is_finite() else None
    # ECS takes at most three decimals.
    if limit is None or not isinstance(exponent, int) or exponent < -3 or limit <= 0:
        raise EcsError(400, "InvalidSpotPriceLimit", "The specified SpotPriceLimit is not valid.")
    return limit


def _user_data(p: Mapping[str, str]) -> str:
    raw = p.get("UserData") or ""
    if not raw:
        return ""
    if len(raw) > MAX_USER_DATA:
        raise EcsError(400, "InvalidUserData.SizeExceeded", "The specified UserData exceeds the size limit.")
    try:
        return base64.b64decode(raw, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise EcsError(400, "InvalidUserData.Base64FormatInvalid",
                       "The specified UserData is not valid Base64.") from None
