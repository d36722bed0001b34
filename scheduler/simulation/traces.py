"""The workload generator: a plausible month of YOLOv9 work for ``gpusched simulate`` (the file
format is ``trace_file``).

``generate_month`` makes a plausible month for a few teams, seeded and
repeatable: per team, weekly retrains with deadlines and budgets, each followed
by a validation and an export; nightly batch inference due by morning; ad-hoc
experiments in office hours. Each generated job can run on the bundled catalog
(its filters match offers, it fits memory, its deadline leaves the planner room
for a spot reclaim), and budgets are set from the catalog's prices, so the
trace exercises scheduling rather than refusals.

A ``Family`` changes the mix, not the machinery: ``standard`` is the month the planner was
tuned on (the same bytes as before families existed); the others add long multi-day
training (yolov9-e/-c at 640-960 px, 150-300 epochs, up to 48,000 images) with A100s among
the GPUs asked for, tight deadlines (12-72 h, "8h", "36h", some written tighter than the
work), and heavy nightly inference (50,000-400,000 images due in 10 h). ``FAMILIES`` lists
them; BENCHMARKS.md keeps the (family, seed) pairs held out from tuning.

Run ``python -m scheduler.simulation.traces --seed 1 --month 2026-11 --jobs 400 --out FILE``
to write one (``--teams``, ``--scale``, ``--family``, ``--reclaim-scale``: see ``main``). The jobs do
not depend on ``--reclaim-scale``: it only writes the market (``market.MarketSpec``) into the trace.
"""

from __future__ import annotations

import argparse
import calendar
import math
import random
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import ROUND_CEILING, Decimal
from typing import Any, Callable, Sequence

from providers.catalog import load_catalog
from scheduler.errors import UserError
from scheduler.jobs.jobfile import parse_job
from scheduler.limits import EARLIEST_TIME, LATEST_TIME
from scheduler.models import JobSpec, Kind, Offer
from scheduler.money import CURRENCIES, FxRates
from scheduler.planner.allowed import OfferFilter
from scheduler.simulation.lower_bound_options import PricedCatalog
from scheduler.simulation.market import MarketSpec, parse_reclaim_scale
from scheduler.simulation.trace_file import TraceEntry, dump_trace

__all__ = ["FAMILIES", "Family", "expected_jobs", "generate_month", "main", "scale_for_jobs"]


# --- the generator: who submits what --------------------------------------------------


@dataclass(frozen=True)
class _Team:
    name: str
    utc_offset_h: int
    currency: str
    providers: tuple[str, ...] | None
    regions: tuple[str, ...] | None
    scheme: str  # where the team keeps data: s3, oss or cos
    projects: tuple[str, ...]
    pipelines: tuple[str, ...]  # nightly inference feeds


# Teams the month is made of; past the eighth, profiles repeat with a number appended.
_TEAMS = (
    _Team("vision-qa", 8, "CNY", ("aws", "alibaba", "tencent"), None, "s3",
          ("safety-helmet", "ppe-vest", "forklift-zone", "fire-smoke", "spill-detect"),
          ("site-cams", "gate-cams", "dock-cams")),
    _Team("retail-ai", 8, "CNY", ("alibaba",), ("cn-hangzhou", "cn-shanghai"), "oss",
          ("shelf-audit", "price-tag", "checkout-watch", "planogram", "cart-count"),
          ("store-frames", "warehouse-frames", "kiosk-frames")),
    _Team("traffic-ops", 8, "CNY", ("tencent", "alibaba"), ("ap-guangzhou", "ap-shanghai", "cn-shanghai"), "cos",
          ("junction-cams", "plate-reader", "bus-lane", "parking-lot", "cyclist-count"),
          ("junction-nightly", "highway-nightly", "tunnel-nightly")),
    _Team("agri-vision", -8, "USD", ("aws",), ("us-west-2", "us-east-1"), "s3",
          ("weed-spot", "fruit-count", "cattle-track", "canopy-gaps"),
          ("field-drones", "orchard-cams")),
    _Team("port-logistics", 9, "USD", ("aws",), ("ap-northeast-1",), "s3",
          ("container-id", "crane-safety", "seal-check", "truck-queue"),
          ("quay-cams", "yard-cams")),
    _Team("drone-survey", 8, "CNY", ("alibaba", "tencent"), ("cn-wulanchabu", "cn-beijing", "ap-beijing"), "oss",
          ("solar-panel", "powerline", "roof-damage", "pipeline-leak"),
          ("survey-tiles", "inspection-tiles")),
    _Team("factory-defects", 8, "CNY", None, None, "s3",
          ("pcb-defect", "weld-seam", "fabric-flaw", "bottle-cap", "screw-count"),
          ("line1-frames", "line2-frames", "line3-frames")),
    _Team("city-safety", 8, "CNY", ("alibaba", "aws"), ("cn-shanghai", "cn-hangzhou", "ap-northeast-1"), "oss",
          ("crowd-density", "fallen-person", "smoke-plume", "illegal-parking"),
          ("plaza-cams", "metro-cams")),
)

_RETRAIN_MODELS = (("yolov9-s", 4), ("yolov9-c", 3), ("yolov9-m", 2), ("gelan-c", 1))
_EXPERIMENT_MODELS = (("yolov9-t", 2), ("yolov9-s", 4), ("gelan-s", 2), ("gelan-c", 2), ("yolov9-c", 1))
_INFER_MODELS = (("yolov9-s", 4), ("yolov9-c", 2), ("gelan-c", 1), ("yolov9-m", 1))
# GPUs a team would list for a model: big activations rule out 16 GB cards at useful batches.
_GPU_CHOICES = {
    "small": (("A10", "L4", "A10G", "T4"), ("T4", "A10"), ("A10", "A10G", "L4"), None),
    "large": (("A10", "A10G", "L4", "V100-32G", "A100-80G"), ("A100-80G", "A100-40G", "V100-32G"),
              ("A10", "A10G", "V100-32G"), None),
}
_INFER_GPUS = ("T4", "A10", "L4", "A10G")
_ENGINE_GPUS = ("T4", "A10", "L4", "A10G")  # what the site servers run; a TensorRT engine is per GPU model

MAX_JOBS = 100_000  # ten stress months; a month of a busy cluster is a few thousand
_TOO_MANY_FIX = "fewer teams or jobs (the stress month has 9,820 jobs of 12 teams)"

# The rate of each stream at scale 1, per team.
_PROJECTS_PER_TEAM = 2.0  # each retrains weekly, then validates and exports
_PIPELINES_PER_TEAM = 1.0  # each runs every night
_EXPERIMENTS_PER_WEEKDAY = 3.6
# Long multi-day training (families with a long_share): big models, big images, many epochs.
_LONG_MODELS = (("yolov9-e", 1), ("yolov9-c", 1))
_LONG_IMG_SIZES = (640, 768, 896, 960)
_LONG_EPOCHS = (150, 200, 250, 300)
_LONG_MAX_IMAGES = 48_000
_A100_LISTS = (("A100-80G", "V100-32G", "A10G"), ("A100-40G", "A100-80G", "L20"), ("A100-40G", "A10", "L4"))
# Tight deadlines people write: hours from submission.
_TIGHT_DEADLINES = ("8h", "12h", "24h", "36h", "48h", "72h")


# --- families of months ---------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """What sets one kind of month apart from another; every share is per job (or per project).

    Draws a family adds come from their own seeded stream, so ``standard`` makes the same
    trace as the generator did before families existed.
    """

    name: str
    about: str
    long_share: float = 0.0  # retrain projects that are long multi-day training
    a100_share: float = 0.0  # large-model GPU lists that put an A100 among three GPUs
    tight_share: float = 0.0  # retrains and experiments given a deadline of 12-72 h, "8h" or "36h"
    as_written_share: float = 0.0  # of those, kept as written even when the work cannot fit
    nightly_images: tuple[int, int] = (50_000, 300_000)
    nightly_deadline_h: int = 8
    pipelines_per_team: float = _PIPELINES_PER_TEAM


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("standard", "the month the planner was tuned on: weekly retrains, experiments, nightly inference"),
    Family("long-training", "half the retrain projects are multi-day yolov9-e/-c runs at 640-960 px, "
           "150-300 epochs, up to 48,000 images; many list an A100 among three GPUs",
           long_share=0.5, a100_share=0.5),
    Family("tight-deadlines", "a quarter of retrains and experiments are due in 12-72 h, 8 h or 36 h; "
           "one in five of those as written, even where the work cannot fit",
           tight_share=0.25, as_written_share=0.2),
    Family("heavy-inference", "nightly inference of 50,000-400,000 images due in 10 h, "
           "two feeds per team", nightly_images=(50_000, 400_000), nightly_deadline_h=10,
           pipelines_per_team=2.0),
    Family("mixed", "issue 17's unseen month: long training, A100 lists, tight deadlines and "
           "heavy nightly inference together", long_share=0.5, a100_share=0.5, tight_share=0.25,
           as_written_share=0.2, nightly_images=(50_000, 400_000), nightly_deadline_h=10),
)}
STANDARD = FAMILIES["standard"]


def family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise UserError(f"unknown trace family {name!r}", fix="one of: " + ", ".join(FAMILIES)) from None


def _team(i: int) -> _Team:
    base = _TEAMS[i % len(_TEAMS)]
    rounds = i // len(_TEAMS)
    return base if rounds == 0 else _replace_name(base, f"{base.name}-{rounds + 1}")


def _replace_name(team: _Team, name: str) -> _Team:
    return _Team(name, team.utc_offset_h, team.currency, team.providers, team.regions, team.scheme,
                 team.projects, team.pipelines)


def _counts(scale: float, fam: Family = STANDARD) -> tuple[int, int, float]:
    projects = max(1, round(_PROJECTS_PER_TEAM * scale))
    pipelines = max(1, round(fam.pipelines_per_team * scale))
    return projects, pipelines, _EXPERIMENTS_PER_WEEKDAY * scale


def _month_days(month: str) -> list[date]:
    try:
        first = datetime.strptime(month, "%Y-%m").date()
    except ValueError:
        raise UserError(f"month {month!r} is not YYYY-MM", fix="e.g. 2026-11") from None
    if not EARLIEST_TIME.year <= first.year < LATEST_TIME.year - 1:  # its deadlines run up to a year past it
        raise UserError(f"month {month!r} is outside the years {EARLIEST_TIME.year}-{LATEST_TIME.year - 2}, the "
                        "times gpusched computes with (a job's deadline a year on included)", fix="e.g. 2026-11")
    return [first.replace(day=d) for d in range(1, calendar.monthrange(first.year, first.month)[1] + 1)]


def expected_jobs(teams: int, scale: float, month: str = "2026-11", fam: Family = STANDARD) -> float:
    """About how many jobs ``generate_month`` makes (follow-ups past the month's end are dropped)."""
    days = _month_days(month)
    weekdays = sum(1 for d in days if d.weekday() < 5)
    projects, pipelines, experiments = _counts(scale, fam)
    per_team = pipelines * len(days) + projects * len(days) / 7 * 3 + weekdays * experiments
    return teams * per_team


def scale_for_jobs(jobs: int, teams: int, month: str = "2026-11", fam: Family = STANDARD) -> float:
    """The scale at which ``teams`` teams submit about ``jobs`` jobs in ``month``."""
    if jobs < 1:
        raise UserError("a trace needs at least one job", fix="e.g. --jobs 400")
    if jobs > MAX_JOBS:
        raise UserError(f"a trace holds at most {MAX_JOBS:,} jobs, not {jobs:,}", fix=_TOO_MANY_FIX)
    lo, hi = 0.01, 1000.0
    for _ in range(60):  # bisection: the count only grows with the scale
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_jobs(teams, mid, month, fam) < jobs else (lo, mid)
    return round(hi, 4)


# --- the generator: making each job runnable ------------------------------------------


@dataclass
class _Context:
    offers: Sequence[Offer]
    catalogs: dict[str, PricedCatalog]  # by currency
    names: set[str]
    month_end: datetime


def _pick(rng: random.Random, weighted: Sequence[tuple[str, int]]) -> str:
    return rng.choices([v for v, _ in weighted], weights=[w for _, w in weighted])[0]


def _poisson(rng: random.Random, mean: float) -> int:
    """Arrivals of a Poisson process with rate ``mean`` in one unit of time."""
    n, t = 0, rng.expovariate(mean) if mean > 0 else math.inf
    while t < 1:
        n, t = n + 1, t + rng.expovariate(mean)
    return n


def _unique(name: str, ctx: _Context) -> str:
    name = name[:60].rstrip("-")
    candidate, n = name, 2
    while candidate in ctx.names:
        candidate, n = f"{name}-{n}", n + 1
    ctx.names.add(candidate)
    return candidate


def _money_text(amount: Decimal, currency: str) -> str:
    step = Decimal(10) if currency == "CNY" else Decimal(2)
    return f"{(amount / step).to_integral_value(rounding=ROUND_CEILING) * step} {currency}"


def _fastest(spec: JobSpec, at: datetime, team: _Team, ctx: _Context) -> float | None:
    open_spec = spec.model_copy(update={"policy": spec.policy.model_copy(update={"deadline": None, "budget": None})})
    options = ctx.catalogs[team.currency].options(open_spec, at).options
    return min((o.hours for o in options), default=None)


def _with(doc: dict[str, Any], section: str, **values: Any) -> dict[str, Any]:
    out = dict(doc)
    out[section] = {**out.get(section, {}), **values}
    return {k: v for k, v in out.items() if v != {}}


def _runnable(doc: dict[str, Any], at: datetime, team: _Team, ctx: _Context, rng: random.Random,
              budget_share: float, room: tuple[float, float] | None = (1.5, 1.0)) -> tuple[JobSpec, float]:
    """Loosen the draft until it can run on the catalog with room to spare; then price its budget.

    A job nothing can run is widened the way a team would: first any region, then any GPU. A
    deadline must leave half again the fastest uninterrupted run plus an hour, so the planner can
    still choose spot or on-demand; when it does not, a training job gets more GPUs per machine
    where that helps, and otherwise the deadline moves. ``room`` is that (factor, hours); a
    tight family passes less, and ``None`` keeps the deadline as written, even where no
    schedule can meet it (people do write "8h" on a day of work).
    """
    doc = dict(doc)
    relax: list[tuple[str, dict[str, Any]]] = [("where", {"regions": None}), ("resources", {"gpus": None})]
    while True:
        spec = parse_job(doc, "generated job")
        fastest = _fastest(spec, at, team, ctx)
        if fastest is not None:
            deadline = spec.deadline_at(at)
            factor, extra = room or (0.0, 0.0)
            if room is None or deadline is None or (deadline - at) >= timedelta(hours=factor * fastest + extra):
                break
            if spec.kind is Kind.train and spec.resources.gpu_count < 8:
                wider = _with(doc, "resources", gpu_count=spec.resources.gpu_count * 2)
                wider_spec = parse_job(wider, "generated job")
                faster = _fastest(wider_spec, at, team, ctx)
                if faster is not None and faster < fastest * 0.8:
                    doc = wider
                    continue
            doc = _with(doc, "policy", deadline=f"{math.ceil(factor * fastest + extra)}h")
            continue
        if not relax:
            raise UserError(f"generated job {doc['name']} cannot run on this catalog", fix="a bug in the generator")
        section, values = relax.pop(0)
        doc = _with(doc, section, **values)
    if rng.random() < budget_share:
        options = ctx.catalogs[team.currency].options(spec, at).options
        if not options:  # a deadline kept as written may leave none: price the work without it
            open_spec = spec.model_copy(update={"policy": spec.policy.model_copy(update={"deadline": None})})
            options = ctx.catalogs[team.currency].options(open_spec, at).options
        on_demand = [o.cost.amount for o in options if o.capacity.value == "on-demand"]
        base = min(on_demand) if on_demand else options[0].cost.amount * 3
        budget = _money_text(base * Decimal(str(round(rng.uniform(1.3, 2.2), 2))), team.currency)
        spec = parse_job(_with(doc, "policy", budget=budget), "generated job")
    return spec, fastest


def _base_doc(name: str, team: _Team, project: str, kind: str, model: str) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": name, "team": team.name, "project": project, "kind": kind, "model": model}
    where = {k: list(v) for k, v in (("providers", team.providers), ("regions", team.regions)) if v}
    if where:
        doc["where"] = where
    return doc


def _minute(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0)


def _local(day: date, team: _Team, hour: float) -> datetime:
    tz = timezone(timedelta(hours=team.utc_offset_h))
    minutes = round(hour * 60)
    return datetime(day.year, day.month, day.day, tzinfo=tz) + timedelta(minutes=minutes)


def _gpus_for(model: str, rng: random.Random) -> list[str] | None:
    size = "large" if model.split("-")[1] in ("m", "c", "e") else "small"
    choice = rng.choice(_GPU_CHOICES[size])
    return None if choice is None else list(choice)


# --- the generator: the three streams ---------------------------------------------------


def _nightly(team: _Team, days: list[date], pipelines: int, ctx: _Context, rng: random.Random,
             fam: Family = STANDARD) -> list[TraceEntry]:
    out = []
    for p in range(pipelines):
        feed = team.pipelines[p % len(team.pipelines)] + ("" if p < len(team.pipelines) else f"-{p + 1}")
        model = _pick(rng, _INFER_MODELS)
        base_images = rng.randrange(fam.nightly_images[0], fam.nightly_images[1] + 1, 1000)
        budget_share = rng.choice((0.0, 1.0))  # a feed either always carries a budget or never
        for day in days:
            at = _local(day, team, rng.uniform(22.0, 23.75))
            volume = base_images * (0.6 if day.weekday() >= 5 else 1.0) * rng.uniform(0.8, 1.2)
            doc = _base_doc(_unique(f"{feed}-{day:%m%d}", ctx), team, feed, "infer", model)
            doc["infer"] = {
                "source": f"{team.scheme}://{team.name}-frames/{feed}/{day:%Y-%m-%d}/",
                "images": int(volume) // 100 * 100,
                "weights": f"{team.scheme}://{team.name}-models/{feed}/best.pt",
            }
            doc["resources"] = {"gpus": list(_INFER_GPUS)}
            doc["policy"] = {"deadline": f"{fam.nightly_deadline_h}h", "priority": 70, "max_restarts": 5}
            spec, _ = _runnable(doc, at, team, ctx, rng, budget_share)
            out.append(TraceEntry(at=at, job=spec))
    return out


def _retrains(team: _Team, days: list[date], projects: int, ctx: _Context, rng: random.Random,
              fam: Family = STANDARD, frng: random.Random | None = None) -> list[TraceEntry]:
    frng = frng or random.Random(0)  # the family's own draws; standard makes none
    out = []
    for p in range(projects):
        project = team.projects[p % len(team.projects)] + ("" if p < len(team.projects) else f"-{p + 1}")
        model = _pick(rng, _RETRAIN_MODELS)
        weekday, hour = rng.randrange(5), rng.uniform(17.0, 21.0)
        images = rng.randrange(10_000, 60_001, 500)
        epochs = rng.choice((50, 60, 80, 100, 120, 150))
        gpus = _gpus_for(model, rng)
        # Big models on big datasets: some teams ask for a 4-GPU machine from the start.
        gpu_count = rng.choice((1, 1, 4)) if model.split("-")[1] in ("c", "m") and images * epochs > 3_000_000 else 1
        img_size: int | None = None
        long = fam.long_share > 0 and frng.random() < fam.long_share
        if long:  # multi-day training of a big model on big images
            model = _pick(frng, _LONG_MODELS)
            images = frng.randrange(12_000, _LONG_MAX_IMAGES + 1, 500)
            epochs = frng.choice(_LONG_EPOCHS)
            img_size = frng.choice(_LONG_IMG_SIZES)
            gpu_count = frng.choice((1, 1, 4, 8))
        if fam.a100_share > 0 and model.split("-")[1] in ("m", "c", "e") and frng.random() < fam.a100_share:
            gpus = list(frng.choice(_A100_LISTS))
        tight = fam.tight_share > 0 and frng.random() < fam.tight_share
        as_written = tight and frng.random() < fam.as_written_share
        for day in (d for d in days if d.weekday() == weekday):
            at = _local(day, team, hour + rng.uniform(-0.5, 0.5))
            images = int(images * rng.uniform(1.0, 1.03))  # labelled data keeps coming in
            if long:
                images = min(images, _LONG_MAX_IMAGES)
            week = day.isocalendar().week
            name = _unique(f"{project}-{model.split('-')[1]}-w{week}", ctx)
            doc = _base_doc(name, team, project, "train", model)
            dataset = f"{team.scheme}://{team.name}-datasets/{project}/{day:%Y}w{week}"
            doc["data"] = {"uri": dataset, "train_images": images, "val_images": images // 10}
            doc["train"] = {"epochs": epochs, "batch": 64, "close_mosaic": min(15, epochs // 5),
                            "weights": f"{team.scheme}://{team.name}-models/pretrained/{model}.pt"}
            if img_size is not None:
                doc["train"]["img_size"] = img_size
                doc["train"]["batch"] = 32 if img_size > 640 else 64
            doc["resources"] = {"gpus": gpus, "gpu_count": gpu_count}
            hours = rng.choice((24, 36, 48, 72, 96))
            if long:
                hours = frng.choice((72, 96, 120, 168))
            deadline: str = f"{hours}h"
            if rng.random() < 0.5:  # "by Monday 10:00" rather than "within 48 h"
                due = at + timedelta(hours=hours)
                deadline = due.replace(minute=0, second=0, microsecond=0).isoformat()
                if datetime.fromisoformat(deadline) <= at:
                    deadline = f"{hours}h"
            doc["policy"] = {"deadline": deadline, "priority": rng.choice((50, 55, 60)), "max_restarts": 10}
            room: tuple[float, float] | None = (1.5, 1.0)
            if tight:
                doc["policy"]["deadline"] = frng.choice(_TIGHT_DEADLINES)
                room = None if as_written else (1.15, 0.5)
            spec, fastest = _runnable(doc, at, team, ctx, rng, 0.8, room)
            out.append(TraceEntry(at=at, job=spec))
            out.extend(_follow_ups(spec, at, fastest, team, ctx, rng))
    return out


def _follow_ups(train: JobSpec, at: datetime, hours: float, team: _Team, ctx: _Context,
                rng: random.Random) -> list[TraceEntry]:
    """Validation and export of a retrain's best.pt, once it would have finished."""
    assert train.data is not None
    weights = f"{team.scheme}://{team.name}-models/{train.project}/{train.name}/best.pt"
    val_at = _minute(at + timedelta(hours=hours * rng.uniform(1.3, 2.0) + rng.uniform(0.5, 3.0)))
    export_at = _minute(val_at + timedelta(hours=rng.uniform(0.2, 2.0)))
    out = []
    if val_at < ctx.month_end:
        doc = _base_doc(_unique(f"{train.name}-val", ctx), team, train.project or train.name, "val", train.model)
        doc["data"] = {"uri": train.data.uri, "val_images": train.data.val_images or 1000}
        doc["val"] = {"weights": weights}
        doc["resources"] = {"gpus": list(_INFER_GPUS)}
        doc["policy"] = {"deadline": "12h", "priority": 40}
        spec, _ = _runnable(doc, val_at, team, ctx, rng, 0.6)
        out.append(TraceEntry(at=val_at, job=spec))
    if export_at < ctx.month_end:
        engine = rng.random() < 0.6
        doc = _base_doc(_unique(f"{train.name}-export", ctx), team, train.project or train.name, "export",
                        train.model)
        doc["export"] = {"weights": weights, "formats": ["onnx", "engine"] if engine else ["onnx"], "half": engine}
        doc["resources"] = {"gpus": [rng.choice(_engine_gpus(team, ctx))] if engine else list(_INFER_GPUS)}
        doc["policy"] = {"deadline": "12h", "priority": 40}
        spec, _ = _runnable(doc, export_at, team, ctx, rng, 0.6)
        out.append(TraceEntry(at=export_at, job=spec))
    return out


def _engine_gpus(team: _Team, ctx: _Context) -> tuple[str, ...]:
    """The site-server GPUs the team can rent one of, to build its TensorRT engine on."""
    one_gpu = OfferFilter(None, 1, team.providers, team.regions)  # any GPU, as the team's job files place it
    rentable = {o.gpu for o in ctx.offers if one_gpu.admits(o)}
    return tuple(g for g in _ENGINE_GPUS if g in rentable) or _ENGINE_GPUS


def _experiments(team: _Team, days: list[date], per_day: float, ctx: _Context,
                 rng: random.Random, fam: Family = STANDARD, frng: random.Random | None = None) -> list[TraceEntry]:
    frng = frng or random.Random(0)
    out = []
    for day in (d for d in days if d.weekday() < 5):
        for n in range(_poisson(rng, per_day)):
            at = _local(day, team, rng.uniform(9.5, 19.0))
            project = rng.choice(team.projects)
            model = _pick(rng, _EXPERIMENT_MODELS)
            what = rng.choices(("train", "val", "infer"), weights=(75, 15, 10))[0]
            doc = _base_doc(_unique(f"exp-{project}-{day:%m%d}-{n + 1}", ctx), team, project, what, model)
            dataset = f"{team.scheme}://{team.name}-datasets/{project}/exp-{rng.randrange(1, 40)}"
            weights = f"{team.scheme}://{team.name}-models/{project}/exp/best.pt"
            if what == "train":
                images = rng.randrange(2_000, 20_001, 250)
                doc["data"] = {"uri": dataset, "train_images": images, "val_images": images // 10}
                doc["train"] = {"epochs": rng.choice((10, 20, 30, 40, 60)),
                                "img_size": rng.choice((320, 640, 640, 960)),
                                "batch": rng.choice((16, 32, 64)), "weights": f"{model}.pt"}
            elif what == "val":
                doc["data"] = {"uri": dataset, "val_images": rng.randrange(500, 5_001, 100)}
                doc["val"] = {"weights": weights}
            else:
                doc["infer"] = {"source": f"{dataset}/images/", "images": rng.randrange(2_000, 30_001, 500),
                                "weights": weights}
            gpus = _gpus_for(model, rng)
            if gpus is not None:
                doc["resources"] = {"gpus": gpus}
            policy: dict[str, Any] = {"priority": rng.choice((20, 30, 40))}
            if rng.random() < 0.5:
                policy["deadline"] = f"{rng.choice((48, 72, 120, 168))}h"
            capacity = rng.choices(("auto", "on-demand", "spot"), weights=(70, 15, 15))[0]
            if capacity != "auto":
                policy["capacity"] = capacity
            room: tuple[float, float] | None = (1.5, 1.0)
            if fam.tight_share > 0 and frng.random() < fam.tight_share:
                policy["deadline"] = frng.choice(_TIGHT_DEADLINES)
                room = None if frng.random() < fam.as_written_share else (1.15, 0.5)
            doc["policy"] = policy
            spec, _ = _runnable(doc, at, team, ctx, rng, 0.3, room)
            out.append(TraceEntry(at=at, job=spec))
    return out


def generate_month(
    seed: int,
    month: str = "2026-11",
    teams: int = 3,
    scale: float = 1.0,
    *,
    offers: Sequence[Offer] | None = None,
    fx: FxRates | None = None,
    fam: Family = STANDARD,
    progress: Callable[[int, int], None] | None = None,
) -> list[TraceEntry]:
    """A month of submissions for ``teams`` teams, sorted by time; the same arguments give the same trace.

    ``scale`` multiplies every stream (projects, nightly feeds, experiments per weekday); at 1.0
    three teams submit about 400 jobs in a 30-day month. Each team draws from its own seeded
    stream, so adding teams leaves the others' jobs as they were. ``progress(done, total)`` is told after
    each team's stream of each kind (a progress bar).
    """
    if teams < 1:
        raise UserError("a trace needs at least one team", fix="e.g. teams=3")
    if not 0 < scale < math.inf:
        raise UserError("the scale must be a positive number", fix="e.g. scale=1.0")
    days = _month_days(month)
    about = expected_jobs(teams, scale, month, fam)
    # Before any is made: a typo's millions of jobs took minutes, then an over-large file. With a margin for
    # ``scale_for_jobs``, whose scale for the most jobs a trace holds comes out a little over it.
    if about > 1.05 * MAX_JOBS:
        raise UserError(f"{teams:,} teams at scale {scale:g} would submit about {about:,.0f} jobs; a trace holds "
                        f"at most {MAX_JOBS:,}", fix=_TOO_MANY_FIX)
    first = days[0]
    month_end = datetime(first.year, first.month, 1, tzinfo=timezone.utc) + timedelta(days=len(days))
    offers = offers if offers is not None else load_catalog()
    fx = fx or FxRates()
    catalogs = {cur: PricedCatalog(offers, currency=cur, fx=fx) for cur in CURRENCIES}
    ctx = _Context(offers=offers, catalogs=catalogs, names=set(), month_end=month_end)
    projects, pipelines, experiments = _counts(scale, fam)
    out: list[TraceEntry] = []
    tell = progress or (lambda _done, _total: None)
    for i in range(teams):
        team = _team(i)
        out += _nightly(team, days, pipelines, ctx, random.Random(f"{seed}:{team.name}:nightly"), fam)
        tell(3 * i + 1, 3 * teams)
        out += _retrains(team, days, projects, ctx, random.Random(f"{seed}:{team.name}:retrain"), fam,
                         random.Random(f"{seed}:{team.name}:retrain:{fam.name}"))
        tell(3 * i + 2, 3 * teams)
        out += _experiments(team, days, experiments, ctx, random.Random(f"{seed}:{team.name}:experiments"), fam,
                            random.Random(f"{seed}:{team.name}:experiments:{fam.name}"))
        tell(3 * i + 3, 3 * teams)
    out = [e for e in out if e.at < month_end]
    out.sort(key=lambda e: (e.at.astimezone(timezone.utc), e.job.name))
    return out


# --- command line -----------------------------------------------------------------------


def main(argv: Sequence[str] | None = None, progress: Callable[[int, int], None] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.simulation.traces",
                                     description="Write a generated workload trace.")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--month", default="2026-11", help="YYYY-MM")
    parser.add_argument("--teams", type=int, default=3)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--jobs", type=int, help="about this many jobs (sets the scale)")
    size.add_argument("--scale", type=float, help="stream multiplier; 1.0 is about 400 jobs for 3 teams")
    parser.add_argument("--family", default="standard", help="kind of month: " + ", ".join(FAMILIES))
    parser.add_argument("--reclaim-scale", default=None,
                        help='the market: factors on the catalog\'s spot reclaim rates, "2" or '
                        '"aws=2,alibaba/cn-hangzhou=0.5" (written into the trace; simulate uses them)')
    parser.add_argument("--out", required=True, help="a .jsonl file, or .jsonl.gz for gzip")
    args = parser.parse_args(argv)
    try:
        fam = family(args.family)
        scale = args.scale if args.scale is not None else (
            scale_for_jobs(args.jobs, args.teams, args.month, fam) if args.jobs is not None else 1.0)
        market = (parse_reclaim_scale(args.reclaim_scale, load_catalog()) if args.reclaim_scale is not None
                  else MarketSpec())
        entries = generate_month(args.seed, args.month, args.teams, scale, fam=fam, progress=progress)
        dump_trace(entries, args.out, market)
    except UserError as exc:
        parser.exit(2, f"error: {exc.message}" + (f"; fix: {exc.fix}" if exc.fix else "") + "\n")
    print(f"wrote {len(entries)} jobs ({args.teams} teams, scale {scale}, family {fam.name}; "
          f"{market.describe()}) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
