"""The parts of the GPU run (``scripts/test-yolo --gpu``, test_on_gpu.py) that need no GPU, so that the CPU tier
checks them: the offer a machine's user-data names for a GPU the catalog does not know, the epoch times read
off the daemon's progress, and the image's Python with its GPU memory capped for its first run.
"""

from __future__ import annotations

import stat
from pathlib import Path

from scheduler.gpus import GPUS

GIB = 1 << 30


def offer_for(model: str | None, memory_mib: int) -> str:
    """The GPU an offer for this machine names: the driver's model when ``scheduler.gpus`` knows it, else
    the known GPU whose memory is closest to what NVML reports (an H200's 141 GB: an 80 GB GPU), so that the
    memory model sizes the batch for a GPU at least that large in memory."""
    if model in GPUS:
        return model
    return min(GPUS, key=lambda name: (abs(GPUS[name].mem_gib * 1024 - memory_mib), -GPUS[name].mem_gib))


def epoch_seconds(samples: list[tuple[float, int]]) -> list[float]:
    """Seconds each epoch took, from (monotonic time, epochs done) samples of the daemon's view, oldest first:
    an epoch ends when the count first shows it; the first starts at the first sample."""
    if not samples:
        return []
    out, last_t, last_n = [], samples[0][0], samples[0][1]
    for t, n in samples[1:]:
        if n > last_n:
            out.extend([(t - last_t) / (n - last_n)] * (n - last_n))
            last_t, last_n = t, n
    return out


def capped_python(path: Path, python: str, marker: Path, cap_bytes: int) -> str:
    """A stand-in for the image's Python whose first run may use only ``cap_bytes`` of GPU 0's memory
    (``torch.cuda.set_per_process_memory_fraction``), so that a batch the memory model chose runs out of
    memory for real; later runs are not capped. Runs the script as ``python script args`` would (``runpy``:
    ``__main__``, ``__file__``, ``sys.argv``). Writes to stderr whether it capped."""
    path.write_text(f"""#!{python}
import os, runpy, sys
marker = {str(marker)!r}
first = not os.path.exists(marker)
open(marker, "a").close()
if first:
    import torch
    if torch.cuda.is_available():
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, {cap_bytes} / total), 0)
        print(f"capped-python: GPU 0 memory capped at {cap_bytes} of {{total}} bytes", file=sys.stderr)
    else:
        print("capped-python: no CUDA device, nothing capped", file=sys.stderr)
script = os.path.abspath(sys.argv[1])
sys.argv = [script, *sys.argv[2:]]
sys.path.insert(0, os.path.dirname(script))
runpy.run_path(script, run_name="__main__")
""")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)
