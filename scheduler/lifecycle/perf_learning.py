"""The performance model learns: observed epoch times replace the priors.

Each progress report from an on-instance agent (epoch N finished) becomes one
sample in ``perf_samples``: the wall time since the previous report, divided by
the epochs it covers, turned into a per-GPU training rate with
``perf.observed_rate`` and divided by the share of the GPU-bound rate its machine's
data loader lets through (``perf_rates.loader_share``), so that the rate is the
GPU's and not the machine's: the planner scales it back by each candidate
machine's share. Without that, a small model's rate measured on a 32-vCPU machine
sent it to a 4-vCPU one of the same GPU at less than half its real time (issue 17,
(heavy-inference, 41) seed 11). A machine the catalog does not list has share 1.
``measured_rates`` condenses the samples into the ``measured`` mapping that
``planner.plan`` and ``perf.estimate`` take; ``perf_table`` shows every number
with where it came from.

Why a median of the newest samples: an epoch's time is noisy (a report that
arrives late, the first epoch's warm-up, a neighbour on the host), and a GPU's
real speed drifts with drivers and images. The median ignores the odd spike
and the window lets old measurements age out.

The first report of an attempt has no previous report to measure from: its
time runs from the attempt's start, which also covers the boot-to-training
setup (image pull, dataset and checkpoint download). The agent does not report
when setup ends, so the performance model's own ``setup_hours`` estimate is
taken off; a setup that ran much longer or shorter than estimated skews that
one sample, and the median absorbs it. Samples from the close-mosaic epochs at
the end of a run are kept: they are faster only where data loading is the
bottleneck, and the window is dominated by the many mosaic epochs before them.

Pure where it can be; the only I/O goes through the session passed in.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Literal

import structlog
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from providers.catalog import load_catalog
from scheduler.errors import UserError
from scheduler.gpus import GPUS
from scheduler.jobs import perf, perf_rates
from scheduler.jobs.perf_priors import VARIANTS
from scheduler.models import Frozen, JobSpec, Kind, TrainSpec
from scheduler.planner.inputs import OwnRates
from scheduler.states import AttemptState, JobState
from scheduler.store.tables import AttemptRow, InstanceRow, JobRow, PerfSampleRow
from scheduler.times import utc

log = structlog.get_logger("gpusched.perf")

Key = tuple[str, str, int]  # (model, gpu, img_size): the key of perf.estimate's ``measured``
SampleSource = Literal["agent", "simulated"]

# A sample this far from the prior is a broken clock, a stalled job or a
# mis-sized dataset, not a GPU: the priors are rough, but not 10x wrong.
OUTLIER_FACTOR = 10.0
RECENT = 20  # how many of a key's newest samples the median looks at
OWN_KEPT = timedelta(days=14)  # how long after its last sample a job's own rates are kept in memory (RatesMemo)
PRIOR_IMG_SIZE = 640  # perf_table lists every model x GPU prior at this size


class PerfRow(Frozen):
    """One line of ``gpusched perf``: the rate the planner uses and where it came from."""

    model: str
    gpu: str
    img_size: int
    rate_img_s: float  # per GPU and GPU-bound: the measured median when source is "measured", else the prior
    source: Literal["prior", "measured"]
    samples: int  # samples recorded for this key (within max_age); the median reads the newest RECENT
    prior_rate: float  # GPU-bound prior; on a given machine the data loader may cap it lower
    last_seen: datetime | None  # newest sample


@dataclass(frozen=True)
class Learned:
    """What the samples of one key say; ``rate_img_s`` is None below ``min_samples``."""

    rate_img_s: float | None
    samples: int
    last_seen: datetime


# --- recording ----------------------------------------------------------------------


def report_since(job: JobRow, attempt: AttemptRow) -> datetime | None:
    """When the interval a progress report closes began: read BEFORE the report updates the job.

    The first report of an attempt measures from the attempt's start. Later
    ones measure from the previous report, which is when ``report_progress``
    last set ``job.updated_at`` (nothing else writes it while the job runs).
    """
    if job.epochs_done <= attempt.start_epoch:
        return utc(attempt.started_at) if attempt.started_at else None
    return utc(job.updated_at)


def learn_from_progress(
    session: Session,
    *,
    job: JobRow,
    attempt: AttemptRow,
    epochs_done: int,
    now: datetime,
    source: SampleSource = "agent",
) -> PerfSampleRow | None:
    """``record_epochs`` as ``agent_reports.report_progress`` needs it: call before it updates the job."""
    if JobState(job.state) is not JobState.running or AttemptState(attempt.state) is not AttemptState.running:
        return None
    if job.kind != Kind.train.value:
        # Only training epochs are samples (``record_epochs``); the row's kind is its job file's, written at
        # submission. Asked first: inference reports a shard at a time, and reading its job file and machine
        # for every shard only to learn that was a good part of a busy simulation.
        return None
    since = report_since(job, attempt)
    instance = session.get(InstanceRow, attempt.instance_id) if attempt.instance_id else None
    if since is None or instance is None:
        return None
    return record_epochs(session, job=job, attempt=attempt, instance=instance, epochs_before=job.epochs_done,
                         epochs_after=epochs_done, since=since, now=now, source=source)


def record_epochs(
    session: Session,
    *,
    job: JobRow,
    attempt: AttemptRow,
    instance: InstanceRow,
    epochs_before: int,
    epochs_after: int,
    since: datetime,
    now: datetime,
    vcpus: int | None = None,
    source: SampleSource = "agent",
) -> PerfSampleRow | None:
    """Record one sample: the epochs ``epochs_before`` -> ``epochs_after`` took ``now - since``.

    ``since`` is when the previous report of this attempt arrived, or the
    attempt's start for its first report (``epochs_before <= attempt.start_epoch``),
    in which case the estimated setup time is taken off (see the module doc).
    ``vcpus`` sizes the data-loading ceiling of the prior the outlier check
    compares against; None looks the instance type up in the bundled catalog.
    Returns the row added to the session, or None when the report teaches
    nothing (not a train job, no new epoch, no time elapsed, an outlier).
    """
    epochs = epochs_after - epochs_before
    spec = JobSpec.model_validate(job.spec_json)
    if epochs <= 0 or spec.kind is not Kind.train or spec.data is None or not spec.data.train_images:
        return None
    train = spec.train or TrainSpec()
    nodes = spec.resources.nodes
    context = {"job_id": job.id, "attempt": attempt.number, "gpu": instance.gpu,
               "epochs": f"{epochs_before}->{epochs_after}"}
    vcpus = vcpus if vcpus is not None else catalog_vcpus(instance.instance_type)
    try:
        # Only setup_hours and the physical batch are read here, and neither depends on vCPUs.
        est = perf.estimate(spec, instance.gpu, instance.gpu_count, epochs_done=attempt.start_epoch, nodes=nodes)
        prior = prior_rate(spec.model, instance.gpu, train.img_size, vcpus=vcpus, gpu_count=instance.gpu_count,
                           batch=est.physical_batch)
    except UserError as exc:  # a GPU or model the performance model does not know
        log.warning("perf_sample_skipped", reason=str(exc), **context)
        return None

    elapsed = (utc(now) - utc(since)).total_seconds()
    if epochs_before <= attempt.start_epoch:
        elapsed -= est.setup_hours * 3600
    if elapsed <= 0:
        log.info("perf_sample_dropped", reason=f"no time left for {epochs} epoch(s) ({elapsed:.0f} s)",
                    **context)
        return None
    epoch_seconds = elapsed / epochs
    val_images = spec.data.val_images or 0
    rate = perf.observed_rate(epoch_seconds, spec.data.train_images, val_images, gpu_count=instance.gpu_count,
                              nodes=nodes)
    why = outlier(rate, prior)
    if why is not None:
        log.info("perf_sample_dropped", reason=why, rate_img_s=round(rate, 2), prior_img_s=round(prior, 2),
                    **context)
        return None
    share = machine_share(spec.model, instance.gpu, train.img_size, vcpus, instance.gpu_count, est.physical_batch)
    row = PerfSampleRow(
        at=utc(now), job_id=job.id, attempt=attempt.number, model=spec.model, gpu=instance.gpu,
        gpu_count=instance.gpu_count, nodes=nodes, img_size=train.img_size, batch=est.physical_batch,
        train_images=spec.data.train_images, val_images=val_images, epoch_seconds=epoch_seconds,
        rate_img_s=rate / share, source=source, loader_share=share,
    )
    session.add(row)
    return row


def rebase_samples(session: Session) -> int:
    """Divide the samples written before migration 0016 (no ``loader_share``) by their machine's share, as
    ``record_epochs`` divides new ones; returns how many it divided. The daemon's start runs it: once the rows
    have a share there is nothing left to do, and two daemons starting together divide each row once (the
    update asks again that it has no share)."""
    rows = session.execute(
        select(PerfSampleRow.id, PerfSampleRow.model, PerfSampleRow.gpu, PerfSampleRow.img_size,
               PerfSampleRow.gpu_count, PerfSampleRow.batch, PerfSampleRow.rate_img_s, InstanceRow.instance_type)
        .outerjoin(AttemptRow, (AttemptRow.job_id == PerfSampleRow.job_id)
                   & (AttemptRow.number == PerfSampleRow.attempt))
        .outerjoin(InstanceRow, InstanceRow.id == AttemptRow.instance_id)
        .where(PerfSampleRow.loader_share.is_(None))
    ).all()
    divided = 0
    for sample_id, model, gpu, img_size, gpu_count, batch, rate, instance_type in rows:
        vcpus = catalog_vcpus(instance_type) if instance_type else None
        try:
            share = machine_share(model, gpu, img_size, vcpus, gpu_count, batch)
        except UserError:  # a GPU or model this version does not know: its rate is read by nothing
            share = 1.0
        done = session.execute(
            update(PerfSampleRow).where(PerfSampleRow.id == sample_id, PerfSampleRow.loader_share.is_(None))
            .values(rate_img_s=rate / share, loader_share=share))
        divided += done.rowcount  # type: ignore[attr-defined]
    if divided:
        log.info("perf_samples_rebased", samples=divided)
    return divided


def machine_share(model: str, gpu: str, img_size: int, vcpus: int | None, gpu_count: int,
                  batch: int | None) -> float:
    """``perf_rates.loader_share`` of the machine a sample ran on: its ``prior_rate`` over the GPU-bound one
    (1 where its vCPUs are unknown)."""
    return prior_rate(model, gpu, img_size, vcpus=vcpus, gpu_count=gpu_count, batch=batch) \
        / perf_rates.gpu_bound_rate(model, gpu, img_size)


def prior_rate(model: str, gpu: str, img_size: int, *, vcpus: int | None = None, gpu_count: int = 1,
               batch: int | None = None) -> float:
    """The per-GPU training rate ``perf.estimate`` assumes without measurements.

    With ``vcpus`` it is capped by the mosaic data loader, as on that machine;
    without, it is the GPU-bound rate alone.
    """
    rate = perf_rates.gpu_bound_rate(model, gpu, img_size)
    if vcpus is None:
        return rate
    if batch is None:
        return min(rate, perf_rates.cpu_bound_rate(vcpus, gpu_count))
    return min(rate, perf_rates.cpu_bound_rate(vcpus, gpu_count, batch))


def outlier(rate: float, prior: float) -> str | None:
    """Why ``rate`` is too far from ``prior`` to trust, or None when it is plausible."""
    if not math.isfinite(rate) or rate <= 0:
        return f"rate {rate} img/s is not a rate"
    if rate > prior * OUTLIER_FACTOR:
        return f"{rate:.1f} img/s is over {OUTLIER_FACTOR:g}x the prior {prior:.1f} img/s"
    if rate < prior / OUTLIER_FACTOR:
        return f"{rate:.1f} img/s is under 1/{OUTLIER_FACTOR:g} of the prior {prior:.1f} img/s"
    return None


@lru_cache(maxsize=1)
def _catalog_vcpus() -> dict[str, int]:
    return {o.instance_type: o.vcpus for o in load_catalog()}


def catalog_vcpus(instance_type: str) -> int | None:
    """vCPUs of an instance type in the bundled catalog; None when it is not listed."""
    return _catalog_vcpus().get(instance_type)


# --- learning -----------------------------------------------------------------------


def own_rates(session: Session, job_ids: Collection[str], *, min_samples: int = 2,
              recent: int = RECENT) -> dict[str, OwnRates]:
    """Each job's own measured rates: per (model, GPU, image size) it trained on, the median of its newest
    ``recent`` samples there, with at least ``min_samples`` (``PlanJob.own_rates``); jobs without are left out.

    ``measured_rates`` pools every job of a key, and a median of many jobs moves late for one that runs
    slower than the rest (its data loader, its images): issue 17's late job on (tight-deadlines, 32) ran
    35% slower than its key for six hours, while the steering rule and the planner, reading the key, saw
    two hours of slack it did not have. Its own epochs said so from its second report."""
    if not job_ids:
        return {}
    # The newest ``recent`` of each (job, key) ranked in SQL: a long run reports hundreds of epochs, and
    # this is asked every tick for every job that just reported one.
    group = (PerfSampleRow.job_id, PerfSampleRow.model, PerfSampleRow.gpu, PerfSampleRow.img_size)
    ranked = select(*group, PerfSampleRow.rate_img_s, func.row_number().over(
        partition_by=group, order_by=(PerfSampleRow.at.desc(), PerfSampleRow.id.desc())).label("newest"),
    ).where(PerfSampleRow.job_id.in_(list(job_ids))).subquery()
    rows = session.execute(
        select(ranked.c.job_id, ranked.c.model, ranked.c.gpu, ranked.c.img_size, ranked.c.rate_img_s)
        .where(ranked.c.newest <= recent)
    ).all()
    samples: dict[tuple[str, Key], list[float]] = defaultdict(list)
    for job_id, model, gpu, img_size, rate in rows:
        samples[(job_id, (model, gpu, img_size))].append(rate)
    out: dict[str, list[tuple[str, str, int, float]]] = defaultdict(list)
    for (job_id, key), rates in sorted(samples.items()):
        if len(rates) >= min_samples:
            out[job_id].append((*key, statistics.median(rates)))
    return {job_id: tuple(rates) for job_id, rates in out.items()}


def measured_rates(
    session: Session,
    *,
    min_samples: int = 2,
    max_age: timedelta | None = None,
    now: datetime | None = None,
    recent: int = RECENT,
    sources: Collection[SampleSource] | None = None,
) -> dict[Key, float]:
    """The ``measured`` mapping for ``planner.plan``: median of each key's newest ``recent`` samples.

    Only keys with at least ``min_samples`` samples appear. ``max_age`` (with
    ``now``) ignores samples older than that; ``sources`` limits which kinds count.
    """
    learned = learn(session, min_samples=min_samples, max_age=max_age, now=now, recent=recent, sources=sources)
    return {key: l.rate_img_s for key, l in learned.items() if l.rate_img_s is not None}


@dataclass
class RatesMemo:
    """``measured_rates`` for the tick, read again only when a sample was added.

    Samples are only ever appended, so the newest id says whether anything changed;
    re-ranking a month of samples on every plan would grow with the month. With ``now``,
    the samples are looked at no more than once per ``refresh``: a busy fleet reports an
    epoch every few seconds, and a median of medians moves slowly.

    On SQLite (one writer at a time: a sample committed later always has a higher id) only the
    samples added since are read, and folded into each key's newest ``RECENT`` and count kept
    here: the same medians as ``measured_rates`` over every sample, without reading a month of
    them again (``test_perf_learning`` compares the two). PostgreSQL writers may commit ids out of
    order, so there every change reads all samples again, as before."""

    refresh: timedelta = timedelta(minutes=10)
    newest: int | None = None
    checked: datetime | None = None
    rates: dict[Key, float] = field(default_factory=dict)
    # What the samples up to ``newest`` say per key (SQLite): the newest RECENT (at, id, rate), newest
    # first, and how many samples the key has.
    _top: dict[Key, list[tuple[datetime, int, float]]] = field(default_factory=dict)
    _totals: dict[Key, int] = field(default_factory=dict)
    # The same per job (``own``): job id -> key -> its newest RECENT (at, id, rate).
    _own_top: dict[str, dict[Key, list[tuple[datetime, int, float]]]] = field(default_factory=dict)

    def get(self, session: Session, now: datetime | None = None) -> dict[Key, float]:
        if now is not None and self.checked is not None and now - self.checked < self.refresh:
            return self.rates
        self.checked = now
        newest = session.scalar(select(func.max(PerfSampleRow.id)))
        if newest != self.newest:
            if session.get_bind().dialect.name == "sqlite":
                self.rates = self._fold(session, newest)
            else:
                self.rates = measured_rates(session)
            self.newest = newest
        return self.rates

    def own(self, session: Session, job_ids: Collection[str],
            now: datetime | None = None) -> dict[str, OwnRates]:
        """``own_rates(session, job_ids)`` from the samples ``get`` has read (on its terms: at most once per
        ``refresh``), without a query of its own; PostgreSQL asks ``own_rates``."""
        if session.get_bind().dialect.name != "sqlite":
            return own_rates(session, job_ids)
        self.get(session, now)
        out = {}
        for job_id in job_ids:
            tops = self._own_top.get(job_id, {})
            rates = tuple((*key, statistics.median(rate for _, _, rate in top))
                          for key, top in sorted(tops.items()) if len(top) >= 2)
            if rates:
                out[job_id] = rates
        return out

    def _fold(self, session: Session, newest: int | None) -> dict[Key, float]:
        """``measured_rates(session)``, reading only the samples with ids above ``self.newest``."""
        if newest is None:
            return {}
        added = session.execute(
            select(PerfSampleRow.model, PerfSampleRow.gpu, PerfSampleRow.img_size, PerfSampleRow.at,
                   PerfSampleRow.id, PerfSampleRow.rate_img_s, PerfSampleRow.job_id)
            .where(PerfSampleRow.id > (self.newest or 0), PerfSampleRow.id <= newest)
        ).all()
        changed: set[Key] = set()
        changed_own: set[tuple[str, Key]] = set()
        for model, gpu, img_size, at, sample_id, rate, job_id in added:
            key = (model, gpu, img_size)
            self._top.setdefault(key, []).append((utc(at), sample_id, rate))
            self._totals[key] = self._totals.get(key, 0) + 1
            changed.add(key)
            self._own_top.setdefault(job_id, {}).setdefault(key, []).append((utc(at), sample_id, rate))
            changed_own.add((job_id, key))
        for key in changed:  # newest first, as learn()'s window ranks them (at, then id, descending)
            self._top[key] = sorted(self._top[key], reverse=True)[:RECENT]
        for job_id, key in changed_own:
            self._own_top[job_id][key] = sorted(self._own_top[job_id][key], reverse=True)[:RECENT]
        if added:  # a daemon runs for months: a job silent for OWN_KEPT is forgotten (its key's rate stays)
            horizon = max(utc(at) for _, _, _, at, _, _, _ in added) - OWN_KEPT
            for job_id in [j for j, tops in self._own_top.items()
                           if all(top[0][0] < horizon for top in tops.values())]:
                del self._own_top[job_id]
        return {key: statistics.median(rate for _, _, rate in top) for key, top in self._top.items()
                if self._totals[key] >= 2}


def learn(
    session: Session,
    *,
    min_samples: int = 2,
    max_age: timedelta | None = None,
    now: datetime | None = None,
    recent: int = RECENT,
    sources: Collection[SampleSource] | None = None,
) -> dict[Key, Learned]:
    """Every key with samples, and what they say (see ``measured_rates``)."""
    if min_samples < 1 or recent < min_samples:
        raise ValueError(f"need 1 <= min_samples <= recent, got min_samples={min_samples}, recent={recent}")
    if max_age is not None and now is None:
        raise ValueError("max_age needs now: the age is counted back from it")
    key_cols = (PerfSampleRow.model, PerfSampleRow.gpu, PerfSampleRow.img_size)
    # Window functions keep the read bounded by keys x recent, however many samples pile up.
    newest_first = (PerfSampleRow.at.desc(), PerfSampleRow.id.desc())
    ranked = select(
        *key_cols,
        PerfSampleRow.rate_img_s,
        PerfSampleRow.at,
        func.row_number().over(partition_by=key_cols, order_by=newest_first).label("rank"),
        func.count().over(partition_by=key_cols).label("total"),
    )
    if max_age is not None and now is not None:
        ranked = ranked.where(PerfSampleRow.at >= utc(now) - max_age)
    if sources is not None:
        ranked = ranked.where(PerfSampleRow.source.in_(list(sources)))
    sub = ranked.subquery()
    rows = session.execute(
        select(sub.c.model, sub.c.gpu, sub.c.img_size, sub.c.rate_img_s, sub.c.at, sub.c.total)
        .where(sub.c.rank <= recent)
    ).all()
    samples = (((r.model, r.gpu, r.img_size), r.rate_img_s, utc(r.at), r.total) for r in rows)
    return summarise(samples, min_samples=min_samples)


def summarise(rows: Iterable[tuple[Key, float, datetime, int]], *, min_samples: int = 2) -> dict[Key, Learned]:
    """Median per key of (key, rate, at, samples-of-that-key) rows; a rate only with ``min_samples``."""
    rates: dict[Key, list[float]] = defaultdict(list)
    last: dict[Key, datetime] = {}
    totals: dict[Key, int] = {}
    for key, rate, at, total in rows:
        rates[key].append(rate)
        last[key] = max(at, last.get(key, at))
        totals[key] = total
    return {
        key: Learned(
            rate_img_s=statistics.median(values) if totals[key] >= min_samples else None,
            samples=totals[key],
            last_seen=last[key],
        )
        for key, values in rates.items()
    }


# --- the table behind `gpusched perf` -------------------------------------------------


def perf_table(
    session: Session,
    models: Sequence[str] | None = None,
    gpus: Sequence[str] | None = None,
    *,
    min_samples: int = 2,
    max_age: timedelta | None = None,
    now: datetime | None = None,
    recent: int = RECENT,
) -> list[PerfRow]:
    """Every model x GPU prior at 640 px plus every measured key, marked prior or measured.

    ``models`` / ``gpus`` keep only those names. Rows come in the performance
    model's order of models, then ``scheduler.gpus`` order, then image size.
    """
    learned = learn(session, min_samples=min_samples, max_age=max_age, now=now, recent=recent)
    keys = {(m, g, PRIOR_IMG_SIZE) for m in VARIANTS for g in GPUS} | set(learned)
    rows = []
    for model, gpu, img_size in sorted(keys, key=_display_order):
        if (models is not None and model not in models) or (gpus is not None and gpu not in gpus):
            continue
        try:
            prior = perf_rates.gpu_bound_rate(model, gpu, img_size)
        except UserError:  # samples of a GPU or model this version no longer knows
            log.warning("perf_key_unknown", model=model, gpu=gpu, img_size=img_size)
            continue
        seen = learned.get((model, gpu, img_size))
        measured = seen.rate_img_s if seen else None
        rows.append(PerfRow(
            model=model, gpu=gpu, img_size=img_size,
            rate_img_s=measured if measured is not None else prior,
            source="measured" if measured is not None else "prior",
            samples=seen.samples if seen else 0,
            prior_rate=prior,
            last_seen=seen.last_seen if seen else None,
        ))
    return rows


def _display_order(key: Key) -> tuple[int, str, int, str, int]:
    model, gpu, img_size = key
    model_ix = list(VARIANTS).index(model) if model in VARIANTS else len(VARIANTS)
    gpu_ix = list(GPUS).index(gpu) if gpu in GPUS else len(GPUS)
    return model_ix, model, gpu_ix, gpu, img_size


__all__ = [
    "Learned",
    "PerfRow",
    "RatesMemo",
    "catalog_vcpus",
    "learn",
    "learn_from_progress",
    "machine_share",
    "measured_rates",
    "outlier",
    "perf_table",
    "prior_rate",
    "rebase_samples",
    "record_epochs",
    "report_since",
    "summarise",
]
