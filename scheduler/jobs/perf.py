"""How long a YOLOv9 job takes on a GPU setup, and whether it fits in memory.

The priors come from ``docs/yolov9-model.md``: a training rate anchored on the
official yolov9-c run (8x RTX 3090, ~35 img/s per GPU) and scaled by model
GFLOPs, GPU speed and image size; a per-variant activation-memory figure; and a
data-loading ceiling from mosaic augmentation on the CPU. Numbers marked [EST]
are this module's own estimates, each with its reasoning. Every prior is a
prior: callers pass ``measured`` rates learned from a job's first epochs (see
``observed_rate``) and those win.

Pure functions only: no clock, no I/O.

Speed: the planner asks for ~10 estimates per queued job, and every job has its
own image count, so caching whole estimates would not hit. What does not depend
on the job's image and epoch counts -- the physical batch, the rate, the memory
for a (model, GPU setup, image size, batch, measured rate) -- is cached in the
``_*_setting`` functions (bounded ``functools`` caches of pure functions of
immutable arguments), leaving a few float operations per estimate; they are the
same operations in the same order as before, so the numbers are the same to the
bit. The planner takes ``figures_for``: a job's figures as a function of the GPU
setup (what depends on the job alone is read once, not once per setup), as a plain
tuple, without building and validating an ``Estimate`` model (which costs more
than the rest).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache, partial
from typing import NamedTuple

from scheduler.errors import GpuschedError, UserError
from scheduler.gpus import GPUS, GpuSpec
from scheduler.jobs.infer_shards import shard_count
from scheduler.models import ExportSpec, Frozen, InferSpec, JobSpec, Kind, TrainSpec

# --- model variants ---------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    train_params_m: float  # train-time parameters, millions
    train_gflops: float  # train-time GFLOPs at 640 px
    act_gib: float  # a_v: activation memory per image at 640 px (the memory model's slope)
    trt_t4_ms: float  # TensorRT FP16 batch-1 latency on a T4, ms


# Train-time params / GFLOPs and a_v from docs/yolov9-model.md. The TensorRT
# latencies are published for yolov9-t..e only; a GELAN model is what a
# converted (auxiliary branch removed) YOLOv9 model runs as, so each gelan
# variant takes its yolov9 sibling's latency [EST].
VARIANTS: dict[str, Variant] = {
    "yolov9-t": Variant(3.72, 16.5, 0.19, 2.30),
    "yolov9-s": Variant(9.80, 39.9, 0.34, 3.54),
    "yolov9-m": Variant(32.88, 133.0, 0.76, 6.43),
    "yolov9-c": Variant(51.18, 239.9, 1.04, 7.16),
    "yolov9-e": Variant(69.53, 245.5, 1.30, 16.77),
    "gelan-t": Variant(2.44, 10.1, 0.14, 2.30),
    "gelan-s": Variant(7.23, 27.0, 0.25, 3.54),
    "gelan-m": Variant(20.12, 77.4, 0.45, 6.43),
    "gelan-c": Variant(25.50, 103.5, 0.58, 7.16),
    "gelan-e": Variant(58.11, 192.5, 1.12, 16.77),
}

# Training checkpoints (last.pt with optimizer state), measured [CPU] in the
# reference for four variants. They all come to ~8.04 MB per million train-time
# parameters, which sizes the rest.
_CHECKPOINT_MB = {"yolov9-s": 80.0, "gelan-c": 205.0, "yolov9-c": 411.0, "yolov9-e": 559.0}
_MB_PER_M_PARAMS = 8.04
# A stripped checkpoint (best.pt, a finished last.pt) is about a quarter of that.
_STRIPPED_FRACTION = 0.25

# --- the throughput prior ------------------------------------------------------------

_ANCHOR_IMG_S = 35.0  # yolov9-c per RTX 3090: 500 COCO epochs on 8 GPUs in ~2.5 days
_ANCHOR_GFLOPS = 239.9
_ANCHOR_SQRT = math.sqrt(71 * 936)  # RTX 3090: FP16 tensor TFLOPS x GB/s
_GFLOPS_EXPONENT = 0.7
_REF_IMG = 640

_WORKERS = 8  # YOLOv9's default --workers
_MOSAIC_IMG_S_PER_CPU = 20.0  # mosaic loading, ~21 img/s per core measured [CPU]
_PLAIN_IMG_S_PER_CPU = 120.0  # loading without mosaic (validation), ~120 img/s per core [CPU]
# [EST] Linear scaling is never reached; 90% per doubling of GPUs is a common
# rule of thumb for DDP on one node, kept across nodes for want of a measurement.
_SCALING_PER_DOUBLING = 0.9
_VAL_SPEEDUP = 3.5  # validation runs 3-4x the training rate: no backward pass, no mosaic

# --- memory --------------------------------------------------------------------------

_MEM_BASE_GIB = 2.0  # CUDA context, weights, optimizer state
_MEM_SLOPE = 1.15
_MEM_HEADROOM = 0.9  # plan to at most 90% of the GPU's memory
# [EST] Inference keeps no activations for a backward pass and no gradients; a
# third of the training activation memory at the same batch is a safe upper guess.
_INFER_ACT_FRACTION = 1 / 3

_DEFAULT_TRAIN = TrainSpec()  # a train job without a train: section runs with the defaults

# --- setup ---------------------------------------------------------------------------

# [EST] The job image (CUDA + PyTorch + YOLOv9) is ~4 GB compressed: ~40 s to
# download at 100 MB/s and a few minutes to extract on a fresh disk.
_IMAGE_PULL_HOURS = 4 / 60
_BYTES_PER_IMAGE = 150e3  # a typical training JPEG
_DOWNLOAD_BYTES_S = 100e6  # object storage to a cloud VM in the same region

# --- inference -----------------------------------------------------------------------

# [EST] detect.py runs PyTorch eager at batch 1, not TensorRT. Fitting
# t = a / S(g) + b to the seed articles' yolov9-s claims on T4 (18.3 ms) and
# A100 (6.5 ms) gives a GPU part of ~3.8x the T4 TensorRT latency on a T4 and a
# fixed part b ~4.8 ms (Python, kernel launches, NMS). Rounded to 4x and 5 ms.
_EAGER_OVER_TRT = 4.0
_INFER_FIXED_S = 0.005
# [EST] detect.py reads, decodes and letterboxes each image on one CPU thread
# and appends its label file: ~5 ms for a 150 KB JPEG, whatever the GPU.
_INFER_IO_FLOOR_S = 0.005

# [EST] Minutes per export format at 640 px, for the conversion itself (CPU-bound,
# except TensorRT, which times kernels on the GPU while it builds the plan).
_EXPORT_MINUTES: dict[str, float] = {
    "torchscript": 1.0,
    "onnx": 2.0,
    "openvino": 3.0,
    "coreml": 3.0,
    "saved_model": 6.0,
    "pb": 6.0,
    "tflite": 8.0,
}
# [EST] TensorRT builds take ~10 minutes on a T4 for the larger models and
# shrink with GPU speed: 3 fixed minutes plus 7 scaled by S(T4) / S(g).
_ENGINE_FIXED_MIN = 3.0
_ENGINE_T4_SCALED_MIN = 7.0


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


# --- building blocks -------------------------------------------------------------------


def variant(model: str) -> Variant:
    try:
        return VARIANTS[model]
    except KeyError:
        raise UserError(f"unknown model {model!r}", fix=f"use one of {', '.join(VARIANTS)}") from None


def _gpu(name: str) -> GpuSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise UserError(f"unknown GPU {name!r}", fix=f"use one of {', '.join(GPUS)}") from None


@cache
def speed_factor(gpu: str) -> float:
    """S(g): training speed relative to an RTX 3090, from FP16 tensor TFLOPS and bandwidth.

    The T4 also carries its 70 W power cap (x0.6), which keeps it far below its
    paper figures under sustained load.
    """
    spec = _gpu(gpu)
    return math.sqrt(spec.fp16_tflops * spec.bandwidth_gbs) / _ANCHOR_SQRT * spec.power_factor


@lru_cache(maxsize=4096)
def gpu_bound_rate(model: str, gpu: str, img_size: int = _REF_IMG) -> float:
    """R_gpu: training images/s one GPU sustains when data loading keeps up."""
    v = variant(model)
    return (
        _ANCHOR_IMG_S
        * (_ANCHOR_GFLOPS / v.train_gflops) ** _GFLOPS_EXPONENT
        * speed_factor(gpu)
        * (_REF_IMG / img_size) ** 2
    )


def cpu_bound_rate(vcpus: int, gpu_count: int = 1, batch: int = _WORKERS) -> float:
    """R_cpu: training images/s the mosaic data loader feeds one GPU.

    YOLOv9 gives each GPU's loader min(cpus // gpus, batch, --workers) worker
    processes (none at batch 1, where the training process loads the data itself).
    """
    return _MOSAIC_IMG_S_PER_CPU * _loader_workers(vcpus, gpu_count, batch)


def _loader_workers(vcpus: int, gpu_count: int, batch: int) -> int:
    return max(min(vcpus // max(gpu_count, 1), batch if batch > 1 else 0, _WORKERS), 1)


def scaling_efficiency(total_gpus: int) -> float:
    """[EST] Share of linear speed-up kept with ``total_gpus`` GPUs: 0.9 per doubling."""
    return _SCALING_PER_DOUBLING ** math.log2(max(total_gpus, 1))


def train_memory_gib(model: str, batch: int, img_size: int) -> float:
    """Estimated peak training memory on one GPU at a per-GPU ``batch`` [EST]."""
    scale = (img_size / _REF_IMG) ** 2
    return _MEM_BASE_GIB + _MEM_SLOPE * batch * variant(model).act_gib * scale


def infer_memory_gib(model: str, batch: int, img_size: int) -> float:
    """Estimated peak inference / validation memory at ``batch`` [EST]."""
    scale = (img_size / _REF_IMG) ** 2
    return _MEM_BASE_GIB + _MEM_SLOPE * batch * variant(model).act_gib * scale * _INFER_ACT_FRACTION


def usable_memory_gib(gpu: str) -> float:
    return _gpu(gpu).mem_gib * _MEM_HEADROOM


def _batch_candidates(limit: int) -> list[int]:
    """Powers of two below ``limit``, then ``limit`` itself, ascending.

    YOLOv9 accumulates gradients up to a nominal batch of 64 with
    round(64 / batch) steps; a power of two keeps that product exactly 64.
    """
    out = [1 << k for k in range(limit.bit_length()) if (1 << k) < limit]
    return out + [limit]


def _largest_fitting(limit: int, fits: Callable[[int], bool]) -> int | None:
    best = None
    for b in _batch_candidates(max(limit, 1)):
        if fits(b):
            best = b
    return best


@lru_cache(maxsize=4096)
def physical_batch(model: str, gpu: str, img_size: int, effective_batch: int) -> int | None:
    """The largest power-of-two batch <= ``effective_batch`` (or that batch itself) whose
    training memory stays within 90% of the GPU's; None when even batch 1 does not fit."""
    usable = usable_memory_gib(gpu)
    return _largest_fitting(effective_batch, lambda b: train_memory_gib(model, b, img_size) <= usable)


def checkpoint_mb(model: str, *, stripped: bool = False) -> float:
    """Size of a training checkpoint (``stripped``: weights only, like best.pt)."""
    full = _CHECKPOINT_MB.get(model, variant(model).train_params_m * _MB_PER_M_PARAMS)
    return full * _STRIPPED_FRACTION if stripped else full


def _download_hours(n_bytes: float) -> float:
    return n_bytes / _DOWNLOAD_BYTES_S / 3600


def observed_rate(
    epoch_seconds: float, train_images: int, val_images: int = 0, *, gpu_count: int = 1, nodes: int = 1
) -> float:
    """Turn one observed epoch (train + val wall time) into a ``measured`` entry.

    The result is the per-GPU training rate (img/s) that makes this model's epoch
    formula reproduce the observation; ``estimate`` uses it in place of
    min(R_gpu, R_cpu). Epoch times come from results.csv row mtimes.
    """
    if epoch_seconds <= 0:
        raise GpuschedError(f"an observed epoch must take some time, got {epoch_seconds} s")
    n = gpu_count * nodes
    return (train_images + val_images / _VAL_SPEEDUP) / epoch_seconds / (n * scaling_efficiency(n))


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

    ``measured`` maps (model, gpu, img_size) to an observed per-GPU training rate
    in img/s (see ``observed_rate``); it replaces the prior for train and val.
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
    _gpu(gpu)
    raise exc


def _train_for(spec: JobSpec, epochs_done: int, nodes: int, measured: Mapping[tuple[str, str, int], float]) -> OnSetup:
    train = spec.train or _DEFAULT_TRAIN
    if spec.data is None or spec.data.train_images is None:
        raise UserError("a train job needs data.train_images to be estimated", fix="set data.train_images")
    train_images = spec.data.train_images
    val_images = spec.data.val_images or 0
    epochs_left = max(train.epochs - epochs_done, 0)
    model, img_size, batch = spec.model, train.img_size, train.batch
    setup = _IMAGE_PULL_HOURS + _download_hours((train_images + val_images) * _BYTES_PER_IMAGE)
    if epochs_done > 0:
        setup += _checkpoint_hours(model, stripped=False)
    elif train.weights:
        setup += _checkpoint_hours(model, stripped=True)

    def on(gpu: str, gpu_count: int, vcpus: int) -> Figures:
        if gpu not in GPUS:
            _gpu(gpu)  # raises
        setting = _train_setting(model, gpu, img_size, batch, gpu_count, nodes, vcpus,
                                 measured.get((model, gpu, img_size)) if measured else None)
        if setting is None:
            return _does_not_fit(model, gpu, img_size, train_memory_gib(model, 1, img_size),
                                 epochs_left=epochs_left, train=True)
        physical, rate, mem_gib, notes = setting
        epoch_hours = (train_images / rate + val_images / (rate * _VAL_SPEEDUP)) / 3600
        # Positional, in Figures' order: hours, setup, epoch hours, epochs left, batch, memory, rate, fits,
        # why not, notes (keywords cost more than the arithmetic).
        return Figures(setup + epochs_left * epoch_hours, setup, epoch_hours, epochs_left, physical, mem_gib, rate,
                       True, None, notes)

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
    per_gpu = measured_rate
    notes: list[str] = []
    if per_gpu is None:
        per_gpu = min(gpu_bound_rate(model, gpu, img_size), cpu_bound_rate(vcpus, gpu_count, physical))
    else:
        notes.append("training rate measured on earlier epochs")
    rate = per_gpu * total_gpus * scaling_efficiency(total_gpus)
    if total_gpus > 1:
        notes.append(f"multi-GPU speed-up assumes {_SCALING_PER_DOUBLING:.0%} efficiency per doubling [EST]")
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
    setup = _IMAGE_PULL_HOURS + _download_hours(images * _BYTES_PER_IMAGE) + _checkpoint_hours(model, stripped=True)

    def on(gpu: str, gpu_count: int, vcpus: int) -> Figures:
        if gpu not in GPUS:
            _gpu(gpu)  # raises
        setting = _val_setting(model, gpu, img_size, batch, vcpus,
                               measured.get((model, gpu, img_size)) if measured else None)
        if setting is None:
            return _does_not_fit(model, gpu, img_size, infer_memory_gib(model, 1, img_size))
        physical, rate, mem_gib = setting
        return Figures(setup + images / rate / 3600, setup, None, None, physical, mem_gib, rate, True, None,
                       _single_gpu_note(gpu_count, "val.py"))  # positional, as in _train_for

    return on


@lru_cache(maxsize=4096)  # bounded: measured rates are floats that change as epochs are observed
def _val_setting(model: str, gpu: str, img_size: int, batch: int, vcpus: int,
                 measured_rate: float | None) -> tuple[int, float, float] | None:
    """A validation run's batch, images/s and memory at that batch; None when batch 1 does not fit."""
    usable = usable_memory_gib(gpu)
    physical = _largest_fitting(batch, lambda b: infer_memory_gib(model, b, img_size) <= usable)
    if physical is None:
        return None
    per_gpu = gpu_bound_rate(model, gpu, img_size) if measured_rate is None else measured_rate
    # val.py loads without mosaic, so its data-loading ceiling is the plain one.
    rate = min(per_gpu * _VAL_SPEEDUP, _PLAIN_IMG_S_PER_CPU * _loader_workers(vcpus, 1, physical))
    return physical, rate, infer_memory_gib(model, physical, img_size)


@lru_cache(maxsize=4096)
def infer_seconds_per_image(model: str, gpu: str, img_size: int = _REF_IMG) -> float:
    """[EST] detect.py wall time per image: eager GPU time + fixed overhead + I/O floor."""
    gpu_part = (
        _EAGER_OVER_TRT
        * variant(model).trt_t4_ms
        / 1000
        * speed_factor("T4")
        / speed_factor(gpu)
        * (img_size / _REF_IMG) ** 2
    )
    return gpu_part + _INFER_FIXED_S + _INFER_IO_FLOOR_S


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
    setup = _IMAGE_PULL_HOURS + _download_hours(images * _BYTES_PER_IMAGE) + _checkpoint_hours(model, stripped=True)

    def on(gpu: str, gpu_count: int, vcpus: int) -> Figures:
        _gpu(gpu)
        mem, rate = _infer_setting(model, gpu, img_size)
        if rate is None:
            return _does_not_fit(model, gpu, img_size, mem)
        work = images / rate / 3600
        # ``work * (left / shards)`` is ``work`` itself, to the bit, before any shard is done.
        return Figures(setup + work * (left / shards), setup, work / shards, left, None, mem, rate, True, None,
                       _DETECT_NOTES)  # positional, as in _train_for

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
        _gpu(gpu)
        return _export_figures(model, formats, img_size, gpu)

    return on


@lru_cache(maxsize=4096)
def _export_figures(model: str, formats: tuple[str, ...], img_size: int, gpu: str) -> Figures:
    """An export reads nothing else of the job: its whole estimate is cached."""
    minutes = 0.0
    notes: list[str] = []
    for fmt in formats:
        if fmt == "engine":
            minutes += _ENGINE_FIXED_MIN + _ENGINE_T4_SCALED_MIN * speed_factor("T4") / speed_factor(gpu)
            notes.append(f"a TensorRT engine runs only on the GPU model it was built on: this one is for {gpu}")
        else:
            minutes += _EXPORT_MINUTES[fmt]
    setup = _IMAGE_PULL_HOURS + _checkpoint_hours(model, stripped=True)
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
    have = _gpu(gpu).mem_gib
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
    "VARIANTS",
    "Estimate",
    "Figures",
    "OnSetup",
    "Variant",
    "checkpoint_mb",
    "cpu_bound_rate",
    "estimate",
    "figures",
    "figures_for",
    "gpu_bound_rate",
    "infer_memory_gib",
    "infer_seconds_per_image",
    "needs_gpu",
    "observed_rate",
    "physical_batch",
    "scaling_efficiency",
    "speed_factor",
    "train_memory_gib",
    "usable_memory_gib",
    "variant",
]
