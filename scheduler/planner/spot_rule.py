"""Spot or on-demand under a deadline: THE decision rule, and the published baselines.

One job of ``compute_h`` hours of work, checkpointed, must finish before its
deadline. At each tick it is idle, on spot or on on-demand (OD). Entering an
instance costs the changeover ``changeover_h`` (launch, setup, checkpoint
download, lost progress) at that instance's price with no progress; spot costs 1,
OD ``k`` times that; OD is always there, spot comes and goes. The model, the
baselines and the yardstick are those of "Can't Be Late" (Wu et al., NSDI 2024).

Every policy is written once, over arrays: a ``Facts`` holds one lane per job,
and a policy returns for each lane the first branch of its ordered table whose
condition holds. The daemon asks about one job (``decide(RuleInput)``, a batch of
one); the trace replay asks about thousands of windows at once. Same code path.

Slack is the time to the deadline beyond the work left: waiting and changeovers
spend it, progress does not. Policies:

- ``decide`` (gpusched): spends slack where it pays.
  * Safety: idle only while the slack covers an OD changeover and a tick; enter
    spot only with room for its changeover and then an OD one; below that, OD
    until done. No deadline is ever missed, with half the paper's margin.
  * Waiting: a reserve of slack is kept for the outages expected before the
    deadline (the availability observed so far, shrunk to a prior), capped by
    what giving every expected outage its patience and a round trip would need.
    Above the reserve it waits for spot; below it, a fresh outage is still waited
    out for a while (most are short), an old one is bridged on OD.
  * Leaving OD: only for a spell that has lasted d x (spells expected ahead /
    round trips the slack can pay), so scarce slack goes to the long spells; OD
    is released to idle only with the reserve plus four changeovers of slack.
- ``greedy``: spot whenever available, wait otherwise; the paper's safety net.
- ``uniform_progress``: the paper's Uniform Progress with its hysteresis.
- ``od_only``: on-demand from the start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

import numpy as np
from pydantic import Field, model_validator

from scheduler.models import Frozen


class SpotState(StrEnum):
    idle = "idle"
    spot = "spot"
    on_demand = "on-demand"


# Array codes of the states, in this order everywhere (Facts.state, targets).
STATES: tuple[SpotState, ...] = (SpotState.idle, SpotState.spot, SpotState.on_demand)
IDLE, SPOT, OD = 0, 1, 2

# Priors for the market before anything is observed, each worth PRIOR_HOURS of watching:
# spot there half the time, a new spell of availability every four hours.
PRIOR_AVAILABILITY = 0.5
PRIOR_SPELLS_PER_HOUR = 0.25
PRIOR_HOURS = 12.0
# Outages are mostly short (median 20-40 min in the published traces) and the long ones
# last long (the longer one has lasted, the longer it goes on), so a fresh outage is worth
# waiting out for a while. Ski rental: waiting costs slack, worth SLACK_VALUE spot-hours
# per hour once slack runs short; giving up costs an OD changeover plus the changeover
# back to spot, d x (k + 1), and two changeovers of slack. SLACK_VALUE and the share of
# the reserve the slack must still cover, PATIENCE_MIN_COVER, were set by measurement on
# the published traces (scheduler.simulation.spotbench.bench).
SLACK_VALUE = 0.4
PATIENCE_MIN_COVER = 0.25
# Leave on-demand for idle only with this many changeovers of slack above the reserve.
RELEASE_CHANGEOVERS = 4.0


class RuleInput(Frozen):
    """What the daemon knows about one job at one tick; nothing about the future.

    Times are hours. ``remaining_h`` may be negative (already late). The market
    fields describe the spot offer the job would use, as observed since
    ``observed_h`` hours ago (the daemon's own probes: stock checks, preemptions).
    """

    state: SpotState
    compute_h: float = Field(gt=0)  # C0: the job's whole work
    progress_h: float = Field(ge=0)  # work done (checkpointed) so far
    elapsed_h: float = Field(ge=0)  # since the job was submitted
    remaining_h: float  # to the deadline
    changeover_h: float = Field(ge=0)  # d: entering an instance costs this, no progress
    spot_available: bool
    price_ratio_k: float = Field(gt=0)  # on-demand price / spot price
    tick_h: float = Field(default=0.0, ge=0)  # until the rule is asked again
    margin_h: float = Field(default=0.0, ge=0)  # extra slack kept for surprises (slow boots)
    observed_h: float = Field(default=0.0, ge=0)  # how long the market has been watched
    spot_seen_h: float = Field(default=0.0, ge=0)  # of which spot was available
    spot_spells: int = Field(default=0, ge=0)  # spells of availability that began in that time
    outage_h: float = Field(default=0.0, ge=0)  # spot unavailable for this long, now
    spell_h: float = Field(default=0.0, ge=0)  # spot available for this long, now

    @model_validator(mode="after")
    def _consistent(self) -> RuleInput:
        if self.spot_seen_h > self.observed_h + 1e-9:
            raise ValueError("spot_seen_h cannot exceed observed_h")
        return self


class RuleDecision(Frozen):
    target: SpotState
    branch: str  # short name of the rule that fired, stable for logs and tests
    reason: str  # the same, in words, with the numbers that decided it


@dataclass(frozen=True)
class Facts:
    """One lane per job; the fields of RuleInput as arrays (hours, bools, state codes)."""

    state: np.ndarray
    compute_h: np.ndarray
    progress_h: np.ndarray
    elapsed_h: np.ndarray
    remaining_h: np.ndarray
    changeover_h: np.ndarray
    spot_available: np.ndarray
    k: np.ndarray
    tick_h: np.ndarray
    margin_h: np.ndarray
    observed_h: np.ndarray
    spot_seen_h: np.ndarray
    spot_spells: np.ndarray
    outage_h: np.ndarray
    spell_h: np.ndarray

    @classmethod
    def of(cls, inputs: Sequence[RuleInput]) -> Facts:
        def col(get: Callable[[RuleInput], float]) -> np.ndarray:
            return np.array([get(i) for i in inputs], dtype=float)

        return cls(
            state=np.array([STATES.index(i.state) for i in inputs], dtype=np.int8),
            compute_h=col(lambda i: i.compute_h),
            progress_h=col(lambda i: i.progress_h),
            elapsed_h=col(lambda i: i.elapsed_h),
            remaining_h=col(lambda i: i.remaining_h),
            changeover_h=col(lambda i: i.changeover_h),
            spot_available=np.array([i.spot_available for i in inputs], dtype=bool),
            k=col(lambda i: i.price_ratio_k),
            tick_h=col(lambda i: i.tick_h),
            margin_h=col(lambda i: i.margin_h),
            observed_h=col(lambda i: i.observed_h),
            spot_seen_h=col(lambda i: i.spot_seen_h),
            spot_spells=col(lambda i: i.spot_spells),
            outage_h=col(lambda i: i.outage_h),
            spell_h=col(lambda i: i.spell_h),
        )

    # -- derived, shared by every policy ------------------------------------------------

    @property
    def left_h(self) -> np.ndarray:
        """Work still to do."""
        return np.maximum(self.compute_h - self.progress_h, 0.0)

    @property
    def slack_h(self) -> np.ndarray:
        """Time to the deadline beyond the work left: what waiting and changeovers may use."""
        return self.remaining_h - self.left_h

    @property
    def done(self) -> np.ndarray:
        return self.progress_h >= self.compute_h - 1e-9

    @property
    def on_spot(self) -> np.ndarray:
        # A spot instance whose market is gone has been (or is being) reclaimed.
        return (self.state == SPOT) & self.spot_available

    @property
    def on_od(self) -> np.ndarray:
        return self.state == OD

    @property
    def idle(self) -> np.ndarray:
        return ~(self.on_spot | self.on_od)

    @property
    def deadline_h(self) -> np.ndarray:
        """R0, the whole time allowed, from submission to deadline."""
        return self.elapsed_h + self.remaining_h


class Branch(NamedTuple):
    name: str
    target: SpotState
    why: str  # str.format template over the policy's numbers and Facts fields


Rows = list[tuple[np.ndarray | bool, Branch]]  # a condition per lane, or True for the last row


@dataclass(frozen=True)
class Choice:
    """A policy's answer for every lane: target state codes and the branch that chose it."""

    target: np.ndarray  # int8 codes into STATES
    branch: np.ndarray  # int index into BRANCHES
    numbers: dict[str, np.ndarray]  # what the reasons quote


Policy = Callable[[Facts], Choice]


def _choose(rows: Rows, numbers: dict[str, np.ndarray], lanes: int) -> Choice:
    """First matching row per lane; the table's last row must match everything."""
    conditions = [np.broadcast_to(np.asarray(c, dtype=bool), (lanes,)) for c, _ in rows]
    index = np.select(conditions, [_BRANCH_INDEX[b.name] for _, b in rows], default=-1)
    if (index < 0).any():
        raise AssertionError("a policy's branch table left a lane without a decision")
    return Choice(target=_BRANCH_TARGET[index], branch=index, numbers=numbers)


# -- the branches, named once so reasons and tests can refer to them ----------------------

DONE = Branch("done", SpotState.idle, "work complete: release everything")
NO_DISCOUNT = Branch("no-discount", SpotState.on_demand, "spot is no cheaper than on-demand: on-demand")
KEEP_SPOT = Branch(
    "keep-spot", SpotState.spot, "on spot: stay until reclaimed ({slack_h:.2f} h slack covers an OD changeover)"
)
GUARD = Branch(
    "guard",
    SpotState.on_demand,
    "slack {slack_h:.2f} h is below one changeover and a tick ({od_floor_h:.2f} h): on-demand now, "
    "before a reclaim makes the deadline unreachable",
)
COMMITTED = Branch(
    "committed",
    SpotState.on_demand,
    "slack {slack_h:.2f} h leaves no room for another round trip to spot ({spot_floor_h:.2f} h): on-demand until done",
)
SAFETY_NET = Branch(
    "safety-net",
    SpotState.on_demand,
    "slack {slack_h:.2f} h is down to one changeover and a tick ({od_floor_h:.2f} h): on-demand until done",
)
TAKE_SPOT = Branch("take-spot", SpotState.spot, "spot is available and {slack_h:.2f} h slack allows its changeover")
SPOT_TOO_LATE = Branch(
    "spot-too-late",
    SpotState.on_demand,
    "spot is available but slack {slack_h:.2f} h cannot cover its changeover and an OD one "
    "({spot_floor_h:.2f} h): on-demand",
)
SWITCH_TO_SPOT = Branch(
    "switch-to-spot",
    SpotState.spot,
    "spot has been back {spell_h:.2f} h (>= {prove_h:.2f} h: slack {slack_h:.2f} h pays {trips:.1f} round trips "
    "for {spells_ahead:.1f} spells expected): leave on-demand",
)
HOLD_OD = Branch(
    "hold-od",
    SpotState.on_demand,
    "spot back for only {spell_h:.2f} h (< {prove_h:.2f} h: slack pays {trips:.1f} round trips for "
    "{spells_ahead:.1f} spells expected): stay on on-demand until it proves itself",
)
RELEASE_OD = Branch(
    "release-od",
    SpotState.idle,
    "no spot, but slack {slack_h:.2f} h is well above the reserve {reserve_h:.2f} h: stop on-demand and wait",
)
STAY_OD = Branch(
    "stay-od",
    SpotState.on_demand,
    "no spot and slack {slack_h:.2f} h is not above {release_h:.2f} h (the reserve and four changeovers): "
    "keep on-demand",
)
WAIT = Branch(
    "wait",
    SpotState.idle,
    "no spot; slack {slack_h:.2f} h is above the reserve {reserve_h:.2f} h "
    "(expected outage share {outage_share:.0%} of {remaining_h:.1f} h left): wait for spot",
)
WAIT_OUT = Branch(
    "wait-out",
    SpotState.idle,
    "no spot for {outage_h:.2f} h (< {patience_h:.2f} h) and slack {slack_h:.2f} h still covers {cover:.0%} of "
    "the expected outages: wait this fresh outage out",
)
GO_OD = Branch(
    "go-od",
    SpotState.on_demand,
    "no spot for {outage_h:.2f} h (fresh outages waited out up to {patience_h:.2f} h) and slack "
    "{slack_h:.2f} h is below the reserve {reserve_h:.2f} h: work on on-demand",
)

# Baselines.
OD_ONLY = Branch("od-only", SpotState.on_demand, "on-demand only")
PAPER_SAFETY_NET = Branch(
    "paper-safety-net",
    SpotState.on_demand,
    "remaining {remaining_h:.2f} h < work {left_h:.2f} h + 2 changeovers: on-demand until done",
)
OD_UNTIL_DONE = Branch("od-until-done", SpotState.on_demand, "the safety net has fired: on-demand until done")
EXPLOIT = Branch("exploit", SpotState.spot, "on spot: stay until reclaimed")
GREEDY_SPOT = Branch("greedy-spot", SpotState.spot, "spot available: take it")
GREEDY_WAIT = Branch("greedy-wait", SpotState.idle, "no spot: wait")
UP_HYSTERESIS = Branch(
    "up-hysteresis",
    SpotState.on_demand,
    "on on-demand and progress {progress_h:.2f} h is behind the line at t + 2d ({ep_2d_h:.2f} h): stay",
)
UP_SPOT = Branch("up-spot", SpotState.spot, "spot available: take it (taking risks)")
UP_BEHIND = Branch(
    "up-behind", SpotState.on_demand, "progress {progress_h:.2f} h is behind the line ({ep_h:.2f} h): on-demand"
)
UP_WAIT = Branch("up-wait", SpotState.idle, "on or ahead of the line ({ep_h:.2f} h): wait for spot")

BRANCHES: tuple[Branch, ...] = (
    DONE, NO_DISCOUNT, KEEP_SPOT, GUARD, COMMITTED, SAFETY_NET, TAKE_SPOT, SPOT_TOO_LATE, SWITCH_TO_SPOT, HOLD_OD,
    RELEASE_OD, STAY_OD, WAIT, WAIT_OUT, GO_OD,
    OD_ONLY, PAPER_SAFETY_NET, OD_UNTIL_DONE, EXPLOIT, GREEDY_SPOT, GREEDY_WAIT,
    UP_HYSTERESIS, UP_SPOT, UP_BEHIND, UP_WAIT,
)  # fmt: skip
_BRANCH_INDEX = {b.name: i for i, b in enumerate(BRANCHES)}
_BRANCH_TARGET = np.array([STATES.index(b.target) for b in BRANCHES], dtype=np.int8)


# -- gpusched ---------------------------------------------------------------------------


def expected_outage_share(x: Facts) -> np.ndarray:
    """Share of the time ahead we expect spot to be missing: observed share, shrunk to a prior."""
    seen = PRIOR_AVAILABILITY * PRIOR_HOURS + x.spot_seen_h
    return 1.0 - seen / (PRIOR_HOURS + x.observed_h)


def expected_spells(x: Facts) -> np.ndarray:
    """Spells of spot availability expected before the deadline, at the observed rate."""
    rate = (PRIOR_SPELLS_PER_HOUR * PRIOR_HOURS + x.spot_spells) / (PRIOR_HOURS + x.observed_h)
    return rate * np.maximum(x.remaining_h, 0.0)


def spot_reserve(x: Facts, spot_floor: np.ndarray) -> np.ndarray:
    """Slack worth keeping before working on OD through an outage.

    Enough to wait out every outage expected before the deadline; or, when that is
    more, enough to give each outage expected its patience and a round trip
    OD -> spot -> OD (two changeovers). Plus one spot entry.
    """
    outages = expected_outage_share(x) * np.maximum(x.remaining_h, 0.0)
    per_outage = patience_limit(x) + 2 * x.changeover_h
    return np.minimum(outages, per_outage * expected_spells(x)) + spot_floor


def patience_limit(x: Facts) -> np.ndarray:
    """How long a fresh outage is waited out (see SLACK_VALUE)."""
    return x.changeover_h * (2 + (x.k + 1) / SLACK_VALUE)


def gpusched_rule(x: Facts) -> Choice:
    d = x.changeover_h
    slack = x.slack_h
    # The least slack that still lets the next decision start OD and finish in time.
    od_floor = d + x.tick_h + x.margin_h
    # Entering spot: its changeover, then (after a reclaim) an OD one.
    spot_floor = 2 * d + x.tick_h + x.margin_h
    reserve = spot_reserve(x, spot_floor)
    # How much of the reserve the slack holds (1 = all of it).
    cover = np.clip(_ratio(slack - spot_floor, reserve - spot_floor), 0.0, 1.0)
    patience = np.where(cover >= PATIENCE_MIN_COVER, patience_limit(x), 0.0)
    # Each trip OD -> spot -> OD spends two changeovers of slack. When the slack pays
    # for fewer trips than spells will come, keep the trips for the long spells: a spell
    # must first have lasted d x (spells ahead / trips affordable), at least d.
    spells_ahead = expected_spells(x)
    trips = np.maximum(slack - od_floor, 0.0) / np.maximum(2 * d, 1e-9)
    prove = d * np.maximum(1.0, _ratio(spells_ahead, trips))
    release = reserve + RELEASE_CHANGEOVERS * d
    rows: Rows = [
        (x.done, DONE),
        (x.k <= 1, NO_DISCOUNT),
        (x.on_spot & (slack >= od_floor), KEEP_SPOT),
        (x.on_spot, GUARD),
        (x.on_od & (slack < spot_floor), COMMITTED),
        (x.idle & (slack < od_floor), SAFETY_NET),
        (x.idle & x.spot_available & (slack >= spot_floor), TAKE_SPOT),
        (x.idle & x.spot_available, SPOT_TOO_LATE),
        (x.on_od & x.spot_available & (x.spell_h >= prove), SWITCH_TO_SPOT),
        (x.on_od & x.spot_available, HOLD_OD),
        (x.on_od & (slack > release), RELEASE_OD),
        (x.on_od, STAY_OD),
        (slack > reserve, WAIT),
        (x.outage_h < patience, WAIT_OUT),
        (True, GO_OD),
    ]
    numbers = {
        "slack_h": slack, "od_floor_h": od_floor, "spot_floor_h": spot_floor, "reserve_h": reserve,
        "outage_share": expected_outage_share(x), "cover": cover, "patience_h": patience, "prove_h": prove,
        "spells_ahead": spells_ahead, "trips": trips, "release_h": release,
    }  # fmt: skip
    return _choose(rows, numbers, len(x.state))


def _ratio(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    """top / bottom, +inf where bottom is 0 (and top positive): no division warnings."""
    top, bottom = np.broadcast_arrays(np.asarray(top, dtype=float), np.asarray(bottom, dtype=float))
    out = np.where(top > 0, np.inf, 0.0)
    np.divide(top, bottom, out=out, where=bottom > 0)
    return out


# -- baselines ----------------------------------------------------------------------------


def od_only_rule(x: Facts) -> Choice:
    return _choose([(x.done, DONE), (True, OD_ONLY)], {}, len(x.state))


def _paper_safety_net(x: Facts) -> np.ndarray:
    # "When idle and R(t) < C(t) + 2d, switch to on-demand and stay on it until the end":
    # staying is enforced by applying the same test while on OD.
    return (~x.on_spot) & (x.slack_h < 2 * x.changeover_h)


def greedy_rule(x: Facts) -> Choice:
    rows: Rows = [
        (x.done, DONE),
        (x.on_spot, EXPLOIT),
        (_paper_safety_net(x), PAPER_SAFETY_NET),
        # Greedy reaches OD only through the safety net, which holds until done.
        (x.on_od, OD_UNTIL_DONE),
        (x.spot_available, GREEDY_SPOT),
        (True, GREEDY_WAIT),
    ]
    return _choose(rows, {"remaining_h": x.remaining_h, "left_h": x.left_h}, len(x.state))


def uniform_progress_rule(x: Facts) -> Choice:
    """Uniform Progress: keep progress on the line t * C0 / R0, hysteresis to t + 2d."""
    rate = x.compute_h / x.deadline_h
    ep = x.elapsed_h * rate
    ep_2d = (x.elapsed_h + 2 * x.changeover_h) * rate
    rows: Rows = [
        (x.done, DONE),
        (x.on_spot, EXPLOIT),
        (_paper_safety_net(x), PAPER_SAFETY_NET),
        (x.on_od & (x.progress_h < ep_2d), UP_HYSTERESIS),
        (x.spot_available, UP_SPOT),
        (x.progress_h < ep, UP_BEHIND),
        (True, UP_WAIT),
    ]
    numbers = {"remaining_h": x.remaining_h, "left_h": x.left_h, "ep_h": ep, "ep_2d_h": ep_2d}
    return _choose(rows, numbers, len(x.state))


POLICIES: dict[str, Policy] = {
    "od-only": od_only_rule,
    "greedy": greedy_rule,
    "uniform-progress": uniform_progress_rule,
    "gpusched": gpusched_rule,
}


# -- one job at a time: what the daemon calls ---------------------------------------------


def decide_with(policy: Policy, inp: RuleInput) -> RuleDecision:
    return decide_all_with(policy, [inp])[0]


def decide_all_with(policy: Policy, inputs: Sequence[RuleInput]) -> list[RuleDecision]:
    """One decision per input, in order, from one pass of ``policy`` over all of them: each lane is worked
    out on its own (the rules are element-wise), so a job's decision is what it would be alone, while
    the array set-up, most of a single decision's cost, is paid once a tick instead of once a job."""
    if not inputs:
        return []
    lanes = len(inputs)
    facts = Facts.of(inputs)
    choice = policy(facts)
    left, slack = facts.left_h, facts.slack_h
    numbers = {n: np.broadcast_to(np.asarray(v, dtype=float), (lanes,)) for n, v in choice.numbers.items()}
    out = []
    for lane, inp in enumerate(inputs):
        branch = BRANCHES[int(choice.branch[lane])]
        values: dict[str, float] = {n: float(v[lane]) for n, v in numbers.items()}
        values.update(progress_h=inp.progress_h, left_h=float(left[lane]), spell_h=inp.spell_h,
                      outage_h=inp.outage_h)
        values.setdefault("remaining_h", inp.remaining_h)
        values.setdefault("slack_h", float(slack[lane]))
        out.append(RuleDecision(target=branch.target, branch=branch.name, reason=branch.why.format(**values)))
    return out


def decide(inp: RuleInput) -> RuleDecision:
    """gpusched's rule: what the job should run on for the next tick, and why."""
    return decide_with(gpusched_rule, inp)


def decide_all(inputs: Sequence[RuleInput]) -> list[RuleDecision]:
    """``decide`` for several jobs at once (the tick's steering: every job that just checkpointed)."""
    return decide_all_with(gpusched_rule, inputs)


def greedy(inp: RuleInput) -> RuleDecision:
    return decide_with(greedy_rule, inp)


def uniform_progress(inp: RuleInput) -> RuleDecision:
    return decide_with(uniform_progress_rule, inp)


def od_only(inp: RuleInput) -> RuleDecision:
    return decide_with(od_only_rule, inp)
