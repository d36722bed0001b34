"""``HuaweiProvider``, the Provider for Huawei Cloud ECS, and ``from_config``, its production wiring."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import requests
from huaweicloudsdkcore.exceptions.exceptions import SdkException
from huaweicloudsdkecs.v2 import (
    BatchStartServersOption,
    BatchStartServersRequest,
    BatchStartServersRequestBody,
    BatchStopServersOption,
    BatchStopServersRequest,
    BatchStopServersRequestBody,
    CreatePostPaidServersRequest,
    CreatePostPaidServersRequestBody,
    DeleteServersRequest,
    DeleteServersRequestBody,
    ListFlavorsRequest,
    ListServersDetailsRequest,
    ServerId,
    ShowJobRequest,
)

from providers.base import (
    TAG_MANAGED,
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
from providers.huawei.client import ClientFactory, EcsClient, refuse_sdk_retries, sdk_client_factory
from providers.huawei.config import NAME, HuaweiConfig
from providers.huawei.errors import answer_error, job_error, translate_error
from providers.huawei.prices import offers_with_stock
from providers.huawei.wire import (
    PREEMPT_REASON,
    TAG_INTENT,
    check_same_request,
    intent_id,
    job_failure,
    job_server_ids,
    launch_capacity,
    post_paid_server,
    tag_filter,
    to_instance,
)
from scheduler.clock import Clock
from scheduler.models import Capacity, Offer

__all__ = ["HuaweiConfig", "HuaweiProvider", "from_config"]

_S = InstanceState


def from_config(config: HuaweiConfig, clock: Clock, *, catalog: Sequence[Offer] | None = None) -> HuaweiProvider:
    """The real provider: SDK clients from ``config``, the bundled catalog unless one is given."""
    offers = list(catalog) if catalog is not None else filter_offers(load_catalog(), providers=[NAME])
    return HuaweiProvider(sdk_client_factory(config), config, clock, offers)


def _carries(tags: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(tags.get(k) == v for k, v in wanted.items())


class HuaweiProvider:
    """``providers.base.Provider`` for Huawei Cloud ECS (see the package docstring for the choices)."""

    name = NAME
    capabilities = frozenset({Capability.stop_charging, Capability.preemption_events})

    def __init__(
        self, client_factory: ClientFactory, config: HuaweiConfig, clock: Clock, catalog: Sequence[Offer]
    ) -> None:
        self._factory = client_factory
        self._config = config
        self._clock = clock
        self._catalog = tuple(o for o in catalog if o.provider == NAME)
        self._clients: dict[str, EcsClient] = {}
        self._lock = threading.Lock()
        # Memory of servers ECS will stop listing (it lists no deleted server): what we last saw of each,
        # whether a listing ever showed it, the ones we deleted, and the gone ones still reported.
        self._seen: dict[str, tuple[Instance, bool]] = {}
        self._deleting: set[str] = set()
        self._gone: dict[str, tuple[Instance, datetime]] = {}

    # --- Provider ------------------------------------------------------------------

    def offers(self, regions: Sequence[str] | None = None) -> list[Offer]:
        out: list[Offer] = []
        for region in self._served(regions):
            rows = [o for o in self._catalog if o.region == region]
            if not rows:
                continue
            answer = self._call(region, "list_flavors", ListFlavorsRequest())
            out.extend(offers_with_stock(rows, answer.get("flavors") or []))
        return out

    def launch(self, request: InstanceRequest) -> Instance:
        offer = request.offer
        if offer.provider != NAME:
            raise InvalidRequest(f"offer {offer.key} belongs to {offer.provider!r}, not {NAME!r}", provider=NAME)
        if offer.region not in self._config.regions:
            raise InvalidRequest(
                f"region {offer.region} is not configured for Huawei Cloud ({', '.join(self._config.regions)})",
                provider=NAME, fix="add it to GPUSCHED_HUAWEI_REGIONS (and its project to GPUSCHED_HUAWEI_PROJECT_IDS)",
            )
        intent = intent_id(request.client_token)
        # A retried launch (a lost answer, a crash after the intent was written) finds its server by the intent
        # tag, however long ago the first try was: Huawei's X-Client-Token dedupes only for a while.
        made = self._by_intent(offer.region, intent)
        if made is None:
            server = post_paid_server(request, self._config, intent)  # refuses a bad request before any call
            try:
                answer = self._call(offer.region, "create_post_paid_servers", CreatePostPaidServersRequest(
                    x_client_token=intent, body=CreatePostPaidServersRequestBody(server=server)))
            except InvalidRequest as exc:
                if exc.code != "Ecs.0122":
                    raise
                # The token was used with other parameters: say what it made, if it made anything.
                made = self._by_intent(offer.region, intent)
                if made is None:
                    raise
            else:
                server_id = self._await_server(offer.region, answer)
                described = self._describe(offer.region, [server_id])
                made = described[0] if described else Instance(
                    # Not listed yet: what we asked for, pending, launch time unknown.
                    ref=InstanceRef(provider=NAME, region=offer.region, instance_id=server_id),
                    zone=offer.zone, instance_type=offer.instance_type,
                    capacity=launch_capacity(request.capacity), state=_S.pending, tags=dict(request.tags),
                )
        check_same_request(made, request)
        with self._lock:
            previous = self._seen.get(made.ref.instance_id)
            self._seen[made.ref.instance_id] = (made, previous[1] if previous else False)
        return made.model_copy(update={"client_token": request.client_token})

    def instances(self, tags: Mapping[str, str], regions: Sequence[str] | None = None) -> list[Instance]:
        wanted = dict(tags)
        found: list[Instance] = []
        for region in self._served(regions):
            listed = [i for i in self._list(region, wanted) if _carries(i.tags, wanted)]
            found.extend(self._remember(region, wanted, listed))
        return found

    def stop(self, ref: InstanceRef) -> None:
        current = self._one(ref)
        if current.capacity is Capacity.spot:
            raise InvalidRequest(
                f"Huawei Cloud spot server {ref.instance_id} is not stopped by gpusched: a stopped spot server "
                "is not promised its capacity back", provider=NAME, code="SpotCannotStop",
                fix="terminate the instance instead (ask for the spot_stop capability before stopping spot)",
            )
        if current.state in (_S.stopping, _S.stopped):
            return
        body = BatchStopServersRequestBody(os_stop=BatchStopServersOption(
            servers=[ServerId(id=ref.instance_id)], type="SOFT"))
        # A stopped pay-per-use GPU server is not billed for vCPUs, memory or GPUs (its disk still is).
        self._call(ref.region, "batch_stop_servers", BatchStopServersRequest(body=body))

    def start(self, ref: InstanceRef) -> None:
        current = self._one(ref)
        if current.state in (_S.pending, _S.running):
            return
        body = BatchStartServersRequestBody(os_start=BatchStartServersOption(servers=[ServerId(id=ref.instance_id)]))
        self._call(ref.region, "batch_start_servers", BatchStartServersRequest(body=body))

    def terminate(self, ref: InstanceRef) -> None:
        self._check_ref(ref)
        with self._lock:
            known = ref.instance_id in self._seen
        if not known:
            # Described first: once deleted, ECS cannot say what the server was.
            for inst in self._describe(ref.region, [ref.instance_id]):
                with self._lock:
                    self._seen.setdefault(inst.ref.instance_id, (inst, True))
        body = DeleteServersRequestBody(servers=[ServerId(id=ref.instance_id)])
        try:
            self._call(ref.region, "delete_servers", DeleteServersRequest(body=body))
        except NotFound:
            with self._lock:
                self._deleting.add(ref.instance_id)
            return  # already gone (or never there): what terminate wants
        with self._lock:
            self._deleting.add(ref.instance_id)

    # --- the wire -------------------------------------------------------------------

    def _client(self, region: str) -> EcsClient:
        with self._lock:
            client = self._clients.get(region)
            if client is None:
                client = self._factory(region)
                refuse_sdk_retries(client)
                self._clients[region] = client
            return client

    def _call(self, region: str, action: str, request: object) -> dict[str, Any]:
        client = self._client(region)
        try:
            response = getattr(client, action)(request)
        except SdkException as exc:
            raise translate_error(exc, action=action, region=region) from None
        except (requests.RequestException, OSError) as exc:
            # The SDK lets a read timeout through as requests' own exception.
            raise ProviderUnavailable(f"Huawei Cloud ECS {action} in {region} got no answer: {exc}",
                                      provider=NAME, code=type(exc).__name__) from None
        answer = response.to_json_object() if response.raw_content else {}
        if not isinstance(answer, dict):
            return {}
        refused = answer_error(answer, response.status_code, action=action, region=region)
        if refused is not None:
            raise refused  # an error the SDK took for a success (ECS's flow control answers HTTP 202)
        return answer

    def _await_server(self, region: str, answer: Mapping[str, Any]) -> str:
        """The server a create job makes: its answer's id once the job has not failed; polls while it names none."""
        job_id = str(answer.get("job_id") or "")
        ids = [str(i) for i in answer.get("serverIds") or []]
        if not job_id:
            raise ProviderUnavailable("Huawei Cloud answered a create without a job id", provider=NAME,
                                      code="UnexpectedAnswer")
        waited = 0.0
        while True:
            job = self._call(region, "show_job", ShowJobRequest(job_id=job_id))
            if job.get("status") == "FAIL":
                code, reason = job_failure(job)
                raise job_error(code, reason, job_id=job_id, region=region)
            ids = ids or job_server_ids(job)
            if ids:
                return ids[0]
            if waited >= self._config.job_wait_seconds:
                raise ProviderUnavailable(
                    f"Huawei Cloud create job {job_id} in {region} named no server within "
                    f"{self._config.job_wait_seconds:g} s; launching the same request again finds it",
                    provider=NAME, code="JobPending", request_id=job_id)
            self._clock.sleep(self._config.job_poll_seconds)
            waited += self._config.job_poll_seconds

    def _pages(self, region: str, **query: str) -> Iterator[dict[str, Any]]:
        page = 1
        listed = 0
        while True:
            ask = ListServersDetailsRequest(offset=page, limit=self._config.page_size, **query)
            answer = self._call(region, "list_servers_details", ask)
            servers = answer.get("servers") or []
            yield from servers
            listed += len(servers)
            if not servers or listed >= int(answer.get("count") or 0):
                return
            page += 1

    def _list(self, region: str, wanted: Mapping[str, str]) -> Iterator[Instance]:
        # ECS filters by one tag; the cluster's is the most selective one every listing has. The rest is matched here.
        key = TAG_MANAGED if TAG_MANAGED in wanted else next(iter(wanted), None)
        query = {"tags": tag_filter(key, wanted[key])} if key is not None else {}
        for raw in self._pages(region, **query):
            inst = to_instance(region, raw)
            if inst is not None:
                yield inst

    def _by_intent(self, region: str, intent: str) -> Instance | None:
        for raw in self._pages(region, tags=tag_filter(TAG_INTENT, intent)):
            inst = to_instance(region, raw)
            if inst is not None and inst.state is not _S.terminated:
                return inst
        return None

    def _describe(self, region: str, ids: Sequence[str]) -> list[Instance]:
        answer = self._call(region, "list_servers_details", ListServersDetailsRequest(server_id=",".join(ids)))
        return [i for i in (to_instance(region, raw) for raw in answer.get("servers") or []) if i is not None]

    def _served(self, regions: Sequence[str] | None) -> tuple[str, ...]:
        if regions is None:
            return self._config.regions
        return tuple(r for r in regions if r in self._config.regions)

    def _check_ref(self, ref: InstanceRef) -> None:
        if ref.provider != NAME:
            raise InvalidRequest(f"instance {ref.instance_id} belongs to {ref.provider!r}, not {NAME!r}", provider=NAME)

    def _one(self, ref: InstanceRef) -> Instance:
        self._check_ref(ref)
        found = self._describe(ref.region, [ref.instance_id])
        if not found:
            raise NotFound(f"Huawei Cloud has no server {ref.instance_id} in {ref.region}", provider=NAME,
                           code="Ecs.0114")
        return found[0]

    # --- memory of servers ECS forgets ---------------------------------------------------

    def _remember(self, region: str, wanted: Mapping[str, str], listed: list[Instance]) -> list[Instance]:
        """``listed`` with our view laid over it, plus the servers we saw that ECS no longer lists."""
        now = self._clock.now()
        keep = timedelta(seconds=self._config.tombstone_seconds)
        with self._lock:
            self._gone = {k: v for k, v in self._gone.items() if now - v[1] < keep}
            out = []
            for inst in listed:
                if inst.ref.instance_id in self._deleting and inst.state is not _S.terminated:
                    inst = inst.model_copy(update={"state": _S.terminating})
                self._seen[inst.ref.instance_id] = (inst, True)
                out.append(inst)
            shown = {i.ref.instance_id for i in listed}
            for instance_id, (inst, confirmed) in list(self._seen.items()):
                if instance_id in shown or inst.ref.region != region or not _carries(inst.tags, wanted):
                    continue
                if not confirmed:
                    continue  # a launch no listing has shown yet: lists are eventually consistent
                del self._seen[instance_id]
                self._gone[instance_id] = (self._bury(inst), now)
            out.extend(inst for instance_id, (inst, _) in self._gone.items()
                       if instance_id not in shown and inst.ref.region == region and _carries(inst.tags, wanted))
            return out

    def _bury(self, inst: Instance) -> Instance:
        """A server ECS stopped listing: terminated; preempted when it was spot and we never deleted it."""
        preempted = inst.capacity is Capacity.spot and inst.ref.instance_id not in self._deleting
        self._deleting.discard(inst.ref.instance_id)
        return inst.model_copy(update={
            "state": _S.terminated, "preempted": preempted, "preempt_reason": PREEMPT_REASON if preempted else None,
        })
