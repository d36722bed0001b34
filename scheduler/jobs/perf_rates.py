"""How fast YOLOv9 runs on a GPU: training images/s, data-loading ceilings, multi-GPU scaling and
detect.py's time per image, from the priors in ``perf_priors`` (docs/yolov9-model.md, "Training rate").

The training rate is anchored on the official yolov9-c run (8x RTX 3090, ~35 img/s per GPU) and
scaled by model GFLOPs, GPU speed S(g) and image size; the mosaic data loader on the CPU caps it.
Functions of names and numbers only, cached where the planner calls them per GPU setup.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from functools import cache, lru_cache

from scheduler.jobs.perf_priors import (
    ANCHOR_GFLOPS,
    ANCHOR_IMG_S,
    ANCHOR_SQRT,
    EAGER_OVER_TRT,
    GFLOPS_EXPONENT,
    INFER_FIXED_S,
    INFER_IO_FLOOR_S,
    MOSAIC_IMG_S_PER_CPU,
    REF_IMG,
    SCALING_PER_DOUBLING,
    WORKERS,
    gpu_spec,
    variant,
)

__all__ = [
    "cpu_bound_rate",
    "gpu_bound_rate",
    "infer_seconds_per_image",
    "loader_share",
    "loader_workers",
    "scaling_efficiency",
    "speed_factor",
]


@cache
def speed_factor(gpu: str) -> float:
    """S(g): training speed relative to an RTX 3090, from FP16 tensor TFLOPS and bandwidth.

    The T4 also carries its 70 W power cap (x0.6), which keeps it far below its
    paper figures under sustained load.
    """
    spec = gpu_spec(gpu)
    return math.sqrt(spec.fp16_tflops * spec.bandwidth_gbs) / ANCHOR_SQRT * spec.power_factor


@lru_cache(maxsize=4096)
def gpu_bound_rate(model: str, gpu: str, img_size: int = REF_IMG) -> float:
    """R_gpu: training images/s one GPU sustains when data loading keeps up."""
    v = variant(model)
    return (
        ANCHOR_IMG_S
        * (ANCHOR_GFLOPS / v.train_gflops) ** GFLOPS_EXPONENT
        * speed_factor(gpu)
        * (REF_IMG / img_size) ** 2
    )


def cpu_bound_rate(vcpus: int, gpu_count: int = 1, batch: int = WORKERS) -> float:
    """R_cpu: training images/s the mosaic data loader feeds one GPU.

    YOLOv9 gives each GPU's loader min(cpus // gpus, batch, --workers) worker
    processes (none at batch 1, where the training process loads the data itself).
    """
    return MOSAIC_IMG_S_PER_CPU * loader_workers(vcpus, gpu_count, batch)


def loader_workers(vcpus: int, gpu_count: int, batch: int) -> int:
    """Data-loader processes per GPU, as YOLOv9 sets them; at least one (the training process)."""
    return max(min(vcpus // max(gpu_count, 1), batch if batch > 1 else 0, WORKERS), 1)


def loader_share(model: str, gpu: str, img_size: int, vcpus: int, gpu_count: int, batch: int) -> float:
    """How much of the GPU-bound rate a machine's mosaic loader lets through: min(R_cpu / R_gpu, 1).

    Learned training rates are kept as GPU-bound rates (``perf_learning.record_epochs`` divides an
    observed rate by its machine's share) and scaled by each candidate machine's share when estimated
    (``perf``): a rate measured on a 32-vCPU machine is not what a 4-vCPU one of the same GPU feeds."""
    return min(cpu_bound_rate(vcpus, gpu_count, batch) / gpu_bound_rate(model, gpu, img_size), 1.0)


def scaling_efficiency(total_gpus: int) -> float:
    """[EST] Share of linear speed-up kept with ``total_gpus`` GPUs: 0.9 per doubling."""
    return SCALING_PER_DOUBLING ** math.log2(max(total_gpus, 1))


@lru_cache(maxsize=4096)
def infer_seconds_per_image(model: str, gpu: str, img_size: int = REF_IMG) -> float:
    """[EST] detect.py wall time per image: eager GPU time + fixed overhead + I/O floor."""
    gpu_part = (
        EAGER_OVER_TRT
        * variant(model).trt_t4_ms
        / 1000
        * speed_factor("T4")
        / speed_factor(gpu)
        * (img_size / REF_IMG) ** 2
    )
    return gpu_part + INFER_FIXED_S + INFER_IO_FLOOR_S
