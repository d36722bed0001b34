"""The Provider protocol: the one small seam between gpusched and a cloud.

Every adapter (sandbox, aws, alibaba, tencent) implements ``Provider`` and is
proven by the same contract suite. The contract, member by member:

``name``
    Short id used in tags, the store and job.yaml (``aws``, ``alibaba``, ...).
``capabilities``
    A frozenset of ``CAP_*`` strings. Callers ask for a capability; they never
    branch on ``name``.
``offers(regions)``
    Every GPU instance type per region / zone with prices (Decimal + currency +
    source + as-of) and stock status. Never raises for "sold out": stock is data.
``launch(request)``
    Non-blocking: returns at once with a ``pending`` Instance. The request carries
    a client token; launching the same token twice returns the same instance,
    never a second one. Raises ``NoCapacity`` / ``QuotaExceeded`` / ... on refusal.
``instances(tags, regions)``
    Every instance carrying all of ``tags`` (pagination is the adapter's job),
    states mapped to ``InstanceState``, with ``preempted`` set and a reason when
    the cloud reclaimed a spot instance.
``stop(ref)`` / ``start(ref)``
    Stop-charging where the cloud offers it (``CAP_STOP_CHARGING``). A spot
    instance that cannot be stopped raises ``InvalidRequest``: it is never
    silently terminated (the caller decides to terminate).
``terminate(ref)``
    Idempotent: an instance that is already gone (or never existed) is success.

Vendor exceptions never cross an adapter: they become the project's
``ProviderError`` subclasses from ``scheduler.errors``.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Mapping, Protocol, Sequence, runtime_checkable

from pydantic import Field

from scheduler.errors import (  # re-exported: adapters import errors from here
    AuthFailed,
    InvalidRequest,
    NoCapacity,
    NotFound,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    Throttled,
)
from scheduler.models import Capacity, Frozen, Offer

__all__ = [
    "AuthFailed", "InvalidRequest", "NoCapacity", "NotFound", "ProviderError",
    "ProviderUnavailable", "QuotaExceeded", "Throttled",
    "CAP_STOP_CHARGING", "CAP_SPOT_STOP", "CAP_LIVE_PRICES", "CAP_PREEMPTION_EVENTS",
    "TAG_MANAGED", "TAG_JOB", "TAG_ATTEMPT", "TAG_TEAM", "TAG_INSTANCE",
    "InstanceState", "InstanceRequest", "Instance", "InstanceRef", "Provider",
]

CAP_STOP_CHARGING = "stop_charging"      # a stopped instance stops billing for compute
CAP_SPOT_STOP = "spot_stop"              # spot instances can be stopped (not only terminated)
CAP_LIVE_PRICES = "live_prices"          # offers() asks the cloud for current prices
CAP_PREEMPTION_EVENTS = "preemption_events"  # instances() reports spot reclaims with a reason

# Tags put on every instance at creation. TAG_MANAGED carries the deployment's
# cluster name so two gpusched installations in one account never touch each
# other's machines.
TAG_MANAGED = "gpusched:cluster"
TAG_JOB = "gpusched:job"
TAG_ATTEMPT = "gpusched:attempt"
TAG_TEAM = "gpusched:team"
TAG_INSTANCE = "gpusched:instance"  # our own instance row id


class InstanceState(StrEnum):
    """The cloud's view, mapped to ours."""

    pending = "pending"
    running = "running"
    stopping = "stopping"
    stopped = "stopped"
    terminating = "terminating"
    terminated = "terminated"


class InstanceRef(Frozen):
    provider: str
    region: str
    instance_id: str


class InstanceRequest(Frozen):
    """Everything needed to launch one instance. ``client_token`` makes it idempotent."""

    offer: Offer
    capacity: Capacity
    client_token: str = Field(min_length=1, max_length=64, pattern=r"^[\x21-\x7e]+$")
    tags: Mapping[str, str]
    image: str = ""
    user_data: str = ""
    name: str = ""
    # Spot only: refuse to pay more than this per hour (None = up to on-demand).
    max_price: str | None = None


class Instance(Frozen):
    """One instance as the cloud reports it."""

    ref: InstanceRef
    zone: str
    instance_type: str
    capacity: Capacity
    state: InstanceState
    tags: Mapping[str, str]
    client_token: str | None = None
    launched_at: datetime | None = None
    preempted: bool = False
    preempt_reason: str | None = None
    # When the cloud has announced a spot reclaim but not yet done it.
    interruption_notice_at: datetime | None = None


@runtime_checkable
class Provider(Protocol):
    name: str
    capabilities: frozenset[str]

    def offers(self, regions: Sequence[str] | None = None) -> list[Offer]: ...

    def launch(self, request: InstanceRequest) -> Instance: ...

    def instances(
        self, tags: Mapping[str, str], regions: Sequence[str] | None = None
    ) -> list[Instance]: ...

    def stop(self, ref: InstanceRef) -> None: ...

    def start(self, ref: InstanceRef) -> None: ...

    def terminate(self, ref: InstanceRef) -> None: ...
