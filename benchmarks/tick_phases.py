"""Where a simulated month's CPU goes, phase by phase of the tick (issue 17, item 4: the simulator's speed).

Usage:  .venv/bin/python benchmarks/tick_phases.py [--trace FILE] [--jobs 1000] [--policy gpusched]
                                                   [--seed 1] [--tick-seconds 60] [--by-library | --triggers]

Runs ``gpusched simulate`` (no lower bound) over the first N jobs of a trace (default: the stress month),
timing each phase of ``lifecycle.tick`` and the simulator's own steps (the simulated agents, the event
search, the submissions) in CPU seconds, and counting the SQL statements each sends and the calls that
wrote nothing (no INSERT, UPDATE or DELETE). Prints a table, then one JSON line.

The phases are wrapped where the tick and the simulator look them up (module attributes), so the run is
the same as ``gpusched simulate``'s with a timer around each call: the summary line says so (cost, ticks).
A call that wrote nothing only asked whether anything had happened: the share of the CPU those calls take
is what a tick that visits only what changed would save.

``--by-library``: instead of the phases, where the CPU goes by library: cProfile's own time per function,
summed by the package its file is in (SQLAlchemy by module, ours by package, SQLite's C calls apart).
cProfile's cost per call inflates code made of many small calls (the ORM is): read the shares as an order,
not as the seconds each part would take without the profiler.

``--triggers``: instead of the phases, why each tick ran: what the simulator's jump landed on (a submission, a
cloud event such as a boot or a reclaim, a job's end, the steering rule's look-again time, an idle machine's stop
or a stopped one's retirement, or only the re-plan of waiting work a minute on), and whether the tick launched or
reused a machine. A tick that landed on nothing but a re-plan is one a tick driven by changes alone would skip.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import event

import scheduler.accounting.ledger as ledger
import scheduler.lifecycle.tick as tick
import scheduler.simulation.simulate as simulate
from scheduler.logs import configure_logging
from scheduler.settings import Settings
from scheduler.simulation.simagent import SimAgents
from scheduler.simulation.trace_file import load_trace_market
from scheduler.store.database import Store

ROOT = Path(__file__).resolve().parent.parent
TICK_PHASES = ("screen_stored_specs", "reconcile", "watch_agents", "terminate_reclaimed", "steer", "stop_at_budget",
               "release_cancelled", "reissue_intents", "plan_and_act", "reap_idle")
_WRITES = ("INSERT", "UPDATE", "DELETE")


@dataclass
class Phase:
    calls: int = 0
    cpu: float = 0.0
    statements: int = 0
    idle_calls: int = 0  # calls that wrote nothing
    idle_cpu: float = 0.0


class Meter:
    """Counts the statements every store sends (an engine hook) and times the wrapped calls."""

    def __init__(self) -> None:
        self.statements = 0
        self.writes = 0
        self.phases: dict[str, Phase] = {}

    def watch(self, store: Store) -> None:
        @event.listens_for(store.engine, "before_cursor_execute")
        def _count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            self.statements += 1
            self.writes += statement.lstrip()[:6].upper() in _WRITES

    def wrap(self, owner: Any, name: str, label: str | None = None) -> None:
        inner: Callable[..., Any] = getattr(owner, name)
        phase = self.phases.setdefault(label or name, Phase())

        def timed(*args: Any, **kwargs: Any) -> Any:
            writes, statements, cpu0 = self.writes, self.statements, time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                cpu = time.process_time() - cpu0
                phase.calls += 1
                phase.cpu += cpu
                phase.statements += self.statements - statements
                if self.writes == writes:
                    phase.idle_calls += 1
                    phase.idle_cpu += cpu

        setattr(owner, name, timed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", type=Path, default=ROOT / "examples" / "traces" / "stress-month.jsonl.gz")
    ap.add_argument("--jobs", type=int, default=1000, help="the trace's first N jobs (0: all)")
    ap.add_argument("--policy", default="gpusched")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tick-seconds", type=float, default=60.0)
    ap.add_argument("--by-library", action="store_true", help="where the CPU goes by library (cProfile)")
    ap.add_argument("--triggers", action="store_true", help="why each tick ran, and whether it launched")
    args = ap.parse_args()
    configure_logging("console", "warning")
    entries, market = load_trace_market(args.trace)
    entries = entries[: args.jobs] if args.jobs else entries
    subs = [simulate.Submission(at=e.at, job=e.job, source=f"{args.trace.name}:{i + 1}") for i, e in enumerate(entries)]

    settings = Settings(_env_file=None, cluster="sim", sandbox_seed=args.seed, tick_seconds=args.tick_seconds)
    if args.by_library:
        by_library(subs, args.policy, args.seed, settings, market)
        return
    if args.triggers:
        triggers(subs, args.policy, args.seed, settings, market)
        return
    meter = Meter()
    store_init = Store.__init__

    def counted_init(self: Store, *a: Any, **kw: Any) -> None:
        store_init(self, *a, **kw)
        meter.watch(self)

    Store.__init__ = counted_init  # type: ignore[method-assign]
    for name in TICK_PHASES:
        meter.wrap(tick, name)
    meter.wrap(ledger, "account", "account (ledger)")
    meter.wrap(SimAgents, "step", "agents: step")
    meter.wrap(SimAgents, "step_started", "agents: step_started")
    meter.wrap(simulate, "_next_event", "simulator: next event")
    meter.wrap(simulate.service, "submit", "simulator: submit")

    cpu0 = time.process_time()
    summary = simulate.simulate(subs, policy=args.policy, seed=args.seed, settings=settings, market=market)
    cpu = time.process_time() - cpu0

    print(f"{len(subs)} jobs, {summary.ticks:,} ticks, {summary.total_cost} {summary.currency}: "
          f"{cpu:.1f} CPU s, {1000 * cpu / summary.ticks:.2f} ms a tick")
    print(f"{'phase':24} {'calls':>7} {'CPU s':>8} {'share':>6} {'ms/call':>8} {'stmts/call':>10} "
          f"{'no-write calls':>14} {'their CPU s':>11}")
    for name, p in sorted(meter.phases.items(), key=lambda kv: -kv[1].cpu):
        if p.calls:
            print(f"{name:24} {p.calls:7,} {p.cpu:8.2f} {p.cpu / cpu:6.1%} {1000 * p.cpu / p.calls:8.2f} "
                  f"{p.statements / p.calls:10.1f} {p.idle_calls:14,} {p.idle_cpu:11.2f}")
    idle = sum(p.idle_cpu for p in meter.phases.values())
    print(f"calls that wrote nothing: {idle:.1f} CPU s ({idle / cpu:.0%}); "
          f"{meter.statements / summary.ticks:.1f} statements a tick")
    print(json.dumps({"benchmark": "tick_phases", "jobs": len(subs), "ticks": summary.ticks,
                      "total_cost": str(summary.total_cost), "cpu_seconds": round(cpu, 2),
                      "ms_per_tick": round(1000 * cpu / summary.ticks, 2),
                      "phases": {k: {"calls": p.calls, "cpu_seconds": round(p.cpu, 3), "statements": p.statements,
                                     "no_write_calls": p.idle_calls, "no_write_cpu_seconds": round(p.idle_cpu, 3)}
                                 for k, p in meter.phases.items()}}))


def by_library(subs: list, policy: str, seed: int, settings: Settings, market: Any, top: int = 25) -> None:
    profile = cProfile.Profile()
    profile.enable()
    summary = simulate.simulate(subs, policy=policy, seed=seed, settings=settings, market=market)
    profile.disable()
    own: dict[str, float] = defaultdict(float)
    for (path, _line, name), (_cc, _nc, tottime, _ct, _callers) in pstats.Stats(profile).stats.items():
        own[_where(path, name)] += tottime
    total = sum(own.values())
    libraries: dict[str, float] = defaultdict(float)
    for group, seconds in own.items():
        libraries[group.split(".")[0]] += seconds
    print(f"{len(subs)} jobs, {summary.ticks:,} ticks, {summary.total_cost} {summary.currency}; "
          f"{total:.1f} s under the profiler")
    ranked = sorted(libraries.items(), key=lambda kv: -kv[1])
    print("by library: " + ", ".join(f"{k} {v / total:.1%}" for k, v in ranked))
    for group, seconds in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{group:40} {seconds:8.2f} {seconds / total:7.1%}")


def triggers(subs: list, policy: str, seed: int, settings: Settings, market: Any) -> None:
    """Count the ticks by what was due at each (``--triggers``; see the module doc)."""
    cadence = timedelta(seconds=settings.tick_seconds)
    due = {"now": "start"}  # what the next tick lands on, set when the simulator picks it
    counts: Counter[tuple[str, bool]] = Counter()
    next_event = simulate._next_event

    def labelled(now: datetime, next_submission: datetime | None, clouds: dict, agents: SimAgents, *rest: Any
                 ) -> datetime:
        nxt = next_event(now, next_submission, clouds, agents, *rest)
        at = max(nxt, now + cadence)  # the tick handles everything due by then (``simulate``)
        look_again_by = rest[-1]
        cloud_events = [x for x in (c.next_event_after(now) for c in clouds.values()) if x is not None]
        found = [name for name, t in (
            ("submission", next_submission), ("steering", look_again_by),
            ("cloud", min(cloud_events, default=None)), ("job end", agents.next_event_after(now)))
            if t is not None and t <= at]
        if not found:
            found = ["re-plan only" if nxt == now + simulate.REPLAN else "idle stop or retire"]
        due["now"] = " + ".join(found)
        return nxt

    plan_and_act = tick.plan_and_act

    def counted(ctx: Any, now: datetime, report: Any) -> Any:
        before = report.launched + report.reused
        try:
            return plan_and_act(ctx, now, report)
        finally:
            counts[(due["now"], report.launched + report.reused > before)] += 1

    simulate._next_event = labelled  # type: ignore[assignment]
    tick.plan_and_act = counted  # type: ignore[assignment]
    summary = simulate.simulate(subs, policy=policy, seed=seed, settings=settings, market=market)
    print(f"{len(subs)} jobs, {summary.ticks:,} ticks, {summary.total_cost} {summary.currency}")
    by_due: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for (what, launched), n in counts.items():
        by_due[what][0] += n
        by_due[what][1] += n if launched else 0
    print(f"{'due at the tick':40} {'ticks':>7} {'share':>6} {'launched or reused':>18}")
    for what, (n, launched) in sorted(by_due.items(), key=lambda kv: -kv[1][0]):
        print(f"{what:40} {n:7,} {n / summary.ticks:6.1%} {launched:18,}")
    print(json.dumps({"benchmark": "tick_triggers", "jobs": len(subs), "ticks": summary.ticks,
                      "total_cost": str(summary.total_cost),
                      "due": {k: {"ticks": v[0], "launched": v[1]} for k, v in by_due.items()}}))


def _where(path: str, name: str) -> str:
    """The group a function's own time counts in: its library (SQLAlchemy by module), our package, or SQLite's C."""
    if path.startswith("~") or path == "<built-in>":
        return "sqlite3 (C)" if "sqlite3" in name else "builtins"
    if "/sqlalchemy/" in path:
        return "sqlalchemy." + path.split("/sqlalchemy/")[1].rsplit(".", 1)[0].replace("/", ".")
    for ours in ("scheduler", "providers"):
        marker = f"{ROOT}/{ours}/"
        if path.startswith(marker):
            rest = path[len(marker):].split("/")
            return f"{ours}.{rest[0].removesuffix('.py')}" if ours == "scheduler" else ours
    if "site-packages/" in path:
        return path.split("site-packages/")[1].split("/")[0].removesuffix(".py")
    return "standard library"


if __name__ == "__main__":
    main()
