"""What the machine says about itself: its GPUs as the driver sees them, how busy they are, and its
shutdown backstop.

The agent tells the daemon what it finds (``POST /v1/agent/hello``), so a machine that is not what
its offer sold (another GPU model, fewer GPUs, a driver that sees none) shows in the instance's
events. Discovery asks NVML (``nvidia-ml-py``, imported as ``pynvml``) when it is installed, else
``nvidia-smi --query-gpu=name,memory.total --format=csv,noheader`` (it comes with the driver), else
takes the user-data's GPUSCHED_AGENT_GPU / _GPU_COUNT on trust. The command runner and the NVML
query are injectable: the tests feed them canned outputs.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar

from scheduler.gpus import GPUS

T = TypeVar("T")

# Runs a command and returns its standard output; raises OSError (no such program) or
# subprocess.SubprocessError (it failed, or took too long) otherwise.
Runner = Callable[[Sequence[str]], str]
# Every GPU's (name, total memory in bytes), or None when NVML cannot be asked.
NvmlQuery = Callable[[], "list[tuple[str, int]] | None"]

SMI_QUERY = ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"]
SMI_UTILIZATION = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
MIB = 1 << 20


def run_command(argv: Sequence[str]) -> str:
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, timeout=30).stdout


@dataclass(frozen=True)
class MachineGpus:
    name: str  # as the driver names it ("NVIDIA A10G"); the offer's model when the driver was not asked
    model: str | None  # our name for it (``scheduler.gpus``), None for a GPU we do not know
    count: int
    memory_mib: int | None  # per GPU
    source: Literal["nvml", "nvidia-smi", "user-data"]


_VENDOR = re.compile(r"^(nvidia|tesla|geforce)\s+", re.IGNORECASE)


def gpu_model(name: str, memory_mib: int | None = None) -> str | None:
    """Our model name for a driver's GPU name ("NVIDIA A100-SXM4-80GB" -> "A100-80G"), or None.

    The family is the first word after the vendor; V100 and A100 come in two memory sizes, told
    apart by the name ("32GB", "80GB") or, failing that, by the memory the driver reports."""
    rest = name.strip()
    while _VENDOR.match(rest):
        rest = _VENDOR.sub("", rest, count=1)
    family = re.split(r"[\s\-_]+", rest.upper(), maxsplit=1)[0] if rest else ""
    text = rest.upper().replace(" ", "")
    if family == "V100":
        big = "32GB" in text or (memory_mib is not None and memory_mib > 24 * 1024)
        return "V100-32G" if big else "V100"
    if family == "A100":
        big = "80GB" in text or (memory_mib is not None and memory_mib > 60 * 1024)
        return "A100-80G" if big else "A100-40G"
    return family if family in GPUS else None


def _ask_nvml(query: Callable[[Any], T]) -> T | None:
    """``query(pynvml)`` between NVML's init and shutdown; None without ``nvidia-ml-py``, a driver, or an
    answer (any NVMLError: the caller falls back to what else it knows)."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError: no driver, no library
        return None
    try:
        return query(pynvml)
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _name(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def nvml_devices() -> list[tuple[str, int]] | None:
    """Every GPU's (name, total memory in bytes) from NVML; None without ``nvidia-ml-py`` or a driver."""
    def devices(nv: Any) -> list[tuple[str, int]]:
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        return [(_name(nv.nvmlDeviceGetName(h)), int(nv.nvmlDeviceGetMemoryInfo(h).total)) for h in handles]

    return _ask_nvml(devices)


def smi_devices(run: Runner = run_command) -> list[tuple[str, int]] | None:
    """Every GPU's (name, total memory in bytes) from nvidia-smi; None when it cannot be run."""
    try:
        text = run(SMI_QUERY)
    except (OSError, subprocess.SubprocessError):
        return None
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, _, memory = line.rpartition(",")
        if not name:  # one column: no memory figure
            name, memory = memory, ""
        m = re.match(r"\s*(\d+)\s*MiB", memory)
        out.append((name.strip(), int(m.group(1)) * MIB if m else 0))
    return out


def discover(fallback_gpu: str, fallback_count: int, *, nvml: NvmlQuery = nvml_devices,
             run: Runner = run_command) -> MachineGpus:
    """This machine's GPUs: NVML, else nvidia-smi, else what the user-data says the offer sold.

    A driver that answers with no GPU at all is reported as such (count 0): that machine is broken,
    and the daemon should hear it rather than the offer's figures."""
    queries: tuple[tuple[Literal["nvml", "nvidia-smi"], NvmlQuery], ...] = (
        ("nvml", nvml), ("nvidia-smi", lambda: smi_devices(run)))
    for source, query in queries:
        devices = query()
        if devices is None:
            continue
        if not devices:
            return MachineGpus(name="", model=None, count=0, memory_mib=None, source=source)
        name, memory = devices[0]
        memory_mib = memory // MIB if memory else None
        return MachineGpus(name=name, model=gpu_model(name, memory_mib), count=len(devices),
                           memory_mib=memory_mib, source=source)
    spec = GPUS.get(fallback_gpu)
    return MachineGpus(name=fallback_gpu, model=fallback_gpu if spec else None, count=fallback_count,
                       memory_mib=int(spec.mem_gib * 1024) if spec else None, source="user-data")


def nvml_utilization() -> list[float] | None:
    """Every GPU's utilisation (percent) from NVML; None when NVML cannot be asked."""
    return _ask_nvml(lambda nv: [float(nv.nvmlDeviceGetUtilizationRates(nv.nvmlDeviceGetHandleByIndex(i)).gpu)
                                 for i in range(nv.nvmlDeviceGetCount())])


def utilization(*, nvml: Callable[[], list[float] | None] = nvml_utilization,
                run: Runner = run_command) -> float | None:
    """The GPUs' mean utilisation in percent (for the heartbeat), or None when nothing can tell."""
    values = nvml()
    if values is None:
        try:
            text = run(SMI_UTILIZATION)
        except (OSError, subprocess.SubprocessError):
            return None
        try:
            values = [float(line) for line in text.split() if line.strip()]
        except ValueError:
            return None
    if not values:
        return None
    return round(min(100.0, max(0.0, sum(values) / len(values))), 1)


def push_shutdown(until: datetime, now: datetime, message: str, run: Runner = run_command) -> None:
    """Move the machine's shutdown backstop to ``until`` (a new ``shutdown`` replaces the pending one).

    Best effort: a machine that cannot reschedule keeps the earlier bound, which only stops it sooner."""
    minutes = max(1, math.ceil((until - now).total_seconds() / 60))
    try:
        run(["shutdown", "-h", f"+{minutes}", message])
    except (OSError, subprocess.SubprocessError):
        pass
