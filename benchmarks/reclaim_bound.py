"""How much of a month's gap to its lower bound spot reclaims alone explain (issue 17, item 1).

Usage:  .venv/bin/python benchmarks/reclaim_bound.py TRACE [TRACE ...] [--seed 11]

For each trace: the lower bound ``gpusched simulate`` reports (at the estimates: uninterrupted hours), and the same
bound with every spot option priced at the hours its expected reclaims take at the month's rates (``lower_bound(...,
reclaims=True)``, ``lower_bound_options.expected_spot_hours``): each epoch, shard or start-over run lost whole when
reclaimed in progress, and set up again on a fresh machine; boots left out. The second is not a lower bound on one
run (a run that happens not to be reclaimed pays less), but on what any policy pays on average: a bill near it has
little left to save by choosing better, only by luck. The third asks every job to be on time on average as well
(``on_time=True``): a job whose cheap spot run takes longer through its reclaims than its deadline allows pays for
faster hours; the least a schedule that is always on time pays on average. Prints a table, then one JSON line per
trace. Takes seconds a trace (three LPs); no simulation.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from scheduler.simulation.compare import load_month, sim_offers, sim_settings
from scheduler.simulation.lower_bound import lower_bound


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--seed", type=int, default=11, help="the simulation seed (settings only: no draw is used)")
    args = ap.parse_args()
    settings = sim_settings(args.seed, 10.0)
    rows = []
    for trace in args.traces:
        month = load_month(trace)
        offers = month.market.scaled(sim_offers(settings))
        kw = {"currency": settings.report_currency, "fx": settings.fx, "reserved": settings.reserved}
        plain = lower_bound(month.entries, offers, **kw).total.quantize().amount
        expected = lower_bound(month.entries, offers, reclaims=True, **kw).total.quantize().amount
        on_time = lower_bound(month.entries, offers, reclaims=True, on_time=True, **kw).total.quantize().amount
        rows.append({"benchmark": "reclaim_bound", "trace": trace.name, "currency": settings.report_currency,
                     "bound": str(plain), "bound_with_expected_reclaims": str(expected),
                     "ratio": round(float(expected / plain), 4), "on_time_on_average": str(on_time),
                     "on_time_ratio": round(float(on_time / plain), 4)})
    print(f"{'trace':<28} {'bound':>12} {'with reclaims':>14} {'ratio':>7} {'and on time':>12} {'ratio':>7}")
    for r in rows:
        print(f"{r['trace']:<28} {r['bound']:>12} {r['bound_with_expected_reclaims']:>14} {r['ratio']:>7.3f} "
              f"{r['on_time_on_average']:>12} {r['on_time_ratio']:>7.3f}")
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
