"""``AwsProvider``, the Provider for AWS EC2, and ``from_config``, its production wiring."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError

from providers.aws.client import EC2Client, make_ec2_client
from providers.aws.config import NAME, AwsConfig
from providers.aws.errors import translate_error
from providers.aws.prices import currency_for, latest_spot_prices, spot_price_records
from providers.aws.wire import run_instances_params, to_instance
from providers.base import (
    AuthFailed,
    Capability,
    Instance,
    InstanceRef,
    InstanceRequest,
    InvalidRequest,
    NotFound,
    ProviderError,
    ProviderUnavailable,
)
from providers.catalog import filter_offers, load_catalog
from scheduler.clock import Clock
from scheduler.logs import get_logger, register_secret
from scheduler.models import Offer, Price

__all__ = ["AwsConfig", "AwsProvider", "from_config"]

log = get_logger(__name__)


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


class AwsProvider:
    """``providers.base.Provider`` for AWS EC2.

    ``clients`` maps a region to its EC2 client, or builds one (called once per
    region, then kept). ``catalog`` supplies instance specs, on-demand prices
    and the fallback spot prices; only its ``aws`` rows are used.
    """

    name = NAME
    capabilities = frozenset({Capability.stop_charging, Capability.preemption_events, Capability.live_prices,
                              Capability.bills_from_running})

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
        return to_instance(offer.region, raw)

    def instances(self, tags: Mapping[str, str], regions: Sequence[str] | None = None) -> list[Instance]:
        wanted = dict(tags)
        # EC2 filter values are wildcard patterns ('*', '?'): the server narrows,
        # the exact comparison below decides.
        filters = [{"Name": f"tag:{key}", "Values": [value]} for key, value in sorted(wanted.items())]
        found: list[Instance] = []
        for region in self._served(regions):
            for raw in self._list(region, filters):
                instance = to_instance(region, raw)
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
        try:
            records = self._call(region, "DescribeSpotPriceHistory",
                                 lambda c: spot_price_records(c, instance_types, self._clock.now()))
        except AuthFailed:
            raise
        except ProviderError as exc:
            log.warning("aws_spot_prices_unavailable", region=region, fallback="catalog", **exc.log_fields())
            return {}
        return latest_spot_prices(records, currency_for(region))
