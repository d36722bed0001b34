"""What the machine says about its GPUs: NVML, else nvidia-smi, else the user-data; canned outputs only."""

from __future__ import annotations

import subprocess
import sys
import types
from datetime import datetime, timedelta, timezone

import pytest

from scheduler.agent import machine
from scheduler.agent.machine import MachineGpus, discover, gpu_model, smi_devices, utilization

GIB = 1 << 30


def no_nvml():
    return None


def smi(text: str):
    calls: list[list[str]] = []

    def run(argv):
        calls.append(list(argv))
        return text

    run.calls = calls  # type: ignore[attr-defined]
    return run


def missing(argv):
    raise FileNotFoundError(argv[0])


def failing(argv):
    raise subprocess.CalledProcessError(9, argv, "NVIDIA-SMI has failed: it cannot talk to the driver")


@pytest.mark.parametrize("name, memory_mib, model", [
    ("NVIDIA A10G", 23028, "A10G"),
    ("NVIDIA A10", 23028, "A10"),
    ("Tesla T4", 15360, "T4"),
    ("NVIDIA L4", 23034, "L4"),
    ("NVIDIA L20", 46068, "L20"),
    ("Tesla V100-SXM2-16GB", 16384, "V100"),
    ("Tesla V100-SXM2-32GB", 32768, "V100-32G"),
    ("Tesla V100-PCIE", 32768, "V100-32G"),  # no size in the name: the memory says
    ("NVIDIA A100-SXM4-40GB", 40960, "A100-40G"),
    ("NVIDIA A100-SXM4-80GB", 81920, "A100-80G"),
    ("NVIDIA A100 80GB PCIe", None, "A100-80G"),
    ("NVIDIA H100 80GB HBM3", 81559, "H100"),
    ("NVIDIA L40S", 46068, "L40S"),  # never mistaken for an L4
    ("NVIDIA GeForce RTX 4090", 24564, None),
    ("", None, None),
])
def test_driver_names_map_to_our_gpu_models(name, memory_mib, model):
    assert gpu_model(name, memory_mib) == model


def test_nvml_is_asked_first():
    run = smi("should not be read")
    gpus = discover("A10", 1, nvml=lambda: [("NVIDIA A10G", 24 * GIB)] * 4, run=run)
    assert gpus == MachineGpus(name="NVIDIA A10G", model="A10G", count=4, memory_mib=24 * 1024, source="nvml")
    assert run.calls == []


def test_without_nvml_nvidia_smi_is_asked():
    run = smi("NVIDIA A100-SXM4-80GB, 81920 MiB\nNVIDIA A100-SXM4-80GB, 81920 MiB\n")
    gpus = discover("A10", 1, nvml=no_nvml, run=run)
    assert gpus == MachineGpus(name="NVIDIA A100-SXM4-80GB", model="A100-80G", count=2, memory_mib=81920,
                               source="nvidia-smi")
    assert run.calls == [["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"]]


@pytest.mark.parametrize("run", [missing, failing])
def test_without_a_driver_to_ask_the_user_data_stands(run):
    gpus = discover("L4", 2, nvml=no_nvml, run=run)
    assert gpus == MachineGpus(name="L4", model="L4", count=2, memory_mib=int(22.4 * 1024), source="user-data")


def test_a_driver_that_sees_no_gpu_says_so():
    assert discover("A10", 1, nvml=lambda: [], run=missing).count == 0
    assert discover("A10", 1, nvml=no_nvml, run=smi("\n")).count == 0


def test_odd_nvidia_smi_lines_are_read_as_far_as_they_go():
    assert smi_devices(smi("Tesla T4, [N/A]\n")) == [("Tesla T4", 0)]
    assert smi_devices(smi("NVIDIA L4\n")) == [("NVIDIA L4", 0)]
    assert smi_devices(missing) is None


def test_nvml_devices_reads_the_library(monkeypatch):
    class Memory:
        total = 23 * GIB

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA A10G" if h == 0 else "NVIDIA A10G",  # bytes in older releases
        nvmlDeviceGetMemoryInfo=lambda h: Memory(),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=40 + 20 * h),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert machine.nvml_devices() == [("NVIDIA A10G", 23 * GIB)] * 2
    assert machine.nvml_utilization() == [40.0, 60.0]
    assert utilization() == 50.0

    def broken():
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", types.SimpleNamespace(nvmlInit=broken))
    assert machine.nvml_devices() is None


def test_utilization_falls_back_to_nvidia_smi_and_to_nothing():
    assert utilization(nvml=lambda: None, run=smi("35\n45\n")) == 40.0
    assert utilization(nvml=lambda: None, run=missing) is None
    assert utilization(nvml=lambda: None, run=smi("[N/A]\n")) is None


def test_the_shutdown_backstop_is_pushed_to_the_new_bound():
    now = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
    run = smi("")
    machine.push_shutdown(now + timedelta(hours=36, seconds=20), now, "gpusched: bound", run=run)
    assert run.calls == [["shutdown", "-h", "+2161", "gpusched: bound"]]
    machine.push_shutdown(now + timedelta(hours=1), now, "m", run=failing)  # best effort: no error
