"""Replay a spot policy over many trace windows at once, tick by tick.

The model is the one of ``spot_rule``: states idle / spot / OD; entering an
instance costs ``changeover`` ticks billed at its price with no progress; OD is
always there; a spot instance is reclaimed at the first tick the trace says spot
is gone, and the job keeps its progress (checkpointed) and becomes idle. Costs are
in spot-price hours (spot 1 per hour, OD ``k``): unitless ratios for comparing
policies, not money.

Each lane is one window (a start tick on the trace and a job shape in whole
ticks); the policy sees every lane's facts as arrays and answers for all of them,
which is what makes thousands of windows replay in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scheduler.planner.spot_rule import IDLE, OD, SPOT, Facts, Policy


@dataclass(frozen=True)
class Lanes:
    """Windows to replay: start tick on the trace and the job's shape, in ticks."""

    start: np.ndarray
    deadline: np.ndarray  # ticks from start to the deadline (R0)
    compute: np.ndarray  # ticks of work (C0)
    changeover: np.ndarray  # ticks per changeover (d), at least 1

    def __len__(self) -> int:
        return len(self.start)


@dataclass(frozen=True)
class Outcome:
    """Per lane: what the policy paid and how it went (hours, spot-price units)."""

    cost: np.ndarray
    spot_h: np.ndarray  # billed on spot, changeovers included
    od_h: np.ndarray
    spot_work_h: np.ndarray  # progress made on spot
    od_work_h: np.ndarray
    finish_h: np.ndarray  # inf when it never finished
    missed: np.ndarray  # finished after the deadline, or never
    changeovers: np.ndarray
    reclaims: np.ndarray


class MarketView:
    """Running observations of one trace as a job would have made them since its start."""

    def __init__(self, available: np.ndarray) -> None:
        self.available = available
        self.seen = np.concatenate(([0], np.cumsum(available, dtype=np.int64)))
        began = available & ~np.concatenate(([False], available[:-1]))
        self.spells = np.concatenate(([0], np.cumsum(began, dtype=np.int64)))
        self.up_run = _run_lengths(available)
        self.down_run = _run_lengths(~available)


def _run_lengths(flags: np.ndarray) -> np.ndarray:
    """For each tick, how many ticks in a row up to and including it ``flags`` held."""
    out = np.zeros(len(flags), dtype=np.int64)
    run = 0
    # A Python loop over one trace (tens of thousands of ticks) runs once per trace.
    for i, f in enumerate(flags.tolist()):
        run = run + 1 if f else 0
        out[i] = run
    return out


def replay(policy: Policy, available: np.ndarray, tick_h: float, k: float, lanes: Lanes) -> Outcome:
    """Run ``policy`` on every lane until each job is done; see the module docstring.

    The market figures a policy sees cover the ticks since its job started, up to
    and including the current one: never any tick after it.
    """
    n = len(lanes)
    longest = int((lanes.deadline + lanes.compute + lanes.changeover).max()) + 1
    # Past the trace's end spot counts as gone: no lane may profit from missing data.
    padded = np.concatenate((available.astype(bool), np.zeros(longest, dtype=bool)))
    market = MarketView(padded)
    state = np.zeros(n, dtype=np.int8)
    warm = np.zeros(n, dtype=np.int64)
    progress = np.zeros(n, dtype=np.int64)
    spot_ticks = np.zeros(n, dtype=np.int64)
    od_ticks = np.zeros(n, dtype=np.int64)
    spot_work = np.zeros(n, dtype=np.int64)
    od_work = np.zeros(n, dtype=np.int64)
    changeovers = np.zeros(n, dtype=np.int64)
    reclaims = np.zeros(n, dtype=np.int64)
    finish = np.full(n, -1, dtype=np.int64)
    compute_h = lanes.compute * tick_h
    changeover_h = lanes.changeover * tick_h
    k_lane = np.full(n, float(k))
    zeros = np.zeros(n)
    tick = np.full(n, tick_h)
    for t in range(longest):
        active = finish < 0
        if not active.any():
            break
        at = lanes.start + t
        spot_now = padded[at]
        lost = (state == SPOT) & ~spot_now
        reclaims += lost
        state[lost] = IDLE
        warm[lost] = 0
        watched = np.full(n, t + 1)  # ticks observed since the job started, this one included
        facts = Facts(
            state=state,
            compute_h=compute_h,
            progress_h=progress * tick_h,
            elapsed_h=np.full(n, t * tick_h),
            remaining_h=(lanes.deadline - t) * tick_h,
            changeover_h=changeover_h,
            spot_available=spot_now,
            k=k_lane,
            tick_h=tick,
            margin_h=zeros,
            observed_h=watched * tick_h,
            spot_seen_h=(market.seen[at + 1] - market.seen[at + 1 - watched]) * tick_h,
            spot_spells=(market.spells[at + 1] - market.spells[at + 1 - watched]).astype(float),
            outage_h=np.minimum(market.down_run[at], watched) * tick_h,
            spell_h=np.minimum(market.up_run[at], watched) * tick_h,
        )
        target = policy(facts).target
        target = np.where(active, target, IDLE).astype(np.int8)
        if ((target == SPOT) & ~spot_now).any():
            raise AssertionError("policy chose spot where the trace has none")
        launched = (target != state) & (target != IDLE)
        warm[launched] = lanes.changeover[launched]
        warm[target == IDLE] = 0
        changeovers += launched
        state = target
        running = state != IDLE
        spot_ticks += state == SPOT
        od_ticks += state == OD
        working = running & (warm == 0)
        spot_work += working & (state == SPOT)
        od_work += working & (state == OD)
        progress += working
        warm -= running & (warm > 0)
        finished = active & (progress >= lanes.compute)
        finish[finished] = t + 1
        state[finished] = IDLE
    finish_h = np.where(finish >= 0, finish * tick_h, np.inf)
    return Outcome(
        cost=(spot_ticks + k * od_ticks) * tick_h,
        spot_h=spot_ticks * tick_h,
        od_h=od_ticks * tick_h,
        spot_work_h=spot_work * tick_h,
        od_work_h=od_work * tick_h,
        finish_h=finish_h,
        missed=(finish < 0) | (finish > lanes.deadline),
        changeovers=changeovers,
        reclaims=reclaims,
    )
