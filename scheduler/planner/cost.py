"""What a candidate is expected to cost: the formula the planner ranks by.

Why spot? A spot machine is the same machine sold at a discount, on the condition that
the cloud may take it back. A reclaim costs a restart (boot, image pull, data and
checkpoint download: ``PlannerPolicy.restart_hours``) and the work done since the last
checkpoint, both billed. So spot is worth it exactly when its discount outweighs that
expected overhead: a cheap price, rare reclaims, and work that checkpoints often. The
planner prices every candidate this way and takes the cheapest expected cost; it does
not prefer spot as such. A deadline adds one condition (``rank.Scorer``): spot must also
finish in time in a bad case, ``BAD_CASE_FACTOR`` x the expected reclaims plus one more late in
the run; the safety margin covers estimate error, this net covers interruption bad luck.

The formula, for one candidate, with ``h`` the hours ``perf.estimate`` gives for its GPU,
count, vCPUs and nodes:

* spot: ``n = rate x nodes x h`` expected reclaims (any node's reclaim stops a gang job).
  Each costs ``restart_hours`` plus lost work: half an epoch for training (it resumes
  from ``last.pt``), half a shard for inference (it resumes at its first unfinished
  shard, ``jobs.infer_shards``), half the job for val and export (they restart from
  scratch). Lost work in total is capped at ``h``: past that the linear model stops
  meaning anything, and spot has lost anyway. Expected hours:
  ``h + n x restart + min(n x lost, h)``.
* on-demand, reserved and warm machines: ``h``.
* cost: expected hours x the hourly price of all nodes in ``policy.currency``, to the cent.
* reserved capacity costs nothing more: it is already paid, so its hourly price is zero.
* a warm machine (ours, idle) costs its capacity's hourly price and starts now; a new
  one starts after ``boot_hours`` (a later finish, not a cost).

The lower bound (``simulation.lower_bound_options``) prices the same uninterrupted hours
without reclaims, boots or rounding: what no schedule can beat.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import NamedTuple

from scheduler.money import Money

BAD_CASE_FACTOR = 1.5  # a spot run under a deadline must survive this many times its expected reclaims, plus one
_CENT = Decimal("0.01")


def on_spot(hours: float, rate: float, nodes: int, checkpoint_hours: float | None,
            restart_hours: float) -> tuple[float, float, float]:
    """``hours`` of work on ``nodes`` spot machines, each reclaimed ``rate`` times an hour: the expected
    reclaims, the expected hours, and the hours of the bad case a deadline must survive.

    A reclaim loses half the time between checkpoints (``checkpoint_hours``: an epoch, a shard) on
    average, or half the job when it restarts from scratch (None).
    """
    n = rate * nodes * hours  # any node's reclaim stops a gang job
    lost = (hours if checkpoint_hours is None else checkpoint_hours) / 2
    bad = BAD_CASE_FACTOR * n + 1
    # Lost work in total is capped at the work itself: past that the linear model means nothing.
    return n, hours + (n * restart_hours + min(n * lost, hours)), hours + (bad * restart_hours + min(bad * lost, hours))


def changeover_hours(boot_hours: float, restart_hours: float, epoch_hours: float) -> float:
    """A training job's move to another machine from its last checkpoint: a boot, a restart and, on average,
    half an epoch lost since that checkpoint (the steering rule's changeover; a stint's way out)."""
    return boot_hours + restart_hours + epoch_hours / 2


class StintLeg(NamedTuple):
    """A spot stint that its move to on-demand completes (``stint_leg``); hours after the planning moment."""

    spot_hours: float  # on spot, from its start to the move: what it pays at the spot price
    leg_hours: float  # on the on-demand machine: the work left, a restart and the half epoch lost (billed)
    finish_hours: float  # when the on-demand leg is expected to end


def stint_leg(start_hours: float, hours: float, cutoff_hours: float, target_hours: float, boot_hours: float,
              restart_hours: float, epoch_hours: float) -> StintLeg | None:
    """A training job on spot that its expected reclaims make late, moved to on-demand in time.

    The steering rule keeps such a job on spot while an on-demand run still meets the deadline within its
    safety margin, and moves it when none would later (``lifecycle.steering``): the last moment is set by
    the fastest on-demand setup, ``target_hours`` for the whole job. On spot the job makes ``1 / hours`` of
    its work an hour (``hours``: expected, with reclaims) from ``start_hours``; the move costs a changeover
    (``changeover_hours``); the rest runs at ``target_hours`` and must end by ``cutoff_hours`` (the deadline
    less its margin). None when the target is no faster than spot or there is no time on spot before the move.
    A move later than the spot run's own end means no move: all of it on spot, nothing on on-demand.
    """
    if target_hours >= hours:
        return None
    change = changeover_hours(boot_hours, restart_hours, epoch_hours)
    share = target_hours / hours
    move = (cutoff_hours - change - target_hours - start_hours * share) / (1 - share)
    if move <= start_hours:
        return None
    if move >= start_hours + hours:
        return StintLeg(hours, 0.0, start_hours + hours)
    left = 1 - (move - start_hours) / hours
    # Billed on on-demand: the work left and the changeover but its boot (as a reclaim's restart is billed).
    return StintLeg(move - start_hours, left * target_hours + (change - boot_hours),
                    move + change + left * target_hours)


def stint_cost(hourly_amount: Decimal, hours: Decimal, spot_hours: float, leg_cost: Decimal) -> Decimal:
    """A stint with a move's expected cost: spot until the move plus the on-demand leg (``leg_cost``, to the cent),
    and never less than all of it on spot (``hours``): were the leg cheaper than that, the on-demand run it moves
    to would cost less than either and be taken instead, so the lower figure is never the one chosen."""
    return max(expected_cost(hourly_amount, hours), expected_cost(hourly_amount, Decimal(repr(spot_hours))) + leg_cost)


def start(now: datetime, boot_hours: float, *, warm: bool) -> datetime:
    """When a machine starts working: a warm one now, a new one after its boot."""
    return now if warm else now + timedelta(hours=boot_hours)


def hourly(price: Money | None, nodes: int, currency: str, rate: Callable[[str, str], Decimal]) -> Money:
    """All nodes' hourly price in ``currency``, ``price`` being one node's (``rate``: ``FxRates.rate``, so the
    arithmetic of ``FxRates.convert``); no price, reserved capacity, costs nothing more."""
    if price is None:
        return Money.zero(currency)
    return Money(amount=price.amount * rate(price.currency, currency), currency=currency) * nodes


def expected_cost(hourly_amount: Decimal, hours: Decimal) -> Decimal:
    """The expected cost, to the cent: hourly price (all nodes, ``hourly``) x expected hours."""
    return (hourly_amount * hours).quantize(_CENT, ROUND_HALF_EVEN)  # positional: a keyword costs 2x
