"""Planner time for N queued jobs against M offers (issue 4 target: 10,000 x 2,000 in under 1 s, one core).

Usage:  .venv/bin/python benchmarks/planner_speed.py [--jobs 10000] [--offers 2000]

Jobs come from the stress trace (examples/traces/stress-month.jsonl.gz); offers are the
bundled catalog, repeated over extra synthetic zones until there are M. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from scheduler.catalog import load_catalog
from scheduler.planner import PlanJob, PlannerPolicy, plan
from scheduler.traces import load_trace

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
    args = ap.parse_args()
    entries = load_trace(ROOT / "examples" / "traces" / "stress-month.jsonl.gz")[: args.jobs]
    now = max(e.at for e in entries)
    jobs = [PlanJob(id=f"j{i}", spec=e.job, submitted_at=e.at, deadline_at=e.job.deadline_at(e.at))
            for i, e in enumerate(entries)]
    market = offers(args.offers)
    t0 = time.perf_counter()
    decisions = plan(jobs, market, [], now, PlannerPolicy())
    seconds = time.perf_counter() - t0
    print(json.dumps({"benchmark": "planner", "jobs": len(jobs), "offers": len(market),
                      "seconds": round(seconds, 2), "per_job_ms": round(1000 * seconds / len(jobs), 3),
                      "actions": {a: sum(d.action == a for d in decisions) for a in ("launch", "wait", "refuse")}}))


if __name__ == "__main__":
    main()
