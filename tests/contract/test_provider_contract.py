"""The Provider contract (providers/base.py), proven the same way for every provider.

Every case runs once per harness in ``conftest.HARNESS_FACTORIES``. Cases talk
to the provider only through the Provider protocol; the harness scripts the
cloud behind it (time, stock, faults, reclaims).
"""

from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal
from typing import TYPE_CHECKING, Collection

import pytest

from providers.base import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_MANAGED,
    AuthFailed,
    Capability,
    Instance,
    InstanceRef,
    InstanceRequest,
    InstanceState,
    InvalidRequest,
    NoCapacity,
    Provider,
    ProviderUnavailable,
    Throttled,
)
from providers.retry import call_with_retry
from scheduler.clock import Clock, SystemClock
from scheduler.models import Capacity, Offer

from .workload import Workload

if TYPE_CHECKING:
    from .conftest import ProviderHarness

S = InstanceState
# Longer than any boot, stop or terminate the harnesses simulate.
SETTLE_SECONDS = 900
STEP_SECONDS = 15


def tags(harness: ProviderHarness, **extra: str) -> dict[str, str]:
    return {TAG_MANAGED: harness.cluster, **extra}


def request(
    harness: ProviderHarness, offer: Offer, capacity: Capacity, purpose: str, **extra_tags: str
) -> InstanceRequest:
    return InstanceRequest(
        offer=offer,
        capacity=capacity,
        client_token=f"{harness.cluster}-{purpose}",
        tags=tags(harness, **extra_tags),
        name=f"contract-{purpose}",
    )


def find(harness: ProviderHarness, ref: InstanceRef) -> Instance | None:
    matches = [i for i in harness.provider.instances(tags(harness)) if i.ref.instance_id == ref.instance_id]
    assert len(matches) <= 1, f"{ref.instance_id} listed {len(matches)} times"
    return matches[0] if matches else None


def eventually(harness: ProviderHarness, ref: InstanceRef, states: Collection[InstanceState]) -> Instance:
    """Let cloud time pass until the instance is in one of ``states``; fail after SETTLE_SECONDS."""
    waited = 0
    seen: list[str] = []
    while True:
        current = find(harness, ref)
        if current is not None:
            if current.state in states:
                return current
            seen.append(current.state.value)
        if waited >= SETTLE_SECONDS:
            pytest.fail(f"{ref.instance_id} never reached {sorted(states)}; states seen: {seen}")
        harness.advance(STEP_SECONDS)
        waited += STEP_SECONDS


def state_of(harness: ProviderHarness, ref: InstanceRef) -> InstanceState:
    current = find(harness, ref)
    assert current is not None, f"{ref.instance_id} is not listed"
    return current.state


def retry_clock(harness: ProviderHarness) -> Clock:
    return harness.clock if harness.clock is not None else SystemClock()


@pytest.mark.parametrize("capacity", [Capacity.spot, Capacity.on_demand])
def test_launch_returns_pending_at_once_and_runs_later(harness: ProviderHarness, capacity: Capacity) -> None:
    offer = harness.offer()
    launched = harness.provider.launch(request(harness, offer, capacity, f"launch-{capacity.value}", **{TAG_JOB: "j1"}))

    assert launched.state is S.pending
    assert launched.capacity is capacity
    assert launched.ref.provider == harness.provider.name
    assert (launched.ref.region, launched.zone, launched.instance_type) == (
        offer.region, offer.zone, offer.instance_type)
    assert launched.tags[TAG_JOB] == "j1"
    assert launched.client_token == f"{harness.cluster}-launch-{capacity.value}"
    running = eventually(harness, launched.ref, {S.running})
    assert running.launched_at == launched.launched_at
    assert running.preempted is False


def test_listing_by_tag_finds_every_instance_and_only_those(harness: ProviderHarness) -> None:
    offer = harness.offer()
    launched = {"even": set(), "odd": set()}
    for n in range(250):
        parity = "even" if n % 2 == 0 else "odd"
        inst = harness.provider.launch(request(harness, offer, Capacity.on_demand, f"many-{n}", **{TAG_JOB: parity}))
        launched[parity].add(inst.ref.instance_id)
    stranger = harness.provider.launch(
        InstanceRequest(offer=offer, capacity=Capacity.on_demand, client_token=f"{harness.cluster}-stranger",
                        tags={TAG_MANAGED: f"{harness.cluster}-other", TAG_JOB: "even"})
    )
    harness.advance(STEP_SECONDS)

    everything = {i.ref.instance_id for i in harness.provider.instances(tags(harness))}
    evens = harness.provider.instances(tags(harness, **{TAG_JOB: "even"}))

    assert everything == launched["even"] | launched["odd"]
    assert len(everything) == 250
    assert {i.ref.instance_id for i in evens} == launched["even"]
    assert all(i.tags[TAG_JOB] == "even" and i.tags[TAG_MANAGED] == harness.cluster for i in evens)
    assert stranger.ref.instance_id not in everything


def test_stop_start_terminate(harness: ProviderHarness) -> None:
    offer = harness.offer()
    ref = harness.provider.launch(request(harness, offer, Capacity.on_demand, "lifecycle")).ref
    eventually(harness, ref, {S.running})

    harness.provider.stop(ref)
    assert state_of(harness, ref) in {S.stopping, S.stopped}
    eventually(harness, ref, {S.stopped})

    harness.provider.start(ref)
    assert state_of(harness, ref) in {S.pending, S.running}
    eventually(harness, ref, {S.running})

    harness.provider.terminate(ref)
    assert state_of(harness, ref) in {S.terminating, S.terminated}
    gone = eventually(harness, ref, {S.terminated})
    assert gone.preempted is False


def test_terminate_twice_and_terminate_unknown_are_success(harness: ProviderHarness) -> None:
    ref = harness.provider.launch(request(harness, harness.offer(), Capacity.on_demand, "twice")).ref
    harness.provider.terminate(ref)
    harness.provider.terminate(ref)
    eventually(harness, ref, {S.terminated})
    harness.provider.terminate(ref)

    unknown = InstanceRef(provider=harness.provider.name, region=ref.region, instance_id="i-0000000000000dead")
    harness.provider.terminate(unknown)
    assert find(harness, unknown) is None


def test_launch_retried_after_a_lost_response_makes_exactly_one_instance(harness: ProviderHarness) -> None:
    req = request(harness, harness.offer(), Capacity.spot, "lost-response", **{TAG_JOB: "lost"})
    harness.lose_next_launch_response()
    with pytest.raises(ProviderUnavailable):
        harness.provider.launch(req)

    again = harness.provider.launch(req)
    listed = harness.provider.instances(tags(harness, **{TAG_JOB: "lost"}))

    assert [i.ref.instance_id for i in listed] == [again.ref.instance_id]
    assert again.client_token == req.client_token


@pytest.mark.parametrize("capacity", [Capacity.spot, Capacity.on_demand])
def test_stock_out_gives_no_capacity_and_no_instance(harness: ProviderHarness, capacity: Capacity) -> None:
    offer = harness.offer()
    harness.sell_out(offer, capacity)

    with pytest.raises(NoCapacity) as caught:
        harness.provider.launch(request(harness, offer, capacity, f"soldout-{capacity.value}"))

    assert caught.value.provider == harness.provider.name
    assert harness.provider.instances(tags(harness)) == []


@pytest.mark.parametrize("capacity", [Capacity.spot, Capacity.on_demand])
def test_sold_out_is_data_in_offers_not_an_error(harness: ProviderHarness, capacity: Capacity) -> None:
    offer = harness.offer()
    harness.sell_out(offer, capacity)

    offers = harness.provider.offers()

    assert (offer.region, offer.zone, offer.instance_type) in {(o.region, o.zone, o.instance_type) for o in offers}


def test_throttled_twice_then_success_through_call_with_retry(harness: ProviderHarness) -> None:
    req = request(harness, harness.offer(), Capacity.on_demand, "throttled", **{TAG_JOB: "throttled"})
    harness.fail_next("launch", Throttled("slow down", code="Throttling"), times=2)
    retries: list[int] = []

    launched = call_with_retry(
        lambda: harness.provider.launch(req),
        clock=retry_clock(harness),
        rng=random.Random(3),
        base_seconds=0.01,
        cap_seconds=0.05,
        on_retry=lambda attempt, error, delay: retries.append(attempt),
    )

    assert retries == [1, 2]
    assert launched.state is S.pending
    listed = harness.provider.instances(tags(harness, **{TAG_JOB: "throttled"}))
    assert [i.ref.instance_id for i in listed] == [launched.ref.instance_id]


def test_preemption_shows_in_listing_with_a_reason(harness: ProviderHarness) -> None:
    ref = harness.provider.launch(request(harness, harness.offer(), Capacity.spot, "preempted")).ref
    running = eventually(harness, ref, {S.running})

    harness.preempt(running)
    reclaimed = eventually(harness, ref, {S.terminated, S.stopped})

    assert reclaimed.preempted is True
    assert reclaimed.preempt_reason


def test_prices_are_decimal_in_the_cloud_currency(harness: ProviderHarness) -> None:
    offers = harness.provider.offers()

    assert offers
    for offer in offers:
        assert offer.provider == harness.provider.name
        for price in (offer.on_demand, offer.spot):
            if price is None:
                continue
            assert isinstance(price.per_hour.amount, Decimal)
            assert price.per_hour.currency == harness.currency
            assert price.per_hour.amount > 0
            assert price.source
        if offer.on_demand is not None and offer.spot is not None:
            assert offer.spot.per_hour.amount <= offer.on_demand.per_hour.amount


def test_same_token_with_different_parameters_is_invalid_request(harness: ProviderHarness) -> None:
    offer = harness.offer()
    first = harness.provider.launch(request(harness, offer, Capacity.spot, "reused-token"))

    with pytest.raises(InvalidRequest):
        harness.provider.launch(request(harness, offer, Capacity.on_demand, "reused-token"))

    assert [i.ref.instance_id for i in harness.provider.instances(tags(harness))] == [first.ref.instance_id]


def _running_spot(harness: ProviderHarness, purpose: str) -> InstanceRef:
    ref = harness.provider.launch(request(harness, harness.offer(), Capacity.spot, purpose)).ref
    eventually(harness, ref, {S.running})
    return ref


def test_stopping_spot_without_spot_stop_is_invalid_request(harness: ProviderHarness) -> None:
    if Capability.spot_stop in harness.provider.capabilities:
        pytest.skip(f"{harness.provider.name} has spot_stop: its spot instances may stop")
    ref = _running_spot(harness, "spot-stop-refused")

    with pytest.raises(InvalidRequest):
        harness.provider.stop(ref)

    # Refused means untouched: not stopped, and never silently terminated.
    assert state_of(harness, ref) is S.running


def test_stopping_spot_with_spot_stop_stops_it(harness: ProviderHarness) -> None:
    if Capability.spot_stop not in harness.provider.capabilities:
        pytest.skip(f"{harness.provider.name} lacks spot_stop: the refusal case covers it")
    ref = _running_spot(harness, "spot-stop-allowed")

    harness.provider.stop(ref)

    assert eventually(harness, ref, {S.stopped}).capacity is Capacity.spot


def test_wrong_secret_is_auth_failed(harness: ProviderHarness) -> None:
    wrong: Provider | None = harness.provider_with_wrong_secret()
    if wrong is None:
        pytest.skip("this provider has no credentials to get wrong (in-memory sandbox); applies to HTTP providers")
    with pytest.raises(AuthFailed):
        wrong.offers()


# --- under faults ---------------------------------------------------------------------------------


def test_under_faults_one_machine_per_intent_nothing_left_running_and_every_job_done(
    faulty_harness: ProviderHarness,
) -> None:
    """Run by ``faulty_harness`` for every provider twice: its cloud failing no call, and 10% of all calls
    (throttled with Retry-After, 5xx, no answer, or no answer after the call was carried out)."""
    harness = faulty_harness
    rng = random.Random(1)
    harness.advance(50 * 60)  # 09:50: the run crosses a whole hour, as time-derived launch parameters do
    offers = call_with_retry(harness.provider.offers, clock=retry_clock(harness), rng=rng)
    offer = next(o for o in offers if o.on_demand is not None and o.spot is not None)

    report = Workload(harness, offer, jobs=8).run()

    # Every job done.
    assert report.rounds < 400
    # One machine per intent (job, attempt), as the cloud itself counts them and as every listing showed them.
    per_intent = Counter((t.get(TAG_JOB), t.get(TAG_ATTEMPT)) for t, _ in harness.machines())
    assert per_intent and max(per_intent.values()) == 1, per_intent
    assert all(len(ids) == 1 for ids in report.intents.values()), report.intents
    # Nothing left running that no job owns: once the cloud has settled, every machine is gone.
    harness.advance(SETTLE_SECONDS)
    listed = call_with_retry(lambda: harness.provider.instances(tags(harness)), clock=retry_clock(harness), rng=rng)
    assert all(i.state is S.terminated for i in listed), [(i.ref.instance_id, i.state) for i in listed]
    assert {state for _, state in harness.machines()} == {"terminated"}
    dealt = harness.faults_dealt()
    if dealt:  # the faulty run really was faulty (which kinds, the seed decides; each kind has its own cases)
        assert sum(dealt.values()) >= 3, dealt
