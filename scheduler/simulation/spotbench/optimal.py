"""The omniscient optimum: the cheapest schedule with the whole trace known, by exact DP.

Same model as the replay (``spot_replay``), in whole ticks. The state before each
tick t is (lag, instance) where lag = t - progress counts the ticks that made no
progress so far (idle or changeover): a job of P ticks due at tick D can afford
lag <= D - P, so the table is only (slack + 1) wide, not P. Choices:

- idle: lag + 1, free;
- keep the running spot (if spot is there at t) or OD: progress, cost 1 or k;
- launch spot (if spot stays for the whole changeover) or OD: lag + d, cost d or d*k,
  arriving at t + d on a running instance.

Launching a spot that is reclaimed during its changeover is never better than
staying idle, so the DP does not consider it; a running spot whose market vanishes
is idle. All start points of one job shape are solved together (numpy over
starts x lag), backwards from the deadline, and only over the lags reachable at
each tick (lag <= t) that are not yet done (progress t - lag < P).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_IDLE, _SPOT, _OD = 0, 1, 2


@dataclass(frozen=True)
class OptimalResult:
    cost: np.ndarray  # spot-price hours, per start; inf where no schedule meets the deadline
    spot_work_h: np.ndarray | None  # progress on spot in one optimal schedule, when asked for


def forward_runs(available: np.ndarray) -> np.ndarray:
    """For each tick, how many ticks in a row from it (inclusive) spot stays available."""
    flags = np.asarray(available, dtype=bool)
    out = np.zeros(len(flags) + 1, dtype=np.int64)
    # Once per trace; a reversed cumulative count reset at every gap.
    for i in range(len(flags) - 1, -1, -1):
        out[i] = out[i + 1] + 1 if flags[i] else 0
    return out[:-1]


def optimal(
    available: np.ndarray,
    tick_h: float,
    k: float,
    starts: np.ndarray,
    *,
    deadline: int,
    compute: int,
    changeover: int,
    runs: np.ndarray | None = None,
    track_spot_work: bool = False,
    dtype: type = np.float64,
) -> OptimalResult:
    """Least cost per start for a job of ``compute`` ticks due ``deadline`` ticks after it.

    ``runs`` (from ``forward_runs``) may be passed to reuse it across job shapes.
    ``track_spot_work`` also returns how much of the work one optimal schedule does
    on spot (ties broken towards idle, then OD: the fewest changeovers); it costs
    twice the time. ``dtype=np.float32`` halves the memory traffic for big sweeps.
    """
    starts = np.asarray(starts, dtype=np.int64)
    n, d = len(starts), int(changeover)
    if d < 1:
        raise ValueError("the changeover must be at least one tick")
    if n and int(starts.max()) + deadline > len(available):
        raise ValueError("every window must lie inside the trace")
    if compute <= 0:
        return OptimalResult(np.zeros(n), np.zeros(n) if track_spot_work else None)
    slack = deadline - compute
    if slack < d:
        return OptimalResult(np.full(n, np.inf), np.zeros(n) if track_spot_work else None)
    if runs is None:
        runs = forward_runs(available)
    spot = np.asarray(available, dtype=bool)
    ring = d + 1  # values at t+1 .. t+d are read at t
    width = slack + 1 + d + 1  # lags past the slack stay inf: infeasible
    value = np.zeros((3, ring, n, width), dtype=dtype)
    value[..., slack + 1 :] = np.inf
    work = np.zeros((3, ring, n, width), dtype=dtype) if track_spot_work else None
    for t in range(deadline - 1, -1, -1):
        # Lags computed at t: not done (t - lag < compute) and reachable (lag <= t).
        # Columns left of lo were never written in this slot: zero, done.
        lo, hi = max(0, t - compute + 1), min(t, slack)
        now, nxt, far = t % ring, (t + 1) % ring, (t + d) % ring
        cols = slice(lo, hi + 1)
        # Launching an instance: d ticks of lag and of its price, arriving running at t + d.
        if t + d <= deadline:
            launch_spot = value[_SPOT, far][:, lo + d : hi + d + 1] + dtype(d)
            launch_spot[runs[starts + t] < d] = np.inf
            launch_od = value[_OD, far][:, lo + d : hi + d + 1] + dtype(d * k)
        else:
            launch_spot = launch_od = np.full((n, hi + 1 - lo), np.inf, dtype=dtype)
        idle_next = value[_IDLE, nxt][:, lo + 1 : hi + 2]
        best = np.minimum(idle_next, launch_od)
        np.minimum(best, launch_spot, out=best)
        keep_spot = value[_SPOT, nxt][:, cols] + dtype(1)
        no_spot = ~spot[starts + t]
        keep_spot[no_spot] = np.inf
        keep_od = value[_OD, nxt][:, cols] + dtype(k)
        if work is not None:
            _track(work, best, idle_next, launch_od, launch_spot, keep_spot, keep_od, now, nxt, far, lo, hi, d)
        value[_IDLE, now][:, cols] = best
        value[_SPOT, now][:, cols] = np.minimum(keep_spot, best)
        value[_OD, now][:, cols] = np.minimum(keep_od, best)
    cost = value[_IDLE, 0][:, 0].astype(np.float64) * tick_h
    spot_work = work[_IDLE, 0][:, 0].astype(np.float64) * tick_h if work is not None else None
    return OptimalResult(cost=cost, spot_work_h=spot_work)


def _track(
    work: np.ndarray,
    best: np.ndarray,
    idle_next: np.ndarray,
    launch_od: np.ndarray,
    launch_spot: np.ndarray,
    keep_spot: np.ndarray,
    keep_od: np.ndarray,
    now: int,
    nxt: int,
    far: int,
    lo: int,
    hi: int,
    d: int,
) -> None:
    """Carry the spot work of the chosen option along with each value (same tie order)."""
    cols = slice(lo, hi + 1)
    shifted = slice(lo + d, hi + d + 1)
    idle_w = work[_IDLE, nxt][:, lo + 1 : hi + 2]
    best_w = np.where(
        idle_next <= np.minimum(launch_od, launch_spot),
        idle_w,
        np.where(launch_od <= launch_spot, work[_OD, far][:, shifted], work[_SPOT, far][:, shifted]),
    )
    work[_IDLE, now][:, cols] = best_w
    work[_SPOT, now][:, cols] = np.where(keep_spot < best, work[_SPOT, nxt][:, cols] + 1, best_w)
    work[_OD, now][:, cols] = np.where(keep_od < best, work[_OD, nxt][:, cols], best_w)
