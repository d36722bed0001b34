"""The offers' grouping (``book.Market``) kept between plan() calls changes no decision.

The tick keeps one market while its offers are the same objects (``book.market_for``); each call adds
its own fleet slots, clock and measured rates. Plans made with a market an earlier call used (with
another fleet, other jobs, another time) must equal plans made from scratch.
"""

from __future__ import annotations

from datetime import timedelta

from scheduler.models import Capacity
from scheduler.planner.book import Market, market_for
from scheduler.planner.inputs import FleetSlot, PlannerPolicy
from scheduler.planner.plan import plan
from scheduler.simulation.trace_file import load_trace
from tests.planner.golden import STRESS, workload


def dumps(decisions: list) -> list[str]:
    return [d.model_dump_json() for d in decisions]


def test_plans_with_a_kept_market_equal_plans_from_scratch() -> None:
    entries = load_trace(STRESS)[:4000]
    jobs, offers, fleet, now, policy, kw = workload("mixed", entries)
    market = market_for(offers, policy, None)
    calls = [  # (jobs, fleet, now): different queues, fleets and times against the same offers
        (jobs[:300], fleet, now),
        (jobs[300:700], fleet[::2], now + timedelta(hours=1)),
        (jobs[700:900], [], now + timedelta(hours=5)),
        (jobs[900:1300], [*fleet[5:], FleetSlot(kind="warm", instance_id="inst-late", offer=offers[7],
                                                capacity=Capacity.on_demand)], now),
    ]
    for i, (js, fl, at) in enumerate(calls):
        fresh = plan(js, offers, fl, at, policy, **kw)
        kept = plan(js, offers, fl, at, policy, **kw, market=market)
        assert dumps(kept) == dumps(fresh), f"call {i}"
    assert market_for(offers, policy, market) is market


def test_a_market_serves_only_the_same_offer_objects_under_the_same_policy() -> None:
    entries = load_trace(STRESS)[:4000]
    _, offers, _, _, policy, _ = workload("mixed", entries)
    market = Market(offers, policy)
    assert market.serves(list(offers), policy)  # another list of the same objects
    assert market.serves(offers, policy.model_copy())  # an equal policy
    changed = [*offers[:3], offers[3].model_copy(update={"spot_stock": offers[3].spot_stock}), *offers[4:]]
    assert not market.serves(changed, policy)  # an equal offer, but another object: grouped again
    assert not market.serves(offers[:-1], policy)
    assert not market.serves(offers, policy.model_copy(update={"strategy": "spot-greedy"}))
    assert not market.serves(offers, PlannerPolicy(currency="USD"))
    assert market_for(changed, policy, market) is not market
