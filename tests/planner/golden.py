"""Large seeded planner workloads and a digest of their decisions, to hold the planner's choices still
while its speed changes (``test_plan_golden``).

The workloads are the speed benchmark's (``benchmarks/planner_speed.py``: the stress trace's jobs
against the bundled catalog repeated over extra zones), plus one with what the benchmark leaves out:
warm and reserved fleet slots, avoided offers, preempted and resumed jobs, money already spent, team
budgets, measured training rates and a baseline strategy. The digest is SHA-256 over every decision's
``model_dump_json``, one a line, in ``plan``'s order; ``chunks`` are the same per 500 decisions, so a
failure says where the first difference is.

The fixture (``data/plan_digests.json``) was written by the planner before the issue-17 speed-up, and
rewritten once since, when measured rates became GPU-bound and each machine's data loader scales them
(2026-12-07: the "mixed" workloads' choices moved, their action counts did not); rewrite it only for a
change that means to change decisions:
``.venv/bin/python -m tests.planner.golden --write`` (prints the digests).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

from providers.catalog import load_catalog
from scheduler.models import Capacity, Offer
from scheduler.money import Money
from scheduler.planner.inputs import FleetSlot, PlanJob, PlannerPolicy, TeamBudget
from scheduler.planner.plan import Decision, plan
from scheduler.simulation.trace_file import TraceEntry, load_trace

ROOT = Path(__file__).resolve().parents[2]
STRESS = ROOT / "examples" / "traces" / "stress-month.jsonl.gz"
FIXTURE = Path(__file__).resolve().parent / "data" / "plan_digests.json"
CHUNK = 500

# name -> (jobs, offers): the benchmark's two workloads over the whole trace, and the seeded mixed one.
WORKLOADS = {"default": (10_000, 2_000), "fresh": (10_000, 2_000), "mixed": (3_000, 1_200)}


FIXTURE_CLOUDS = ("aws", "alibaba", "tencent")


def market(n: int) -> list[Offer]:
    """The bundled catalog repeated over extra zones until there are ``n`` offers (as the benchmark's)."""
    # The three clouds the fixture was written with: a cloud added to the catalog later is new offers,
    # not a change of the planner's decisions.
    base = [o for o in load_catalog() if o.provider in FIXTURE_CLOUDS]
    out: list[Offer] = []
    k = 0
    while len(out) < n:
        for o in base:
            if len(out) >= n:
                break
            out.append(o if k == 0 else o.model_copy(update={"zone": f"{o.zone}-x{k}"}))
        k += 1
    return out


def workload(name: str, entries: Sequence[TraceEntry]) -> tuple[list[PlanJob], list[Offer], list[FleetSlot], datetime,
                                                                  PlannerPolicy, dict]:
    """The jobs, offers, fleet, now, policy and keyword arguments of one named workload."""
    n_jobs, n_offers = WORKLOADS[name]
    chosen = list(entries[:n_jobs])
    now = max(e.at for e in chosen)
    offers = market(n_offers)
    if name in ("default", "fresh"):
        jobs = [PlanJob(id=f"j{i}", spec=e.job, submitted_at=at, deadline_at=e.job.deadline_at(at))
                for i, e in enumerate(chosen) for at in (now if name == "fresh" else e.at,)]
        return jobs, offers, [], now, PlannerPolicy(), {}
    rng = random.Random(17)
    chosen = rng.sample(list(entries), n_jobs)
    avoid_pool = [f"{o.key}|{c}" for o in rng.sample(offers, 60) for c in ("spot", "on-demand")]
    jobs = []
    for i, e in enumerate(chosen):
        at = now - timedelta(hours=rng.choice((0, 0, 1, 3, 12)))
        epochs = e.job.train.epochs if e.job.train is not None else 0
        preempted = rng.random() < 0.2
        jobs.append(PlanJob(
            id=f"m{i}", spec=e.job, submitted_at=at, deadline_at=e.job.deadline_at(at),
            epochs_done=rng.randrange(epochs) if preempted and epochs else 0,
            preemptions=rng.randrange(1, 12) if preempted else 0,
            restarts=rng.randrange(0, 4) if preempted and rng.random() < 0.5 else None,
            avoid=frozenset(rng.sample(avoid_pool, 8)) if rng.random() < 0.15 else frozenset(),
            spent=Money.parse(f"{rng.uniform(1, 400):.2f} {rng.choice(('CNY', 'USD'))}") if preempted else None,
        ))
    fleet = []
    for k, o in enumerate(rng.sample(offers, 40)):
        cap = rng.choice([c for c in (Capacity.spot, Capacity.on_demand) if o.price(c) is not None])
        fleet.append(FleetSlot(kind="warm", instance_id=f"inst-{k}", offer=o, capacity=cap))
    for o in rng.sample(offers, 6):
        fleet += [FleetSlot(kind="reserved", instance_id=None, offer=o, capacity=Capacity.reserved,
                            until=now + timedelta(hours=rng.choice((2, 30, 24 * 90))))] * rng.randint(1, 3)
    teams = sorted({j.spec.team for j in jobs})
    budgets = {t: TeamBudget(monthly=Money.parse("60000 CNY"), left=Money.parse(f"{rng.randrange(0, 9000)} CNY"))
               for t in teams[::2]}
    measured = {(m, g, s): rng.uniform(20, 900) for m in ("yolov9-t", "yolov9-s", "yolov9-c", "gelan-c")
                for g in ("T4", "A10G", "A10", "L4", "V100") for s in (640,) if rng.random() < 0.5}
    policy = PlannerPolicy(max_preemptions_before_on_demand=9)
    return jobs, offers, fleet, now, policy, {"measured": measured, "team_budgets": budgets}


def digest(decisions: Sequence[Decision]) -> dict:
    """What the fixture keeps of a plan: counts, the whole digest, and one per ``CHUNK`` decisions."""
    lines = [d.model_dump_json() for d in decisions]
    chunks = ["\n".join(lines[i:i + CHUNK]) for i in range(0, len(lines), CHUNK)]
    return {
        "decisions": len(lines),
        "actions": {a: sum(d.action == a for d in decisions) for a in ("launch", "reuse", "wait", "refuse")},
        "sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest(),
        "chunks": [hashlib.sha256(c.encode()).hexdigest()[:16] for c in chunks],
    }


def plan_of(name: str, entries: Sequence[TraceEntry], *, strategy: str | None = None) -> list[Decision]:
    jobs, offers, fleet, now, policy, kw = workload(name, entries)
    if strategy is not None:
        policy = policy.model_copy(update={"strategy": strategy})
    return plan(jobs, offers, fleet, now, policy, **kw)


# (workload, strategy): the mixed workload also under a baseline, whose spot rule differs
CASES = (("default", None), ("fresh", None), ("mixed", None), ("mixed", "spot-greedy"))


def case_name(name: str, strategy: str | None) -> str:
    return name if strategy is None else f"{name}/{strategy}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true",
                    help="write the fixture (only for a change meant to change decisions)")
    args = ap.parse_args()
    entries = load_trace(STRESS)
    out = {case_name(n, s): digest(plan_of(n, entries, strategy=s)) for n, s in CASES}
    text = json.dumps(out, indent=1, sort_keys=True) + "\n"
    if args.write:
        FIXTURE.parent.mkdir(exist_ok=True)
        FIXTURE.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
