"""The agent layer of the YOLOv9 tier: ``gpusched agent`` started as cloud-init starts it (``cloud.boot``),
against the daemon's real API, an S3 bucket on a moto server and a metadata service that serves reclaim
notices, runs the official train_dual.py / val_dual.py / export.py / detect_dual.py on CPU.

The story, in file order (each test leans on the ones before it: the module's fixtures hold the state):

- machine B (on-demand, no job yet) boots and waits warm; its idle agent's memory is measured;
- machine A (spot) trains a job from the dataset as a user uploads it (relative paths, no ``path:``),
  uploading a checkpoint after each epoch; a reclaim notice after the first reported epoch: A tells the
  daemon, which requeues the job, and A's agent exits 0 when told the machine is going;
- B, warm, gets attempt 2 without a new boot: fetches last.pt and opt.yaml, rewrites opt.yaml for itself,
  resumes with ``--resume`` and uploads every output; every epoch is once in results.csv;
- B then validates best.pt (metrics read and uploaded), exports it to ONNX (uploaded), fails an export
  whose format cannot be written (OpenVINO is not in the image), and
- finishes an inference job that machine C (spot) started: C writes labels shard by shard and is reclaimed
  mid-way; B resumes at the first unfinished shard;
- machine D stands for a GPU machine whose first run runs out of CUDA memory (a wrapper of the image's
  Python prints CUDA's message and exits 1, then runs the real script on the CPU): the agent halves the
  batch and finishes.
"""

from __future__ import annotations

import stat
import statistics
import time
from pathlib import Path

import pytest
import yaml

from scheduler.agent.checkpoints import FINAL, checkpoint_epoch
from scheduler.jobs import infer_shards, yolo
from scheduler.models import DataSpec, ExportSpec, InferSpec, JobSpec, Kind, TrainSpec, ValSpec
from tests.agent.machines import machine_row
from tests.yolo.cloud import Cloud, Machine, wait_for
from tests.yolo.dataset import write_dataset

pytestmark = pytest.mark.timeout(900)

IMG = 128
IDLE_RSS_LIMIT_MIB = 200  # the agent's process waiting for work (measured about a quarter of this)
RSS_SAMPLES, RSS_EVERY = 10, 0.5


@pytest.fixture(scope="module")
def warm(cloud: Cloud, wall_times: list[tuple[str, float]]) -> Machine:
    """Machine B: on-demand, booted with no job, waiting for work (an L4 by its user-data)."""
    inst = "inst-0000000000b0"
    with cloud.store.session() as s:
        s.add(machine_row(inst, cloud.clock, job_id=None, client_token="gs-warm-b", gpu="L4"))
    t0 = time.monotonic()
    b = cloud.boot("machine-b", inst, gpu="L4", gpu_count=None)
    wait_for("machine B's hello", lambda: Path(b.env["GPUSCHED_AGENT_STARTED_MARK"]).exists(), timeout=60,
             machines=[b])
    wall_times.append(("machine B: boot to the daemon's hello (gpusched agent)", time.monotonic() - t0))
    return b


# --- boot -----------------------------------------------------------------------------------------


def test_the_agent_runs_as_its_user_data_says_and_waits_warm(cloud: Cloud, warm: Machine,
                                                             measures: list[str]) -> None:
    unit = warm.unit
    assert unit.argv == ["/opt/gpusched/bin/gpusched", "agent"]
    assert unit.env["GPUSCHED_AGENT_API"] == cloud.daemon.url and unit.env["GPUSCHED_AGENT_GPU"] == "L4"
    for key, value in unit.env.items():
        assert warm.env[key] == value, key  # every setting of user-data reaches the agent as it is
    samples = []
    for _ in range(RSS_SAMPLES):  # while it asks for work and is told to wait, with its heartbeat
        time.sleep(RSS_EVERY)
        assert warm.proc.poll() is None, warm.tail()
        samples.append(warm.rss_kib() / 1024)
    assert warm.logged("agent_up") == 1
    measures.append(f"idle `gpusched agent` waiting for work (machine B): VmRSS median "
                    f"{statistics.median(samples):.1f} MiB, max {max(samples):.1f} MiB ({len(samples)} samples "
                    f"over {RSS_SAMPLES * RSS_EVERY:.0f} s)")
    assert 10 < max(samples) < IDLE_RSS_LIMIT_MIB
    assert not (warm.root / "shutdown-calls").exists()  # no renewal was due: the backstop stands


# --- training across a reclaim, then warm reuse -----------------------------------------------------


TRAIN = "agent-train"


@pytest.fixture(scope="module")
def trained(cloud: Cloud, warm: Machine, wall_times: list[tuple[str, float]]) -> dict:
    """The training job: attempt 1 on spot machine A (reclaimed after epoch 1), attempt 2 on warm B."""
    spec = JobSpec(name=TRAIN, team="ci", kind=Kind.train, model="yolov9-t", data=DataSpec(uri=cloud.data),
                   train=TrainSpec(epochs=3, img_size=IMG, batch=4, weights="", hyp="hyp.scratch-high.yaml",
                                   close_mosaic=1))
    job = cloud.submit(spec)
    inst_a = "inst-0000000000a0"
    cloud.put(job, 1, inst_a, capacity="spot", gpu="T4")
    t0 = time.monotonic()
    a = cloud.boot("machine-a", inst_a, gpu="T4", gpu_count=None)
    after = cloud.reclaim_when(job, 1, a)
    wall_times.append(("train: machine A boots, trains, reclaimed after epoch 1", time.monotonic() - t0))
    pid = warm.proc.pid
    cloud.put(job, 2, warm.instance_id)
    t0 = time.monotonic()
    final = cloud.finished(job, warm)
    wall_times.append(("train: warm machine B resumes and finishes", time.monotonic() - t0))
    assert warm.proc.pid == pid and warm.proc.poll() is None and warm.logged("agent_up") == 1
    return {"job": job, "after_reclaim": after, "final": final, "a": a}


def test_training_is_reclaimed_and_resumes_on_the_warm_machine(cloud: Cloud, warm: Machine, trained: dict) -> None:
    after, final, a = trained["after_reclaim"], trained["final"], trained["a"]
    prefix = f"{cloud.data}/runs/{TRAIN}/"
    assert after["state"] == "queued" and after["preemptions"] == 1, after["reason"]
    done = after["epochs_done"]
    assert 1 <= done < 3
    assert a.logged("attempt_reclaimed") == 1 and a.logged("agent_exit") == 1
    assert final["state"] == "succeeded" and final["epochs_done"] == 3, final["reason"]
    assert final["outputs"] == prefix
    log = warm.job_log(TRAIN, 2)
    assert f"Resuming training from {warm.workdir}/runs/train/{TRAIN}/weights/last.pt from epoch {done}" in log
    keys = cloud.bucket.keys(prefix)
    for name in ("weights/best.pt", "weights/last.pt", "results.csv", "opt.yaml"):
        assert prefix.removeprefix("s3://ci-bucket/") + name in keys, keys
    opt = yaml.safe_load(cloud.bucket.get(prefix + "opt.yaml"))
    assert opt["data"] == f"{warm.workdir}/data/data.yaml" and opt["device"] == "cpu" and opt["workers"] == 0
    saved = warm.root / "downloaded-last.pt"
    saved.write_bytes(cloud.bucket.get(prefix + "weights/last.pt"))
    assert checkpoint_epoch(saved) == FINAL
    epochs = [r.epoch for r in yolo.parse_results_csv(cloud.bucket.get(prefix + "results.csv").decode())]
    assert epochs == [0, 1, 2]
    raw = [line.split(",")[0].strip() for line in cloud.bucket.get(prefix + "results.csv").decode().splitlines()[1:]]
    assert raw == ["0", "1", "2"]  # every epoch once


def best_pt(cloud: Cloud) -> str:
    return f"{cloud.data}/runs/{TRAIN}/weights/best.pt"


def test_val_metrics_are_read_and_uploaded(cloud: Cloud, warm: Machine, trained: dict,
                                           wall_times: list[tuple[str, float]]) -> None:
    spec = JobSpec(name="agent-val", team="ci", kind=Kind.val, model="yolov9-t", data=DataSpec(uri=cloud.data),
                   val=ValSpec(weights=best_pt(cloud), img_size=IMG, batch=4))
    job = cloud.submit(spec)
    cloud.put(job, 1, warm.instance_id)
    t0 = time.monotonic()
    final = cloud.finished(job, warm)
    wall_times.append(("val on warm machine B (val_dual.py)", time.monotonic() - t0))
    prefix = f"{cloud.data}/runs/agent-val/"
    assert final["state"] == "succeeded" and final["outputs"] == prefix, final["reason"]
    metrics = yaml.safe_load(cloud.bucket.get(prefix + "metrics.json"))  # JSON is YAML
    assert metrics["images"] == 4 and metrics["instances"] >= 4
    assert 0 <= metrics["map50_95"] <= metrics["map50"] <= 1
    assert f"mAP50 {metrics['map50']:.3f}" in final["reason"]


def test_export_uploads_the_onnx_file(cloud: Cloud, warm: Machine, trained: dict,
                                      wall_times: list[tuple[str, float]]) -> None:
    spec = JobSpec(name="agent-export", team="ci", kind=Kind.export, model="yolov9-t",
                   export=ExportSpec(weights=best_pt(cloud), formats=("onnx",), img_size=IMG))
    job = cloud.submit(spec)
    cloud.put(job, 1, warm.instance_id)
    t0 = time.monotonic()
    final = cloud.finished(job, warm)
    wall_times.append(("export to ONNX on warm machine B (export.py)", time.monotonic() - t0))
    prefix = f"{cloud.data}/runs/{TRAIN}/weights/"
    assert final["state"] == "succeeded" and final["outputs"] == prefix, final["reason"]
    onnx = cloud.bucket.get(prefix + "best.onnx")
    assert len(onnx) > 100_000  # the weights are in the file (yolov9-t: about 8 MB)
    assert b"pytorch" in onnx[:200]  # ModelProto's producer_name, near the start of the file


def test_an_export_whose_format_failed_is_a_failed_job(cloud: Cloud, warm: Machine, trained: dict) -> None:
    """export.py exits 0 when OpenVINO is missing from the image (it tries, logs the failure, writes nothing)."""
    spec = JobSpec(name="agent-export-openvino", team="ci", kind=Kind.export, model="yolov9-t",
                   export=ExportSpec(weights=best_pt(cloud), formats=("openvino",), img_size=IMG))
    job = cloud.submit(spec)
    cloud.put(job, 1, warm.instance_id)
    final = cloud.finished(job, warm)
    assert final["state"] == "failed", final
    assert "export wrote no openvino file" in final["reason"]
    assert "export failure" in final["reason"] and "openvino" in final["reason"]  # export.py's words (colored)
    assert not [k for k in cloud.bucket.keys(f"{cloud.data}/runs/{TRAIN}/weights/") if "openvino" in k]
    assert "pip install" not in warm.job_log("agent-export-openvino", 1)  # never installs into the image
    assert warm.proc.poll() is None  # a failed job is reported; the agent asks for the next


# --- inference across a reclaim ---------------------------------------------------------------------


def test_inference_is_reclaimed_mid_way_and_resumes_at_the_first_unfinished_shard(
        cloud: Cloud, warm: Machine, trained: dict, wall_times: list[tuple[str, float]]) -> None:
    images = write_dataset(cloud.root / "to-label", train=6, val=0, seed=3).parent / "images" / "train"
    source = cloud.bucket.put_folder(images, "incoming/batch-1")
    shards = 3
    # 6 images on disk; ``images`` is the user's count, which sets the shard count (SHARD_IMAGES each)
    spec = JobSpec(name="agent-infer", team="ci", kind=Kind.infer, model="yolov9-t",
                   infer=InferSpec(source=source, images=shards * infer_shards.SHARD_IMAGES, img_size=IMG,
                                   weights=best_pt(cloud), conf=0.001))
    assert infer_shards.shard_count(spec.infer.images) == shards  # type: ignore[union-attr]
    job = cloud.submit(spec)
    inst_c = "inst-0000000000c0"
    cloud.put(job, 1, inst_c, capacity="spot", gpu="T4")
    t0 = time.monotonic()
    c = cloud.boot("machine-c", inst_c, gpu="T4", gpu_count=None)
    after = cloud.reclaim_when(job, 1, c)
    wall_times.append(("infer: machine C boots, labels, reclaimed after shard 1", time.monotonic() - t0))
    done = after["epochs_done"]
    assert after["state"] == "queued" and 1 <= done < shards, after
    out = "s3://ci-bucket/runs/agent-infer/labels/"
    before = cloud.bucket.keys(out)
    assert before, "the finished shards' labels are uploaded before they are reported"

    cloud.put(job, 2, warm.instance_id)
    t0 = time.monotonic()
    final = cloud.finished(job, warm)
    wall_times.append(("infer: warm machine B runs the rest", time.monotonic() - t0))
    assert final["state"] == "succeeded" and final["epochs_done"] == shards, final["reason"]
    assert final["outputs"] == "s3://ci-bucket/runs/agent-infer/"
    log = warm.job_log("agent-infer", 2)
    ran = [i for i in range(shards) if f"/shards/{infer_shards.shard_name(i)}/" in log]
    assert ran == list(range(done, shards)), ran  # from the first unfinished shard, none again
    labels = cloud.bucket.keys(out)
    assert [Path(k).stem for k in labels] == sorted(p.stem for p in images.iterdir())
    for key in labels:
        rows = [line.split() for line in cloud.bucket.get(f"s3://ci-bucket/{key}").decode().splitlines()]
        assert rows and all(len(r) == 6 and r[0] == "0" for r in rows), key


# --- CUDA out of memory -------------------------------------------------------------------------------


def oom_python(path: Path, python: str, calls: Path) -> str:
    """A stand-in for the image's Python on a GPU machine whose memory is too small for the first batch:
    the first run prints CUDA's message and exits 1; every run goes to the CPU (``--device 0`` -> cpu)."""
    path.write_text(f"""#!{python}
import os, sys
calls = {str(calls)!r}
argv = ["cpu" if a == "0" and sys.argv[i - 1] == "--device" else a for i, a in enumerate(sys.argv[1:], 1)]
first = not os.path.exists(calls)
with open(calls, "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
if first:
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total "
          "capacity of 14.58 GiB of which 20.00 MiB is free.", file=sys.stderr)
    sys.exit(1)
os.execv({python!r}, [{python!r}, *argv])
""")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_out_of_memory_halves_the_batch_and_finishes(cloud: Cloud, tmp_path: Path,
                                                     wall_times: list[tuple[str, float]]) -> None:
    spec = JobSpec(name="agent-oom", team="ci", kind=Kind.train, model="yolov9-t", data=DataSpec(uri=cloud.data),
                   train=TrainSpec(epochs=1, img_size=IMG, batch=4, weights="", close_mosaic=0))
    job = cloud.submit(spec)
    inst_d = "inst-0000000000d0"
    cloud.put(job, 1, inst_d, gpu="T4")
    calls = tmp_path / "python-calls"
    t0 = time.monotonic()
    d = cloud.boot("machine-d", inst_d, gpu="T4", gpu_count=1,
                   python=oom_python(tmp_path / "python", cloud.image.python, calls))
    final = cloud.finished(job, d)
    wall_times.append(("OOM: machine D, out of memory at batch 4, trains 1 epoch at 2", time.monotonic() - t0))
    assert final["state"] == "succeeded", final["reason"]
    assert "CUDA ran out of memory, so the batch was halved: 4 -> 2 (2 per GPU)" in final["reason"]
    runs = [line.split() for line in calls.read_text().splitlines()]
    assert [(r[0], r[r.index("--batch") + 1], r[r.index("--device") + 1]) for r in runs] == [
        ("train_dual.py", "4", "0"), ("train_dual.py", "2", "0")]
    assert "CUDA out of memory" in d.job_log("agent-oom", 1)
