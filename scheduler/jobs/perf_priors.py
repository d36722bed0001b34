"""The priors of the YOLOv9 time and memory model: every constant it uses, with its source.

The numbers and their sources are in ``docs/yolov9-model.md`` (its keys: Y1, the
official repository; CPU, measured by running that code on a CPU-only machine;
seed, the articles the project started from; EST, this project's own estimate).
Each [EST] here carries its reasoning next to it. Every prior is a prior: rates
measured on a job's first epochs replace them (``perf.observed_rate``).

Also the two lookups every part of the model starts from, ``variant`` and
``gpu_spec``, which turn an unknown name into a ``UserError`` with its fix, and
``checkpoint_mb``, sized from the checkpoint table below.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scheduler.errors import UserError
from scheduler.gpus import GPUS, GpuSpec

__all__ = [
    "VARIANTS",
    "Variant",
    "checkpoint_mb",
    "gpu_spec",
    "variant",
]

# --- model variants (docs/yolov9-model.md, "Model variants") ---------------------------


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
CHECKPOINT_MB = {"yolov9-s": 80.0, "gelan-c": 205.0, "yolov9-c": 411.0, "yolov9-e": 559.0}
MB_PER_M_PARAMS = 8.04
# A stripped checkpoint (best.pt, a finished last.pt) is about a quarter of that.
STRIPPED_FRACTION = 0.25

# --- the throughput prior (docs/yolov9-model.md, "Training rate") ----------------------

ANCHOR_IMG_S = 35.0  # yolov9-c per RTX 3090: 500 COCO epochs on 8 GPUs in ~2.5 days
ANCHOR_GFLOPS = 239.9
ANCHOR_SQRT = math.sqrt(71 * 936)  # RTX 3090: FP16 tensor TFLOPS x GB/s
GFLOPS_EXPONENT = 0.7
REF_IMG = 640

WORKERS = 8  # YOLOv9's default --workers
MOSAIC_IMG_S_PER_CPU = 20.0  # mosaic loading, ~21 img/s per core measured [CPU]
PLAIN_IMG_S_PER_CPU = 120.0  # loading without mosaic (validation), ~120 img/s per core [CPU]
# [EST] Linear scaling is never reached; 90% per doubling of GPUs is a common
# rule of thumb for DDP on one node, kept across nodes for want of a measurement.
SCALING_PER_DOUBLING = 0.9
VAL_SPEEDUP = 3.5  # validation runs 3-4x the training rate: no backward pass, no mosaic

# --- memory (docs/yolov9-model.md, "Memory and batch size") ----------------------------

MEM_BASE_GIB = 2.0  # CUDA context, weights, optimizer state
MEM_SLOPE = 1.15
MEM_HEADROOM = 0.9  # plan to at most 90% of the GPU's memory
# [EST] Inference keeps no activations for a backward pass and no gradients; a
# third of the training activation memory at the same batch is a safe upper guess.
INFER_ACT_FRACTION = 1 / 3

# --- setup (docs/yolov9-model.md, "Setup, checkpoints, inference, export") -------------

# [EST] The job image (CUDA + PyTorch + YOLOv9) is ~4 GB compressed: ~40 s to
# download at 100 MB/s and a few minutes to extract on a fresh disk.
IMAGE_PULL_HOURS = 4 / 60
BYTES_PER_IMAGE = 150e3  # a typical training JPEG
DOWNLOAD_BYTES_S = 100e6  # object storage to a cloud VM in the same region

# --- inference -------------------------------------------------------------------------

# [EST] detect.py runs PyTorch eager at batch 1, not TensorRT. Fitting
# t = a / S(g) + b to the seed articles' yolov9-s claims on T4 (18.3 ms) and
# A100 (6.5 ms) gives a GPU part of ~3.8x the T4 TensorRT latency on a T4 and a
# fixed part b ~4.8 ms (Python, kernel launches, NMS). Rounded to 4x and 5 ms.
EAGER_OVER_TRT = 4.0
INFER_FIXED_S = 0.005
# [EST] detect.py reads, decodes and letterboxes each image on one CPU thread
# and appends its label file: ~5 ms for a 150 KB JPEG, whatever the GPU.
INFER_IO_FLOOR_S = 0.005

# --- export ----------------------------------------------------------------------------

# [EST] Minutes per export format at 640 px, for the conversion itself (CPU-bound,
# except TensorRT, which times kernels on the GPU while it builds the plan).
EXPORT_MINUTES: dict[str, float] = {
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
ENGINE_FIXED_MIN = 3.0
ENGINE_T4_SCALED_MIN = 7.0


# --- lookups ---------------------------------------------------------------------------


def variant(model: str) -> Variant:
    try:
        return VARIANTS[model]
    except KeyError:
        raise UserError(f"unknown model {model!r}", fix=f"use one of {', '.join(VARIANTS)}") from None


def gpu_spec(name: str) -> GpuSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise UserError(f"unknown GPU {name!r}", fix=f"use one of {', '.join(GPUS)}") from None


def checkpoint_mb(model: str, *, stripped: bool = False) -> float:
    """Size of a training checkpoint (``stripped``: weights only, like best.pt)."""
    full = CHECKPOINT_MB.get(model, variant(model).train_params_m * MB_PER_M_PARAMS)
    return full * STRIPPED_FRACTION if stripped else full
