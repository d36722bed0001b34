"""``TencentProvider``, the Provider for Tencent Cloud CVM, and ``from_config``, its production wiring."""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from tencentcloud.common.exception.tencent_cloud_sdk_exception import (
    TencentCloudSDKException,
)
from tencentcloud.cvm.v20170312 import models

from providers.base import (
    Capability,
    Instance,
    InstanceRef,
    InstanceRequest,
    InstanceState,
    InvalidRequest,
    NotFound,
    ProviderUnavailable,
)
from providers.catalog import filter_offers, load_catalog
from providers.retry import parse_retry_after
from providers.tencent.client import ClientFactory, CvmClient, refuse_sdk_retryer, sdk_client_factory
from providers.tencent.config import NAME, TencentConfig
from providers.tencent.error_codes import GONE_ON_TERMINATE
from providers.tencent.errors import translate_error, vendor_error
from providers.tencent.prices import live_offers
from providers.tencent.wire import (
    MAX_TAG_FILTERS,
    check_same_request,
    launch_capacity,
    run_instances_params,
    to_instance,
)
from scheduler.clock import Clock
from scheduler.models import Capacity, Offer

__all__ = ["TencentConfig", "TencentProvider", "from_config"]


def from_config(config: TencentConfig, clock: Clock, *, catalog: Sequence[Offer] | None = None) -> TencentProvider:
    """The real provider: SDK clients from ``config``, the bundled catalog unless one is given."""
    offers = list(catalog) if catalog is not None else filter_offers(load_catalog(), providers=[NAME])
    return TencentProvider(sdk_client_factory(config), config, clock, offers)


class TencentProvider:
    """``providers.base.Provider`` for Tencent Cloud CVM (see the package docstring for the contract choices)."""

    name = NAME

    def __init__(
        self, client_factory: ClientFactory, config: TencentConfig, clock: Clock, catalog: Sequence[Offer]
    ) -> None:
        self.capabilities = frozenset(
            {Capability.stop_charging, Capability.preemption_events}
            | ({Capability.live_prices} if config.live_prices else set())
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
            out.extend(live_offers(region, answer.get("InstanceTypeQuotaSet") or [], self._catalog,
                                   self._config.billing_currency, self._clock.now().date()))
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
        params = run_instances_params(request, self._config, self._clock.now())
        answer = self._call(offer.region, "RunInstances", params)
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
                zone=offer.zone, instance_type=offer.instance_type, capacity=launch_capacity(request.capacity),
                state=InstanceState.pending, tags=dict(request.tags), client_token=request.client_token,
            )
        made = described[0]
        check_same_request(made, request)
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
                    instance = to_instance(region, raw)
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
        except (NotFound, InvalidRequest) as exc:
            # Destroyed, in the recycle bin (SHUTDOWN), on its way there, never created (LAUNCH_FAILED),
            # or an id that names no instance: what terminate wants is already true.
            if exc.code not in GONE_ON_TERMINATE:
                raise

    # --- inside ----------------------------------------------------------------------

    def _client(self, region: str) -> CvmClient:
        client = self._clients.get(region)
        if client is None:
            client = self._factory(region)
            refuse_sdk_retryer(client)
            self._clients[region] = client
        return client

    def _call(self, region: str, action: str, params: Mapping[str, Any]) -> dict[str, Any]:
        request = getattr(models, f"{action}Request")()
        request.from_json_string(json.dumps(params))
        client = self._client(region)
        try:
            # The SDK's transport, not its typed method: the SDK recognises an error answer only under a
            # Content-Type of exactly application/json, and reads one with "; charset=utf-8" as a success
            # (a sold-out launch as zero instances, a failed listing as an empty one). The answer is read
            # here whatever its Content-Type, and its headers (Retry-After) are kept.
            http = client._call(action, request._serialize(), headers=dict(request.headers or {}))
        except TencentCloudSDKException as exc:
            raise translate_error(exc, action=action, region=region) from None
        retry_after = parse_retry_after(http.headers.get("Retry-After"))
        if http.status_code != 200:
            raise ProviderUnavailable(
                f"Tencent Cloud {action} in {region} answered HTTP {http.status_code}", provider=NAME,
                code="ServerNetworkError", retry_after=retry_after,
            )
        try:
            answer = json.loads(http.content)["Response"]
        except (ValueError, KeyError, TypeError):
            raise ProviderUnavailable(f"Tencent Cloud {action} in {region} answered with something that is not "
                                      "its JSON", provider=NAME, code="JSONDecodeError") from None
        if not isinstance(answer, dict):
            raise ProviderUnavailable(f"Tencent Cloud {action} in {region} answered without a Response",
                                      provider=NAME, code="JSONDecodeError")
        error = answer.get("Error")
        if isinstance(error, dict):
            raise vendor_error(str(error.get("Code") or "Unknown"), str(error.get("Message") or ""),
                               str(answer.get("RequestId") or ""), action=action, region=region,
                               retry_after=retry_after)
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
        return [to_instance(region, raw) for raw in answer.get("InstanceSet") or []]
