"""The Provider protocol: the one small seam between gpusched and a cloud.

Every adapter (sandbox, aws, alibaba, tencent) implements ``Provider`` and is
proven by the same contract suite (``tests/contract/test_provider_contract.py``,
one run per adapter). Each member's contract is in its own docstring below, so
an editor shows it where the member is used.

Vendor exceptions never cross an adapter: they become the project's
``ProviderError`` subclasses from ``scheduler.errors`` (re-exported here), with
the vendor's code and request id kept.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Mapping, Protocol, Sequence, runtime_checkable

from pydantic import Field

from scheduler.errors import (  # re-exported: adapters import errors from here
    AuthFailed,
    BillingStopped,
    InvalidRequest,
    NoCapacity,
    NotFound,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    ResourceBusy,
    Throttled,
)
from scheduler.models import Capacity, Frozen, Offer

__all__ = [
    "AuthFailed", "BillingStopped", "InvalidRequest", "NoCapacity", "NotFound", "ProviderError",
    "ProviderUnavailable", "QuotaExceeded", "ResourceBusy", "Throttled",
    "Capability",
    "TAG_MANAGED", "TAG_JOB", "TAG_ATTEMPT", "TAG_TEAM", "TAG_INSTANCE",
    "InstanceState", "InstanceRequest", "Instance", "InstanceRef", "Provider",
]


class Capability(StrEnum):
    """What a cloud can do beyond the protocol's minimum.

    Callers ask ``Capability.spot_stop in provider.capabilities``; they never
    branch on ``provider.name``. The values are the plain strings that logs and
    stored data have always used (``"spot_stop"`` ...); a misspelt member is an
    AttributeError, not a capability silently missing.
    """

    stop_charging = "stop_charging"  # a stopped instance stops billing for compute (its disk still bills)
    spot_stop = "spot_stop"  # spot instances can be stopped, not only terminated
    live_prices = "live_prices"  # offers() asks the cloud for current prices
    preemption_events = "preemption_events"  # instances() reports spot reclaims with a reason
    # A billing rule rather than a feature: the meter starts when the instance first runs, so its boot
    # is free (AWS: usage begins when the instance enters running). Without it the cloud bills from
    # creation, the boot included (Alibaba ECS and Tencent CVM pay-as-you-go and spot). On every cloud
    # the meter runs until the instance is released (terminated, or stopped in stop-charging mode): a
    # reclaim that is announced (``Instance.preempted`` while it still runs) has not stopped it yet.
    # The ledger follows the rule (``scheduler/lifecycle/transitions.py``, ``bills_boot``).
    bills_from_running = "bills_from_running"


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
    # When the intent was written ahead (the store keeps it beside the client token). Every
    # parameter that depends on time (a release backstop) is computed from it, so each retry of
    # one intent sends the same parameters: a cloud refuses a reused token with different ones.
    # None: the adapter's clock at the call (a one-off launch nobody retries).
    requested_at: datetime | None = None


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
    # True for a stopped (or stopping) instance whose compute the cloud still bills: the stop did
    # not stop charging (Alibaba KeepCharging: types with local disks, or economical mode off).
    stop_keeps_billing: bool = False


@runtime_checkable
class Provider(Protocol):
    """One cloud behind gpusched: its offers, and the instances it launches, lists, stops, starts and terminates.

    The contract of each member is in its docstring; ``tests/contract`` runs the
    same cases against every adapter. A cloud's failures arrive as
    ``ProviderError`` subclasses; the ``retryable`` ones (``Throttled``,
    ``ProviderUnavailable``, ``ResourceBusy``) may be retried with
    ``providers.retry.call_with_retry``, and only those.
    """

    name: str
    """The cloud's short id: ``aws``, ``alibaba``, ``tencent`` (or the one a sandbox poses as).

    Used in tags, the store and job.yaml. The offers, instance refs and errors
    this provider hands out carry it in their ``provider`` field.
    """

    capabilities: frozenset[Capability]
    """What this provider can do beyond the minimum (see ``Capability``), fixed once it is built.

    Callers ask for a capability, never for a ``name``. The contract suite runs
    both sides of ``Capability.spot_stop``: stopping a spot instance stops it
    where the capability is present and raises ``InvalidRequest`` where it is not.
    """

    def offers(self, regions: Sequence[str] | None = None) -> list[Offer]:
        """The GPU instance types this provider sells, one ``Offer`` per zone and type.

        ``regions`` narrows the answer to those regions; None means every region
        the provider serves. Each offer's ``provider`` is ``name``. Its prices
        (``on_demand``, ``spot``; None where that capacity is not sold) are
        ``Price`` objects: a positive ``Decimal`` amount in the currency the cloud
        bills in, a non-empty ``source`` saying where the figure came from (a
        live price call, or the bundled catalog when the cloud gives none), and
        the date it was valid (``as_of``).

        Sold out is data, not an error: a type with no stock is still offered
        (its stock fields say what is known about stock) and ``offers`` does not
        raise for it. Credentials the cloud refuses raise ``AuthFailed``.
        """
        ...

    def launch(self, request: InstanceRequest) -> Instance:
        """Ask for one instance and return at once, without waiting for it to boot.

        The returned ``Instance`` is ``pending``, in the offer's region and zone,
        of its instance type, spot or on-demand as asked, with the request's
        tags and ``client_token``; ``instances()`` shows it ``running`` later,
        with the same ``launched_at``.

        ``request.client_token`` makes the call idempotent: launching the same
        request again (a retry after a lost answer, or after ``Throttled``)
        gives the instance the first call made, never a second one. The same
        token with different parameters raises ``InvalidRequest`` and launches
        nothing.

        Raises ``NoCapacity`` (with ``provider`` set) when the cloud has no stock
        for the offer at that capacity, leaving no instance behind;
        ``InvalidRequest`` for a request this provider cannot carry out;
        ``Throttled``, ``ResourceBusy`` or ``ProviderUnavailable`` when the cloud
        is busy or its answer was lost, in which case retrying the same request is
        safe (time-derived parameters come from ``request.requested_at``, so a
        retry an hour later still sends what the first call sent). Other
        refusals (``QuotaExceeded``, ``BillingStopped``, ``AuthFailed`` ...) arrive
        as the matching ``ProviderError`` subclass (docs/error-codes.md lists
        every documented code of each cloud and its class).
        """
        ...

    def instances(
        self, tags: Mapping[str, str], regions: Sequence[str] | None = None
    ) -> list[Instance]:
        """Every instance that carries all of ``tags`` with exactly those values, and no other.

        ``regions`` narrows the listing to those regions; None means every region
        the provider serves. Paging is the adapter's job: the whole list comes
        back however many pages the cloud needs (the contract suite lists 250).
        The cloud's states are mapped to ``InstanceState``, and an instance stays
        listed through ``stopping``/``stopped`` and ``terminating`` until it
        shows as ``terminated`` (for as long as the cloud, or the adapter's
        memory of it, keeps it). An id that never existed is not listed.

        ``preempted`` is True, with a non-empty ``preempt_reason``, once the cloud
        has reclaimed a spot instance (it then shows ``terminated``, or
        ``stopped`` where reclaims stop); it is False for instances that run and
        for instances their owner terminated.
        """
        ...

    def stop(self, ref: InstanceRef) -> None:
        """Stop a running instance, keeping its disk.

        Returns once the cloud has taken the request: the listing then shows
        ``stopping`` or ``stopped``, and ``stopped`` later. Where the provider has
        ``Capability.stop_charging``, a stopped instance's compute stops billing
        while its disk still bills: on AWS that is what a stop is, on Alibaba and
        Tencent the adapter asks for the stop-charging mode (their own tests
        check that parameter; the contract suite cannot see a bill). Where the
        cloud stops the instance but keeps billing it anyway (an Alibaba type with
        local disks stops in KeepCharging mode without an error), the listing says
        so with ``stop_keeps_billing``; the lifecycle then counts those hours and
        terminates the machine instead of keeping it stopped.

        A spot instance on a provider without ``Capability.spot_stop`` raises
        ``InvalidRequest`` and is left as it was: not stopped, and never silently
        terminated (terminating is the caller's decision). With ``spot_stop`` it
        stops and stays a spot instance.
        """
        ...

    def start(self, ref: InstanceRef) -> None:
        """Start a stopped instance again.

        Returns once the cloud has taken the request: the listing then shows
        ``pending`` or ``running``, and ``running`` later.
        """
        ...

    def terminate(self, ref: InstanceRef) -> None:
        """Terminate the instance for good.

        The listing then shows ``terminating`` or ``terminated``, and
        ``terminated`` later, with ``preempted`` False. Idempotent: terminating
        an instance that is already terminating or terminated, or that never
        existed, is success, not an error.
        """
        ...
