"""One trace under several policies, each in its own process: ``gpusched simulate --policy all``.

A what-if is a comparison: the same month under ours and the baselines, on the same seed, held to the
same lower bound. Each policy's run is independent of the others (its own store, its own sandbox
clouds, the same seeds), so they run side by side in processes and the month takes the wall time of
its slowest policy rather than the sum. A run in a process is the same run as one in the command's own
process: the summary is the same but for ``wall_seconds`` (``tests/app/test_cli.py``).

The bound at the estimates is solved once, here, and handed to every run; the bound at the true speeds
is solved by each run once it is over (``simulate(true_speed_bound=...)``), from the draws of its own
simulated agents, which depend on the seed and the job ids only, so every policy gets the same figure.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from providers.catalog import load_catalog
from scheduler.errors import UserError
from scheduler.lifecycle.fleet import reserved_offer
from scheduler.logs import configure_logging
from scheduler.models import Offer
from scheduler.settings import WHAT_IF_SETTINGS, Settings, load_settings
from scheduler.simulation.lower_bound import LowerBound, lower_bound
from scheduler.simulation.market import MarketSpec
from scheduler.simulation.simulate import POLICIES, Progress, SimSummary, Submission, simulate
from scheduler.simulation.trace_file import TraceEntry, load_trace_market

MAX_WORKERS = 4  # one process per policy: there are four
Speed = Callable[[int, str], float]  # (trace entry, GPU model) -> its true hours over the estimate's


@dataclass(frozen=True)
class Month:
    """A trace as the simulator takes it: its entries, the market on its first line, the submissions."""

    entries: list[TraceEntry]
    market: MarketSpec
    submissions: list[Submission]


@dataclass(frozen=True)
class PolicyRun:
    summary: SimSummary
    cpu_seconds: float  # the process's CPU time for the run (the bound at the estimates not included)


def policies_of(text: str) -> tuple[str, ...]:
    """``--policy``: one name, a comma-separated list, or ``all``; in the order given, each once."""
    names = POLICIES if text.strip() == "all" else tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        raise UserError(f"unknown policy {', '.join(map(repr, unknown)) or repr(text)}",
                        fix=f"use one of: {', '.join(POLICIES)}; several separated by commas; or all")
    return tuple(dict.fromkeys(names))


def load_month(trace: Path) -> Month:
    entries, market = load_trace_market(trace)
    subs = [Submission(at=e.at, job=e.job, source=f"{trace.name}:{i + 1}") for i, e in enumerate(entries)]
    return Month(entries, market, subs)


def what_if_of(pairs: Sequence[str]) -> dict[str, str]:
    """``--set KEY=VALUE`` pairs: a setting of ``WHAT_IF_SETTINGS`` (as the field or as GPUSCHED_KEY) and its
    value as the environment would give it (JSON for maps). Values are checked by ``sim_settings``."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        name = key.strip().lower().removeprefix("gpusched_").replace("-", "_")
        if not sep or name not in WHAT_IF_SETTINGS:
            raise UserError(f"--set {pair!r}: " + ("not KEY=VALUE" if not sep else f"{key.strip()!r} is not a "
                                                   "setting a simulation can change"),
                            fix=f"--set KEY=VALUE, KEY one of: {', '.join(WHAT_IF_SETTINGS)}")
        out[name] = value.strip()
    return out


def sim_settings(seed: int, tick_seconds: float, what_if: Mapping[str, str] | None = None) -> Settings:
    """The simulated daemon's settings: GPUSCHED_* from the environment (no .env), ``what_if`` over them.

    A reservation must match an offer of the simulated clouds: the daemon only logs one that does not and
    never launches it, which in a what-if would charge its fee for machines that never run (a typo in an
    instance type answering "should we buy it" with a fee and no use)."""
    settings = load_settings(_env_file=None, **{**(what_if or {}), "cluster": "sim", "sandbox_seed": seed,
                                                "tick_seconds": tick_seconds})
    offers = sim_offers(settings) if settings.reserved else []  # the catalog is read only to check them
    for res in settings.reserved:
        if reserved_offer(res, offers) is None:
            where = f"{res.provider} {res.region}" + (f" {res.zone}" if res.zone else "")
            raise UserError(f"reserved capacity {where} {res.instance_type} matches no offer of the simulated "
                            f"clouds ({', '.join(settings.providers)})",
                            fix="use a provider, region and instance type that `gpusched offers` lists")
    return settings


def sim_offers(settings: Settings) -> list[Offer]:
    """The catalog's offers of the clouds the simulated daemon has (``settings.providers``)."""
    return [o for o in load_catalog() if o.provider in settings.providers]


def bound_solver(month: Month, settings: Settings, *, on_time_floor: bool = False
                 ) -> Callable[[Speed | None], LowerBound]:
    """``lower_bound`` over the month on what the simulated daemon has (its clouds' offers, its reserved
    capacity, in the summary's currency), at the given speeds (None: the estimates).

    ``on_time_floor``: spot priced through the month's expected reclaims (its market's rates) and every job on
    time on average (``lower_bound(..., reclaims=True, on_time=True)``) instead of uninterrupted."""
    offers = month.market.scaled(sim_offers(settings)) if on_time_floor else sim_offers(settings)

    def solve(speed: Speed | None) -> LowerBound:
        return lower_bound(month.entries, offers, currency=settings.report_currency, fx=settings.fx,
                           reserved=settings.reserved, speed=speed, reclaims=on_time_floor, on_time=on_time_floor)

    return solve


def solve_bound(month: Month, settings: Settings) -> LowerBound:
    """The lower bound at the estimates."""
    return bound_solver(month, settings)(None)


def run_policy(trace: Path, policy: str, seed: int, tick_seconds: float, bound: LowerBound | None, *,
               what_if: Mapping[str, str] | None = None, month: Month | None = None,
               progress: Callable[[Progress], None] | None = None) -> PolicyRun:
    """One policy over the trace; with ``bound``, the bound and the on-time floor at the true speeds solved
    after the run. ``what_if``: settings over the environment's (``what_if_of``); ``month``: the trace already
    loaded."""
    month = month or load_month(trace)
    settings = sim_settings(seed, tick_seconds, what_if)
    cpu0 = time.process_time()
    summary = simulate(month.submissions, policy=policy, seed=seed, bound=bound, settings=settings,
                       progress=progress, market=month.market,
                       true_speed_bound=bound_solver(month, settings) if bound is not None else None,
                       true_speed_floor=bound_solver(month, settings, on_time_floor=True) if bound is not None
                       else None)
    return PolicyRun(summary, time.process_time() - cpu0)


def _in_process(trace: Path, policy: str, seed: int, tick_seconds: float, bound: LowerBound | None,
                what_if: Mapping[str, str] | None) -> PolicyRun:
    configure_logging("console", "warning")  # a fresh process logs as the command does
    return run_policy(trace, policy, seed, tick_seconds, bound, what_if=what_if)


def run_policies(trace: Path, policies: Sequence[str], seed: int, tick_seconds: float, bound: LowerBound | None,
                 *, what_if: Mapping[str, str] | None = None, workers: int = 0,
                 done: Callable[[PolicyRun], None] | None = None) -> dict[str, PolicyRun]:
    """Every policy over the trace, in up to ``workers`` processes (0: one per core, at most ``MAX_WORKERS``);
    ``done`` is called as each run ends. The result is in the order of ``policies``."""
    workers = min(workers or min(MAX_WORKERS, os.cpu_count() or 1), len(policies))
    runs: dict[str, PolicyRun] = {}
    if workers <= 1:
        month = load_month(trace)
        for policy in policies:
            runs[policy] = run_policy(trace, policy, seed, tick_seconds, bound, what_if=what_if, month=month)
            if done is not None:
                done(runs[policy])
    else:
        # Spawned, not forked: the command's progress bar runs a thread, and a fork taken while it holds a
        # lock (the console's, stderr's) would leave that lock held in the child for good.
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_in_process, trace, p, seed, tick_seconds, bound, what_if): p for p in policies}
            for future in as_completed(futures):
                runs[futures[future]] = future.result()
                if done is not None:
                    done(runs[futures[future]])
    return {p: runs[p] for p in policies}


__all__ = ["MAX_WORKERS", "Month", "PolicyRun", "load_month", "policies_of", "run_policies", "run_policy",
           "sim_settings", "solve_bound", "bound_solver", "what_if_of"]
