"""GPU models the project knows, with the specs the performance model needs.

Figures from ``docs/gpus-and-clouds.md`` (dense tensor FP16 TFLOPS, memory bandwidth).
``mem_gib`` is what the cloud reports to the OS; AWS shows A10G and L4 as 22.4 GiB.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    name: str
    mem_gib: float
    bandwidth_gbs: float
    fp16_tflops: float
    fp32_tflops: float
    tdp_w: int
    # Extra throughput factor for power-capped parts (T4 runs at 70 W).
    power_factor: float = 1.0


GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        GpuSpec("T4", 15.0, 320, 65, 8.1, 70, power_factor=0.6),
        GpuSpec("A10", 22.0, 600, 125, 31.2, 150),
        GpuSpec("A10G", 22.4, 600, 70, 31.5, 300),
        GpuSpec("L4", 22.4, 300, 121, 30.3, 72),
        GpuSpec("L20", 45.0, 864, 119.5, 59.4, 275),
        GpuSpec("V100", 16.0, 900, 125, 15.7, 300),
        GpuSpec("V100-32G", 32.0, 900, 125, 15.7, 300),
        GpuSpec("A100-40G", 40.0, 1555, 312, 19.5, 400),
        GpuSpec("A100-80G", 80.0, 2039, 312, 19.5, 400),
        GpuSpec("L40S", 44.9, 864, 362, 91.6, 350),
        GpuSpec("H100", 80.0, 3350, 989, 67, 700),
    )
}

# Names people type (SkyPilot's, the clouds' own pages) -> the name above. "A100" alone is the 40 GB
# part, as SkyPilot and the clouds' pages mean it; 80 GB has to be said. Matched case-insensitively.
ALIASES: dict[str, str] = {
    "a100": "A100-40G",
    "a100-40gb": "A100-40G",
    "a100-80gb": "A100-80G",
    "v100-32gb": "V100-32G",
    "h100-80gb": "H100",
}
_BY_LOWER: dict[str, str] = {name.lower(): name for name in GPUS} | ALIASES


def canonical_gpu(name: str) -> str | None:
    """The GPU model a typed name means (``a10g`` -> ``A10G``, ``A100`` -> ``A100-40G``), or None."""
    return _BY_LOWER.get(name.strip().lower())


def gpu_spellings() -> tuple[str, ...]:
    """Every accepted name, lower-case: the models and their aliases."""
    return tuple(_BY_LOWER)


def gpu(name: str) -> GpuSpec:
    known = canonical_gpu(name)
    if known is None:
        raise KeyError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}")
    return GPUS[known]
