"""providers.sandbox.provider: the simulated cloud's market, timing, faults and determinism.

The Provider contract itself is proven in tests/contract/; these cases cover
what only the sandbox has (seeds, scripting, drift, quotas, paging, billing).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from statistics import mean

import pytest

from providers.base import (
    Capability,
    InstanceRef,
    InstanceRequest,
    InstanceState,
    InvalidRequest,
    NoCapacity,
    NotFound,
    Provider,
    ProviderUnavailable,
    QuotaExceeded,
    Throttled,
)
from providers.sandbox.provider import (
    PREEMPT_REASON,
    SandboxCloud,
    SandboxInstance,
    SandboxProvider,
    capabilities_like,
    market_key,
)
from scheduler.clock import SimClock
from scheduler.models import Capacity, Offer, Price, Stock
from scheduler.money import Money

S = InstanceState
C = Capability
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
SPOT, OD = Capacity.spot, Capacity.on_demand


def price(amount: str, currency: str = "CNY") -> Price:
    return Price(per_hour=Money(amount=Decimal(amount), currency=currency), source="test catalog",
                 as_of=date(2026, 11, 1))


def offer(itype: str = "ecs.gn6i-c4g1.xlarge", *, region: str = "cn-hangzhou", zone: str = "cn-hangzhou-i",
          gpu_count: int = 1, od: str = "11.63", spot: str | None = "4.65", rate: float = 0.5,
          spot_stock: Stock = Stock.available) -> Offer:
    return Offer(
        provider="sandbox", region=region, zone=zone, instance_type=itype, gpu="T4", gpu_count=gpu_count,
        gpu_mem_gib=15.0, vcpus=4, mem_gib=15, on_demand=price(od), spot=price(spot) if spot else None,
        on_demand_stock=Stock.available, spot_stock=spot_stock, spot_interruptions_per_hour=rate,
    )


T4 = offer()
A10 = offer("ecs.gn7i-c8g1.2xlarge", od="9.5326", spot="3.81")
SHANGHAI = offer(region="cn-shanghai", zone="cn-shanghai-l")
NO_SPOT = offer("ecs.gn6i-c24g1.12xlarge", gpu_count=2, od="34.38", spot=None)
CATALOG = (T4, A10, SHANGHAI, NO_SPOT)


def make(clock: SimClock | None = None, **kw: object) -> tuple[SimClock, SandboxCloud]:
    clock = clock or SimClock(T0)
    return clock, SandboxCloud(clock, CATALOG, **kw)  # type: ignore[arg-type]


def launch(
    cloud: SandboxCloud, o: Offer = T4, capacity: Capacity = OD, token: str | None = "t-1", **tags: str
) -> SandboxInstance:
    return cloud.launch(region=o.region, zone=o.zone, instance_type=o.instance_type, capacity=capacity,
                        client_token=token, tags=tags)


def at(clock: SimClock, seconds: float) -> None:
    clock.set(T0 + timedelta(seconds=seconds))


def entered(cloud: SandboxCloud, instance_id: str, state: InstanceState) -> datetime:
    return next(when for when, s in cloud.history(instance_id) if s is state)


# --- determinism ----------------------------------------------------------------


def script(seed: int) -> list[tuple[str, list[tuple[datetime, InstanceState]], bool]]:
    """A fixed call sequence on a fresh cloud; returns what every instance went through."""
    clock, cloud = make(seed=seed, interruption_scale=4.0, stockout_probability=0.2)
    for n in range(20):
        try:
            launch(cloud, T4 if n % 2 else A10, SPOT if n % 3 else OD, token=f"job-{n}")
        except NoCapacity:
            pass
        clock.advance(timedelta(minutes=7))
    clock.advance(timedelta(hours=6))
    return [(i.instance_id, cloud.history(i.instance_id), i.preempted) for i in cloud.all_instances()]


def test_same_seed_and_calls_give_the_same_cloud_and_another_seed_does_not() -> None:
    first = script(seed=3)

    assert first == script(seed=3)
    assert first != script(seed=4)
    assert [iid for iid, _, _ in first][:2] == ["sbx-000001", "sbx-000002"]
    assert any(preempted for _, _, preempted in first)


def test_boot_takes_the_seeded_delay_within_the_jitter_and_is_recorded_when_due() -> None:
    clock, cloud = make(boot_seconds=90, boot_jitter=30)
    ids = [launch(cloud, token=f"boot-{n}").instance_id for n in range(40)]

    assert all(cloud.get(i).state is S.pending for i in ids)
    clock.advance(timedelta(hours=3))  # read long after: times must still be the due times

    boots = [(entered(cloud, i, S.running) - T0).total_seconds() for i in ids]
    assert all(60 <= b <= 120 for b in boots)
    assert len(set(boots)) > 30


def test_boot_never_takes_less_than_a_second_so_launch_is_observably_pending() -> None:
    clock, cloud = make(boot_seconds=0, boot_jitter=0)
    inst = launch(cloud)

    assert inst.state is S.pending
    clock.advance(timedelta(seconds=1))
    assert cloud.get(inst.instance_id).state is S.running


# --- spot interruptions -------------------------------------------------------------


def test_reclaim_times_follow_the_exponential_rate_times_the_scale() -> None:
    clock, cloud = make(seed=5, interruption_scale=2.0)  # 0.5/h x 2 = one reclaim per hour on average
    ids = [launch(cloud, capacity=SPOT, token=f"spot-{n}").instance_id for n in range(400)]
    clock.advance(timedelta(hours=40))

    lifetimes = []
    for i in ids:
        inst = cloud.get(i)
        assert inst.state is S.terminated and inst.preempted and inst.preempt_reason == PREEMPT_REASON
        lifetimes.append((entered(cloud, i, S.terminated) - T0).total_seconds() / 3600)
    assert 0.85 < mean(lifetimes) < 1.15
    assert min(lifetimes) < 0.1 < 3 < max(lifetimes)


@pytest.mark.parametrize(("capacity", "scale"), [(OD, 5.0), (SPOT, 0.0)])
def test_no_reclaims_for_on_demand_or_a_zero_scale(capacity: Capacity, scale: float) -> None:
    clock, cloud = make(interruption_scale=scale)
    ids = [launch(cloud, capacity=capacity, token=f"t-{n}").instance_id for n in range(30)]
    clock.advance(timedelta(days=30))

    assert all(cloud.get(i).state is S.running and not cloud.get(i).preempted for i in ids)


def test_the_notice_appears_notice_seconds_before_the_scripted_reclaim() -> None:
    clock, cloud = make(notice_seconds=120, interruption_scale=0)
    inst = launch(cloud, capacity=SPOT)
    reclaim = T0 + timedelta(hours=1)
    cloud.preempt(inst.instance_id, at=reclaim)

    clock.set(reclaim - timedelta(seconds=121))
    assert cloud.get(inst.instance_id).interruption_notice_at is None
    clock.set(reclaim - timedelta(seconds=119))
    noticed = cloud.get(inst.instance_id)
    assert (noticed.state, noticed.interruption_notice_at, noticed.preempted) == (
        S.running, reclaim - timedelta(seconds=120), False)
    clock.set(reclaim)
    gone = cloud.get(inst.instance_id)
    assert (gone.state, gone.preempted, gone.preempt_reason) == (S.terminated, True, PREEMPT_REASON)
    assert entered(cloud, inst.instance_id, S.terminated) == reclaim


def test_a_reclaim_while_pending_terminates_an_instance_that_never_ran() -> None:
    clock, cloud = make(interruption_scale=0)
    inst = launch(cloud, capacity=SPOT)
    cloud.preempt(inst.instance_id)
    clock.advance(timedelta(hours=1))

    assert [s for _, s in cloud.history(inst.instance_id)] == [S.pending, S.terminated]
    assert cloud.get(inst.instance_id).preempted


def test_stop_behaviour_stops_the_reclaimed_instance_and_start_clears_the_mark() -> None:
    clock, cloud = make(spot_interruption_behavior="stop", interruption_scale=0)
    inst = launch(cloud, capacity=SPOT)
    clock.advance(timedelta(minutes=5))
    cloud.preempt(inst.instance_id)

    reclaimed = cloud.get(inst.instance_id)
    assert (reclaimed.state, reclaimed.preempted) == (S.stopped, True)
    cloud.start(inst.instance_id)
    clock.advance(timedelta(minutes=5))
    restarted = cloud.get(inst.instance_id)
    assert (restarted.state, restarted.preempted, restarted.preempt_reason) == (S.running, False, None)


def test_only_spot_instances_can_be_preempted() -> None:
    _, cloud = make()
    inst = launch(cloud, capacity=OD)
    with pytest.raises(InvalidRequest):
        cloud.preempt(inst.instance_id)


# --- idempotency ------------------------------------------------------------------


def test_the_same_token_returns_the_same_instance_even_once_terminated() -> None:
    clock, cloud = make()
    first = launch(cloud, token="job-7-1")
    cloud.terminate(first.instance_id)
    clock.advance(timedelta(minutes=5))

    again = launch(cloud, token="job-7-1")

    assert (again.instance_id, again.state) == (first.instance_id, S.terminated)
    assert len(cloud.all_instances()) == 1


@pytest.mark.parametrize(("other_offer", "other_capacity"), [(A10, OD), (T4, SPOT), (SHANGHAI, OD)])
def test_the_same_token_with_other_parameters_is_a_mismatch(other_offer: Offer, other_capacity: Capacity) -> None:
    _, cloud = make()
    launch(cloud, T4, OD, token="job-8-1")

    with pytest.raises(InvalidRequest) as caught:
        launch(cloud, other_offer, other_capacity, token="job-8-1")

    assert caught.value.code == "IdempotentParameterMismatch"
    assert "IdempotentParameterMismatch" in caught.value.message
    assert len(cloud.all_instances()) == 1


def test_a_lost_launch_response_still_launches_once() -> None:
    _, cloud = make()
    cloud.lose_next_launch_response()

    with pytest.raises(ProviderUnavailable):
        launch(cloud, token="lost")
    created = cloud.all_instances()
    found = launch(cloud, token="lost")
    other = launch(cloud, token="next")  # one-shot: the next launch answers normally

    assert [i.instance_id for i in created] == [found.instance_id]
    assert other.instance_id != found.instance_id


# --- stock, prices, quota ---------------------------------------------------------


def stock(cloud: SandboxCloud, o: Offer, capacity: Capacity) -> Stock:
    return next(x for x in cloud.offers() if market_key(x) == market_key(o)).stock(capacity)


def test_sell_out_until_a_time_then_stock_returns() -> None:
    clock, cloud = make()
    cloud.sell_out(T4, SPOT, until=T0 + timedelta(hours=1))

    with pytest.raises(NoCapacity):
        launch(cloud, T4, SPOT, token="a")
    assert stock(cloud, T4, SPOT) is Stock.sold_out
    assert stock(cloud, T4, OD) is Stock.available
    launch(cloud, T4, OD, token="b")  # the other capacity and other offers are unaffected
    launch(cloud, A10, SPOT, token="c")

    clock.advance(timedelta(hours=1))
    assert stock(cloud, T4, SPOT) is Stock.available
    assert launch(cloud, T4, SPOT, token="a").state is S.pending


def test_sell_out_without_end_lasts_until_restock_and_accepts_any_key_form() -> None:
    clock, cloud = make()
    cloud.sell_out(f"aws/{market_key(T4)}", OD)
    clock.advance(timedelta(days=300))
    with pytest.raises(NoCapacity):
        launch(cloud, T4, Capacity.reserved)  # reserved runs on the on-demand pool

    cloud.restock(market_key(T4), OD)
    assert launch(cloud, T4, OD).state is S.pending


def test_a_catalog_sold_out_offer_stays_sold_out_until_restocked() -> None:
    clock = SimClock(T0)
    sold = offer("ecs.gn6i-c8g1.2xlarge", spot_stock=Stock.sold_out)
    cloud = SandboxCloud(clock, [sold])

    with pytest.raises(NoCapacity):
        launch(cloud, sold, SPOT)
    cloud.restock(sold, SPOT)
    assert launch(cloud, sold, SPOT).capacity is SPOT


def test_starting_a_stopped_instance_needs_stock_again() -> None:
    clock, cloud = make()
    inst = launch(cloud)
    clock.advance(timedelta(minutes=5))
    cloud.stop(inst.instance_id)
    clock.advance(timedelta(minutes=5))
    cloud.sell_out(T4, OD)

    with pytest.raises(NoCapacity):
        cloud.start(inst.instance_id)
    assert cloud.get(inst.instance_id).state is S.stopped


@pytest.mark.parametrize(("p", "low", "high"), [(0.0, 0, 0), (1.0, 300, 300), (0.3, 60, 120)])
def test_random_stock_outs_happen_at_the_seeded_probability(p: float, low: int, high: int) -> None:
    def refusals(seed: int) -> list[int]:
        _, cloud = make(seed=seed, stockout_probability=p)
        out = []
        for n in range(300):
            try:
                launch(cloud, token=f"s-{n}")
            except NoCapacity:
                out.append(n)
        return out

    refused = refusals(9)
    assert low <= len(refused) <= high
    assert refused == refusals(9)


def spot_prices(cloud: SandboxCloud) -> dict[str, Price]:
    return {market_key(o): o.spot for o in cloud.offers() if o.spot is not None}


def test_without_drift_offers_carry_the_catalog_prices() -> None:
    clock, cloud = make()
    clock.advance(timedelta(days=12))

    assert [(o.on_demand, o.spot) for o in cloud.offers()] == [(o.on_demand, o.spot) for o in CATALOG]


def test_spot_drift_is_daily_bounded_seeded_and_below_on_demand() -> None:
    clock, cloud = make(seed=2, spot_price_drift=True)
    _, twin = make(SimClock(T0), seed=2, spot_price_drift=True)
    base = {market_key(o): o.spot.per_hour.amount for o in CATALOG if o.spot}
    ods = {market_key(o): o.on_demand.per_hour.amount for o in CATALOG if o.on_demand}

    days = []
    for day in range(10):
        today = spot_prices(cloud)
        assert today == spot_prices(cloud)  # stable within the day
        for key, p in today.items():
            assert isinstance(p.per_hour.amount, Decimal) and p.per_hour.currency == "CNY"
            assert base[key] * Decimal("0.9") <= p.per_hour.amount <= base[key] * Decimal("1.1")
            assert p.per_hour.amount <= ods[key]
            assert p.as_of == clock.now().date()
        days.append(today)
        clock.advance(timedelta(days=1))
    assert len({d[market_key(T4)].per_hour.amount for d in days}) > 5
    assert days[0] == spot_prices(twin)


def test_an_offer_that_did_not_change_is_listed_as_the_same_object() -> None:
    # The tick keeps the planner's grouping of the offers while they are the same objects
    # (planner.book.Market), so an unchanged offer must come back as itself, and a changed one must not.
    clock, cloud = make(seed=2, spot_price_drift=True)
    provider = SandboxProvider(cloud, name="alibaba")
    first, again = provider.offers(), provider.offers()
    assert [a is b for a, b in zip(first, again, strict=True)] == [True] * len(first)
    cloud.sell_out(T4, SPOT)
    sold = provider.offers()
    changed = [i for i, (a, b) in enumerate(zip(first, sold, strict=True)) if a is not b]
    assert [market_key(sold[i]) for i in changed] == [market_key(T4)]
    assert sold[changed[0]].spot_stock is Stock.sold_out and sold[changed[0]].provider == "alibaba"
    clock.advance(timedelta(days=1))  # a new day's spot prices: every offer with a spot price is new
    tomorrow = provider.offers()
    assert all((a is b) == (a.spot is None) for a, b in zip(sold, tomorrow, strict=True))
    assert [o.model_dump() for o in tomorrow] == [o.model_copy(update={"provider": "alibaba"}).model_dump()
                                                   for o in cloud.offers()]


def test_max_price_below_the_spot_price_is_no_capacity() -> None:
    _, cloud = make()
    with pytest.raises(NoCapacity) as caught:
        cloud.launch(region=T4.region, zone=T4.zone, instance_type=T4.instance_type, capacity=SPOT,
                     client_token="cheap", max_price=Decimal("4.64"))
    assert caught.value.code == "SpotMaxPriceTooLow"
    assert cloud.launch(region=T4.region, zone=T4.zone, instance_type=T4.instance_type, capacity=SPOT,
                        client_token="cheap", max_price=Decimal("4.65")).state is S.pending


def test_gpu_quota_counts_live_instances_until_they_are_terminated() -> None:
    clock, cloud = make(gpu_quota=3)
    first = launch(cloud, T4, token="q1")
    launch(cloud, NO_SPOT, token="q2")  # 2 GPUs

    with pytest.raises(QuotaExceeded):
        launch(cloud, T4, token="q3")
    assert launch(cloud, T4, token="q1").instance_id == first.instance_id  # a repeat is not a new launch
    cloud.terminate(first.instance_id)
    with pytest.raises(QuotaExceeded):
        launch(cloud, T4, token="q3")  # still terminating
    clock.advance(timedelta(minutes=1))
    assert launch(cloud, T4, token="q3").state is S.pending


@pytest.mark.parametrize(
    ("o", "capacity", "code"),
    [(offer("ecs.nope"), OD, "InvalidInstanceType"), (NO_SPOT, SPOT, "InvalidCapacityType")],
)
def test_launching_what_is_not_sold_is_invalid(o: Offer, capacity: Capacity, code: str) -> None:
    _, cloud = make()
    with pytest.raises(InvalidRequest) as caught:
        launch(cloud, o, capacity)
    assert caught.value.code == code


# --- lifecycle details ------------------------------------------------------------------


def test_stop_and_terminate_pass_through_observable_states_for_their_delays() -> None:
    clock, cloud = make(boot_seconds=60, boot_jitter=0, stop_seconds=30, terminate_seconds=10)
    iid = launch(cloud).instance_id
    at(clock, 100)
    cloud.stop(iid)
    at(clock, 129)
    assert cloud.get(iid).state is S.stopping
    at(clock, 130)
    assert cloud.get(iid).state is S.stopped
    cloud.terminate(iid)
    at(clock, 139)
    assert cloud.get(iid).state is S.terminating
    at(clock, 140)
    assert cloud.get(iid).state is S.terminated
    assert [s for _, s in cloud.history(iid)] == [
        S.pending, S.running, S.stopping, S.stopped, S.terminating, S.terminated]


@pytest.mark.parametrize(
    ("prepare", "operation", "code"),
    [
        ("pending", "stop", "IncorrectInstanceState"),
        ("terminated", "stop", "IncorrectInstanceState"),
        ("terminated", "start", "IncorrectInstanceState"),
        ("stopping", "start", "IncorrectInstanceState"),
    ],
)
def test_moves_from_the_wrong_state_are_refused(prepare: str, operation: str, code: str) -> None:
    clock, cloud = make(interruption_scale=0)
    iid = launch(cloud).instance_id
    if prepare != "pending":
        clock.advance(timedelta(minutes=5))
        (cloud.stop if prepare == "stopping" else cloud.terminate)(iid)
    if prepare == "terminated":
        clock.advance(timedelta(minutes=5))
    before = cloud.get(iid).state

    with pytest.raises(InvalidRequest) as caught:
        getattr(cloud, operation)(iid)

    assert caught.value.code == code
    assert cloud.get(iid).state is before


def test_repeated_moves_are_no_ops() -> None:
    clock, cloud = make()
    iid = launch(cloud).instance_id
    cloud.start(iid)  # pending already
    clock.advance(timedelta(minutes=5))
    cloud.stop(iid)
    cloud.stop(iid)
    cloud.terminate(iid)
    cloud.terminate(iid)

    assert [s for _, s in cloud.history(iid)] == [S.pending, S.running, S.stopping, S.terminating]


@pytest.mark.parametrize("operation", ["stop", "start", "terminate", "get"])
def test_unknown_or_wrong_region_ids_are_not_found(operation: str) -> None:
    _, cloud = make()
    iid = launch(cloud).instance_id
    with pytest.raises(NotFound):
        getattr(cloud, operation)("sbx-ffffff")
    with pytest.raises(NotFound):
        getattr(cloud, operation)(iid, region="cn-shanghai")


def test_a_cloud_whose_spot_cannot_stop_refuses_itself() -> None:
    clock, cloud = make(spot_can_stop=False)
    iid = launch(cloud, capacity=SPOT).instance_id
    clock.advance(timedelta(minutes=5))

    with pytest.raises(InvalidRequest) as caught:
        cloud.stop(iid)
    assert caught.value.code == "UnsupportedOperation"


# --- faults -------------------------------------------------------------------------------


def test_fail_next_fails_that_operation_so_many_times_then_works() -> None:
    _, cloud = make()
    iid = launch(cloud).instance_id
    planted = Throttled("slow down", code="Throttling")
    cloud.fail_next("instances", planted, times=2)

    raised = []
    for _ in range(2):
        with pytest.raises(Throttled) as caught:
            cloud.instances()
        raised.append(caught.value)
    cloud.offers()  # other operations are untouched
    page, _ = cloud.instances()

    assert [i.instance_id for i in page] == [iid]
    assert all(e is not planted and e.message == "slow down" and e.code == "Throttling" for e in raised)


def test_a_failed_launch_does_nothing() -> None:
    _, cloud = make()
    cloud.fail_next("launch", ProviderUnavailable("502"))
    with pytest.raises(ProviderUnavailable):
        launch(cloud, token="x")
    assert cloud.all_instances() == []


@pytest.mark.parametrize(("operation", "times"), [("reboot", 1), ("launch", 0)])
def test_fail_next_refuses_nonsense(operation: str, times: int) -> None:
    _, cloud = make()
    with pytest.raises(ValueError):
        cloud.fail_next(operation, Throttled("x"), times)


# --- listing -------------------------------------------------------------------------------


def test_listing_pages_are_complete_and_disjoint() -> None:
    _, cloud = make()
    ids = [launch(cloud, token=f"p-{n}", team="a" if n % 3 else "b").instance_id for n in range(23)]

    pages, token = [], None
    while True:
        page, token = cloud.instances(tags={"team": "a"}, page_size=4, page_token=token)
        pages.append([i.instance_id for i in page])
        if token is None:
            break

    flat = [i for p in pages for i in p]
    assert flat == [i for n, i in enumerate(ids) if n % 3]
    assert all(len(p) <= 4 for p in pages) and len(pages) >= 4


def test_new_instances_show_in_listings_only_after_the_listing_delay() -> None:
    clock, cloud = make(list_delay_seconds=30)
    iid = launch(cloud).instance_id

    assert cloud.instances()[0] == []
    assert cloud.get(iid).instance_id == iid
    clock.advance(timedelta(seconds=30))
    assert [i.instance_id for i in cloud.instances()[0]] == [iid]


def test_terminated_instances_are_forgotten_after_a_while_if_configured() -> None:
    clock, cloud = make(forget_terminated_seconds=3600, terminate_seconds=10)
    iid = launch(cloud).instance_id
    cloud.terminate(iid)
    clock.advance(timedelta(seconds=10 + 3599))
    assert [i.instance_id for i in cloud.instances()[0]] == [iid]
    clock.advance(timedelta(seconds=1))

    assert cloud.instances()[0] == []
    with pytest.raises(NotFound):
        cloud.get(iid)
    assert [i.instance_id for i in cloud.all_instances()] == [iid]


def test_a_listing_paged_across_a_prune_skips_and_repeats_nothing() -> None:
    # Forgotten machines are pruned when a listing starts; a listing already paging must not shift.
    clock, cloud = make(forget_terminated_seconds=60, terminate_seconds=10)
    ids = [launch(cloud, token=f"q-{n}").instance_id for n in range(9)]
    for iid in ids[:3]:
        cloud.terminate(iid)
    first, token = cloud.instances(page_size=4)
    clock.advance(timedelta(seconds=70))
    assert cloud.instances()[0][0].instance_id == ids[3]  # another listing prunes ids[:3]
    rest: list[str] = []
    while token is not None:
        page, token = cloud.instances(page_size=4, page_token=token)
        rest += [i.instance_id for i in page]

    assert [i.instance_id for i in first] == ids[:4]
    assert rest == ids[4:]
    assert cloud.next_event_after(clock.now()) is None or cloud.next_event_after(clock.now()) > clock.now()


def test_market_key_accepts_offers_and_both_key_forms_only() -> None:
    assert market_key(T4) == market_key(T4.key) == market_key(market_key(T4)) == (
        "cn-hangzhou/cn-hangzhou-i/ecs.gn6i-c4g1.xlarge")
    for bad in ("cn-hangzhou", "a/b", "a//c", "p/r/z/t/extra"):
        with pytest.raises(ValueError):
            market_key(bad)


def test_duplicate_catalog_entries_are_refused() -> None:
    with pytest.raises(ValueError):
        SandboxCloud(SimClock(T0), [T4, T4.model_copy(update={"provider": "aws"})])


# --- the provider face -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cloud_name", "has", "lacks"),
    [
        ("aws", {C.stop_charging, C.preemption_events, C.bills_from_running}, {C.spot_stop}),
        ("alibaba", {C.stop_charging, C.spot_stop, C.preemption_events}, {C.bills_from_running}),
        ("tencent", {C.stop_charging, C.preemption_events}, {C.spot_stop, C.bills_from_running}),
        ("sandbox", {C.stop_charging, C.spot_stop, C.live_prices, C.preemption_events}, {C.bills_from_running}),
    ],
)
def test_capabilities_mirror_the_real_clouds(cloud_name: str, has: set[Capability], lacks: set[Capability]) -> None:
    caps = capabilities_like(cloud_name)
    assert has <= caps and not (lacks & caps)
    assert SandboxProvider(make()[1], name=cloud_name).capabilities == caps


def test_capabilities_for_an_unknown_cloud_must_be_given() -> None:
    with pytest.raises(ValueError):
        capabilities_like("gcp")
    assert SandboxProvider(make()[1], name="gcp", capabilities=frozenset()).capabilities == frozenset()


def test_capabilities_keep_their_strings_and_a_misspelt_one_fails_loudly() -> None:
    assert sorted(C) == ["bills_from_running", "live_prices", "preemption_events", "spot_stop",
                         "stop_charging"]  # as stored and logged
    assert C("spot_stop") is C.spot_stop and f"{C.spot_stop}" == "spot_stop"
    with pytest.raises(AttributeError):
        C.spot_stops  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        SandboxProvider(make()[1], name="gcp", capabilities=frozenset({"spot_stops"}))  # type: ignore[arg-type]


def test_the_provider_poses_as_its_cloud_and_serves_only_its_regions() -> None:
    _, cloud = make()
    provider = SandboxProvider(cloud, name="alibaba", regions=["cn-hangzhou"])

    assert isinstance(provider, Provider)
    offers = provider.offers()
    assert {o.provider for o in offers} == {"alibaba"}
    assert {o.region for o in offers} == {"cn-hangzhou"}
    assert provider.offers(["cn-shanghai"]) == []
    inst = provider.launch(InstanceRequest(offer=offers[0], capacity=OD, client_token="r1", tags={"k": "v"}))
    assert inst.ref == InstanceRef(provider="alibaba", region="cn-hangzhou", instance_id=inst.ref.instance_id)

    shanghai = SHANGHAI.model_copy(update={"provider": "alibaba"})
    with pytest.raises(InvalidRequest):
        provider.launch(InstanceRequest(offer=shanghai, capacity=OD, client_token="r2", tags={}))
    with pytest.raises(InvalidRequest):
        provider.launch(InstanceRequest(offer=T4, capacity=OD, client_token="r3", tags={}))  # provider "sandbox"
    with pytest.raises(InvalidRequest):
        provider.terminate(inst.ref.model_copy(update={"provider": "aws"}))


def test_provider_errors_name_the_provider_and_terminate_swallows_not_found() -> None:
    _, cloud = make()
    provider = SandboxProvider(cloud, name="tencent")
    cloud.sell_out(T4, OD)
    sold = provider.offers()[0]

    with pytest.raises(NoCapacity) as caught:
        provider.launch(InstanceRequest(offer=sold, capacity=OD, client_token="e1", tags={}))
    assert caught.value.provider == "tencent"
    provider.terminate(InstanceRef(provider="tencent", region="cn-hangzhou", instance_id="sbx-ffffff"))
    with pytest.raises(NotFound):
        provider.stop(InstanceRef(provider="tencent", region="cn-hangzhou", instance_id="sbx-ffffff"))


@pytest.mark.parametrize(("max_price", "error"), [("4.00", NoCapacity), ("cheap", InvalidRequest)])
def test_provider_passes_max_price_and_refuses_nonsense(max_price: str, error: type[Exception]) -> None:
    _, cloud = make()
    provider = SandboxProvider(cloud)
    req = InstanceRequest(offer=provider.offers()[0], capacity=SPOT, client_token="m1", tags={}, max_price=max_price)
    with pytest.raises(error):
        provider.launch(req)
    assert cloud.all_instances() == []


def test_provider_listing_walks_every_page() -> None:
    _, cloud = make()
    provider = SandboxProvider(cloud, page_size=3)
    o = provider.offers()[0]
    ids = [provider.launch(InstanceRequest(offer=o, capacity=OD, client_token=f"w{n}", tags={"g": "1"})).ref.instance_id
           for n in range(10)]
    cloud.fail_next("instances", Throttled("x"))

    with pytest.raises(Throttled):
        provider.instances({"g": "1"})
    assert [i.ref.instance_id for i in provider.instances({"g": "1"})] == ids


def test_provider_reports_the_interruption_notice_and_preemption() -> None:
    clock, cloud = make(interruption_scale=0, notice_seconds=300)
    provider = SandboxProvider(cloud, name="alibaba")
    inst = provider.launch(InstanceRequest(offer=provider.offers()[0], capacity=SPOT, client_token="n1", tags={}))
    cloud.preempt(inst.ref.instance_id, at=T0 + timedelta(minutes=30))

    clock.set(T0 + timedelta(minutes=26))
    [noticed] = provider.instances({})
    clock.set(T0 + timedelta(minutes=30))
    [gone] = provider.instances({})

    assert noticed.interruption_notice_at == T0 + timedelta(minutes=25) and not noticed.preempted
    assert (gone.state, gone.preempted, gone.preempt_reason) == (S.terminated, True, PREEMPT_REASON)


def test_a_provider_without_spot_stop_refuses_before_asking_the_cloud() -> None:
    clock, cloud = make(spot_can_stop=True, interruption_scale=0)  # the cloud itself would stop it
    provider = SandboxProvider(cloud, name="aws")
    inst = provider.launch(InstanceRequest(offer=provider.offers()[0], capacity=SPOT, client_token="s1", tags={}))
    clock.advance(timedelta(minutes=5))

    with pytest.raises(InvalidRequest) as caught:
        provider.stop(inst.ref)

    assert caught.value.provider == "aws" and caught.value.fix and "terminate" in caught.value.fix
    assert cloud.get(inst.ref.instance_id).state is S.running
