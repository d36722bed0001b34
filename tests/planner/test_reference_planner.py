"""The real planner against the slow reference planner (``reference_planner``), on seeded random scenarios.

Each scenario is a small market: 1-6 queued jobs (train / infer / val / export, GPU, provider and region
filters, capacities, deadlines tight and loose and past, budgets, money already spent, preemptions, avoided
offers), 0-20 offers (both currencies, sold-out stock, spot reclaim rates, unknown GPUs, the same machine in
several zones at one price), 0-8 fleet slots (warm machines on each capacity, reserved units ending soon or
late), team budgets, measured rates and the baseline strategies; in some, a deadline, budget or team budget
sits exactly on an option's finish or cost (``on_the_edge``).

For every job, ``plan`` must take the reference's action and choice (provider, region, zone, type, GPU,
capacity, source, instance id, hours, cost, price, finish, interruptions, batch), keep the same runners-up,
and ``options_for`` must list the reference's candidates in the reference's order with the same
feasibility, numbers and blockers. Every fourth scenario, its jobs, offers and fleet shuffled, must plan
the same.

Cost: the normal suite runs ``DEFAULT_SCENARIOS`` = 6,000 scenarios, 2-3 ms of CPU each (13-20 s for
the file on the machine this was written on, well under a minute). Set GPUSCHED_PLANNER_SCENARIOS to run
more (30,000 took 58 s here), GPUSCHED_PLANNER_SEED to run one seed alone. A failure prints the seed, the
scenario and a readable diff, with the reference's ranking of the job.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from scheduler.errors import UserError
from scheduler.gpus import GPUS
from scheduler.jobs.perf import figures
from scheduler.models import Capacity, JobSpec, Offer, Price, Stock
from scheduler.money import FxRates, Money
from scheduler.planner.inputs import FleetSlot, PlanJob, PlannerPolicy, TeamBudget
from scheduler.planner.plan import Decision, Option, options_for, plan
from tests.planner.reference_planner import RefDecision, RefOption, reference_options, reference_plan

DEFAULT_SCENARIOS = 6_000  # 13-20 s of CPU; see the module docstring
SCENARIOS = int(os.environ.get("GPUSCHED_PLANNER_SCENARIOS", DEFAULT_SCENARIOS))
ONE_SEED = os.environ.get("GPUSCHED_PLANNER_SEED")
CHUNKS = 24  # test cases the scenarios are split into (a failure names its chunk's seeds)
NOW = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)

# --- the market ----------------------------------------------------------------------------------

# provider -> regions, and the currency its prices usually come in
CLOUDS = {
    "aws": (("us-east-1", "us-west-2"), "USD"),
    "alibaba": (("cn-hangzhou", "cn-beijing"), "CNY"),
    "tencent": (("ap-guangzhou",), "CNY"),
}
KNOWN_GPUS = ("T4", "A10G", "L4", "A10", "L20", "V100", "A100-40G", "A100-80G", "H100")
PRICES = ("0.00", "0.20", "0.40", "0.4", "0.50", "1.00", "1.21", "2.50", "3.00", "8.00", "12.5", "28.00")
RATES = (0.0, 0.0, 0.02, 0.05, 0.05, 0.2, 1.0, 3.0)
TEAMS = ("vision", "lidar", "ops")


def money_price(rng: random.Random, currency: str) -> Price:
    amount = rng.choice(PRICES) if rng.random() < 0.7 else f"{rng.uniform(0.05, 30):.3f}"
    return Price(per_hour=Money.parse(f"{amount} {currency}"), source="test", as_of=date(2026, 11, 1))


def random_offer(rng: random.Random, n: int) -> Offer:
    provider = rng.choice(tuple(CLOUDS))
    regions, currency = CLOUDS[provider]
    if rng.random() < 0.15:
        currency = "CNY" if currency == "USD" else "USD"
    region = rng.choice(regions)
    gpu = rng.choice(KNOWN_GPUS) if rng.random() < 0.95 else "MI300X"  # a GPU the model does not know
    gpu_count = rng.choice((1, 1, 1, 1, 1, 1, 2, 4, 8))
    stock = lambda: rng.choice((Stock.available, Stock.available, Stock.low, Stock.unknown, Stock.sold_out))  # noqa: E731
    return Offer(
        provider=provider, region=region, zone=f"{region}{rng.choice('abc')}",
        instance_type=f"{gpu.lower()}x{gpu_count}.{rng.choice(('xlarge', '2xlarge', '4xlarge'))}-{n}",
        gpu=gpu, gpu_count=gpu_count, gpu_mem_gib=GPUS[gpu].mem_gib if gpu in GPUS else 192.0,
        vcpus=rng.choice((4, 8, 16, 32, 48)) * gpu_count // max(1, gpu_count // 2), mem_gib=64,
        on_demand=money_price(rng, currency) if rng.random() < 0.85 else None,
        spot=money_price(rng, currency) if rng.random() < 0.75 else None,
        on_demand_stock=stock(), spot_stock=stock(), spot_interruptions_per_hour=rng.choice(RATES),
    )


def twin(rng: random.Random, offer: Offer) -> Offer:
    """The same offer in another zone (or another type), often at the same price: ties to break."""
    zone = f"{offer.region}{rng.choice('abcd')}"
    kind = offer.instance_type + ("-b" if rng.random() < 0.5 else "")
    changes: dict = {"zone": zone, "instance_type": kind}
    if rng.random() < 0.3:
        changes["spot_stock"] = Stock.sold_out
    if rng.random() < 0.3:
        changes["spot_interruptions_per_hour"] = rng.choice(RATES)
    return offer.model_copy(update=changes)


def random_fleet(rng: random.Random, offers: list[Offer]) -> list[FleetSlot]:
    fleet: list[FleetSlot] = []
    for i in range(rng.choice((0, 0, 1, 2, 3, 4))):
        base = rng.choice(offers) if offers and rng.random() < 0.8 else random_offer(rng, 100 + i)
        if rng.random() < 0.5:
            until = NOW + timedelta(hours=rng.choice((0.2, 1, 3, 24 * 30))) if rng.random() < 0.95 else None
            fleet.append(FleetSlot(kind="reserved", instance_id=None, offer=base, capacity=Capacity.reserved,
                                   until=until))
            if rng.random() < 0.3:  # another unit of the same commitment, ending at another time
                fleet.append(FleetSlot(kind="reserved", instance_id=None, offer=base, capacity=Capacity.reserved,
                                       until=NOW + timedelta(hours=rng.choice((0.2, 3, 24 * 30)))))
        else:
            capacity = rng.choice((Capacity.on_demand, Capacity.on_demand, Capacity.spot, Capacity.reserved))
            fleet.append(FleetSlot(kind="warm", instance_id=f"i-{i:03d}", offer=base, capacity=capacity))
    return fleet


# --- the jobs ------------------------------------------------------------------------------------


def random_spec(rng: random.Random, offers: list[Offer], i: int) -> JobSpec:
    kind = rng.choice(("train", "train", "train", "infer", "infer", "val", "export"))
    model = rng.choice(("yolov9-t", "yolov9-s", "yolov9-m", "yolov9-c", "yolov9-e", "gelan-c", "gelan-s"))
    img_size = rng.choice((320, 640, 640, 640, 1280, 2048))
    images = rng.choice((500, 5_000, 20_000, 50_000, 120_000, 400_000))
    gpu_count = 1 if not offers or rng.random() < 0.7 else rng.choice(offers).gpu_count
    nodes = rng.choice((1,) * 8 + (2, 3))
    raw: dict = {"name": f"job-{i}", "team": rng.choice(TEAMS), "kind": kind, "model": model,
                 "resources": {"gpu_count": gpu_count, "nodes": nodes}}
    if kind == "train":
        raw["data"] = {"uri": "s3://bucket/data", "train_images": images, "val_images": images // 10}
        if rng.random() < 0.03:
            raw["data"].pop("train_images")  # the model cannot size it: every option is an "estimate" blocker
        raw["train"] = {"epochs": rng.choice((1, 3, 10, 30, 100)), "img_size": img_size,
                        "batch": rng.choice((16, 64, 128))}
    elif kind == "infer":
        raw["infer"] = {"source": "s3://bucket/images", "images": images, "weights": "s3://bucket/best.pt",
                        "img_size": img_size}
    elif kind == "val":
        raw["data"] = {"uri": "s3://bucket/data", "val_images": images}
        raw["val"] = {"weights": "s3://bucket/best.pt", "img_size": img_size}
    else:
        formats = rng.sample(("onnx", "engine", "torchscript", "tflite", "openvino"), rng.randint(1, 3))
        raw["export"] = {"weights": "s3://bucket/best.pt", "formats": formats, "img_size": img_size}
    if rng.random() < 0.3:
        pool = sorted({o.gpu for o in offers} | {"T4", "H100"})
        raw["resources"]["gpus"] = rng.sample(pool, rng.randint(1, min(3, len(pool))))
    where: dict = {}
    if rng.random() < 0.2:
        where["providers"] = rng.sample(tuple(CLOUDS), rng.randint(1, 2))
    if rng.random() < 0.15:
        where["regions"] = rng.sample(("us-east-1", "us-west-2", "cn-hangzhou", "cn-beijing", "ap-guangzhou"),
                                      rng.randint(1, 3))
    raw["where"] = where
    policy: dict = {
        "capacity": rng.choice(("auto",) * 6 + ("spot", "on-demand", "reserved")),
        "priority": rng.choice((10, 50, 50, 50, 80)),
        "max_restarts": rng.choice((0, 1, 2, 5, 10, 10)),
    }
    if rng.random() < 0.35:
        amount = f"{10 ** rng.uniform(-1, 3.5) if rng.random() < 0.8 else rng.choice((1, 20, 100, 800)):.2f}"
        policy["budget"] = f"{amount} {rng.choice(('CNY', 'USD'))}"
    raw["policy"] = policy
    return JobSpec.model_validate(raw)


def random_job(rng: random.Random, offers: list[Offer], i: int) -> PlanJob:
    spec = random_spec(rng, offers, i)
    roll = rng.random()
    if roll < 0.3:
        deadline = None
    elif roll < 0.35:
        deadline = NOW - timedelta(hours=rng.choice((0.5, 5)))  # already past
    elif roll < 0.55:
        deadline = NOW + timedelta(hours=10 ** rng.uniform(-1.3, 1.5))  # 3 min to 30 h
    elif roll < 0.9:
        # around what the job takes on an A10G: just met, just missed, only on a faster GPU, only off spot
        hours = estimate_hours(spec)
        deadline = None if hours is None else NOW + timedelta(hours=hours * 10 ** rng.uniform(-0.3, 0.6))
    else:
        deadline = NOW + timedelta(hours=rng.choice((24, 48, 24 * 14)))
    avoid = frozenset()
    if offers and rng.random() < 0.2:
        picked = rng.sample(offers, rng.randint(1, min(3, len(offers))))
        avoid = frozenset(f"{o.key}|{rng.choice(('spot', 'on-demand'))}" for o in picked)
    epochs_done = 0
    if spec.train is not None and rng.random() < 0.2:
        epochs_done = rng.randint(0, spec.train.epochs)
    elif spec.infer is not None and rng.random() < 0.2:
        epochs_done = rng.randint(0, 5)  # shards done
    spent = None
    if rng.random() < 0.2:
        spent = Money.parse(f"{rng.uniform(0, 200):.2f} {rng.choice(('CNY', 'USD'))}")
    return PlanJob(
        id=f"job-{i:02d}{rng.choice('xyz')}", spec=spec,
        submitted_at=NOW - timedelta(hours=rng.choice((0, 0, 1, 2.5))), deadline_at=deadline,
        epochs_done=epochs_done, preemptions=rng.choice((0, 0, 0, 1, 2, 4, 9)), avoid=avoid, spent=spent,
        stint=rng.random() < 0.3,  # read by the planner for training jobs with a deadline only
    )


def estimate_hours(spec: JobSpec) -> float | None:
    try:
        est = figures(spec, "A10G", spec.resources.gpu_count, 8, nodes=spec.resources.nodes)
    except UserError:
        return None
    return est.hours if est.fits else None


# --- a whole scenario -----------------------------------------------------------------------------


@dataclass
class Scenario:
    seed: int
    jobs: list[PlanJob]
    offers: list[Offer]
    fleet: list[FleetSlot]
    policy: PlannerPolicy
    measured: dict | None
    team_budgets: dict[str, TeamBudget] | None
    alternatives: int

    def describe(self) -> str:
        lines = [f"seed {self.seed}: policy {self.policy.model_dump(mode='json')}",
                 f"  measured {self.measured}, team budgets "
                 f"{ {t: (str(b.monthly), str(b.left)) for t, b in (self.team_budgets or {}).items()} }"]
        for o in self.offers:
            lines.append(f"  offer {o.key} {o.gpu_count}x{o.gpu} {o.vcpus}vcpu od={_p(o.on_demand)}/"
                         f"{o.on_demand_stock.value} spot={_p(o.spot)}/{o.spot_stock.value} "
                         f"rate={o.spot_interruptions_per_hour}")
        for s in self.fleet:
            lines.append(f"  slot {s.kind} {s.instance_id} {s.offer.key} {s.capacity.value} until={s.until}")
        for j in self.jobs:
            p, r, w = j.spec.policy, j.spec.resources, j.spec.where
            lines.append(f"  job {j.id} {j.spec.kind.value} {j.spec.model} team={j.spec.team} prio={p.priority} "
                         f"cap={p.capacity} budget={p.budget} spent={j.spent} deadline={j.deadline_at} "
                         f"submitted={j.submitted_at} gpus={r.gpus} count={r.gpu_count} nodes={r.nodes} "
                         f"providers={w.providers} regions={w.regions} preempted={j.preemptions} "
                         f"max_restarts={p.max_restarts} done={j.epochs_done} avoid={sorted(j.avoid)}")
        return "\n".join(lines)


def _p(price: Price | None) -> str:
    return "-" if price is None else str(price.per_hour.amount) + price.per_hour.currency


def scenario(seed: int) -> Scenario:
    rng = random.Random(seed)
    offers: list[Offer] = []
    for n in range(rng.choice((0, 1, 3, 5, 8, 8, 10, 14, 20))):
        offers.append(twin(rng, rng.choice(offers)) if offers and rng.random() < 0.25 else random_offer(rng, n))
    if rng.random() < 0.9:  # mostly one offer per (provider, region, zone, type); else exact ties go by input order
        offers = list({o.key: o for o in offers}.values())
    fleet = random_fleet(rng, offers)
    fx = FxRates(base="CNY", rates={"USD": Decimal(rng.choice(("7.2", "6.9", "9.0")))})
    strategy = rng.choice(("gpusched",) * 17 + ("on-demand", "spot-greedy", "skypilot-like"))
    policy = PlannerPolicy(
        currency=rng.choice(("CNY", "CNY", "USD")), fx=fx, boot_hours=rng.choice((0.05, 0.05, 0.0, 0.2)),
        restart_hours=rng.choice((0.15, 0.15, 0.5)), deadline_safety=rng.choice((0.1, 0.1, 0.0, 0.3)),
        max_preemptions_before_on_demand=rng.choice((None, None, None, 0, 2)), strategy=strategy,
    )
    jobs = [random_job(rng, offers, i) for i in range(rng.choice((1, 1, 2, 3, 4, 6)))]
    measured = None
    if rng.random() < 0.1:
        measured = {(j.spec.model, gpu, (j.spec.train.img_size if j.spec.train else 640)): rng.uniform(5, 400)
                    for j in jobs for gpu in rng.sample(KNOWN_GPUS, 3)}
    team_budgets = None
    if rng.random() < 0.3:
        team_budgets = {}
        for team in rng.sample(TEAMS, rng.randint(1, 3)):
            cur = rng.choice(("CNY", "USD"))
            monthly = Decimal(rng.choice(("0.10", "5", "50", "1000")))
            left = (monthly * Decimal(rng.choice(("1", "0.5", "0.05", "0", "-0.1")))).quantize(Decimal("0.01"))
            team_budgets[team] = TeamBudget(monthly=Money(amount=monthly, currency=cur),
                                            left=Money(amount=left, currency=cur))
    if rng.random() < 0.3:
        jobs, team_budgets = on_the_edge(rng, jobs, offers, fleet, policy, measured, team_budgets)
    return Scenario(seed, jobs, offers, fleet, policy, measured, team_budgets, rng.choice((3, 3, 0, 1, 6)))


def on_the_edge(rng: random.Random, jobs: list[PlanJob], offers: list[Offer], fleet: list[FleetSlot],
                policy: PlannerPolicy, measured: dict | None,
                team_budgets: dict[str, TeamBudget] | None) -> tuple[list[PlanJob], dict[str, TeamBudget] | None]:
    """Move a job's deadline, budget or team budget exactly onto one of its options' numbers: a finish at
    the deadline less its safety margin (or a spot bad case at the deadline), a cost plus what was spent
    equal to the budget, a cost equal to what is left of the team's month. The reference only picks the
    numbers; both planners are then checked on them."""
    out = []
    for job in jobs:
        options = [o for o in reference_options(job, offers, fleet, NOW, policy, measured=measured)
                   if o.est_cost is not None and o.rank < 3]
        if not options or rng.random() < 0.4:
            out.append(job)
            continue
        o = rng.choice(options)
        assert o.est_cost is not None and o.finish_by is not None
        edge = rng.choice(("deadline", "deadline", "budget", "team"))
        if edge == "deadline":
            if o.way_out is not None:  # a spot stint's check: its way out stretched by the margin, or its finish
                deadline = max(NOW + (o.way_out - NOW) / (1 - policy.deadline_safety), o.finish_by)
            elif o.worst_finish is not None and rng.random() < 0.5:
                deadline = o.worst_finish
            elif policy.deadline_safety == 0:
                deadline = o.finish_by
            else:  # as near as the microseconds allow
                deadline = NOW + (o.finish_by - NOW) / (1 - policy.deadline_safety)
            job = job.model_copy(update={"deadline_at": deadline})
        elif edge == "budget":
            spent = job.spent if job.spent is None or job.spent.currency == policy.currency else None
            budget = o.est_cost if spent is None else o.est_cost + spent
            job = job.model_copy(update={"spent": spent, "spec": job.spec.model_copy(update={
                "policy": job.spec.policy.model_copy(update={"budget": budget})})})
        else:
            team_budgets = dict(team_budgets or {})
            team_budgets[job.spec.team] = TeamBudget(monthly=max(o.est_cost, Money.parse(f"1 {policy.currency}")),
                                                     left=o.est_cost)
        out.append(job)
    return out, team_budgets


# --- comparing ------------------------------------------------------------------------------------

BLOCKER_WORDS = {  # how Option.why names each blocker kind (rank.Scored.blockers)
    "stock": ("sold out",),
    "avoid": ("recently out of capacity",),
    "taken": ("held for higher-priority job",),
    "deadline": ("misses deadline", "safety margin"),
    "spot_risk": ("too risky on spot",),
    "reservation": ("reservation ends",),
    "budget": ("over budget",),
    "memory": ("GiB",),
    "estimate": ("unknown GPU", "needs data", "a val job", "an infer job", "an export job"),
}


def view(o: Option | RefOption) -> dict:
    """What is compared of an option, real or reference (they share these attribute names)."""
    assert o.est_cost is not None and o.price_per_hour is not None
    return {
        "where": (o.provider, o.region, o.zone, o.instance_type, o.gpu, o.gpu_count),
        "capacity": o.capacity.value, "source": o.source, "instance_id": o.instance_id,
        "est_hours": o.est_hours, "est_cost": (o.est_cost.amount, o.est_cost.currency),
        "price_per_hour": (o.price_per_hour.amount, o.price_per_hour.currency), "finish_by": o.finish_by,
        "expected_interruptions": o.expected_interruptions, "physical_batch": o.physical_batch,
        "feasible": o.feasible,
    }


def why_problems(real: Option, ref: RefOption) -> list[str]:
    """The real option's ``why`` must name each of the reference's blockers (and none when feasible)."""
    if ref.feasible:
        return [] if real.why.startswith(("feasible", "cheapest", "reserved")) else [f"why {real.why!r} of a "
                                                                                    "feasible option"]
    out = []
    for kind in ref.blockers:
        if not any(word in real.why for word in BLOCKER_WORDS[kind]):
            out.append(f"why {real.why!r} does not name the {kind!r} blocker")
    if ref.held_by is not None and ref.held_by not in real.why:
        out.append(f"why {real.why!r} does not name the holder {ref.held_by}")
    return out


def _diff(label: str, real: dict | None, ref: dict | None) -> list[str]:
    if real == ref:
        return []
    if real is None or ref is None:
        return [f"{label}: real {real} != reference {ref}"]
    return [f"{label}.{k}: real {real[k]!r} != reference {ref[k]!r}" for k in real if real[k] != ref.get(k)]


def compare_decisions(real: Sequence[Decision], ref: Sequence[RefDecision]) -> list[str]:
    out = []
    if [d.job_id for d in real] != [d.job_id for d in ref]:
        return [f"planning order: real {[d.job_id for d in real]} != reference {[d.job_id for d in ref]}"]
    for d, r in zip(real, ref, strict=True):
        problems = []
        if d.action != r.action:
            problems.append(f"action: real {d.action} != reference {r.action}")
        problems += _diff("choice", view(d.choice) if d.choice else None,
                          view(r.choice) if r.choice else None)
        real_alts = [view(o) for o in d.alternatives]
        ref_alts = [view(o) for o in r.alternatives]
        if real_alts != ref_alts:
            problems.append(f"alternatives: real {[_short(a) for a in real_alts]} != reference "
                            f"{[_short(a) for a in ref_alts]}")
            for i, (a, b) in enumerate(zip(real_alts, ref_alts)):
                problems += _diff(f"alternatives[{i}]", a, b)
        else:
            problems += [p for a, b in zip(d.alternatives, r.alternatives) for p in why_problems(a, b)]
        if r.team_blocked and not ("team " in d.reason and "monthly budget" in d.reason):
            problems.append(f"reason {d.reason!r} does not name the team budget")
        if problems:
            ranked = "\n".join(f"      {_short(view(o))} blockers={o.blockers}" for o in r.options[:8])
            out.append(f"  job {d.job_id}:\n    " + "\n    ".join(problems) + f"\n    reference ranking:\n{ranked}")
    return out


def compare_options(real: list[Option], ref: list[RefOption]) -> list[str]:
    real_v, ref_v = [view(o) for o in real], [view(o) for o in ref]
    if real_v != ref_v:
        out = [f"options_for order: real {[_short(o) for o in real_v]}\n    reference {[_short(o) for o in ref_v]}"]
        for i, (a, b) in enumerate(zip(real_v, ref_v)):
            out += _diff(f"options[{i}]", a, b)
        return out
    return [p for a, b in zip(real, ref, strict=True) for p in why_problems(a, b)]


def _short(v: dict) -> str:
    return (f"{v['where'][0]}/{v['where'][2]}/{v['where'][3]}/{v['capacity']}/{v['source']}"
            f"{'/' + v['instance_id'] if v['instance_id'] else ''} {v['est_cost'][0]} {'ok' if v['feasible'] else 'x'}")


def check(seed: int) -> list[str]:
    """Every disagreement between the real planner and the reference on scenario ``seed``."""
    s = scenario(seed)
    kw = {"measured": s.measured}
    real = plan(s.jobs, s.offers, s.fleet, NOW, s.policy, team_budgets=s.team_budgets, alternatives=s.alternatives,
                **kw)
    ref = reference_plan(s.jobs, s.offers, s.fleet, NOW, s.policy, team_budgets=s.team_budgets,
                         alternatives=s.alternatives, **kw)
    problems = compare_decisions(real, ref)
    # options_for, for one job (they are planned alone: no slot is held)
    job = random.Random(seed ^ 0x5EED).choice(s.jobs)
    problems += [f"  options_for({job.id}): {p}" for p in
                 compare_options(options_for(job, s.offers, s.fleet, NOW, s.policy, **kw),
                                 reference_options(job, s.offers, s.fleet, NOW, s.policy, **kw))]
    # the same inputs in another order plan the same (plan.py: "whatever order ... they come in"); not
    # with two offers of one key, a known exception (test_offers_sharing_a_key_plan_alike_in_any_order)
    if seed % 4 == 0 and len({o.key for o in s.offers}) == len(s.offers):
        rng = random.Random(seed)
        jobs, offers, fleet = s.jobs[:], s.offers[:], s.fleet[:]
        for items in (jobs, offers, fleet):
            rng.shuffle(items)
        again = plan(jobs, offers, fleet, NOW, s.policy, team_budgets=s.team_budgets, alternatives=s.alternatives,
                     **kw)
        if [d.model_dump(mode="json") for d in again] != [d.model_dump(mode="json") for d in real]:
            problems.append("  shuffled inputs plan differently")
    if problems:
        return [s.describe() + "\n" + "\n".join(problems)]
    return []


def _seeds(chunk: int) -> range:
    if ONE_SEED is not None:
        return range(int(ONE_SEED), int(ONE_SEED) + 1) if chunk == 0 else range(0)
    return range(chunk, SCENARIOS, CHUNKS)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_the_planner_agrees_with_the_reference(chunk: int) -> None:
    failures = [f for seed in _seeds(chunk) for f in check(seed)]
    assert not failures, f"{len(failures)} scenario(s) disagree; the first:\n" + "\n\n".join(failures[:3])


def test_the_scenarios_cover_every_outcome() -> None:
    """The scenarios stay worth comparing: every action, source, capacity and blocker kind turns up."""
    seen: set[str] = set()
    for seed in range(min(SCENARIOS, 600)):
        s = scenario(seed)
        for d in reference_plan(s.jobs, s.offers, s.fleet, NOW, s.policy, measured=s.measured,
                                team_budgets=s.team_budgets):
            seen.add(f"action {d.action}")
            if d.team_blocked:
                seen.add(f"team {d.action}")
            if d.choice is not None:
                seen |= {f"source {d.choice.source}", f"capacity {d.choice.capacity.value}"}
            seen |= {f"blocker {b}" for o in d.options for b in o.blockers}
            seen |= {"a stint moved" for o in d.options if o.moved}  # ranked (chosen: test_planner's table)
    expected = {"a stint moved"}
    expected |= {f"action {a}" for a in ("launch", "reuse", "wait", "refuse")} | {"team wait", "team refuse"}
    expected |= {f"source {s}" for s in ("new", "warm", "reserved")} | {f"capacity {c.value}" for c in Capacity}
    expected |= {f"blocker {b}" for b in BLOCKER_WORDS}
    assert expected <= seen, f"never seen: {sorted(expected - seen)}"


# --- a documented rule the planner breaks -------------------------------------------------------------


def _offer(spot_stock: Stock) -> Offer:
    return Offer(provider="aws", region="us-east-1", zone="us-east-1a", instance_type="g5.xlarge", gpu="A10G",
                 gpu_count=1, gpu_mem_gib=22.4, vcpus=8, mem_gib=32, on_demand=None,
                 spot=Price(per_hour=Money.parse("0.40 USD"), source="test", as_of=date(2026, 11, 1)),
                 spot_stock=spot_stock, spot_interruptions_per_hour=0.05)


def test_offers_sharing_a_key_plan_alike_in_any_order() -> None:
    """Two offers of one key (provider/region/zone/type) differing only in stock, both blocked by the deadline:
    stock breaks their tie before input order, so the runner-up shown is the same in any order (found by the
    scenarios here: seeds 695, 4211, 4866, 10763, 18471, shuffled, of 20,000)."""
    spec = JobSpec.model_validate({
        "name": "late", "team": "vision", "kind": "train", "model": "yolov9-s",
        "data": {"uri": "s3://bucket/data", "train_images": 20_000, "val_images": 2_000}, "train": {"epochs": 10},
    })
    job = PlanJob(id="late", spec=spec, submitted_at=NOW, deadline_at=NOW + timedelta(minutes=10))
    in_stock, sold_out = _offer(Stock.available), _offer(Stock.sold_out)
    policy = PlannerPolicy()
    [one] = plan([job], [in_stock, sold_out], [], NOW, policy)
    [other] = plan([job], [sold_out, in_stock], [], NOW, policy)
    assert one.action == other.action == "refuse"  # both miss the deadline whatever the stock
    assert one.model_dump(mode="json") == other.model_dump(mode="json")
