"""Planner time for N queued jobs against M offers (issue 4 and 17 target: 10,000 x 2,000 in under 1 s, one core).

Usage:  .venv/bin/python benchmarks/planner_speed.py [--jobs 10000] [--offers 2000] [--fresh] [--gc-freeze]

Jobs come from the stress trace (examples/traces/stress-month.jsonl.gz); offers are the
bundled catalog, repeated over extra synthetic zones until there are M. Prints one JSON line.

``now`` is the trace's last submission. By default each job keeps its own submission
time, so a month-old job's relative deadline has long passed and most are refused.
``--fresh`` submits every job at ``now`` (deadlines count from now): a queue of jobs
that just arrived, where few are refused.

Besides wall ``seconds``: ``cpu_seconds`` (this process only: the figure to trust on a
busy machine) and ``gc_seconds``, the part of the wall time the garbage collector took.
``plan()`` pauses the cyclic collector for the call (``planner.plan.collector_paused``), so
what is left is the one young collection its return sets off, which looks at the decisions
once; it happens inside the timed call and is counted.

Garbage collection is otherwise left as any process has it: default thresholds, nothing frozen,
the trace loaded just before planning (as a daemon tick builds its queue just before
planning). ``--gc-freeze`` is an experiment, off by default: it calls ``gc.freeze()`` on
what is loaded before planning, what a daemon or simulator could do once after start-up.
Neither does today (``scheduler/app/daemon.py``, ``scheduler/simulation/simulate.py``), so a figure
measured with it is not what ``gpusched`` gets, and BENCHMARKS.md says so where it quotes one.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path

from providers.catalog import load_catalog
from scheduler.planner.inputs import PlanJob, PlannerPolicy
from scheduler.planner.plan import plan
from scheduler.simulation.trace_file import load_trace

ROOT = Path(__file__).resolve().parent.parent


def offers(n: int) -> list:
    base = load_catalog()
    out, k = [], 0
    while len(out) < n:
        for o in base:
            if len(out) >= n:
                break
            out.append(o if k == 0 else o.model_copy(update={"zone": f"{o.zone}-x{k}"}))
        k += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--offers", type=int, default=2_000)
    ap.add_argument("--fresh", action="store_true", help="every job submitted at now (deadlines from now)")
    ap.add_argument("--gc-freeze", action="store_true",
                    help="experiment: gc.freeze() what is loaded before planning (the daemon does not do this)")
    args = ap.parse_args()
    entries = load_trace(ROOT / "examples" / "traces" / "stress-month.jsonl.gz")[: args.jobs]
    now = max(e.at for e in entries)
    jobs = [PlanJob(id=f"j{i}", spec=e.job, submitted_at=at, deadline_at=e.job.deadline_at(at))
            for i, e in enumerate(entries) for at in (now if args.fresh else e.at,)]
    market = offers(args.offers)
    if args.gc_freeze:
        gc.freeze()
    gc_clock = _GcClock()
    gc.callbacks.append(gc_clock)
    t0, c0 = time.perf_counter(), time.process_time()
    decisions = plan(jobs, market, [], now, PlannerPolicy())
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    gc.callbacks.remove(gc_clock)
    print(json.dumps({"benchmark": "planner", "jobs": len(jobs), "offers": len(market), "fresh": args.fresh,
                      "gc_freeze": args.gc_freeze,
                      "seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
                      "gc_seconds": round(gc_clock.seconds, 2), "per_job_ms": round(1000 * seconds / len(jobs), 3),
                      "actions": {a: sum(d.action == a for d in decisions) for a in ("launch", "wait", "refuse")}}))


class _GcClock:
    """A gc callback adding up the time collections take."""

    def __init__(self) -> None:
        self.seconds, self._start = 0.0, 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start


if __name__ == "__main__":
    main()
