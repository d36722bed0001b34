"""One job of a trace, alone, under many seeds: was its bill in a month the decision or the draw? (issue 17, item 1)

Usage:  .venv/bin/python benchmarks/one_job_seeds.py TRACE JOB_NAME [--seeds 20] [--policy gpusched]

A month's gap to its bound is one draw of each job's reclaims and true speed. This simulates the job named
``JOB_NAME`` of ``TRACE`` on its own, in the trace's market, once per seed (0 .. N-1: the sandbox's reclaims and
the job's true speed both change with it), and prints its mean, median and range of cost, its deadline misses and
its mean on-demand cost, then one JSON line. Run it under ours and ``--policy on-demand`` to see whether a job that
cost ours more than its share in a month is dear on average or was unlucky once. No other job competes for the
machines here: a job's average alone, not its month.
"""

from __future__ import annotations

import argparse
import json
import statistics
from datetime import timedelta
from pathlib import Path

from scheduler.logs import configure_logging
from scheduler.simulation.compare import load_month, sim_settings
from scheduler.simulation.simulate import POLICIES, simulate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", type=Path)
    ap.add_argument("job")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--policy", default="gpusched", choices=POLICIES)
    args = ap.parse_args()
    configure_logging("console", "warning")
    month = load_month(args.trace)
    subs = [s for s in month.submissions if s.job.name == args.job]
    if not subs:
        raise SystemExit(f"{args.trace} has no job named {args.job!r}")
    costs, on_demand, misses = [], [], 0
    for seed in range(args.seeds):
        summary = simulate(subs[:1], policy=args.policy, seed=seed, settings=sim_settings(seed, 10.0),
                           market=month.market, horizon=timedelta(days=30))
        costs.append(float(summary.total_cost))
        on_demand.append(float(summary.cost_by_capacity.get("on-demand", 0)))
        misses += summary.deadline_misses
    out = {"benchmark": "one_job_seeds", "trace": args.trace.name, "job": args.job, "policy": args.policy,
           "seeds": args.seeds, "currency": summary.currency, "mean": round(statistics.mean(costs), 2),
           "median": round(statistics.median(costs), 2), "min": min(costs), "max": max(costs),
           "deadline_misses": misses, "mean_on_demand": round(statistics.mean(on_demand), 2)}
    print(f"{args.job} under {args.policy}, {args.seeds} seeds: mean {out['mean']:.2f} {out['currency']}, median "
          f"{out['median']:.2f}, {out['min']:.2f}-{out['max']:.2f}; {misses} deadline misses; mean on-demand "
          f"{out['mean_on_demand']:.2f}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
