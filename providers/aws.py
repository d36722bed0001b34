"""The AWS EC2 adapter: ``providers.base.Provider`` over boto3, one EC2 client per region.

The clients are injected (a mapping or a factory; ``make_ec2_client`` builds
real ones), so tests point them at a local moto server and production at AWS;
this module never reads the environment. botocore's own retries are switched
off (``total_max_attempts: 1``): retries are ours (``providers.retry``), made safe by
the client token on every launch. The adapter itself never retries.

Every botocore exception is translated here into the project's
``ProviderError`` classes, keeping AWS's error code and request id.

AWS specifics worth knowing:

* Spot is a one-time request that terminates on interruption: such an instance
  cannot be stopped, so ``stop`` refuses it with ``InvalidRequest`` before
  asking AWS (which would refuse too), and the capability set lacks
  ``spot_stop``.
* A reclaimed spot instance lingers as ``terminated`` (about an hour) with the
  state reason ``Server.SpotInstanceTermination``: listings keep terminated
  instances visible so the lifecycle sees the reclaim.
* The two-minute interruption notice is published on the instance (IMDS) and
  through EventBridge, not by DescribeInstances, so ``interruption_notice_at``
  stays None here.
* Reserved capacity is a billing construct on AWS: a reserved launch is an
  on-demand launch that the reservation's discount covers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)
from botocore.parsers import ResponseParserError
from pydantic import Field, SecretStr, model_validator

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
from scheduler.logs import get_logger, register_secret
from scheduler.models import Capacity, Frozen, Offer, Price
from scheduler.money import Money
from scheduler.times import utc

__all__ = [
    "NAME",
    "PREEMPTION_REASON_CODES",
    "AwsConfig",
    "AwsProvider",
    "EC2Client",
    "classify_error",
    "currency_for",
    "from_config",
    "latest_spot_prices",
    "make_ec2_client",
    "run_instances_params",
    "translate_error",
]

NAME = "aws"
SPOT_PRICE_SOURCE = "aws describe_spot_price_history"
# DescribeSpotPriceHistory takes the product with or without "(Amazon VPC)";
# the plain one is what instances in a VPC (all of ours) are billed as.
SPOT_PRODUCT = "Linux/UNIX"
# StateReason codes with which AWS reports that it reclaimed a spot instance.
PREEMPTION_REASON_CODES = frozenset({"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"})

log = get_logger(__name__)

_STATES: dict[str, InstanceState] = {
    "pending": InstanceState.pending,
    "running": InstanceState.running,
    "stopping": InstanceState.stopping,
    "stopped": InstanceState.stopped,
    "shutting-down": InstanceState.terminating,
    "terminated": InstanceState.terminated,
}

# AWS error codes -> ours. Codes win over HTTP status: AWS answers a capacity
# shortage with a 500, which a status rule alone would call an outage.
_CODE_CLASSES: dict[str, type[ProviderError]] = {
    "InsufficientInstanceCapacity": NoCapacity,
    "InsufficientCapacity": NoCapacity,
    "InsufficientHostCapacity": NoCapacity,
    "InsufficientReservedInstanceCapacity": NoCapacity,
    "UnfulfillableCapacity": NoCapacity,
    "SpotMaxPriceTooLow": NoCapacity,
    # "The requested configuration is currently not supported": the type is not
    # sold in that zone (for that market) right now; another offer may be.
    "Unsupported": NoCapacity,
    "MaxSpotInstanceCountExceeded": QuotaExceeded,
    "VcpuLimitExceeded": QuotaExceeded,
    "InstanceLimitExceeded": QuotaExceeded,
    "RequestLimitExceeded": Throttled,
    "Throttling": Throttled,
    "ThrottlingException": Throttled,
    "AuthFailure": AuthFailed,
    "UnauthorizedOperation": AuthFailed,
    "InvalidClientTokenId": AuthFailed,
    "SignatureDoesNotMatch": AuthFailed,
    "OptInRequired": AuthFailed,
    "Blocked": AuthFailed,
    "InvalidInstanceID.NotFound": NotFound,
    "InvalidInstanceID.Malformed": NotFound,
    "IdempotentParameterMismatch": InvalidRequest,
    "UnsupportedOperation": InvalidRequest,
    "IncorrectInstanceState": InvalidRequest,
    "MissingParameter": InvalidRequest,
    "InternalError": ProviderUnavailable,
    "InternalFailure": ProviderUnavailable,
    "ServiceUnavailable": ProviderUnavailable,
    "Unavailable": ProviderUnavailable,
}
_PREFIX_CLASSES: tuple[tuple[str, type[ProviderError]], ...] = (
    ("InvalidParameter", InvalidRequest),
    ("AuthFailure", AuthFailed),
    ("Insufficient", NoCapacity),
)

_FIXES: dict[type[ProviderError], str] = {
    AuthFailed: (
        "check GPUSCHED_AWS_ACCESS_KEY_ID / GPUSCHED_AWS_SECRET_ACCESS_KEY (or the instance role) "
        "and that the IAM policy allows this EC2 action in this region"
    ),
    QuotaExceeded: (
        "raise the EC2 quota in Service Quotas (Running On-Demand / All Spot Instance Requests "
        "for this family), or terminate unused instances"
    ),
}


class EC2Client(Protocol):
    """The part of a boto3 EC2 client this adapter uses (botocore builds the methods at run time)."""

    def run_instances(self, **kwargs: Any) -> dict[str, Any]: ...

    def describe_instances(self, **kwargs: Any) -> dict[str, Any]: ...

    def stop_instances(self, **kwargs: Any) -> dict[str, Any]: ...

    def start_instances(self, **kwargs: Any) -> dict[str, Any]: ...

    def terminate_instances(self, **kwargs: Any) -> dict[str, Any]: ...

    def get_paginator(self, operation_name: str) -> Any: ...


class AwsConfig(Frozen):
    """How to reach EC2 and what to launch with. Secrets stay SecretStr.

    Leave both keys empty to use botocore's default credential chain (an
    instance role when the daemon itself runs on EC2: the recommended setup).
    AMIs, subnets and security groups are regional (subnets per zone), hence
    the mappings.
    """

    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    session_token: SecretStr | None = None
    regions: tuple[str, ...] = Field(default=("us-east-1",), min_length=1)
    image_ids: Mapping[str, str] = Field(default_factory=dict)  # region -> AMI id
    subnet_ids: Mapping[str, str] = Field(default_factory=dict)  # availability zone -> subnet id
    security_group_ids: Mapping[str, tuple[str, ...]] = Field(default_factory=dict)  # region -> group ids
    key_name: str | None = None
    instance_profile: str | None = None  # IAM instance profile name, or its ARN
    endpoint_url: str | None = None  # tests: a local moto server
    page_size: int = Field(default=100, ge=5, le=1000)  # DescribeInstances MaxResults allows 5..1000
    connect_timeout_seconds: float = Field(default=10.0, gt=0)
    read_timeout_seconds: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _keys_come_in_pairs(self) -> AwsConfig:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("set both the AWS access key id and the secret access key, or neither")
        if self.session_token is not None and self.access_key_id is None:
            raise ValueError("an AWS session token needs an access key id and secret access key")
        return self


def make_ec2_client(region: str, config: AwsConfig, session: boto3.session.Session | None = None) -> EC2Client:
    """A boto3 EC2 client for ``region`` with ``config``'s credentials and botocore's retries off.

    ``total_max_attempts: 1`` is what "no retries" means to botocore: its
    ``max_attempts`` counts retries AFTER the first try, so 1 there would still
    retry once (and two Throttling replies in a row would look like one).
    Pass one ``session`` for all regions: it loads the EC2 service model once
    (about 0.3 s) instead of once per client. Building clients from one session
    in several threads at once is not safe; AwsProvider builds them under a lock.
    Without keys in ``config``, botocore's default chain finds credentials
    (an instance role when the daemon runs on EC2).
    """
    client: EC2Client = (session or boto3.session.Session()).client(
        "ec2",
        region_name=region,
        endpoint_url=config.endpoint_url,
        aws_access_key_id=config.access_key_id,
        aws_secret_access_key=_reveal(config.secret_access_key),
        aws_session_token=_reveal(config.session_token),
        config=Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=config.connect_timeout_seconds,
            read_timeout=config.read_timeout_seconds,
            user_agent_extra="gpusched",
        ),
    )
    return client


def from_config(
    config: AwsConfig,
    clock: Clock,
    catalog: Sequence[Offer] | None = None,
    session: boto3.session.Session | None = None,
) -> AwsProvider:
    """The production wiring: clients built on first use per region, the bundled catalog as price fallback."""
    register_secret(config.secret_access_key)
    register_secret(config.session_token)
    shared = session or boto3.session.Session()
    offers = catalog if catalog is not None else load_catalog()
    return AwsProvider(lambda region: make_ec2_client(region, config, shared), config, clock, offers)


# --- error translation ---------------------------------------------------------


def classify_error(code: str, status: int) -> type[ProviderError]:
    """Our error class for an AWS error code (first) or HTTP status (when the code is unknown)."""
    if code in _CODE_CLASSES:
        return _CODE_CLASSES[code]
    for prefix, cls in _PREFIX_CLASSES:
        if code.startswith(prefix):
            return cls
    if status >= 500:
        return ProviderUnavailable
    if status in (401, 403):
        return AuthFailed
    if 400 <= status < 500:
        return InvalidRequest
    return ProviderError


def translate_error(exc: Exception, *, operation: str, region: str) -> ProviderError:
    """The ProviderError for a botocore exception raised by ``operation`` in ``region``."""
    where = f"AWS {operation} in {region}"
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        meta = exc.response.get("ResponseMetadata", {})
        code = str(error.get("Code") or "")
        status = int(meta.get("HTTPStatusCode") or 0)
        detail = str(error.get("Message") or "no message")
        cls = classify_error(code, status)
        if cls is AuthFailed:
            message = f"{where} was refused: AWS did not accept the credentials or permissions ({code}: {detail})"
        else:
            message = f"{where} failed: {code or f'HTTP {status}'}: {detail}"
        return cls(message, provider=NAME, code=code, request_id=str(meta.get("RequestId") or ""),
                   fix=_FIXES.get(cls))
    code = type(exc).__name__
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return AuthFailed(f"{where}: no usable AWS credentials ({exc})", provider=NAME, code=code,
                          fix=_FIXES[AuthFailed])
    if isinstance(exc, (BotoConnectionError, HTTPClientError, ResponseParserError)):
        # Sent, maybe carried out, answer lost or garbled: transient, and safe to
        # retry because launches carry their client token.
        return ProviderUnavailable(f"{where}: no usable answer from EC2 ({exc})", provider=NAME, code=code)
    if isinstance(exc, ParamValidationError):
        return InvalidRequest(f"{where}: botocore refused the parameters: {exc}", provider=NAME, code=code)
    # Any other botocore error happens on our side before anything is sent
    # (unknown region, endpoint, configuration): retrying will not help.
    return InvalidRequest(f"{where}: {exc}", provider=NAME, code=code)


# --- the request -----------------------------------------------------------------


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


# --- the provider ------------------------------------------------------------------


class AwsProvider:
    """``providers.base.Provider`` for AWS EC2.

    ``clients`` maps a region to its EC2 client, or builds one (called once per
    region, then kept). ``catalog`` supplies instance specs, on-demand prices
    and the fallback spot prices; only its ``aws`` rows are used.
    """

    name = NAME
    capabilities = frozenset({CAP_STOP_CHARGING, CAP_PREEMPTION_EVENTS, CAP_LIVE_PRICES})

    def __init__(
        self,
        clients: Callable[[str], EC2Client] | Mapping[str, EC2Client],
        config: AwsConfig,
        clock: Clock,
        catalog: Sequence[Offer],
    ) -> None:
        self._config = config
        self._clock = clock
        self._catalog = tuple(filter_offers(catalog, providers=[NAME]))
        self._lock = threading.Lock()
        if isinstance(clients, Mapping):
            self._clients: dict[str, EC2Client] = dict(clients)
            self._factory: Callable[[str], EC2Client] | None = None
        else:
            self._clients = {}
            self._factory = clients

    # --- Provider ------------------------------------------------------------

    def offers(self, regions: Sequence[str] | None = None) -> list[Offer]:
        out: list[Offer] = []
        for region in self._served(regions):
            rows = [o for o in self._catalog if o.region == region]
            if not rows:
                continue
            live = self._live_spot_prices(region, sorted({o.instance_type for o in rows}))
            for offer in rows:
                price = live.get((offer.instance_type, offer.zone))
                out.append(offer if price is None else offer.model_copy(update={"spot": price}))
        return out

    def launch(self, request: InstanceRequest) -> Instance:
        offer = request.offer
        if offer.provider != NAME:
            raise InvalidRequest(f"offer {offer.key} belongs to {offer.provider!r}, not {NAME!r}", provider=NAME)
        if offer.region not in self._config.regions:
            raise InvalidRequest(
                f"region {offer.region} is not served by aws ({', '.join(self._config.regions)})",
                provider=NAME, fix="add it to GPUSCHED_AWS_REGIONS",
            )
        params = run_instances_params(request, self._config)
        response = self._call(offer.region, "RunInstances", lambda c: c.run_instances(**params))
        created = response.get("Instances") or []
        if len(created) != 1:
            raise ProviderUnavailable(
                f"AWS RunInstances in {offer.region} answered with {len(created)} instances, expected 1",
                provider=NAME, code="UnexpectedResponse",
                request_id=str(response.get("ResponseMetadata", {}).get("RequestId", "")),
            )
        raw = created[0]
        if not raw.get("Tags"):
            # Tagged at creation either way; fill them in where the answer leaves them out.
            raw = {**raw, "Tags": [{"Key": k, "Value": v} for k, v in request.tags.items()]}
        return self._instance(offer.region, raw)

    def instances(self, tags: Mapping[str, str], regions: Sequence[str] | None = None) -> list[Instance]:
        wanted = dict(tags)
        # EC2 filter values are wildcard patterns ('*', '?'): the server narrows,
        # the exact comparison below decides.
        filters = [{"Name": f"tag:{key}", "Values": [value]} for key, value in sorted(wanted.items())]
        found: list[Instance] = []
        for region in self._served(regions):
            for raw in self._list(region, filters):
                instance = self._instance(region, raw)
                if all(instance.tags.get(k) == v for k, v in wanted.items()):
                    found.append(instance)
        return found

    def stop(self, ref: InstanceRef) -> None:
        self._check_ref(ref)
        current = self._describe_one(ref)
        if current.get("InstanceLifecycle") == "spot":
            raise InvalidRequest(
                f"aws cannot stop spot instance {ref.instance_id}: a one-time spot instance can only be terminated",
                provider=NAME, code="UnsupportedOperation",
                fix="terminate the instance instead (spot_stop is not among aws's capabilities)",
            )
        self._call(ref.region, "StopInstances", lambda c: c.stop_instances(InstanceIds=[ref.instance_id]))

    def start(self, ref: InstanceRef) -> None:
        self._check_ref(ref)
        self._call(ref.region, "StartInstances", lambda c: c.start_instances(InstanceIds=[ref.instance_id]))

    def terminate(self, ref: InstanceRef) -> None:
        self._check_ref(ref)
        try:
            self._call(
                ref.region, "TerminateInstances", lambda c: c.terminate_instances(InstanceIds=[ref.instance_id])
            )
        except NotFound:
            return  # already gone, or never there: what terminate wants

    # --- inside --------------------------------------------------------------

    def _client(self, region: str) -> EC2Client:
        with self._lock:
            client = self._clients.get(region)
            if client is None:
                if self._factory is None:
                    raise InvalidRequest(f"no EC2 client was given for region {region}", provider=NAME)
                client = self._factory(region)
                self._clients[region] = client
            return client

    def _call(self, region: str, operation: str, fn: Callable[[EC2Client], Any]) -> Any:
        client = self._client(region)
        try:
            return fn(client)
        except (ClientError, BotoCoreError, ResponseParserError) as exc:
            raise translate_error(exc, operation=operation, region=region) from exc

    def _served(self, regions: Sequence[str] | None) -> tuple[str, ...]:
        if regions is None:
            return self._config.regions
        return tuple(r for r in self._config.regions if r in set(regions))

    def _check_ref(self, ref: InstanceRef) -> None:
        if ref.provider != NAME:
            raise InvalidRequest(
                f"instance {ref.instance_id} belongs to {ref.provider!r}, not {NAME!r}", provider=NAME
            )

    def _list(self, region: str, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every instance matching ``filters`` in ``region``: one DescribeInstances call per page."""

        def pages(client: EC2Client) -> list[dict[str, Any]]:
            paginator = client.get_paginator("describe_instances")
            config = {"PageSize": self._config.page_size}
            listed: list[dict[str, Any]] = []
            for page in paginator.paginate(Filters=filters, PaginationConfig=config):
                for reservation in page.get("Reservations", []):
                    listed.extend(reservation.get("Instances", []))
            return listed

        return self._call(region, "DescribeInstances", pages)

    def _describe_one(self, ref: InstanceRef) -> dict[str, Any]:
        response = self._call(
            ref.region, "DescribeInstances", lambda c: c.describe_instances(InstanceIds=[ref.instance_id])
        )
        for reservation in response.get("Reservations", []):
            for raw in reservation.get("Instances", []):
                if raw.get("InstanceId") == ref.instance_id:
                    return dict(raw)
        raise NotFound(f"AWS has no instance {ref.instance_id} in {ref.region}", provider=NAME,
                       code="InvalidInstanceID.NotFound")

    def _live_spot_prices(self, region: str, instance_types: list[str]) -> dict[tuple[str, str], Price]:
        """The current spot price per (instance type, zone); empty when AWS cannot say right now.

        Wrong credentials are not hidden behind the catalog: AuthFailed propagates.
        """

        def history(client: EC2Client) -> list[dict[str, Any]]:
            paginator = client.get_paginator("describe_spot_price_history")
            records: list[dict[str, Any]] = []
            # A start time of now gives the price in effect now, per zone.
            for page in paginator.paginate(
                InstanceTypes=instance_types, ProductDescriptions=[SPOT_PRODUCT], StartTime=self._clock.now()
            ):
                records.extend(page.get("SpotPriceHistory", []))
            return records

        try:
            records = self._call(region, "DescribeSpotPriceHistory", history)
        except AuthFailed:
            raise
        except ProviderError as exc:
            log.warning("aws_spot_prices_unavailable", region=region, fallback="catalog", **exc.log_fields())
            return {}
        return latest_spot_prices(records, currency_for(region))

    def _instance(self, region: str, raw: Mapping[str, Any]) -> Instance:
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


def currency_for(region: str) -> str:
    """AWS bills its China regions (Beijing, Ningxia: ``cn-*``) in yuan, every other region in dollars."""
    return "CNY" if region.startswith("cn-") else "USD"


def latest_spot_prices(records: Iterable[Mapping[str, Any]], currency: str = "USD") -> dict[tuple[str, str], Price]:
    """The newest DescribeSpotPriceHistory record per (instance type, zone), as a Price in ``currency``."""
    newest: dict[tuple[str, str], tuple[datetime, Decimal]] = {}
    for record in records:
        key = (str(record["InstanceType"]), str(record["AvailabilityZone"]))
        stamp = utc(record["Timestamp"])
        try:
            amount = Decimal(str(record["SpotPrice"]))
        except InvalidOperation:
            continue  # a garbled record says nothing; the catalog price stays
        if not amount.is_finite() or amount <= 0:
            continue
        if key not in newest or stamp > newest[key][0]:
            newest[key] = (stamp, amount)
    return {
        key: Price(
            per_hour=Money(amount=amount, currency=currency),
            source=f"{SPOT_PRICE_SOURCE} {stamp.isoformat()}",
            as_of=stamp.date(),
        )
        for key, (stamp, amount) in newest.items()
    }


def _tag_dict(tags: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    return {str(t["Key"]): str(t.get("Value", "")) for t in tags}


def _reveal(secret: SecretStr | None) -> str | None:
    return None if secret is None else secret.get_secret_value()
