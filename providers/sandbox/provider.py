"""The ``providers.base.Provider`` adapter over the simulated cloud, and real clouds' capability profiles.

``SandboxProvider`` poses as one cloud (``capabilities_like`` gives it that
cloud's capabilities) on top of a ``SandboxCloud``, the simulated market that
lives in ``providers/sandbox/cloud.py``. The market's public names are
re-exported here, so ``from providers.sandbox.provider import SandboxCloud`` keeps working.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Callable, Mapping, ParamSpec, Sequence, TypeVar

from providers.base import (
    Capability,
    Instance,
    InstanceRef,
    InstanceRequest,
    InvalidRequest,
    NotFound,
    ProviderError,
)
from providers.sandbox.cloud import OPERATIONS, PREEMPT_REASON, SandboxCloud, SandboxInstance, market_key
from scheduler.models import Capacity, Offer

__all__ = [
    "OPERATIONS",
    "PREEMPT_REASON",
    "SandboxCloud",
    "SandboxInstance",
    "SandboxProvider",
    "capabilities_like",
    "market_key",
]

_P = ParamSpec("_P")
_T = TypeVar("_T")

_C = Capability
_CAPABILITIES: dict[str, frozenset[Capability]] = {
    # One-time spot instances on AWS cannot be stopped, only terminated; the boot is not billed.
    "aws": frozenset({_C.stop_charging, _C.preemption_events, _C.bills_from_running}),
    # ECS: StopCharging mode, and SpotInterruptionBehavior=Stop exists.
    "alibaba": frozenset({_C.stop_charging, _C.spot_stop, _C.preemption_events}),
    "tencent": frozenset({_C.stop_charging, _C.preemption_events}),
    # ECS: a stopped pay-per-use GPU server bills only its disks; gpusched does not stop spot servers.
    "huawei": frozenset({_C.stop_charging, _C.preemption_events}),
    # Every feature; the billing rule is the default one (from creation), as the ledger always had it.
    "sandbox": frozenset({_C.stop_charging, _C.spot_stop, _C.live_prices, _C.preemption_events}),
}


def capabilities_like(cloud_name: str) -> frozenset[Capability]:
    """The capabilities of the real cloud ``cloud_name`` ("aws", "alibaba", "tencent", "huawei"), or "sandbox" (all)."""
    try:
        return _CAPABILITIES[cloud_name]
    except KeyError:
        raise ValueError(
            f"no capability profile for {cloud_name!r}; use one of {', '.join(sorted(_CAPABILITIES))}"
        ) from None


class SandboxProvider:
    """``providers.base.Provider`` over one SandboxCloud, posing as the cloud ``name``.

    ``capabilities`` defaults to ``capabilities_like(name)``; ``regions`` are the
    regions this provider serves (None: every region in the cloud's catalog).
    """

    def __init__(
        self,
        cloud: SandboxCloud,
        name: str = "sandbox",
        capabilities: frozenset[Capability] | None = None,
        regions: Sequence[str] | None = None,
        *,
        page_size: int = 100,
    ) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self.cloud = cloud
        self.name = name
        # Capability(...) refuses a name that is no capability (a stray string) with a ValueError.
        self.capabilities = (
            frozenset(Capability(c) for c in capabilities) if capabilities is not None else capabilities_like(name)
        )
        self._regions = None if regions is None else tuple(regions)
        self._page_size = page_size
        self._renamed: dict[int, tuple[Offer, Offer]] = {}  # id(cloud's offer) -> (it, our copy): ``offers``
        # id -> (``_listing_key``, the Instance, the cloud's snapshot it was made of): ``instances``
        self._listed_instances: dict[str, tuple[tuple, Instance, SandboxInstance]] = {}

    def offers(self, regions: Sequence[str] | None = None) -> list[Offer]:
        offers = self._call(self.cloud.offers, self._served(regions))
        # The cloud lists an unchanged offer as the same object: so is its copy under our name.
        renamed, last = {}, self._renamed
        for o in offers:
            got = last.get(id(o))
            if got is None or got[0] is not o:
                got = (o, o.model_copy(update={"provider": self.name}))
            renamed[id(o)] = got
        self._renamed = renamed
        return [renamed[id(o)][1] for o in offers]

    def launch(self, request: InstanceRequest) -> Instance:
        offer = request.offer
        if offer.provider != self.name:
            raise InvalidRequest(
                f"offer {offer.key} belongs to {offer.provider!r}, not {self.name!r}", provider=self.name
            )
        if self._regions is not None and offer.region not in self._regions:
            raise InvalidRequest(
                f"region {offer.region} is not served by {self.name} ({', '.join(self._regions)})",
                provider=self.name,
            )
        max_price = None
        if request.max_price is not None:
            try:
                max_price = Decimal(request.max_price)
            except InvalidOperation:
                raise InvalidRequest(
                    f"max_price {request.max_price!r} is not a number", provider=self.name
                ) from None
        created = self._call(
            self.cloud.launch,
            region=offer.region,
            zone=offer.zone,
            instance_type=offer.instance_type,
            capacity=request.capacity,
            client_token=request.client_token,
            tags=request.tags,
            name=request.name,
            image=request.image,
            user_data=request.user_data,
            max_price=max_price,
        )
        return self._instance(created)

    def instances(self, tags: Mapping[str, str], regions: Sequence[str] | None = None) -> list[Instance]:
        found: list[Instance] = []
        token: str | None = None
        # An instance listed as it was last time is the same ``Instance`` object: the tick lists every
        # cloud each tick, and validating a model per machine per listing was a cost of its own.
        last, seen = self._listed_instances, {}
        while True:
            page, token = self._call(
                self.cloud.instances,
                tags=tags,
                regions=self._served(regions),
                page_size=self._page_size,
                page_token=token,
            )
            for raw in page:
                hit = last.get(raw.instance_id)
                if hit is not None and hit[2] is raw:  # the cloud's very snapshot of last time: nothing changed
                    seen[raw.instance_id] = hit
                    found.append(hit[1])
                    continue
                key = _listing_key(raw)
                inst = hit[1] if hit is not None and hit[0] == key else self._instance(raw)
                seen[raw.instance_id] = (key, inst, raw)
                found.append(inst)
            if token is None:
                self._listed_instances = seen
                return found

    def stop(self, ref: InstanceRef) -> None:
        self._check_ref(ref)
        current = self._call(self.cloud.get, ref.instance_id, ref.region)
        if current.capacity is Capacity.spot and Capability.spot_stop not in self.capabilities:
            raise InvalidRequest(
                f"{self.name} cannot stop spot instance {ref.instance_id}: spot instances here can only be terminated",
                provider=self.name,
                code="UnsupportedOperation",
                fix="terminate the instance instead (ask for the spot_stop capability before stopping spot)",
            )
        self._call(self.cloud.stop, ref.instance_id, region=ref.region)

    def start(self, ref: InstanceRef) -> None:
        self._check_ref(ref)
        self._call(self.cloud.start, ref.instance_id, region=ref.region)

    def terminate(self, ref: InstanceRef) -> None:
        self._check_ref(ref)
        try:
            self._call(self.cloud.terminate, ref.instance_id, region=ref.region)
        except NotFound:
            return  # already gone (or never there): that is what terminate wants

    # --- inside -------------------------------------------------------------

    def _served(self, regions: Sequence[str] | None) -> Sequence[str] | None:
        if regions is None:
            return self._regions
        if self._regions is None:
            return regions
        return [r for r in regions if r in self._regions]

    def _check_ref(self, ref: InstanceRef) -> None:
        if ref.provider != self.name:
            raise InvalidRequest(
                f"instance {ref.instance_id} belongs to {ref.provider!r}, not {self.name!r}", provider=self.name
            )

    def _call(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return fn(*args, **kwargs)
        except ProviderError as exc:
            if not exc.provider:
                exc.provider = self.name
            raise

    def _instance(self, raw: SandboxInstance) -> Instance:
        return Instance(
            ref=InstanceRef(provider=self.name, region=raw.region, instance_id=raw.instance_id),
            zone=raw.zone,
            instance_type=raw.instance_type,
            capacity=raw.capacity,
            state=raw.state,
            tags=dict(raw.tags),
            client_token=raw.client_token,
            launched_at=raw.launched_at,
            preempted=raw.preempted,
            preempt_reason=raw.preempt_reason,
            interruption_notice_at=raw.interruption_notice_at,
        )


def _listing_key(raw: SandboxInstance) -> tuple:
    """Everything of a snapshot that ``SandboxProvider._instance`` copies into an ``Instance``."""
    return (raw.region, raw.zone, raw.instance_type, raw.capacity, raw.state, tuple(raw.tags.items()),
            raw.client_token, raw.launched_at, raw.preempted, raw.preempt_reason, raw.interruption_notice_at)
