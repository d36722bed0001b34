"""``AlibabaProvider``, the Provider for Alibaba Cloud ECS, and ``from_config``, its production wiring."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import Any

from aliyunsdkcore.acs_exception.exceptions import ClientException, ServerException
from aliyunsdkcore.client import AcsClient
from aliyunsdkcore.request import RpcRequest
from aliyunsdkecs.request.v20140526.DeleteInstancesRequest import DeleteInstancesRequest
from aliyunsdkecs.request.v20140526.DescribeInstancesRequest import (
    DescribeInstancesRequest,
)
from aliyunsdkecs.request.v20140526.StartInstancesRequest import StartInstancesRequest
from aliyunsdkecs.request.v20140526.StopInstancesRequest import StopInstancesRequest

from providers.alibaba.client import ClientFactory, make_client_factory, split_endpoint
from providers.alibaba.config import NAME, AlibabaConfig
from providers.alibaba.errors import translate_error
from providers.alibaba.prices import on_demand_price, spot_prices, stock
from providers.alibaba.wire import MAX_TAGS, PAGE_SIZE, items, run_instances_request, to_instance
from providers.base import (
    Capability,
    Instance,
    InstanceRef,
    InstanceRequest,
    InstanceState,
    InvalidRequest,
    NotFound,
    ProviderError,
    ProviderUnavailable,
)
from providers.catalog import load_catalog
from providers.retry import parse_retry_after
from scheduler.clock import Clock
from scheduler.models import Capacity, Offer, Price, Stock

__all__ = ["AlibabaConfig", "AlibabaProvider", "from_config"]

_S = InstanceState


def from_config(config: AlibabaConfig, clock: Clock, catalog: Sequence[Offer] | None = None) -> AlibabaProvider:
    """The production adapter: real AcsClients, the bundled catalog unless one is given."""
    return AlibabaProvider(make_client_factory(config), config, clock, load_catalog() if catalog is None else catalog)


def _carries(tags: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(tags.get(k) == v for k, v in wanted.items())


class AlibabaProvider:
    """``providers.base.Provider`` for Alibaba Cloud ECS."""

    name = NAME
    capabilities = frozenset({
        Capability.stop_charging, Capability.spot_stop, Capability.preemption_events, Capability.live_prices,
    })

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
        self._host, _ = split_endpoint(config.endpoint)
        self._clients: dict[str, AcsClient] = {}
        self._lock = threading.Lock()
        # Instances ECS will stop listing: the ones we released, the ones it is reclaiming.
        self._releasing: dict[str, Instance] = {}
        self._reclaiming: dict[str, Instance] = {}
        self._gone: dict[str, tuple[Instance, datetime]] = {}

    # --- the Provider protocol ------------------------------------------------

    def offers(self, regions: Sequence[str] | None = None) -> list[Offer]:
        out: list[Offer] = []
        spot_duration = self._config.spot_duration_hours
        for region in self._served(regions):
            rows = [o for o in self._catalog if o.region == region]
            if not rows:
                continue
            call = partial(self._call, region)
            on_demand_stock = stock(call, Capacity.on_demand, spot_duration)
            spot_stock = stock(call, Capacity.spot, spot_duration)
            on_demand: dict[str, Price | None] = {}
            spot: dict[str, dict[str, Price]] = {}
            for instance_type in sorted({o.instance_type for o in rows}):
                on_demand[instance_type] = on_demand_price(call, instance_type, self._clock)
                spot[instance_type] = spot_prices(call, instance_type, spot_duration, self._clock)
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
        run = run_instances_request(request, self._config, self._clock.now())
        body = self._call(offer.region, run)
        ids = items(body, "InstanceIdSets", "InstanceIdSet")
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
            # What do_action_with_exception does, keeping the answer's headers: a throttling
            # answer's Retry-After is the wait the retry helper must honour.
            _, headers, raw, failure = self._client(region)._implementation_of_do_action(request)
        except (ServerException, ClientException) as exc:
            raise translate_error(exc, action) from exc
        except OSError as exc:  # the SDK wraps network errors; this is the belt to its braces
            raise ProviderUnavailable(f"Alibaba Cloud {action} failed: {exc}", provider=NAME) from exc
        if failure is not None:
            retry_after = parse_retry_after((headers or {}).get("Retry-After"))
            raise translate_error(failure, action, retry_after=retry_after) from failure
        try:
            body = json.loads(raw, parse_float=Decimal)
        except (TypeError, ValueError):
            body = None
        if not isinstance(body, dict):
            raise ProviderUnavailable(f"Alibaba Cloud {action} answered with something that is not JSON", provider=NAME)
        return body

    def _check_batch(self, body: Mapping[str, Any], action: str) -> None:
        for answer in items(body, "InstanceResponses", "InstanceResponse"):
            code = str(answer.get("Code", "200"))
            if code != "200":
                failure = ServerException(code, str(answer.get("Message", "")), request_id=body.get("RequestId"))
                raise translate_error(failure, action)

    def _describe(self, region: str, instance_ids: list[str]) -> list[Instance]:
        describe = DescribeInstancesRequest()
        describe.set_InstanceIds(json.dumps(instance_ids))
        describe.set_PageSize(PAGE_SIZE)
        body = self._call(region, describe)
        return [to_instance(region, raw) for raw in items(body, "Instances", "Instance")]

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
            for raw in items(body, "Instances", "Instance"):
                yield to_instance(region, raw)
            token = str(body.get("NextToken") or "")
            if not token:
                return

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
