"""Where a simulated month's CPU goes by library (issue 17, item 4): cProfile's own time per function, summed by
the package its file is in (SQLAlchemy by module, ours by package), over ``gpusched simulate``'s run.

Usage:  .venv/bin/python benchmarks/sim_libraries.py [--trace FILE] [--jobs 500] [--top 25]

The run is ``simulate`` on the first N jobs of a trace (default: the stress month), policy gpusched, seed 1,
``--tick-seconds 60``, no lower bound. cProfile's cost per call inflates code made of many small calls (the ORM
is), so read the shares as an order, not as the seconds each part would take without the profiler.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from collections import defaultdict
from pathlib import Path

import scheduler.simulation.simulate as simulate
from scheduler.logs import configure_logging
from scheduler.settings import Settings
from scheduler.simulation.trace_file import load_trace_market

ROOT = Path(__file__).resolve().parent.parent


def where(path: str, name: str) -> str:
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", type=Path, default=ROOT / "examples" / "traces" / "stress-month.jsonl.gz")
    ap.add_argument("--jobs", type=int, default=500, help="the trace's first N jobs (0: all)")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    configure_logging("console", "warning")
    entries, market = load_trace_market(args.trace)
    entries = entries[: args.jobs] if args.jobs else entries
    subs = [simulate.Submission(at=e.at, job=e.job, source=f"{args.trace.name}:{i + 1}") for i, e in enumerate(entries)]
    settings = Settings(_env_file=None, cluster="sim", sandbox_seed=1, tick_seconds=60.0)
    profile = cProfile.Profile()
    profile.enable()
    summary = simulate.simulate(subs, policy="gpusched", seed=1, settings=settings, market=market)
    profile.disable()
    own: dict[str, float] = defaultdict(float)
    for (path, _line, name), (_cc, _nc, tottime, _ct, _callers) in pstats.Stats(profile).stats.items():
        own[where(path, name)] += tottime
    total = sum(own.values())
    libraries: dict[str, float] = defaultdict(float)
    for group, seconds in own.items():
        libraries[group.split(".")[0]] += seconds
    print(f"{len(subs)} jobs, {summary.ticks:,} ticks, {summary.total_cost} {summary.currency}; "
          f"{total:.1f} s under the profiler")
    ranked = sorted(libraries.items(), key=lambda kv: -kv[1])
    print("by library: " + ", ".join(f"{k} {v / total:.1%}" for k, v in ranked))
    for group, seconds in sorted(own.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{group:40} {seconds:8.2f} {seconds / total:7.1%}")


if __name__ == "__main__":
    main()
