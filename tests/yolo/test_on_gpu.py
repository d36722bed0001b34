"""The YOLOv9 tier on a real NVIDIA GPU: ``scripts/test-yolo --gpu`` (GPUSCHED_YOLO_GPU=1), on a machine without
a package index whose Python has torch, torchvision, opencv-python-headless, nvidia-ml-py and onnx.

- the agent's machine discovery reads the GPU through NVML (``machine.discover``), and the agent started from
  its user-data says hello with it;
- a 2-epoch training job runs on ``--device 0`` with the per-GPU batch the memory model chose for that GPU
  (``perf_memory.physical_batch``); the epoch times are read off the daemon's progress;
- a real CUDA out-of-memory: the image's Python runs the first training run with GPU 0's memory capped
  (``gpu.capped_python``); the agent reads CUDA's message, halves the batch and finishes uncapped.

What NVML reported, the batch, the epoch times and the OOM retry are printed at the end of the run (and go
to BENCHMARKS.md by hand). Outside the GPU run these tests are skipped, saying so; in it, a machine where
NVML sees no GPU is a failure.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.agent import machine as agent_machine
from scheduler.agent.config import AgentConfig
from scheduler.agent.training import initial_total
from scheduler.jobs import yolo
from scheduler.models import DataSpec, JobSpec, Kind, TrainSpec
from tests.yolo.cloud import JOB_TIMEOUT, Cloud, Image, Machine, wait_for
from tests.yolo.dataset import find_truetype_font
from tests.yolo.gpu import GIB, capped_python, epoch_seconds, offer_for

GPU_RUN = os.environ.get("GPUSCHED_YOLO_GPU") == "1"
pytestmark = [
    pytest.mark.skipif(not GPU_RUN, reason="needs an NVIDIA GPU: run scripts/test-yolo --gpu on a GPU machine"),
    pytest.mark.timeout(1800),
]

IMG = 640  # the size the memory model is fitted at; the drawn images are upscaled
FIRST_RUN_CAP = 1 * GIB  # the capped first run: far below what the chosen batch needs at 640 px


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory, yolov9_dir: Path, yolo_python: str) -> Iterator[Cloud]:
    """As the CPU tier's, with more images: 64 to train on, 16 to validate, 320 px."""
    image = Image(yolov9_dir=yolov9_dir, python=yolo_python, font=find_truetype_font(yolo_python))
    c = Cloud(tmp_path_factory.mktemp("cloud-gpu"), image, train_images=64, val_images=16, size=320)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def gpus() -> agent_machine.MachineGpus:
    found = agent_machine.discover("A10", 1)
    if found.source != "nvml" or found.count < 1:
        pytest.fail(f"NVML sees no GPU (discovery answered from {found.source}: {found}); nvidia-ml-py and an "
                    "NVIDIA driver are needed", pytrace=False)
    return found


def test_nvml_reports_the_gpu(gpus: agent_machine.MachineGpus, measures: list[str]) -> None:
    measures.append(f"NVML: {gpus.count} x {gpus.name!r}, {gpus.memory_mib} MiB each; scheduler.gpus model: "
                    f"{gpus.model or 'none'} (offer named: {offer_for(gpus.model, gpus.memory_mib or 0)})")
    assert gpus.memory_mib and gpus.memory_mib > 4 * 1024


def train_spec(name: str, epochs: int, data: str = "s3://ci-bucket/datasets/boxes") -> JobSpec:
    return JobSpec(name=name, team="ci", kind=Kind.train, model="yolov9-t", data=DataSpec(uri=data),
                   train=TrainSpec(epochs=epochs, img_size=IMG, batch=64, weights="", close_mosaic=0))


def chosen_total(spec: JobSpec, gpu: str, count: int) -> int:
    cfg = AgentConfig(api="http://unused", instance_id="unused", token="unused", gpu=gpu, gpu_count=count)
    return initial_total(spec, cfg)


def run_job(cloud: Cloud, name: str, inst: str, gpus: agent_machine.MachineGpus, epochs: int,
            python: str | None = None) -> tuple[dict, list[float], Machine]:
    """Boot a GPU machine with one training job; returns the job's end, its epoch times, and the machine."""
    offer = offer_for(gpus.model, gpus.memory_mib or 0)
    job = cloud.submit(train_spec(name, epochs, cloud.data))
    cloud.put(job, 1, inst, gpu=offer, gpu_count=1)
    m = cloud.boot(name, inst, gpu=offer, gpu_count=1, python=python)
    samples: list[tuple[float, int]] = []

    def ended() -> dict | None:
        detail = cloud.daemon.job(job)
        samples.append((time.monotonic(), detail["epochs_done"]))
        return detail if detail["state"] in ("succeeded", "failed", "cancelled") else None

    final = wait_for(f"job {name}", ended, timeout=JOB_TIMEOUT, machines=[m], every=0.2)
    return final, epoch_seconds(samples), m


def test_two_epochs_on_device_0_with_the_memory_models_batch(cloud: Cloud, gpus: agent_machine.MachineGpus,
                                                           measures: list[str]) -> None:
    final, epochs, m = run_job(cloud, "gpu-train", "inst-0000000000e0", gpus, 2)
    assert final["state"] == "succeeded" and final["epochs_done"] == 2, final["reason"]
    journal = m.journal.read_text(errors="replace")
    assert "agent_up" in journal and "source=nvml" in journal  # the agent's own discovery, in its process
    model = gpus.model or offer_for(gpus.model, gpus.memory_mib or 0)
    total = chosen_total(train_spec("gpu-train", 2), model, gpus.count)
    log = m.job_log("gpu-train", 1)
    assert f"batch_size={total}," in log and f"device={yolo.device_list(gpus.count)}," in log, log[:3000]
    assert "CUDA:0 (" in log  # YOLOv9's select_device: it trained on the GPU
    measures.append(f"2 epochs of yolov9-t at {IMG} px, --batch {total} on --device {yolo.device_list(gpus.count)}"
                    f" (memory model, {model}): " + ", ".join(f"{s:.1f} s" for s in epochs))


def test_a_real_cuda_oom_halves_the_batch(cloud: Cloud, gpus: agent_machine.MachineGpus, tmp_path: Path,
                                          measures: list[str]) -> None:
    python = capped_python(tmp_path / "python", cloud.image.python, tmp_path / "capped-once", FIRST_RUN_CAP)
    t0 = time.monotonic()
    final, epochs, m = run_job(cloud, "gpu-oom", "inst-0000000000e1", gpus, 1, python=python)
    seconds = time.monotonic() - t0
    assert final["state"] == "succeeded", final["reason"]
    log = m.job_log("gpu-oom", 1)
    assert "capped-python: GPU 0 memory capped" in log
    assert "CUDA out of memory" in log  # torch's own message, from the capped run
    model = gpus.model or offer_for(gpus.model, gpus.memory_mib or 0)
    total = chosen_total(train_spec("gpu-oom", 1), model, gpus.count)
    halved = yolo.halved_batch(total, gpus.count)
    assert f"the batch was halved: {total} -> {halved}" in final["reason"], final["reason"]
    measures.append(f"CUDA OOM with GPU 0 capped at {FIRST_RUN_CAP // GIB} GiB: --batch {total} -> {halved}, "
                    f"then 1 epoch uncapped; {seconds:.0f} s from boot to success")
