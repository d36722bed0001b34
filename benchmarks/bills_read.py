"""How long reading a month's bills takes: each cloud's reader against its emulated bill, over real HTTP.

    .venv/bin/python benchmarks/bills_read.py --instances 200 --hours 24

Each of the three sandbox clouds runs ``--instances`` machines for ``--hours`` hours in November 2026;
the AWS bill is served by moto's Cost Explorer, Alibaba's by the BSS emulator, Tencent's by the Billing
emulator (one row per instance and hour, 100 a page: the most pages). It prints, per cloud, the lines
read and the wall time of ``read``, then the time ``reconcile`` takes to match them all against
a ledger of the same instances. Needs the cloud and test extras (moto).
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from random import Random

from providers.base import TAG_INSTANCE, TAG_MANAGED
from providers.catalog import filter_offers, load_catalog
from providers.sandbox.cloud import SandboxCloud
from scheduler.accounting.reconcile_bills import LedgerInstance, reconcile
from scheduler.clock import SimClock
from scheduler.models import Capacity
from scheduler.money import FxRates, Money
from scheduler.simulation.emulated_bills import emulated_bills

START = datetime(2026, 11, 2, tzinfo=UTC)
MONTH = "2026-11"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", type=int, default=200)
    ap.add_argument("--hours", type=float, default=24)
    args = ap.parse_args()
    clock = SimClock(START)
    clouds = {}
    for n, name in enumerate(("aws", "alibaba", "tencent")):
        offers = [o for o in filter_offers(load_catalog(), providers=[name]) if o.on_demand is not None]
        cloud = SandboxCloud(clock, offers, seed=n, interruption_scale=0)
        rng = Random(n)
        for i in range(args.instances):
            o = rng.choice(offers)
            cloud.launch(region=o.region, zone=o.zone, instance_type=o.instance_type, capacity=Capacity.on_demand,
                         client_token=f"{name}-{i}", tags={TAG_MANAGED: "bench", TAG_INSTANCE: f"gi-{name}-{i}"})
        clouds[name] = cloud
    clock.advance(timedelta(hours=args.hours))
    for cloud in clouds.values():
        for inst in cloud.all_instances():
            cloud.terminate(inst.instance_id)
    clock.advance(timedelta(minutes=1))
    bills = emulated_bills(clouds, clock, MONTH, cluster="bench")
    lines = {}
    out: dict[str, object] = {"instances_per_cloud": args.instances, "hours": args.hours}
    try:
        for name, reader in bills.readers.items():
            t0 = time.perf_counter()
            lines[name] = reader.read(MONTH)
            out[name] = {"lines": len(lines[name]), "read_seconds": round(time.perf_counter() - t0, 3)}
    finally:
        bills.close()
    ledger = [LedgerInstance(instance=line.gpusched_instance or line.key, cloud=name, cloud_id=line.instance_id,
                             team="bench", amount=Money(amount=line.amount.amount * Decimal("0.999"),
                                                        currency=line.amount.currency))
              for name, read in lines.items() for line in read
              if line.cluster == "bench" and line.key != bills.planted.get(name)]
    t0 = time.perf_counter()
    rec = reconcile(MONTH, ledger, lines, cluster="bench", currency="CNY",
                    fx=FxRates(base="CNY", rates={"USD": Decimal("7.2")}), as_of=clock.now())
    out["reconcile_seconds"] = round(time.perf_counter() - t0, 3)
    out["matched"] = {c.cloud: len(c.matched) for c in rec.clouds}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
