"""How long a YOLOv9 job takes on a GPU setup, and whether it fits in memory: the estimate API.

``estimate`` (an ``Estimate`` model), ``figures`` (the same numbers as a plain tuple) and
``figures_for`` (a job's figures as a function of the GPU setup) put together the parts of the
model: the priors and their sources (``perf_priors``, from ``docs/yolov9-model.md``), the
training and inference rates (``perf_rates``) and the memory fit and physical batch
(``perf_memory``). Every prior is a prior: callers pass ``measured`` rates learned from a job's
first epochs (see ``observed_rate``, the inverse of the epoch formula here) and those win over the
GPU-bound prior; each machine's data loader still scales them (``perf_rates.loader_share``).

Pure functions only: no clock, no I/O.

Speed: the planner asks for ~10 estimates per queued job, and every job has its
own image count, so caching whole estimates would not hit. What does not depend
on the job's image and epoch counts -- the physical batch, the rate, the memory
for a (model, GPU setup, image size, batch, measured rate) -- is cached in the
``_*_setting`` functions (bounded ``functools`` caches of pure functions of
immutable arguments), leaving a few float operations per estimate; a cached
setting is computed by the same operations in the same order as an uncached one
would be, so caching changes no number, not even in the last bit. The planner
takes ``figures_for``: a job's figures as a function of the GPU setup (what
depends on the job alone is read once, not once per setup), as a plain tuple,
without building and validating an ``Estimate`` model (which costs more than the
rest).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import lru_cache, partial
from typing import NamedTuple

from scheduler.errors import GpuschedError, UserError
from scheduler.gpus import GPUS
from scheduler.jobs.infer_shards import shard_count
from scheduler.jobs.perf_memory import (
    infer_memory_gib,
    largest_fitting,
    physical_batch,
    train_memory_gib,
    usable_memory_gib,
)
from scheduler.jobs.perf_priors import (
    BYTES_PER_IMAGE,
    DOWNLOAD_BYTES_S,
    ENGINE_FIXED_MIN,
    ENGINE_T4_SCALED_MIN,
    EXPORT_MINUTES,
    IMAGE_PULL_HOURS,
    PLAIN_IMG_S_PER_CPU,
    SCALING_PER_DOUBLING,
    VAL_SPEEDUP,
    checkpoint_mb,
    gpu_spec,
)
from scheduler.jobs.perf_rates import (
    cpu_bound_rate,
    gpu_bound_rate,
    infer_seconds_per_image,
    loader_share,
    loader_workers,
    scaling_efficiency,
    speed_factor,
)
from scheduler.models import ExportSpec, Frozen, InferSpec, JobSpec, Kind, TrainSpec

_DEFAULT_TRAIN = TrainSpec()  # a train job without a train: section runs with the defaults


class Estimate(Frozen):
    """How a job would run on one GPU setup. ``hours`` is ``inf`` when it does not fit."""

    hours: float  # total remaining wall hours on this GPU setup, setup included
    setup_hours: float  # boot excluded; image pull + dataset + checkpoint download
    epoch_hours: float | None  # train: one epoch (train + val); None for other kinds
    epochs_left: int | None
    physical_batch: int | None  # per GPU, train/val; None when it does not fit
    mem_gib: float | None  # estimated GPU memory at that batch
    throughput_img_s: float  # the rate used (train: images/s over all GPUs; export: 0)
    fits: bool
    why_not: str | None  # when not fits: a sentence a user can act on
    notes: tuple[str, ...] = ()  # assumptions a planner or user should know about


class Figures(NamedTuple):
    """An ``Estimate``'s fields as a plain tuple (see ``figures``): validating the model
    costs more than computing the numbers, and the planner needs ~10 per queued job."""

    hours: float
    setup_hours: float
    epoch_hours: float | None
    epochs_left: int | None
    physical_batch: int | None
    mem_gib: float | None
    throughput_img_s: float
    fits: bool
    why_not: str | None
    notes: tuple[str, ...] = ()


_tuple_new = tuple.__new__  # ``_tuple_new(Figures, (...))`` is ``Figures(...)`` without its Python-level ``__new__``


# --- setup and observed rates ------------------------------------------------------------


def _download_hours(n_bytes: float) -> float:
    return n_bytes / DOWNLOAD_BYTES_S / 3600


def observed_rate(
    epoch_seconds: float, train_images: int, val_images: int = 0, *, gpu_count: int = 1, nodes: int = 1
) -> float:
    """Turn one observed epoch (train + val wall time) into a ``measured`` entry.

    The result is the per-GPU training rate (img/s) that makes this model's epoch
    formula reproduce the observation on that machine; divided by the machine's
    ``perf_rates.loader_share`` (``perf_learning.record_epochs``) it is what ``estimate``
    takes in place of R_gpu. Epoch times come from results.csv row mtimes.
    """
    if epoch_seconds <= 0:
        raise GpuschedError(f"an observed epoch must take some time, got {epoch_seconds} s")
    n = gpu_count * nodes
    return (train_images + val_images / VAL_SPEEDUP) / epoch_seconds / (n * scaling_efficiency(n))


# --- the estimate ------------------------------------------------------------------------


def estimate(
    spec: JobSpec,
    gpu: str,
    gpu_count: int = 1,
    vcpus: int = 8,
    *,
    epochs_done: int = 0,
    nodes: int = 1,
    measured: Mapping[tuple[str, str, int], float] | None = None,
) -> Estimate:
    """How long ``spec`` takes from here on ``nodes`` x ``gpu_count`` x ``gpu`` with ``vcpus`` per node.

    ``measured`` maps (model, gpu, img_size) to a learned GPU-bound per-GPU training rate
    in img/s (see ``observed_rate``); it replaces R_gpu for train and val, and the
    data loader of a machine with ``vcpus`` scales it as it caps the prior.
    """
    return Estimate(**figures(spec, gpu, gpu_count, vcpus, epochs_done=epochs_done, nodes=nodes,
                              measured=measured)._asdict())


def figures(
    spec: JobSpec,
    gpu: str,
    gpu_count: int = 1,
    vcpus: int = 8,
    *,
    epochs_done: int = 0,
    nodes: int = 1,
    measured: Mapping[tuple[str, str, int], float] | None = None,
) -> Figures:
    """``estimate``'s numbers, the same to the bit, as a ``Figures`` tuple instead of an ``Estimate``."""
    return figures_for(spec, epochs_done=epochs_done, nodes=nodes, measured=measured)(gpu, gpu_count, vcpus)


OnSetup = Callable[[str, int, int], Figures]  # (gpu, gpu_count, vcpus) -> figures


def figures_for(
    spec: JobSpec,
    *,
    epochs_done: int = 0,
    nodes: int = 1,
    measured: Mapping[tuple[str, str, int], float] | None = None,
) -> OnSetup:
    """``figures`` of one job, as a function of the GPU setup: what depends on the job alone (its
    images, epochs, setup time) is read once for the ~6 setups the planner asks about. The same
    operations in the same order as one ``figures`` call each, so the same numbers to the bit, and the
    same errors: an unknown GPU first, then what the job file lacks."""
    try:
        if spec.kind is Kind.train:
            on = _train_for(spec, epochs_done, nodes, measured or {})
        elif spec.kind is Kind.val:
            on = _val_for(spec, measured or {})
        elif spec.kind is Kind.infer:
            on = _infer_for(spec, epochs_done)
        else:
            on = _export_for(spec)
    except UserError as exc:
        return partial(_unsized, exc)
    return on


def _unsized(exc: UserError, gpu: str, gpu_count: int, vcpus: int) -> Figures:
    gpu_spec(gpu)
    raise exc


def _train_for(spec: JobSpec, epochs_done: int, nodes: int, measured: Mapping[tuple[str, str, int], float]) -> OnSetup:
    train = spec.train or _DEFAULT_TRAIN
    if spec.data is None or spec.data.train_images is None:
        raise UserError("a train job needs data.train_images to be estimated", fix="set data.train_images")
    train_images = spec.data.train_images
    val_images = spec.data.val_images or 0
    epochs_left = max(train.epochs - epochs_done, 0)
    model, img_size, batch = spec.model, train.img_size, train.batch
    setup = IMAGE_PULL_HOURS + _download_hours((train_images + val_images) * BYTES_PER_IMAGE)
    if epochs_done > 0:
        setup += _checkpoint_hours(model, stripped=False)
    elif train.weights:
        setup += _checkpoint_hours(model, stripped=True)

    def on(gpu: str, gpu_count: int, vcpus: int) -> Figures:
        if gpu not in GPUS:
            gpu_spec(gpu)  # raises
        setting = _train_setting(model, gpu, img_size, batch, gpu_count, nodes, vcpus,
                                 measured.get((model, gpu, img_size)) if measured else None)
        if setting is None:
            return _does_not_fit(model, gpu, img_size, train_memory_gib(model, 1, img_size),
                                 epochs_left=epochs_left, train=True)
        physical, rate, mem_gib, notes = setting
        epoch_hours = (train_images / rate + val_images / (rate * VAL_SPEEDUP)) / 3600
        # In Figures' order: hours, setup, epoch hours, epochs left, batch, memory, rate, fits, why not, notes;
        # ``_tuple_new``, not ``Figures(...)``: keywords, or even the NamedTuple's own ``__new__``, cost more
        # than the arithmetic.
        return _tuple_new(Figures, (setup + epochs_left * epoch_hours, setup, epoch_hours, epochs_left, physical,
                                    mem_gib, rate, True, None, notes))

    return on


@lru_cache(maxsize=4096)  # bounded: measured rates are floats that change as epochs are observed
def _train_setting(model: str, gpu: str, img_size: int, batch: int, gpu_count: int, nodes: int, vcpus: int,
                   measured_rate: float | None) -> tuple[int, float, float, tuple[str, ...]] | None:
    """What a training run's speed depends on besides its image and epoch counts: the physical batch,
    the images/s over all GPUs, the memory at that batch and the notes; None when batch 1 does not fit."""
    total_gpus = gpu_count * nodes
    per_gpu_batch = max(1, math.ceil(batch / total_gpus))
    physical = physical_batch(model, gpu, img_size, per_gpu_batch)
    if physical is None:
        return None
    notes: list[str] = []
    if measured_rate is None:
        per_gpu = min(gpu_bound_rate(model, gpu, img_size), cpu_bound_rate(vcpus, gpu_count, physical))
    else:
        # Learned rates are GPU-bound rates (``perf_learning.record_epochs``): this machine's loader may
        # feed less than the machines they were measured on.
        share = loader_share(model, gpu, img_size, vcpus, gpu_count, physical)
        per_gpu = measured_rate * share
        notes.append("training rate measured on earlier epochs" if share == 1.0 else
                     f"training rate measured on earlier epochs, x{share:.2f} for this machine's data loader")
    rate = per_gpu * total_gpus * scaling_efficiency(total_gpus)
    if total_gpus > 1:
        notes.append(f"multi-GPU speed-up assumes {SCALING_PER_DOUBLING:.0%} efficiency per doubling [EST]")
    return physical, rate, train_memory_gib(model, physical, img_size), tuple(notes)


@lru_cache(maxsize=64)
def _checkpoint_hours(model: str, *, stripped: bool) -> float:
    return _download_hours(checkpoint_mb(model, stripped=stripped) * 1e6)


def _val_for(spec: JobSpec, measured: Mapping[tuple[str, str, int], float]) -> OnSetup:
    val = spec.val
    if val is None:
        raise UserError("a val job needs a val: section", fix="add val: {weights: ..., img_size: 640}")
    if spec.data is None or not spec.data.val_images:
        raise UserError("a val job needs data.val_images to be estimated", fix="set data.val_images")
    model, img_size, batch, images = spec.model, val.img_size, val.batch, spec.data.val_images
    setup = IMAGE_PULL_HOURS + _download_hours(images * BYTES_PER_IMAGE) + _checkpoint_hours(model, stripped=True)

    def on(gpu: str, gpu_count: int, vcpus: int) -> Figures:
        if gpu not in GPUS:
            gpu_spec(gpu)  # raises
        setting = _val_setting(model, gpu, img_size, batch, vcpus,
                               measured.get((model, gpu, img_size)) if measured else None)
        if setting is None:
            return _does_not_fit(model, gpu, img_size, infer_memory_gib(model, 1, img_size))
        physical, rate, mem_gib = setting
        return _tuple_new(Figures, (setup + images / rate / 3600, setup, None, None, physical, mem_gib, rate, True,
                                    None, _single_gpu_note(gpu_count, "val.py")))  # as in _train_for

    return on


@lru_cache(maxsize=4096)  # bounded: measured rates are floats that change as epochs are observed
def _val_setting(model: str, gpu: str, img_size: int, batch: int, vcpus: int,
                 measured_rate: float | None) -> tuple[int, float, float] | None:
    """A validation run's batch, images/s and memory at that batch; None when batch 1 does not fit."""
    usable = usable_memory_gib(gpu)
    physical = largest_fitting(batch, lambda b: infer_memory_gib(model, b, img_size) <= usable)
    if physical is None:
        return None
    per_gpu = gpu_bound_rate(model, gpu, img_size) if measured_rate is None else measured_rate
    # val.py loads without mosaic, so its data-loading ceiling is the plain one.
    rate = min(per_gpu * VAL_SPEEDUP, PLAIN_IMG_S_PER_CPU * loader_workers(vcpus, 1, physical))
    return physical, rate, infer_memory_gib(model, physical, img_size)


_DETECT_NOTES = ("detect.py runs one image at a time on one GPU; more GPUs do not speed it up",)


def _infer_for(spec: JobSpec, shards_done: int) -> OnSetup:
    """Inference runs in shards (``infer_shards``); ``shards_done`` of them are already uploaded.

    A shard is the resumable unit, reported like an epoch: ``epoch_hours`` is one shard's
    detection time and ``epochs_left`` the shards still to run. Every attempt stages the
    whole source (setup), whatever is left of it."""
    infer: InferSpec | None = spec.infer
    if infer is None:
        raise UserError("an infer job needs an infer: section", fix="add infer: {source: ..., images: ...}")
    model, img_size, images = spec.model, infer.img_size, infer.images
    shards = shard_count(images)
    left = max(0, shards - shards_done)
    setup = IMAGE_PULL_HOURS + _download_hours(images * BYTES_PER_IMAGE) + _checkpoint_hours(model, stripped=True)

    def on(gpu: str, gpu_count: int, vcpus: int) -> Figures:
        gpu_spec(gpu)
        mem, rate = _infer_setting(model, gpu, img_size)
        if rate is None:
            return _does_not_fit(model, gpu, img_size, mem)
        work = images / rate / 3600
        # ``work * (left / shards)`` is ``work`` itself, to the bit, before any shard is done.
        return _tuple_new(Figures, (setup + work * (left / shards), setup, work / shards, left, None, mem, rate,
                                    True, None, _DETECT_NOTES))  # as in _train_for

    return on


@lru_cache(maxsize=4096)
def _infer_setting(model: str, gpu: str, img_size: int) -> tuple[float, float | None]:
    """Inference memory at batch 1, and images/s (None when that does not fit)."""
    mem = infer_memory_gib(model, 1, img_size)
    if mem > usable_memory_gib(gpu):
        return mem, None
    return mem, 1 / infer_seconds_per_image(model, gpu, img_size)


def _export_for(spec: JobSpec) -> OnSetup:
    export: ExportSpec | None = spec.export
    if export is None:
        raise UserError("an export job needs an export: section", fix="add export: {weights: ..., formats: [onnx]}")
    model, formats, img_size = spec.model, export.formats, export.img_size

    def on(gpu: str, gpu_count: int, vcpus: int) -> Figures:
        gpu_spec(gpu)
        return _export_figures(model, formats, img_size, gpu)

    return on


@lru_cache(maxsize=4096)
def _export_figures(model: str, formats: tuple[str, ...], img_size: int, gpu: str) -> Figures:
    """An export reads nothing else of the job: its whole estimate is cached."""
    minutes = 0.0
    notes: list[str] = []
    for fmt in formats:
        if fmt == "engine":
            minutes += ENGINE_FIXED_MIN + ENGINE_T4_SCALED_MIN * speed_factor("T4") / speed_factor(gpu)
            notes.append(f"a TensorRT engine runs only on the GPU model it was built on: this one is for {gpu}")
        else:
            minutes += EXPORT_MINUTES[fmt]
    setup = IMAGE_PULL_HOURS + _checkpoint_hours(model, stripped=True)
    return Figures(
        hours=setup + minutes / 60,
        setup_hours=setup,
        epoch_hours=None,
        epochs_left=None,
        physical_batch=None,
        mem_gib=infer_memory_gib(model, 1, img_size),
        throughput_img_s=0.0,
        fits=True,
        why_not=None,
        notes=tuple(notes),
    )


# Kinds whose estimate reads the GPU model but neither the GPU count, the vCPUs nor the nodes
# (detect.py runs on one GPU; exports convert on the CPU): one estimate serves every setup of a GPU.
GPU_ONLY_KINDS = frozenset({Kind.infer, Kind.export})


def needs_gpu(spec: JobSpec) -> bool:
    """Whether the job needs a GPU at all: every kind does except an export without ``engine``."""
    if spec.kind is Kind.export:
        return spec.export is not None and "engine" in spec.export.formats
    return True


def _single_gpu_note(gpu_count: int, script: str) -> tuple[str, ...]:
    if gpu_count > 1:
        return (f"{script} uses one GPU; the other {gpu_count - 1} would sit idle",)
    return ()


def _does_not_fit(
    model: str, gpu: str, img_size: int, need_gib: float, *, epochs_left: int | None = None, train: bool = False
) -> Figures:
    have = gpu_spec(gpu).mem_gib
    why = (
        f"{model} at {img_size} px needs ~{need_gib:.0f} GiB at batch 1; {gpu} has {have:.0f} GiB: "
        f"allow a GPU with more memory or lower img_size"
    )
    return Figures(
        hours=math.inf,
        setup_hours=0.0,
        epoch_hours=math.inf if train else None,
        epochs_left=epochs_left,
        physical_batch=None,
        mem_gib=need_gib,
        throughput_img_s=0.0,
        fits=False,
        why_not=why,
    )


__all__ = [
    "GPU_ONLY_KINDS",
    "Estimate",
    "Figures",
    "OnSetup",
    "estimate",
    "figures",
    "figures_for",
    "needs_gpu",
    "observed_rate",
]
