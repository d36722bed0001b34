"""Whether a YOLOv9 job fits in a GPU's memory, and at which batch (docs/yolov9-model.md, "Memory and
batch size").

Peak memory is a base (CUDA context, weights, optimizer state) plus a slope times the batch times
the variant's activation memory per image, scaled by image area; inference keeps a third of the
activations. The planner keeps to 90% of a GPU's memory and trains at the largest power-of-two
batch that fits there.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from scheduler.jobs.perf_priors import (
    INFER_ACT_FRACTION,
    MEM_BASE_GIB,
    MEM_HEADROOM,
    MEM_SLOPE,
    REF_IMG,
    gpu_spec,
    variant,
)

__all__ = [
    "batch_candidates",
    "infer_memory_gib",
    "largest_fitting",
    "physical_batch",
    "train_memory_gib",
    "usable_memory_gib",
]


def train_memory_gib(model: str, batch: int, img_size: int) -> float:
    """Estimated peak training memory on one GPU at a per-GPU ``batch`` [EST]."""
    scale = (img_size / REF_IMG) ** 2
    return MEM_BASE_GIB + MEM_SLOPE * batch * variant(model).act_gib * scale


def infer_memory_gib(model: str, batch: int, img_size: int) -> float:
    """Estimated peak inference / validation memory at ``batch`` [EST]."""
    scale = (img_size / REF_IMG) ** 2
    return MEM_BASE_GIB + MEM_SLOPE * batch * variant(model).act_gib * scale * INFER_ACT_FRACTION


def usable_memory_gib(gpu: str) -> float:
    return gpu_spec(gpu).mem_gib * MEM_HEADROOM


def batch_candidates(limit: int) -> list[int]:
    """Powers of two below ``limit``, then ``limit`` itself, ascending.

    YOLOv9 accumulates gradients up to a nominal batch of 64 with
    round(64 / batch) steps; a power of two keeps that product exactly 64.
    """
    out = [1 << k for k in range(limit.bit_length()) if (1 << k) < limit]
    return out + [limit]


def largest_fitting(limit: int, fits: Callable[[int], bool]) -> int | None:
    """The largest of ``batch_candidates(limit)`` that ``fits``; None when none does."""
    best = None
    for b in batch_candidates(max(limit, 1)):
        if fits(b):
            best = b
    return best


@lru_cache(maxsize=4096)
def physical_batch(model: str, gpu: str, img_size: int, effective_batch: int) -> int | None:
    """The largest power-of-two batch <= ``effective_batch`` (or that batch itself) whose
    training memory stays within 90% of the GPU's; None when even batch 1 does not fit."""
    usable = usable_memory_gib(gpu)
    return largest_fitting(effective_batch, lambda b: train_memory_gib(model, b, img_size) <= usable)
