"""Harnesses for the provider contract suite: one factory per provider under test.

A harness wraps one Provider together with the levers a test needs to script
its cloud (time, stock, faults, reclaims). The suite only talks to harnesses,
so a new provider (moto-backed AWS, the Alibaba and Tencent HTTP emulators)
joins by adding a factory to ``HARNESS_FACTORIES``; no test changes.

Two sandbox flavours run today: "sandbox" (every capability, CNY prices, spot
instances can stop) and "sandbox-as-aws" (AWS's capabilities and USD prices,
spot instances cannot stop), so both sides of each capability-dependent case
run rather than skip.

A factory takes ``faults`` (a ``providers.emulators.faults.FaultPlan``, or None):
its cloud then fails calls as the plan deals them (the emulators and the AWS
wire on the wire, the sandbox through ``FaultyProvider``). ``faulty_harness``
runs the fault cases for every provider under each plan of ``FAULT_PLANS``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Callable, Iterator, Protocol, TypeVar

import pytest

from providers.base import (
    Instance,
    InstanceRef,
    InstanceRequest,
    Provider,
    ProviderError,
    ProviderUnavailable,
    Throttled,
)
from providers.emulators.faults import FaultDice, FaultPlan
from providers.sandbox.provider import SandboxCloud, SandboxProvider, capabilities_like
from scheduler.clock import SimClock
from scheduler.models import Capacity, Offer, Price, Stock
from scheduler.money import Money

T = TypeVar("T")

START = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)


class ProviderHarness(Protocol):
    """What the contract suite needs from a provider under test."""

    provider: Provider
    clock: SimClock | None  # None: the provider runs on real time
    currency: str  # the currency its prices are quoted in
    cluster: str  # a TAG_MANAGED value no other test uses on this cloud

    def advance(self, seconds: float) -> None:
        """Let at least ``seconds`` of cloud time pass."""

    def sell_out(self, offer: Offer, capacity: Capacity) -> None: ...

    def preempt(self, instance: Instance) -> None:
        """Make the cloud reclaim this spot instance now."""

    def fail_next(self, operation: str, error: ProviderError, times: int = 1) -> None: ...

    def lose_next_launch_response(self) -> None: ...

    def offer(self, gpu: str | None = None) -> Offer:
        """An offer from ``provider.offers()`` with both prices, of ``gpu`` if given."""

    def provider_with_wrong_secret(self) -> Provider | None:
        """The same provider built with a wrong secret; None where there are no credentials."""

    def machines(self) -> list[tuple[Mapping[str, str], str]]:
        """Every machine the cloud itself ever made for this harness, as (its tags, its state): the truth
        behind the provider, for counting machines per intent whatever the listing shows."""

    def faults_dealt(self) -> dict[str, int]:
        """How many calls failed so far, per fault kind (empty without a fault plan)."""

    def close(self) -> None: ...


def _price(amount: str, currency: str, source: str) -> Price:
    return Price(per_hour=Money(amount=Decimal(amount), currency=currency), source=source, as_of=date(2026, 11, 1))


def _offer(provider: str, region: str, zone: str, itype: str, gpu: str, mem: float, vcpus: int,
           ram: float, od: str, spot: str, currency: str) -> Offer:
    return Offer(
        provider=provider, region=region, zone=zone, instance_type=itype, gpu=gpu, gpu_count=1,
        gpu_mem_gib=mem, vcpus=vcpus, mem_gib=ram,
        on_demand=_price(od, currency, "docs/prices.md list price"),
        spot=_price(spot, currency, "contract test catalog"),
        on_demand_stock=Stock.available, spot_stock=Stock.available, spot_interruptions_per_hour=0.05,
    )


# On-demand figures from docs/prices.md; spot figures are illustrative.
ALIBABA_LIKE_CATALOG = (
    _offer("sandbox", "cn-hangzhou", "cn-hangzhou-i", "ecs.gn6i-c4g1.xlarge", "T4", 15.0, 4, 15, "11.63", "4.65",
           "CNY"),
    _offer("sandbox", "cn-hangzhou", "cn-hangzhou-i", "ecs.gn7i-c8g1.2xlarge", "A10", 22.0, 8, 30, "9.5326", "3.81",
           "CNY"),
    _offer("sandbox", "cn-shanghai", "cn-shanghai-l", "ecs.gn7i-c8g1.2xlarge", "A10", 22.0, 8, 30, "9.5326", "3.95",
           "CNY"),
)
AWS_LIKE_CATALOG = (
    _offer("aws", "us-east-1", "us-east-1a", "g4dn.xlarge", "T4", 15.0, 4, 16, "0.526", "0.2132", "USD"),
    _offer("aws", "us-east-1", "us-east-1a", "g5.xlarge", "A10G", 22.4, 4, 16, "1.006", "0.4328", "USD"),
    _offer("aws", "us-west-2", "us-west-2b", "g4dn.xlarge", "T4", 15.0, 4, 16, "0.526", "0.2147", "USD"),
)


class FaultyProvider:
    """A Provider whose calls fail as a ``FaultPlan`` deals: the sandbox's stand-in for an emulator's faults
    (it has no wire). ``lost`` carries the call out, then raises as a lost answer would. Each protocol call
    draws under the cloud action that does its work (``launch`` is ``RunInstances`` ...)."""

    def __init__(self, inner: Provider, plan: FaultPlan) -> None:
        self.inner = inner
        self.dice: FaultDice = plan.dice()
        self.name = inner.name
        self.capabilities = inner.capabilities

    def _call(self, action: str, fn: Callable[[], T]) -> T:
        fault = self.dice.draw(action)
        if fault == "throttle":
            raise Throttled("slow down (injected)", provider=self.name, code="Throttling",
                            retry_after=self.dice.plan.retry_after_seconds)
        if fault == "5xx":
            raise ProviderUnavailable("the service failed (injected)", provider=self.name, code="ServiceUnavailable")
        if fault == "timeout":
            raise ProviderUnavailable("no answer (injected)", provider=self.name, code="RequestTimeout")
        result = fn()
        if fault == "lost":
            raise ProviderUnavailable("the answer was lost (injected)", provider=self.name, code="RequestTimeout")
        return result

    def offers(self, regions: Sequence[str] | None = None) -> list[Offer]:
        return self._call("DescribePrice", lambda: self.inner.offers(regions))

    def launch(self, request: InstanceRequest) -> Instance:
        return self._call("RunInstances", lambda: self.inner.launch(request))

    def instances(self, tags: Mapping[str, str], regions: Sequence[str] | None = None) -> list[Instance]:
        return self._call("DescribeInstances", lambda: self.inner.instances(tags, regions))

    def stop(self, ref: InstanceRef) -> None:
        self._call("StopInstances", lambda: self.inner.stop(ref))

    def start(self, ref: InstanceRef) -> None:
        self._call("StartInstances", lambda: self.inner.start(ref))

    def terminate(self, ref: InstanceRef) -> None:
        self._call("TerminateInstances", lambda: self.inner.terminate(ref))


class SandboxHarness:
    """A fresh in-memory cloud on a SimClock per test."""

    def __init__(self, name: str, catalog: tuple[Offer, ...], currency: str, *, spot_can_stop: bool,
                 faults: FaultPlan | None = None) -> None:
        self.clock = SimClock(START)
        self.cloud = SandboxCloud(self.clock, catalog, seed=11, spot_can_stop=spot_can_stop)
        provider: Provider = SandboxProvider(self.cloud, name=name, capabilities=capabilities_like(name))
        self.provider: Provider = FaultyProvider(provider, faults) if faults is not None else provider
        self.currency = currency
        self.cluster = "contract"

    def advance(self, seconds: float) -> None:
        self.clock.advance(timedelta(seconds=seconds))

    def sell_out(self, offer: Offer, capacity: Capacity) -> None:
        self.cloud.sell_out(offer, capacity)

    def preempt(self, instance: Instance) -> None:
        self.cloud.preempt(instance.ref.instance_id)

    def fail_next(self, operation: str, error: ProviderError, times: int = 1) -> None:
        self.cloud.fail_next(operation, error, times)

    def lose_next_launch_response(self) -> None:
        self.cloud.lose_next_launch_response()

    def offer(self, gpu: str | None = None) -> Offer:
        for o in self.provider.offers():
            if (gpu is None or o.gpu == gpu) and o.on_demand is not None and o.spot is not None:
                return o
        raise LookupError(f"the test catalog has no offer with gpu={gpu!r}")

    def provider_with_wrong_secret(self) -> Provider | None:
        return None

    def machines(self) -> list[tuple[Mapping[str, str], str]]:
        return [(dict(m.tags), m.state.value) for m in self.cloud.all_instances()]

    def faults_dealt(self) -> dict[str, int]:
        return dict(self.provider.dice.drawn) if isinstance(self.provider, FaultyProvider) else {}

    def close(self) -> None:
        pass


# name -> factory(faults=None): a fresh harness, its cloud failing as the plan deals when one is given.
HarnessFactory = Callable[..., ProviderHarness]
HARNESS_FACTORIES: dict[str, HarnessFactory] = {
    "sandbox": lambda faults=None: SandboxHarness("sandbox", ALIBABA_LIKE_CATALOG, "CNY", spot_can_stop=True,
                                                  faults=faults),
    "sandbox-as-aws": lambda faults=None: SandboxHarness("aws", AWS_LIKE_CATALOG, "USD", spot_can_stop=False,
                                                         faults=faults),
}


def _load_cloud_harnesses() -> None:
    """Each real-HTTP provider brings its harness in tests/contract/harness_<cloud>.py (HARNESSES)."""
    for path in sorted(Path(__file__).parent.glob("harness_*.py")):
        module = importlib.import_module(f"tests.contract.{path.stem}")
        HARNESS_FACTORIES.update(module.HARNESSES)


_load_cloud_harnesses()


@pytest.fixture(params=sorted(HARNESS_FACTORIES))
def harness(request: pytest.FixtureRequest) -> Iterator[ProviderHarness]:
    made = HARNESS_FACTORIES[request.param]()
    try:
        yield made
    finally:
        made.close()


# The fault plans every provider runs the fault cases under (the seed is set per provider below).
FAULT_PLANS: dict[str, FaultPlan | None] = {
    "no-faults": None,
    "10%-faults": FaultPlan(rate=0.1, retry_after_seconds=2),  # throttle, 5xx, timeout, lost: any call
    "half-the-launch-answers-lost": FaultPlan(rate=0.5, kinds=("lost",), actions=("RunInstances",)),
}


@pytest.fixture(params=[(name, plan) for name in sorted(HARNESS_FACTORIES) for plan in FAULT_PLANS],
                ids=lambda p: f"{p[0]}-{p[1]}")
def faulty_harness(request: pytest.FixtureRequest) -> Iterator[ProviderHarness]:
    """Every provider, with its cloud failing none of the calls, 10% of them (throttled, 5xx, no answer,
    answer lost after acting), and half of its launch answers lost; seeded per provider so a failure
    replays."""
    name, label = request.param
    factory = HARNESS_FACTORIES[name]
    # Every provider's harness has the fault switch; one without it is a harness left behind, not a skip.
    missing_switch = (f"the {name} harness has no fault switch: give its factory a faults= argument and "
                      "the harness machines() and faults_dealt() (see SandboxHarness)")
    if "faults" not in inspect.signature(factory).parameters:
        pytest.fail(missing_switch, pytrace=False)
    plan = FAULT_PLANS[label]
    if plan is not None:
        plan = dataclasses.replace(plan, seed=sum(map(ord, name)))
    made = factory(faults=plan)
    if not (hasattr(made, "machines") and hasattr(made, "faults_dealt")):
        made.close()
        pytest.fail(missing_switch, pytrace=False)
    try:
        yield made
    finally:
        made.close()
