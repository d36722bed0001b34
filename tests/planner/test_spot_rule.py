"""The spot-under-deadline rule and the paper's baselines, branch by branch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from scheduler.planner.spot_rule import (
    PRIOR_AVAILABILITY,
    PRIOR_HOURS,
    PRIOR_SPELLS_PER_HOUR,
    RELEASE_CHANGEOVERS,
    SLACK_VALUE,
    STATES,
    Facts,
    RuleInput,
    SpotState,
    decide,
    decide_all,
    gpusched_rule,
    greedy,
    od_only,
    uniform_progress,
)

IDLE, SPOT, OD = SpotState.idle, SpotState.spot, SpotState.on_demand
D, TICK = 0.2, 0.05
OD_FLOOR = D + TICK  # idle is safe while the slack covers an OD changeover and a tick
SPOT_FLOOR = 2 * D + TICK  # entering spot needs its changeover and then an OD one


def job(**kw: Any) -> RuleInput:
    """A 48 h job observed for 24 h: spot there 12 h of it, in 6 spells."""
    base: dict[str, Any] = dict(
        state=IDLE, compute_h=48.0, progress_h=0.0, elapsed_h=24.0, remaining_h=60.0, changeover_h=D,
        spot_available=False, price_ratio_k=3.3, tick_h=TICK, observed_h=24.0, spot_seen_h=12.0,
        spot_spells=6, outage_h=0.0, spell_h=0.0,
    )  # fmt: skip
    base.update(kw)
    return RuleInput(**base)


def with_slack(slack_h: float, **kw: Any) -> RuleInput:
    """The job above with ``slack_h`` of slack: remaining time = work left + slack."""
    progress = kw.pop("progress_h", 20.0)
    return job(progress_h=progress, remaining_h=48.0 - progress + slack_h, **kw)


# The numbers the job above gives the rule (see the constants in scheduler.planner.spot_rule):
SHARE = 1 - (PRIOR_AVAILABILITY * PRIOR_HOURS + 12.0) / (PRIOR_HOURS + 24.0)  # expected outage share


def patience(k: float = 3.3) -> float:
    # Ski rental: an OD changeover and the one back to spot, d (k + 1), at SLACK_VALUE per hour.
    return D * (2 + (k + 1) / SLACK_VALUE)


def reserve_for(remaining_h: float) -> float:
    spells = (PRIOR_SPELLS_PER_HOUR * PRIOR_HOURS + 6) / (PRIOR_HOURS + 24.0) * remaining_h
    return min(SHARE * remaining_h, (patience() + 2 * D) * spells) + SPOT_FLOOR


# -- gpusched: every branch --------------------------------------------------------------

BRANCH_CASES = [
    # (why, input, expected branch, expected target)
    ("work complete", dict(progress_h=48.0, state=SPOT, spot_available=True), "done", IDLE),
    ("on spot with room for a reclaim", dict(state=SPOT, spot_available=True, slack=12.0), "keep-spot", SPOT),
    ("on spot, slack below one changeover", dict(state=SPOT, spot_available=True, slack=OD_FLOOR - 0.01), "guard", OD),
    ("on OD, no room for a round trip",
     dict(state=OD, spot_available=True, spell_h=5.0, slack=SPOT_FLOOR - 0.01), "committed", OD),
    ("idle at the last safe moment", dict(slack=OD_FLOOR - 0.01), "safety-net", OD),
    ("idle, spot there, room to enter it", dict(spot_available=True, slack=12.0), "take-spot", SPOT),
    ("idle, spot there, no room to enter it", dict(spot_available=True, slack=SPOT_FLOOR - 0.01), "spot-too-late", OD),
    ("on OD, spot proved itself", dict(state=OD, spot_available=True, spell_h=1.0, slack=12.0), "switch-to-spot", SPOT),
    ("on OD, spot just came back", dict(state=OD, spot_available=True, spell_h=0.1, slack=12.0), "hold-od", OD),
    ("on OD, no spot, slack near the reserve", dict(state=OD, slack=12.0), "stay-od", OD),
    ("idle, no spot, fresh outage, slack covers a quarter", dict(outage_h=0.5, slack=12.0), "wait-out", IDLE),
    ("idle, no spot, old outage", dict(outage_h=patience() + 0.1, slack=12.0), "go-od", OD),
    ("the same outage, spot five times cheaper",
     dict(outage_h=patience() + 0.1, slack=12.0, price_ratio_k=5.0), "wait-out", IDLE),
    ("spot no cheaper than on-demand", dict(spot_available=True, slack=12.0, price_ratio_k=1.0), "no-discount", OD),
    ("idle, no spot, fresh outage, slack too thin", dict(outage_h=0.1, slack=4.0), "go-od", OD),
]  # fmt: skip


@pytest.mark.parametrize("why, fields, branch, target", BRANCH_CASES, ids=[c[0] for c in BRANCH_CASES])
def test_gpusched_branches(why: str, fields: dict[str, Any], branch: str, target: SpotState) -> None:
    fields = dict(fields)
    inp = with_slack(fields.pop("slack"), **fields) if "slack" in fields else job(**fields)
    decision = decide(inp)
    assert (decision.branch, decision.target) == (branch, target), decision.reason


def test_waits_above_the_reserve_and_releases_od_only_well_above_it() -> None:
    progress = 20.0
    left = 48.0 - progress
    # Slack s means remaining = left + s; the reserve depends on the remaining time.
    just_above = next(s for s in np.arange(0.5, 60, 0.05) if s > reserve_for(left + s))
    assert decide(with_slack(just_above, progress_h=progress, outage_h=10.0)).branch == "wait"
    assert decide(with_slack(just_above, progress_h=progress, state=OD)).branch == "stay-od"
    far_above = next(s for s in np.arange(0.5, 60, 0.05) if s > reserve_for(left + s) + RELEASE_CHANGEOVERS * D)
    assert decide(with_slack(far_above, progress_h=progress, state=OD)).branch == "release-od"


@pytest.mark.parametrize(
    "slack, spell_h, expected",
    [(2.0, 0.3, "hold-od"), (2.0, 0.4, "switch-to-spot"), (12.0, 0.15, "hold-od"), (12.0, 0.25, "switch-to-spot")],
)
def test_scarce_slack_keeps_round_trips_for_long_spells(slack: float, spell_h: float, expected: str) -> None:
    # Spells come at 0.25 an hour (the prior and the 6 seen in 24 h agree): 7.5 in the 30 h left
    # with 2 h of slack, which pays (2 - 0.25) / 0.4 = 4.4 round trips, so a spell must have
    # lasted 0.2 h x 7.5 / 4.4 = 0.34 h. With 12 h of slack every spell gets one: d = 0.2 h is enough.
    inp = with_slack(slack, state=OD, spot_available=True, spell_h=spell_h)
    assert decide(inp).branch == expected


@pytest.mark.parametrize("slack", np.round(np.arange(0.3, 40.0, 0.35), 2))
@pytest.mark.parametrize("outage_h", [0.0, 0.5, 5.0])
def test_no_flapping(slack: float, outage_h: float) -> None:
    """What one tick decides, the next tick (same market, same slack) does not undo."""
    for state in (IDLE, OD):
        first = decide(with_slack(slack, state=state, outage_h=outage_h))
        again = decide(with_slack(slack, state=first.target, outage_h=outage_h + TICK))
        assert again.target == first.target, (first.reason, again.reason)


def test_reasons_quote_the_numbers() -> None:
    reason = decide(with_slack(0.2)).reason
    assert "0.20 h" in reason and f"{OD_FLOOR:.2f} h" in reason
    assert "spells expected" in decide(job(state=OD, spot_available=True, spell_h=0.1, progress_h=10.0)).reason


# -- safety: no decision leaves the deadline unreachable --------------------------------

inputs = st.builds(
    lambda state, slack, left, d, tick, margin, spot, seen, spells, age: job(
        state=state,
        compute_h=48.0,
        progress_h=48.0 - left,
        remaining_h=left + slack,
        changeover_h=d,
        tick_h=tick,
        margin_h=margin,
        spot_available=spot,
        spot_seen_h=seen * 24.0,
        spot_spells=spells,
        outage_h=0.0 if spot else age,
        spell_h=age if spot else 0.0,
    ),
    state=st.sampled_from(STATES),
    slack=st.floats(0.0, 30.0),
    left=st.floats(0.01, 48.0),
    d=st.floats(0.01, 0.5),
    tick=st.floats(0.0, 0.1),
    margin=st.floats(0.0, 0.2),
    spot=st.booleans(),
    seen=st.floats(0.0, 1.0),
    spells=st.integers(0, 30),
    age=st.floats(0.0, 10.0),
)


@settings(max_examples=300, deadline=None)
@given(inputs)
def test_gpusched_never_strands_the_job(inp: RuleInput) -> None:
    d, reach = inp.changeover_h, inp.tick_h + inp.margin_h
    slack = inp.remaining_h - (inp.compute_h - inp.progress_h)
    decision = decide(inp)
    ulp = 1e-9  # the rule sums the same terms in another order
    if decision.target is IDLE:
        assert slack >= d + reach - ulp  # the next tick can still start OD and finish
    if decision.target is SPOT and not (inp.state is SPOT and inp.spot_available):
        assert slack >= 2 * d + reach - ulp  # room for the spot changeover, then an OD one
    if decision.target is SPOT:
        assert inp.spot_available and slack >= d + reach - ulp


@settings(max_examples=300, deadline=None)
@given(inputs)
def test_paper_policies_keep_their_safety_net(inp: RuleInput) -> None:
    slack = inp.remaining_h - (inp.compute_h - inp.progress_h)
    for policy in (greedy, uniform_progress):
        decision = policy(inp)
        on_spot = inp.state is SPOT and inp.spot_available
        if not on_spot and slack < 2 * inp.changeover_h and inp.progress_h < inp.compute_h:
            assert decision.target is OD, (policy.__name__, decision.reason)
        if decision.target is SPOT:
            assert inp.spot_available


# -- the baselines -----------------------------------------------------------------------

GREEDY_CASES = [
    (dict(progress_h=48.0), "done", IDLE),
    (dict(state=SPOT, spot_available=True, slack=0.1), "exploit", SPOT),
    (dict(slack=2 * D - 0.01), "paper-safety-net", OD),
    (dict(state=OD, spot_available=True, slack=12.0), "od-until-done", OD),
    (dict(spot_available=True, slack=12.0), "greedy-spot", SPOT),
    (dict(slack=12.0), "greedy-wait", IDLE),
]


@pytest.mark.parametrize("fields, branch, target", GREEDY_CASES)
def test_greedy(fields: dict[str, Any], branch: str, target: SpotState) -> None:
    fields = dict(fields)
    inp = with_slack(fields.pop("slack"), **fields) if "slack" in fields else job(**fields)
    assert (greedy(inp).branch, greedy(inp).target) == (branch, target)


def up_job(progress_h: float, **kw: Any) -> RuleInput:
    # C0 = 48 h, R0 = 60 h, t = 20 h: the line is at 16 h; at t + 2d at 16.32 h.
    return job(elapsed_h=20.0, remaining_h=40.0, progress_h=progress_h, **kw)


UP_CASES = [
    (dict(progress_h=16.2, state=OD, spot_available=True), "up-hysteresis", OD),
    (dict(progress_h=16.4, state=OD, spot_available=True), "up-spot", SPOT),
    (dict(progress_h=16.4, state=OD), "up-wait", IDLE),
    (dict(progress_h=15.9), "up-behind", OD),
    (dict(progress_h=16.1), "up-wait", IDLE),
    (dict(progress_h=15.0, spot_available=True), "up-spot", SPOT),
    (dict(progress_h=15.0, state=SPOT, spot_available=True), "exploit", SPOT),
]


@pytest.mark.parametrize("fields, branch, target", UP_CASES)
def test_uniform_progress(fields: dict[str, Any], branch: str, target: SpotState) -> None:
    decision = uniform_progress(up_job(**fields))
    assert (decision.branch, decision.target) == (branch, target), decision.reason


def test_uniform_progress_safety_net_beats_the_line() -> None:
    # Far ahead of the line, but idle with less than 2d of slack: on-demand until done.
    inp = job(elapsed_h=50.0, remaining_h=10.3, progress_h=48.0 - 10.0)
    assert uniform_progress(inp).branch == "paper-safety-net"


@pytest.mark.parametrize("state", STATES)
def test_od_only(state: SpotState) -> None:
    assert od_only(job(state=state, spot_available=True)).target is OD
    assert od_only(job(state=state, progress_h=48.0)).target is IDLE


# -- one code path, and the input's own checks --------------------------------------------


def test_batch_and_single_decisions_agree() -> None:
    rng = np.random.default_rng(7)
    many = [
        job(
            state=STATES[int(rng.integers(3))], progress_h=float(rng.uniform(0, 48)),
            remaining_h=float(rng.uniform(0, 70)),
            spot_available=bool(rng.integers(2)), outage_h=float(rng.uniform(0, 3)), spell_h=float(rng.uniform(0, 3)),
            spot_seen_h=float(rng.uniform(0, 24)), spot_spells=int(rng.integers(0, 20)),
        )
        for _ in range(200)
    ]  # fmt: skip
    batch = gpusched_rule(Facts.of(many))
    assert [STATES[t] for t in batch.target] == [decide(i).target for i in many]
    # What the tick's steering asks: every decision, reason included, the one the job gets alone.
    assert decide_all(many) == [decide(i) for i in many]
    assert decide_all([]) == []


@pytest.mark.parametrize(
    "fields",
    [dict(spot_seen_h=30.0, observed_h=24.0), dict(compute_h=0.0), dict(changeover_h=-0.1), dict(extra_field=1)],
)
def test_inconsistent_inputs_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        job(**fields)
