"""Smoke layer of the YOLOv9 tier: the project's own command lines, run by the official scripts on CPU.

Each argv comes from scheduler.jobs.yolo and runs as the agent runs it: the job image's Python in
place of ``yolo.PYTHON``, the YOLOv9 checkout as the working directory, no network. A yolov9-t model
trains from scratch on a dataset of 12 drawn images (tests/yolo/dataset.py); each script's wall time
is printed at the end. The builders are asked for the CPU (gpu_count 0); nothing else is changed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
import yaml

from scheduler.agent.checkpoints import FINAL, checkpoint_epoch
from scheduler.jobs import yolo
from scheduler.models import DataSpec, ExportSpec, InferSpec, JobSpec, Kind, TrainSpec, ValSpec
from tests.yolo.dataset import write_dataset

pytestmark = pytest.mark.timeout(900)  # pyproject's 120 s is for the main suite; each script has its own limit

MODEL = "yolov9-t"  # the smallest model: train_dual.py, val_dual.py, detect_dual.py (models/detect/yolov9-t.yaml)
IMG = 128
DATA = DataSpec(uri="s3://ci-bucket/datasets/boxes")
SCRIPT_TIMEOUT = 420  # seconds for one script: a 2-core CI machine needs about a tenth of it
LOG_TAIL = 4000


# --- running a builder's argv -------------------------------------------------------------------


def runnable(argv: list[str], python: str) -> list[str]:
    """The builder's argv as the agent runs it: the job image's Python in place of ``yolo.PYTHON``."""
    assert argv[0] == yolo.PYTHON, argv
    if "--device" in argv:  # a --resume argv has none: the device comes from opt.yaml
        assert argv[argv.index("--device") + 1] == "cpu", argv
    return [python, *argv[1:]]


def start(argv: list[str], *, cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        out.flush()
        # A session of its own: a kill reaches any dataloader workers too.
        return subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-LOG_TAIL:] if log.exists() else "(no log)"


def run(argv: list[str], *, cwd: Path, env: dict[str, str], log: Path,
        wall_times: list[tuple[str, float]], label: str) -> float:
    """Run one script to its end; fail with the end of its output unless it exits 0. Returns seconds."""
    t0 = time.monotonic()
    proc = start(argv, cwd=cwd, env=env, log=log)
    try:
        proc.wait(timeout=SCRIPT_TIMEOUT)
    except subprocess.TimeoutExpired:
        kill(proc)
        pytest.fail(f"{label}: still running after {SCRIPT_TIMEOUT} s; its output ends:\n{tail(log)}")
    finally:
        kill(proc)
    seconds = time.monotonic() - t0
    wall_times.append((label, seconds))
    assert proc.returncode == 0, f"{label}: exit status {proc.returncode}; its output ends:\n{tail(log)}"
    return seconds


def raw_epochs(results_csv: Path) -> list[int]:
    """The epoch column of every complete row, duplicates kept (parse_results_csv drops them)."""
    lines = [line for line in results_csv.read_text().splitlines() if line.strip()] if results_csv.exists() else []
    width = len(lines[0].split(",")) if lines else 0
    return [int(float(row.split(",")[0])) for row in lines[1:] if len(row.split(",")) == width]


def checkpoint_facts(path: Path, *, python: str, cwd: Path, env: dict[str, str]) -> dict[str, object]:
    """epoch, whether the optimizer is kept (only until training ends), and the batch size it ran with."""
    code = ("import json, sys, torch; c = torch.load(sys.argv[1], map_location='cpu', weights_only=False); "
            "print(json.dumps({'epoch': c['epoch'], 'optimizer': c['optimizer'] is not None, "
            "'batch_size': c['opt']['batch_size']}))")
    out = subprocess.run([python, "-c", code, str(path)], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-LOG_TAIL:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def complete_checkpoint(path: Path) -> bool:
    """torch.save writes a zip in place: it is whole once its central directory is there and reads back."""
    try:
        with zipfile.ZipFile(path) as z:
            return z.testzip() is None and any(n.endswith("data.pkl") for n in z.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def train_spec(epochs: int) -> JobSpec:
    return JobSpec(name="smoke-train", team="ci", kind=Kind.train, model=MODEL, data=DATA,
                   train=TrainSpec(epochs=epochs, img_size=IMG, batch=4, weights="",
                                   hyp="hyp.scratch-high.yaml", close_mosaic=1))


# --- the runs ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(workdir: str, yolov9_dir: Path, yolo_python: str, yolo_env: dict[str, str],
            wall_times: list[tuple[str, float]]) -> Path:
    """(a)'s run: 2 epochs of yolov9-t at 128 px, batch 4, on CPU. Returns the run folder."""
    argv = yolo.train_command(train_spec(epochs=2), physical_batch=4, gpu_count=0, run_name="smoke",
                              workdir=workdir, workers=0)
    run_dir = Path(yolo.run_dir(workdir, "train", "smoke"))
    run(runnable(argv, yolo_python), cwd=yolov9_dir, env=yolo_env, log=run_dir.parent / "smoke.log",
        wall_times=wall_times, label=f"train {MODEL}, 2 epochs, img {IMG}, batch 4 (train_dual.py)")
    return run_dir


@pytest.fixture(scope="module")
def staged_best(trained: Path, workdir: str) -> str:
    """The trained best.pt where a val, infer or export job finds its ``weights: best.pt``."""
    target = Path(yolo.local_weights("best.pt", workdir))
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(trained / "weights" / "best.pt", target)
    return "best.pt"


def test_train_two_epochs(trained: Path) -> None:
    results = yolo.parse_results_csv((trained / "results.csv").read_text())
    assert [r.epoch for r in results] == [0, 1]
    for name in ("weights/last.pt", "weights/best.pt", "opt.yaml"):
        assert (trained / name).is_file(), name
    opt = yaml.safe_load((trained / "opt.yaml").read_text())
    assert (opt["epochs"], opt["batch_size"], opt["imgsz"], opt["device"]) == (2, 4, IMG, "cpu")


def test_resume_after_preemption_with_a_smaller_batch(workdir: str, yolov9_dir: Path, yolo_python: str,
                                                      yolo_env: dict[str, str],
                                                      wall_times: list[tuple[str, float]]) -> None:
    """(b) 3 epochs, killed once epoch 0's row and last.pt are written; resumed with batch 2 in opt.yaml."""
    spec, name = train_spec(epochs=3), "preempted"
    run_dir = Path(yolo.run_dir(workdir, "train", name))
    results_csv, last = run_dir / "results.csv", Path(yolo.checkpoint_path(workdir, name))
    log = run_dir.parent / f"{name}.log"
    argv = yolo.train_command(spec, physical_batch=4, gpu_count=0, run_name=name, workdir=workdir, workers=0)

    t0 = time.monotonic()
    proc = start(runnable(argv, yolo_python), cwd=yolov9_dir, env=yolo_env, log=log)
    try:
        deadline = t0 + SCRIPT_TIMEOUT
        while not (raw_epochs(results_csv) and complete_checkpoint(last)):
            ended = proc.poll()
            assert ended is None, f"training ended (exit {ended}) before epoch 0 was saved:\n{tail(log)}"
            assert time.monotonic() < deadline, f"epoch 0 not saved after {SCRIPT_TIMEOUT} s:\n{tail(log)}"
            time.sleep(0.05)
    finally:
        kill(proc)  # SIGKILL, as a reclaimed spot instance
    wall_times.append(("train 3 epochs, killed after epoch 0", time.monotonic() - t0))
    assert raw_epochs(results_csv) == [0], "killed too late: epoch 1 had ended too; poll faster"
    facts = checkpoint_facts(last, python=yolo_python, cwd=yolov9_dir, env=yolo_env)
    assert facts == {"epoch": 0, "optimizer": True, "batch_size": 4}
    assert checkpoint_epoch(last) == 0  # the agent reads the same epoch without torch

    opt_yaml = run_dir / "opt.yaml"
    opt_yaml.write_text(yolo.resume_opt_patch(opt_yaml.read_text(), batch=2))
    resume = yolo.train_command(spec, physical_batch=2, gpu_count=0, run_name=name, workdir=workdir,
                                resume_from=str(last.parent))
    run(runnable(resume, yolo_python), cwd=yolov9_dir, env=yolo_env, log=log, wall_times=wall_times,
        label="resume --resume last.pt, batch 4 -> 2, epochs 1-2")

    assert raw_epochs(results_csv) == [0, 1, 2]  # every epoch exactly once
    assert [r.epoch for r in yolo.parse_results_csv(results_csv.read_text())] == [0, 1, 2]
    facts = checkpoint_facts(last, python=yolo_python, cwd=yolov9_dir, env=yolo_env)
    # Finished: strip_optimizer drops the optimizer and sets epoch -1; the options are the patched ones.
    assert facts == {"epoch": -1, "optimizer": False, "batch_size": 2}
    assert checkpoint_epoch(last) == FINAL


def test_val_on_the_trained_weights(staged_best: str, workdir: str, yolov9_dir: Path, yolo_python: str,
                                    yolo_env: dict[str, str], wall_times: list[tuple[str, float]]) -> None:
    """(c) val_dual.py on the trained weights; its metrics are read from its output (no --save-json: that
    is COCO's evaluation, which would pip-install pycocotools and look for COCO's annotations)."""
    spec = JobSpec(name="smoke-val", team="ci", kind=Kind.val, model=MODEL, data=DATA,
                   val=ValSpec(weights=staged_best, img_size=IMG, batch=4))
    argv = yolo.val_command(spec, run_name="smoke", workdir=workdir, gpu_count=0)
    assert argv[1] == "val_dual.py"
    out = Path(yolo.run_dir(workdir, "val", "smoke"))
    log = out.parent / "smoke.log"
    run(runnable(argv, yolo_python), cwd=yolov9_dir, env=yolo_env, log=log, wall_times=wall_times,
        label="val best.pt (val_dual.py)")
    assert out.is_dir()
    metrics = yolo.parse_val_metrics(log.read_text(errors="replace"))
    assert metrics is not None and (metrics.images, metrics.instances) == (4, _val_instances(workdir)), \
        f"{metrics}; val_dual.py's output ends:\n{tail(log)}"
    assert 0 <= metrics.map50_95 <= metrics.map50 <= 1
    assert "pycocotools" not in log.read_text(errors="replace")


def _val_instances(workdir: str) -> int:
    labels = Path(workdir) / "data" / "labels" / "val"
    return sum(len(p.read_text().splitlines()) for p in labels.glob("*.txt"))


def test_detect_writes_labels(staged_best: str, workdir: str, yolov9_dir: Path, yolo_python: str,
                              yolo_env: dict[str, str], wall_times: list[tuple[str, float]]) -> None:
    """(d) detect_dual.py over 3 images, --save-txt --save-conf; conf 0.001 so that a 2-epoch model finds
    something (an untrained head already scores about 0.01)."""
    source = Path(yolo.source_dir(workdir))
    source.mkdir(parents=True, exist_ok=True)
    images = sorted((Path(workdir) / "data" / "images" / "val").glob("*.png"))[:3]
    for image in images:
        shutil.copyfile(image, source / image.name)
    spec = JobSpec(name="smoke-infer", team="ci", kind=Kind.infer, model=MODEL,
                   infer=InferSpec(source="s3://ci-bucket/source", images=len(images), img_size=IMG,
                                   weights=staged_best, conf=0.001))
    out = Path(yolo.infer_output_dir(workdir, "smoke"))
    cleanup = yolo.pre_infer_cleanup(str(out))
    assert subprocess.run(cleanup, check=False).returncode == 0
    argv = yolo.infer_command(spec, run_name="smoke", workdir=workdir, gpu_count=0)
    assert argv[1] == "detect_dual.py"
    run(runnable(argv, yolo_python), cwd=yolov9_dir, env=yolo_env, log=out.parent / "smoke.log",
        wall_times=wall_times, label=f"detect {len(images)} images (detect_dual.py)")
    labels = out / "labels"
    assert sorted(p.name for p in labels.iterdir()) == sorted(f"{i.stem}.txt" for i in images)
    for file in labels.iterdir():
        rows = [line.split() for line in file.read_text().splitlines()]
        assert rows, file
        for row in rows:  # class, x, y, w, h (normalised), confidence
            assert len(row) == 6 and row[0] == "0", row
            assert all(0.0 <= float(v) <= 1.0 for v in row[1:]), row


def test_export_onnx(staged_best: str, workdir: str, yolov9_dir: Path, yolo_python: str,
                     yolo_env: dict[str, str], wall_times: list[tuple[str, float]]) -> None:
    """(e) export.py exits 0 even when a format failed: the file is the evidence (yolo.export_outputs)."""
    spec = JobSpec(name="smoke-export", team="ci", kind=Kind.export, model=MODEL,
                   export=ExportSpec(weights=staged_best, formats=("onnx",), img_size=IMG))
    argv = yolo.export_command(spec, workdir=workdir, gpu_count=0)
    onnx = Path(yolo.export_outputs(spec, workdir)["onnx"])
    onnx.unlink(missing_ok=True)
    log = Path(workdir) / "runs" / "export.log"
    run(runnable(argv, yolo_python), cwd=yolov9_dir, env=yolo_env, log=log, wall_times=wall_times,
        label="export best.pt to ONNX (export.py)")
    assert onnx.is_file() and onnx.stat().st_size > 0, tail(log)
    # With torch >= 2.9 export.py also leaves <name>.onnx.data (the new exporter's external weights) and
    # the model is opset 18 whatever --opset says; the .onnx it re-saves must still hold every weight,
    # since it is the one file export_outputs names.
    code = ("import sys, onnx; m = onnx.load(sys.argv[1], load_external_data=False); "
            "print(sum(t.data_location == onnx.TensorProto.EXTERNAL for t in m.graph.initializer))")
    out = subprocess.run([yolo_python, "-c", code, str(onnx)], env=yolo_env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-LOG_TAIL:]
    assert out.stdout.split()[-1] == "0", "the .onnx needs a file beside it"


def test_gelan_t_uses_the_single_branch_scripts(workdir: str, yolov9_dir: Path, yolo_python: str,
                                                yolo_env: dict[str, str], wall_times: list[tuple[str, float]]) -> None:
    """gelan-* has no auxiliary branch: train_command picks train.py and infer_command detect.py."""
    spec = JobSpec(name="smoke-gelan", team="ci", kind=Kind.train, model="gelan-t", data=DATA,
                   train=TrainSpec(epochs=1, img_size=IMG, batch=4, weights="", close_mosaic=0))
    argv = yolo.train_command(spec, physical_batch=4, gpu_count=0, run_name="gelan", workdir=workdir, workers=0)
    assert argv[1] == "train.py"
    run_dir = Path(yolo.run_dir(workdir, "train", "gelan"))
    run(runnable(argv, yolo_python), cwd=yolov9_dir, env=yolo_env, log=run_dir.parent / "gelan.log",
        wall_times=wall_times, label="train gelan-t, 1 epoch (train.py)")
    assert [r.epoch for r in yolo.parse_results_csv((run_dir / "results.csv").read_text())] == [0]

    weights = Path(yolo.local_weights("gelan-best.pt", workdir))
    weights.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run_dir / "weights" / "best.pt", weights)
    source = Path(workdir) / "gelan-source"
    source.mkdir(exist_ok=True)
    image = sorted((Path(workdir) / "data" / "images" / "val").glob("*.png"))[0]
    shutil.copyfile(image, source / image.name)
    infer = JobSpec(name="smoke-gelan", team="ci", kind=Kind.infer, model="gelan-t",
                    infer=InferSpec(source="s3://ci-bucket/source", images=1, img_size=IMG, weights=weights.name,
                                    conf=0.001))
    argv = yolo.infer_command(infer, run_name="gelan", workdir=workdir, source=str(source), gpu_count=0)
    assert argv[1] == "detect.py"
    out = Path(yolo.infer_output_dir(workdir, "gelan"))
    run(runnable(argv, yolo_python), cwd=yolov9_dir, env=yolo_env, log=out.parent / "gelan.log",
        wall_times=wall_times, label="detect 1 image (detect.py)")
    assert (out / "labels" / f"{image.stem}.txt").is_file()


def test_a_relative_data_yaml_resolves_against_the_checkout(tmp_path: Path, yolov9_dir: Path, yolo_python: str,
                                                            yolo_env: dict[str, str]) -> None:
    """Why the tier's data.yaml names an absolute ``path:``: YOLOv9 joins a relative (or missing) one onto
    its own checkout, not onto the yaml's folder (utils/general.py:check_dataset), so a dataset staged
    as it is into <workdir>/data/ with the usual relative train:/val: is "not found". Whatever stages a
    job's dataset must write ``path:`` (see the TODO on the ``workdir`` fixture)."""
    data_yaml = write_dataset(tmp_path / "data", train=1, val=1)  # the user's file: relative, no path:
    code = ("import sys; from utils.general import check_dataset\n"
            "try:\n    check_dataset(sys.argv[1], autodownload=False)\n"
            "except Exception as e:\n    print('REFUSED', e)\nelse:\n    print('FOUND')")
    out = subprocess.run([yolo_python, "-c", code, str(data_yaml)], cwd=yolov9_dir, env=yolo_env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-LOG_TAIL:]
    assert "REFUSED" in out.stdout, out.stdout
    assert str(yolov9_dir / "images" / "val") in out.stdout + out.stderr  # where it looked
