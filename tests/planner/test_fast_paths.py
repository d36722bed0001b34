"""The shortcuts the planner's speed rests on give what the slow forms give (issue 17).

``heap._floor_cents`` stands in for ``cost.expected_cost`` in a placeholder's sort key and must never be
above it; ``rank.float_cents`` gives its whole cents where floats settle them; ``timedelta(0, 0, 0, 0, 0, h)``
stands in for ``timedelta(hours=h)``; a deadline moved into ``now``'s zone object
(``CandidateBook.in_now_zone``) must plan as the deadline it was; ``plan._soonest``, making only the timings
whose float estimate (``heap.Ranking.needs``) is near the least, must find the soonest deadline computing
every ``Timing.needed`` finds; Money made without validation, and texts formatted with ``%`` or kept by
amount, must be what the validated model and the format specs give.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

from scheduler.models import Capacity
from scheduler.money import Money
from scheduler.planner import cost
from scheduler.planner.book import CandidateBook
from scheduler.planner.heap import _CENTS_UNDER, _floor_cents, need_tolerance
from scheduler.planner.inputs import FleetSlot, PlanJob, PlannerPolicy
from scheduler.planner.plan import _ceil_minute, _filter, _Planning, _soonest, plan
from scheduler.planner.rank import Timing, float_cents, fmt_hours, fmt_time
from scheduler.simulation.trace_file import load_trace
from tests.planner.golden import STRESS, market
from tests.planner.test_planner import make_job, make_offer


def _prices(rng: random.Random) -> list[Decimal]:
    """Hourly prices as the book makes them: list prices, some through an FX rate (long decimals), x nodes."""
    out = []
    for _ in range(3000):
        listed = Decimal(rng.randrange(1, 10**7)).scaleb(-rng.choice((2, 3, 4, 6)))
        rate = rng.choice((Decimal(1), Decimal("7.2"), Decimal(1) / Decimal("7.2"), Decimal("0.1389")))
        out.append(listed * rate * rng.choice((1, 2, 4, 8)))
    return out


def test_a_placeholders_floor_is_never_above_the_cost_and_hardly_below() -> None:
    rng = random.Random(17)
    checked = 0
    for price in _prices(rng):
        for hours in (rng.uniform(0, 1), rng.uniform(0, 50), rng.uniform(0, 5000), 10 ** rng.uniform(-4, 4),
                      round(rng.uniform(0, 100), 2)):
            exact = cost.expected_cost(price, Decimal(repr(hours)))
            cents = int(exact * 100)
            floor = _floor_cents(float(price), hours)
            assert cents - 1 - cents * 1e-11 <= floor <= cents, (price, hours, exact, floor)
            checked += 1
    assert checked == 15_000


def test_float_cents_are_the_decimal_costs_cents_where_they_settle_them() -> None:
    """``rank.float_cents`` stands in for ``int(cost.expected_cost(...) * 100)``, and the Decimal of those cents
    (``Scored.cost``'s) for the cost itself (same digits and exponent: it prints the same): on the prices and
    hours of the floor's test, and on hours that put the cost within a hair of a half cent, which it leaves to
    the Decimal formula."""
    rng = random.Random(23)
    settled = unsettled = 0
    for price in _prices(rng):
        halves = [float((Decimal(k) + Decimal("0.5")) / 100 / price) for k in (rng.randrange(1, 10**6),)]
        # At a half cent, a float's step either side (left to the formula), and a little further (settled).
        halves += [f(h) for h in halves for f in (lambda h: math.nextafter(h, math.inf), lambda h: math.nextafter(h, 0),
                                                  lambda h: h * (1 + 1e-13), lambda h: h * (1 - 1e-13))]
        for hours in (rng.uniform(0, 1), rng.uniform(0, 50), rng.uniform(0, 5000), 10 ** rng.uniform(-4, 4),
                      round(rng.uniform(0, 100), 2), 0.0, *halves):
            exact = cost.expected_cost(price, Decimal(repr(hours)))
            got = float_cents(float(price) * (hours * 100.0))
            if got is None:
                unsettled += 1
                continue
            settled += 1
            assert got == int(exact * 100), (price, hours, exact, got)
            made = Decimal(got).scaleb(-2)
            assert made == exact and str(made) == str(exact) and made.as_tuple() == exact.as_tuple(), (price, hours)
    assert settled > 20_000 and unsettled > 10_000, (settled, unsettled)


def test_the_budget_screen_says_what_the_decimals_say() -> None:
    """``Scorer.over_budget`` settles most costs from their cents and floats (``Scorer._budget_screen``); it must
    say what the Decimal total says, for budgets and money spent in either currency, near the limit too."""
    rng = random.Random(31)
    offer = make_offer("g5.xlarge")
    settled = checked = 0
    for _ in range(300):
        currency, budget_currency, spent_currency = (rng.choice(("CNY", "USD")) for _ in range(3))
        budget = f"{Decimal(rng.randrange(1, 10**6)).scaleb(-rng.choice((0, 2)))} {budget_currency}"
        spent = rng.choice((None, f"{Decimal(rng.randrange(0, 10**7)).scaleb(-2)} {spent_currency}"))
        book = CandidateBook([offer], [], datetime(2026, 12, 1, tzinfo=UTC), PlannerPolicy(currency=currency), None)
        p = _Planning(make_job(budget=budget, spent=spent), book)
        sc = p.scorer
        g = book.matching(_filter(p.job, book.policy))[0][0]
        t = sc.timing(g)
        assert sc._budget is not None and t.hours > 0
        limit = int((sc._budget.amount - (sc._spent or 0)) / sc._budget_rate * 100)  # type: ignore[operator]
        for cents in {max(0, limit + d) for d in (-10**6, -1000, -2, -1, 0, 1, 2, 1000, 10**6)} | {0}:
            exact = sc._budget_total(Decimal(cents).scaleb(-2)) > sc._budget.amount
            assert sc.over_budget(g, t, cents) == exact, (budget, spent, currency, cents)
            settled += not sc._within_at <= cents <= sc._over_at
            checked += 1
    assert settled > checked / 2, (settled, checked)


def test_a_new_machine_scored_in_one_go_is_what_the_general_steps_give() -> None:
    """``Scorer._score`` scores a new machine of a job that avoids nothing in one go: its runs are what
    ``Scored._runs`` works out, its blockers only the timing's and the budget's, and over budget where the
    Decimal total (``Scorer.budget_total``, its cost plus what was spent) is over the budget, late or not; jobs
    with and without budgets, some with money spent."""
    entries = load_trace(STRESS)[:200]
    offers = market(300)
    now = max(e.at for e in entries)
    book = CandidateBook(offers, [], now, PlannerPolicy(), None)
    late = over = checked = 0
    for i, e in enumerate(entries):
        budget = e.job.policy.budget if i % 3 else None
        if budget is not None and i % 4 == 0:  # a budget some of its options are over
            budget = budget.model_copy(update={"amount": budget.amount / 8})
        spent = Money(amount=Decimal(i % 7) * 3, currency="CNY") if i % 5 == 0 else None
        job = PlanJob(id=f"j{i}", spec=e.job.model_copy(update={"policy": e.job.policy.model_copy(
            update={"budget": budget})}), submitted_at=now - timedelta(hours=i % 30), deadline_at=None, spent=spent)
        job = job.model_copy(update={"deadline_at": job.spec.deadline_at(job.submitted_at)})
        p = _Planning(job, book)
        sc = p.scorer
        for t, groups in p.ranking.bundles:
            for g in groups:
                if t.est_blocker is not None:
                    continue
                s = sc._score(g, t)
                is_over = sc._budget is not None and sc.budget_total(s) > sc._budget.amount
                assert (s.structural, s.late_only, s.reservation, s.over_budget, s.avoided, s.taken_by) == (
                    t.late is not None or is_over, t.late is not None and not is_over, False, is_over, frozenset(),
                    None)
                assert s.runs == s._runs()
                late += t.late is not None
                over += is_over
                checked += 1
    assert checked > 1000 and 0 < late < checked and 0 < over < checked, (checked, late, over)


def test_the_books_money_is_the_validated_money() -> None:
    """``CandidateBook.money`` makes its Money without validating it (``book._money``): it equals, dumps and
    copies as the validated one, whatever the amount's digits and sign."""
    book = CandidateBook([], [], datetime(2026, 12, 1, tzinfo=UTC), PlannerPolicy(currency="USD"), None)
    for text in ("0.00", "-0.00", "1.50", "1.5", "12345678.91", "-3.20"):
        amount = Decimal(text)
        made, validated = book.money(amount), Money(amount=amount, currency="USD")
        assert made == validated and made.model_dump_json() == validated.model_dump_json()
        assert str(made) == str(validated) and hash(made) == hash(validated) and made.amount is amount
        assert made.model_fields_set == validated.model_fields_set
        assert made.model_copy(update={"currency": "CNY"}) == validated.model_copy(update={"currency": "CNY"})


def test_a_kept_money_text_is_the_moneys_text() -> None:
    """``CandidateBook.money_text`` (a choice's cost, kept by cents) is ``str`` of the Money ``money_of`` makes for
    those cents, asked first or again, with thousands separators and for 0.00 and -0.00 alike; and a capacity's
    ``%s`` (``plan._label``) is its value."""
    book = CandidateBook([], [], datetime(2026, 12, 1, tzinfo=UTC), PlannerPolicy(currency="USD"), None)
    for text in ("0.00", "-0.00", "0.01", "1.50", "12345678.91", "1234.00", "-3.20"):
        amount = Decimal(text)
        cents = int(amount * 100)

        class Cost:
            cost = amount

        for _ in range(2):
            made = book.money_of(cents, Cost())
            assert book.money_text(cents, made) == str(Money(amount=amount, currency="USD")), text
    assert ["%s" % c for c in Capacity] == [c.value for c in Capacity]


def test_a_spot_placeholders_floor_is_never_above_the_spot_cost() -> None:
    """``heap.ranking`` floors a spot bundle from its price times 1 + rate x nodes x restart_hours
    (``book.Link.hourly``) and the estimate's hours: never above the cost on ``cost.on_spot``'s expected hours."""
    rng = random.Random(9)
    prices = _prices(rng)
    for _ in range(50_000):
        hours, rate = 10 ** rng.uniform(-3, 4), rng.choice((0.0, 1e-9, rng.uniform(0, 0.5), rng.uniform(0, 50)))
        nodes, restart = rng.choice((1, 2, 3, 8)), rng.choice((0.0, 0.15, rng.uniform(0, 2)))
        checkpoint = rng.choice((None, hours / rng.randint(1, 300)))
        price = rng.choice(prices)
        spot_hours = cost.on_spot(hours, rate, nodes, checkpoint, restart)[1]
        cents = int(cost.expected_cost(price, Decimal(repr(spot_hours))) * 100)
        hourly = float(price) * (1.0 + rate * nodes * restart)
        assert math.floor(hourly * hours * _CENTS_UNDER) <= cents, (price, hours, rate, nodes, restart)


def test_positional_hours_make_the_same_timedelta_as_the_keyword() -> None:
    rng = random.Random(4)
    values = [rng.uniform(0, 1) for _ in range(20_000)] + [10 ** rng.uniform(-6, 4) for _ in range(20_000)]
    # Hours whose microseconds end in exactly a half (rounding to even) and plain fractions.
    values += [(k + 0.5) / 3.6e9 for k in range(0, 2000, 7)] + [k / 7 for k in range(1, 500)]
    for h in values:
        assert timedelta(0, 0, 0, 0, 0, h) == timedelta(hours=h), h


def test_the_texts_formatted_with_percent_are_the_format_specs_texts() -> None:
    """``rank.fmt_time``, ``rank.fmt_hours`` and ``plan._ceil_minute`` against the forms they replace."""
    rng = random.Random(6)
    zones = (UTC, timezone(timedelta(hours=9)), timezone(timedelta(hours=-5, minutes=-30)), ZoneInfo("Europe/Berlin"))
    for _ in range(20_000):
        dt = datetime(2026, 1, 1, tzinfo=rng.choice(zones)) + timedelta(
            microseconds=rng.choice((rng.randrange(10**14), rng.randrange(10**8) * 60 * 10**6)))
        dt = dt.replace(fold=rng.randint(0, 1))
        floored = dt.replace(second=0, microsecond=0)
        ceiled = floored if floored == dt else floored + timedelta(minutes=1)
        got = _ceil_minute(dt)
        assert (got, got.tzinfo, got.fold, fmt_time(got)) == (ceiled, ceiled.tzinfo, ceiled.fold, fmt_time(ceiled))
        assert fmt_time(dt) == dt.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
        delta = dt - datetime(2026, 6, 1, tzinfo=UTC)
        assert fmt_hours(delta) == f"{delta.total_seconds() / 3600:.1f} h"


def test_a_deadline_joins_nows_fixed_offset_zone_as_the_same_instant() -> None:
    shanghai = timezone(timedelta(hours=8))
    now = datetime(2026, 12, 1, 8, 0, tzinfo=shanghai)
    book = CandidateBook([], [], now, PlannerPolicy(), None)
    other = datetime(2026, 12, 1, 3, 30, tzinfo=timezone(timedelta(hours=8)))  # an equal zone, not the object
    moved = book.in_now_zone(other)
    assert moved == other and moved.tzinfo is now.tzinfo and moved.isoformat() == other.isoformat()
    utc = datetime(2026, 12, 1, 3, 30, tzinfo=UTC)
    assert book.in_now_zone(utc) == utc and book.in_now_zone(utc).tzinfo is now.tzinfo
    # A zone with daylight saving is left as it is (one zone object compares wall clocks).
    berlin = datetime(2026, 10, 25, 2, 30, tzinfo=ZoneInfo("Europe/Berlin"))
    assert book.in_now_zone(berlin) is berlin
    naive_now = CandidateBook([], [], datetime(2026, 12, 1), PlannerPolicy(), None)
    assert naive_now.in_now_zone(other) is other


def test_decisions_are_the_same_whatever_zone_the_deadlines_are_given_in() -> None:
    now = datetime(2026, 12, 1, 8, 0, tzinfo=timezone(timedelta(hours=8)))
    offers = [make_offer("g5.xlarge"), make_offer("g4dn.xlarge", gpu="T4", spot="0.20 USD", od="0.52 USD"),
              make_offer("p3.2xlarge", gpu="V100", spot="1.10 USD", od="3.06 USD", rate=0.2)]
    jobs = [make_job(f"j{i}", deadline_h=h, priority=50 + i) for i, h in enumerate((2, 5, 9, 30, 0.5))]

    def at(zone: timezone) -> list[PlanJob]:
        return [j.model_copy(update={"submitted_at": now.astimezone(zone),
                                     "deadline_at": j.deadline_at and (now + (j.deadline_at - j.submitted_at))
                                     .astimezone(zone)}) for j in jobs]

    zones = (now.tzinfo, timezone(timedelta(hours=8)), UTC, timezone(timedelta(hours=-5)))
    plans = [[d.model_dump_json() for d in plan(at(z), offers, [], now, PlannerPolicy())] for z in zones]  # type: ignore[arg-type]
    assert all(p == plans[0] for p in plans[1:])
    assert {d.split('"action":"')[1].split('"')[0] for d in plans[0]} >= {"launch", "refuse"}


def test_the_soonest_deadline_skips_no_timing_that_meets_it() -> None:
    """``plan._soonest`` makes and computes ``needed`` only for timings whose float estimate is near the
    least: with estimates as far off as ``heap.need_tolerance`` allows, it finds what computing every one finds,
    ties included."""
    rng = random.Random(5)
    now = datetime(2026, 12, 1, 8, 0, tzinfo=timezone(timedelta(hours=8)))
    skipped = 0
    made: list[Timing] = []

    def make(t: Timing) -> Timing:
        made.append(t)
        return t

    for case in range(400):
        timings = []
        for _ in range(rng.randint(1, 14)):
            start = now + rng.choice((timedelta(0), timedelta(hours=0.05)))
            finish = start + timedelta(microseconds=rng.choice((rng.randrange(10**10), 3 * 10**9, 3 * 10**9 + 1)))
            spot = rng.random() < 0.5
            worst = finish + timedelta(microseconds=rng.randrange(2 * 10**9)) if spot else None
            timings.append(Timing(Capacity.spot if spot else Capacity.on_demand, None, 1.0, 0.0, None, start, finish,
                                  "deadline", worst, None))
        safety = rng.choice((0.0, 0.1, 0.25, 0.9))
        needs = [t.needed(now, safety) for t in timings]
        floats = []
        for t, need in zip(timings, needs, strict=True):
            hours = (need - now) / timedelta(hours=1)
            floats.append((hours + rng.uniform(-0.5, 0.5) * need_tolerance(hours, 1 / (1 - safety)), t))
        made.clear()
        soonest, fastest = _soonest(floats, now, safety, make)
        assert soonest == min(needs), case
        assert [t for t, x in fastest if t is x] == [t for t, need in zip(timings, needs, strict=True)
                                                      if need == soonest], case
        skipped += len(timings) - len(made)
    assert skipped > 1000  # most timings are never made


def test_a_timings_float_need_is_well_within_the_tolerance() -> None:
    """``Ranking.needs`` is ``Timing.needed`` to within half ``heap.need_tolerance`` (and far less),
    for stress-trace jobs past and before their deadlines, new and warm machines, spot and on-demand."""
    entries = load_trace(STRESS)[:300]
    offers = market(400)
    now = max(e.at for e in entries)
    slots = [FleetSlot(kind="warm", instance_id=f"i-{k}", offer=o, capacity=Capacity.on_demand)
             for k, o in enumerate(offers[:40:4])]
    worst, checked, warm, spot = 0.0, 0, 0, 0
    for safety in (0.0, 0.1, 0.5, 0.99):
        policy = PlannerPolicy(deadline_safety=safety)
        book = CandidateBook(offers, slots, now, policy, None)
        for i, e in enumerate(entries):
            submitted = now - timedelta(hours=i % 7)
            deadline = e.job.deadline_at(submitted)
            if deadline is None:
                continue
            p = _Planning(PlanJob(id=f"j{i}", spec=e.job, submitted_at=submitted, deadline_at=deadline), book)
            sc, stretch = p.scorer, 1 / (1 - safety)
            needs = [(need, timed.group) for need, timed in p.ranking.needs(stretch)]
            # Every spot timing too, and the bound that may leave one out (``Ranking.needs``).
            for bundle in p.ranking._matching:
                g = bundle[0]
                base = sc._base_hours(g)
                if g.capacity is Capacity.spot and base is not None:
                    start = policy.boot_hours if g.not_warm else 0.0
                    need = sc.spot_need_hours(g, base, start, stretch)
                    assert need >= max((start + base) * stretch, start + (base + policy.restart_hours))
                    needs.append((need, g))
            for approx, g in needs:
                exact = (sc.timing(g).needed(now, safety) - now) / timedelta(hours=1)
                worst = max(worst, abs(approx - exact) / need_tolerance(approx, stretch))
                checked += 1
                warm += not g.not_warm
                spot += g.capacity is Capacity.spot
    assert checked > 5000 and warm > 50 and spot > 1000, (checked, warm, spot)
    assert worst < 0.1, worst
