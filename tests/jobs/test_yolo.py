"""YOLOv9 command lines (exact argv) and results.csv parsing."""

from __future__ import annotations

import pytest
import yaml

from scheduler.errors import GpuschedError, UserError
from scheduler.jobs import yolo
from scheduler.jobs.yolo import (
    EpochResult,
    checkpoint_path,
    export_command,
    infer_command,
    infer_output_dir,
    parse_results_csv,
    pre_infer_cleanup,
    resume_opt_patch,
    staged_inputs,
    total_batch,
    train_command,
    val_command,
)
from scheduler.models import DataSpec, ExportSpec, InferSpec, JobSpec, Kind, TrainSpec, ValSpec

W = "/opt/gpusched/job"
DATA = DataSpec(uri="s3://vision-qa-datasets/helmet", train_images=12000, val_images=1500)


def train_spec(model: str = "yolov9-s", **train: object) -> JobSpec:
    return JobSpec(
        name="helmet", team="vision-qa", kind=Kind.train, model=model, data=DATA,
        train=TrainSpec(**{"weights": "s3://models/pretrained/yolov9-s.pt", **train}),
    )


def test_single_gpu_training() -> None:
    argv = train_command(train_spec(), physical_batch=16, gpu_count=1, run_name="job-7", workdir=W)
    assert argv == [
        "python3", "train_dual.py",
        "--workers", "8", "--device", "0", "--batch", "16",
        "--data", f"{W}/data/data.yaml", "--img", "640",
        "--cfg", "models/detect/yolov9-s.yaml", "--weights", f"{W}/weights/yolov9-s.pt",
        "--hyp", "hyp.scratch-high.yaml", "--min-items", "0",
        "--epochs", "100", "--close-mosaic", "15", "--patience", "100",
        "--project", f"{W}/runs/train", "--name", "job-7", "--exist-ok",
    ]


def test_multi_gpu_training_uses_the_launcher_and_total_batch() -> None:
    argv = train_command(train_spec(), physical_batch=16, gpu_count=4, run_name="job-7", workdir=W + "/")
    launcher = ["python3", "-m", "torch.distributed.launch", "--use_env", "--nproc_per_node", "4",
                "--master_port", "9527", "train_dual.py"]
    assert argv[: len(launcher)] == launcher
    assert argv[argv.index("--device") + 1] == "0,1,2,3"
    assert argv[argv.index("--batch") + 1] == "64"
    assert argv[-1] == "--sync-bn"
    assert f"{W}/data/data.yaml" in argv  # the trailing slash of workdir does not double


def test_multi_node_training_names_the_master() -> None:
    argv = train_command(train_spec(), physical_batch=8, gpu_count=8, run_name="r", workdir=W,
                         nnodes=2, node_rank=1, master_addr="10.0.0.5")
    assert argv[:13] == ["python3", "-m", "torch.distributed.launch", "--use_env", "--nproc_per_node", "8",
                         "--nnodes", "2", "--node_rank", "1", "--master_addr", "10.0.0.5", "--master_port"]
    assert argv[argv.index("--batch") + 1] == "64"  # 8 x 8 x 2 = 128, capped at the job's batch of 64


def test_gelan_from_scratch_uses_train_py_and_empty_weights() -> None:
    spec = train_spec("gelan-c", weights="", epochs=30, img_size=512, close_mosaic=5, hyp="hyp.custom.yaml")
    argv = train_command(spec, physical_batch=8, gpu_count=1, run_name="g1", workdir=W, workers=4)
    assert argv[1] == "train.py"
    pairs = dict(zip(argv[2::2], argv[3::2]))
    assert pairs["--weights"] == ""
    assert pairs["--cfg"] == "models/detect/gelan-c.yaml"
    assert (pairs["--epochs"], pairs["--img"], pairs["--close-mosaic"]) == ("30", "512", "5")
    assert (pairs["--hyp"], pairs["--workers"]) == ("hyp.custom.yaml", "4")


@pytest.mark.parametrize(
    ("job_batch", "physical", "gpus", "nodes", "expected"),
    [
        (64, 16, 1, 1, 16),   # memory-bound: YOLOv9 accumulates up to 64
        (64, 16, 4, 1, 64),
        (64, 32, 4, 1, 64),   # never above the job's batch
        (30, 16, 4, 1, 28),   # a multiple of the GPU count, as DDP requires
        (2, 16, 4, 1, 4),     # at least one image per GPU
        (128, 16, 8, 2, 128),
    ],
)
def test_total_batch(job_batch: int, physical: int, gpus: int, nodes: int, expected: int) -> None:
    spec = train_spec(batch=job_batch)
    assert total_batch(spec, physical_batch=physical, gpu_count=gpus, nnodes=nodes) == expected


@pytest.mark.parametrize(
    ("resume_from", "gpus", "expected"),
    [
        (f"{W}/runs/train/job-7/weights", 1,
         ["python3", "train_dual.py", "--resume", f"{W}/runs/train/job-7/weights/last.pt"]),
        (f"{W}/runs/train/job-7/weights/last.pt", 2,
         ["python3", "-m", "torch.distributed.launch", "--use_env", "--nproc_per_node", "2", "--master_port", "9527",
          "train_dual.py", "--resume", f"{W}/runs/train/job-7/weights/last.pt"]),
    ],
)
def test_resume(resume_from: str, gpus: int, expected: list[str]) -> None:
    argv = train_command(train_spec(), physical_batch=8, gpu_count=gpus, run_name="job-7", workdir=W,
                         resume_from=resume_from)
    assert argv == expected


def test_checkpoint_path_is_where_resume_looks() -> None:
    assert checkpoint_path(W, "job-7") == f"{W}/runs/train/job-7/weights/last.pt"


OPT_YAML = """weights: /opt/gpusched/job/weights/yolov9-s.pt
cfg: models/detect/yolov9-s.yaml
data: /opt/gpusched/job/data/data.yaml
hyp:
  lr0: 0.01
  batch_size: 999
epochs: 100
batch_size: 64
imgsz: 640
device: 0,1,2,3
sync_bn: true
save_dir: /opt/gpusched/job/runs/train/job-7
"""


def test_resume_opt_patch_rewrites_only_batch_and_device() -> None:
    patched = resume_opt_patch(OPT_YAML, 16, device="0")
    before, after = yaml.safe_load(OPT_YAML), yaml.safe_load(patched)
    assert after["batch_size"] == 16
    assert after["device"] == "0"
    assert after["hyp"]["batch_size"] == 999  # a nested key of the same name is not the option
    assert {k: v for k, v in after.items() if k not in ("batch_size", "device")} == {
        k: v for k, v in before.items() if k not in ("batch_size", "device")
    }
    changed = [(a, b) for a, b in zip(OPT_YAML.splitlines(), patched.splitlines()) if a != b]
    assert changed == [("batch_size: 64", "batch_size: 16"), ("device: 0,1,2,3", "device: '0'")]


def test_resume_opt_patch_keeps_device_unless_asked() -> None:
    assert yaml.safe_load(resume_opt_patch(OPT_YAML, 32))["device"] == "0,1,2,3"


@pytest.mark.parametrize(
    ("text", "batch", "device", "error"),
    [
        ("epochs: 100\n", 16, None, GpuschedError),
        (OPT_YAML, 0, None, ValueError),
        (OPT_YAML, 16, "0; rm -rf /", ValueError),
    ],
)
def test_resume_opt_patch_refuses(text: str, batch: int, device: str | None, error: type[Exception]) -> None:
    with pytest.raises(error):
        resume_opt_patch(text, batch, device=device)


def test_resume_opt_patch_moves_the_data_workers_and_run_folder_to_this_machine() -> None:
    opt = OPT_YAML.replace("sync_bn: true\n", "workers: 16\nsync_bn: true\n")
    patched = resume_opt_patch(opt, 8, device="cpu", data="/srv/w/data/data.yaml", workers=0,
                               save_dir="/srv/w/runs/train/job-7")
    after = yaml.safe_load(patched)
    assert (after["batch_size"], after["device"], after["workers"]) == (8, "cpu", 0)
    assert after["data"] == "/srv/w/data/data.yaml" and after["save_dir"] == "/srv/w/runs/train/job-7"
    assert after["hyp"] == {"lr0": 0.01, "batch_size": 999}
    changed = [b for a, b in zip(opt.splitlines(), patched.splitlines()) if a != b]
    assert changed == ["data: /srv/w/data/data.yaml", "batch_size: 8", "device: 'cpu'", "workers: 0",
                       "save_dir: /srv/w/runs/train/job-7"]


def test_resume_opt_patch_leaves_out_what_the_file_does_not_have_and_quotes_odd_paths() -> None:
    patched = resume_opt_patch("batch_size: 64\ndevice: '0'\ndata: /a/data.yaml\n", 16, workers=2,
                               data="/srv/my data/it's.yaml", save_dir="/srv/run")
    assert patched == "batch_size: 16\ndevice: '0'\ndata: '/srv/my data/it''s.yaml'\n"
    assert yaml.safe_load(patched)["data"] == "/srv/my data/it's.yaml"
    with pytest.raises(ValueError):
        resume_opt_patch(OPT_YAML, 16, data="relative/data.yaml")
    with pytest.raises(ValueError):
        resume_opt_patch(OPT_YAML, 16, workers=-1)


def test_train_command_refuses_other_kinds_and_unsafe_names() -> None:
    spec = infer_spec()
    with pytest.raises(ValueError):
        train_command(spec, physical_batch=8, gpu_count=1, run_name="r", workdir=W)
    with pytest.raises(ValueError):
        train_command(train_spec(), physical_batch=8, gpu_count=1, run_name="../x", workdir=W)


# --- inference ----------------------------------------------------------------------


def infer_spec(model: str = "yolov9-s", weights: str = "s3://traffic-models/cams/best.pt") -> JobSpec:
    return JobSpec(
        name="nightly", team="traffic-ops", kind=Kind.infer, model=model,
        infer=InferSpec(source="s3://frames/junction/", images=200000, weights=weights, conf=0.3),
    )


def test_infer_command() -> None:
    assert infer_command(infer_spec(), run_name="job-9", workdir=W) == [
        "python3", "detect_dual.py",
        "--weights", f"{W}/weights/best.pt", "--source", f"{W}/source",
        "--imgsz", "640", "--conf-thres", "0.3", "--iou-thres", "0.45", "--device", "0",
        "--save-txt", "--save-conf", "--nosave",
        "--project", f"{W}/runs/detect", "--name", "job-9", "--exist-ok",
    ]


@pytest.mark.parametrize(
    ("model", "weights", "script"),
    [
        ("yolov9-c", "s3://m/best.pt", "detect_dual.py"),
        ("yolov9-c", "s3://m/yolov9-c-converted.pt", "detect.py"),
        ("gelan-c", "s3://m/best.pt", "detect.py"),
        ("yolov9-s", "s3://m/best.onnx", "detect.py"),
    ],
)
def test_infer_script_follows_the_weights(model: str, weights: str, script: str) -> None:
    assert infer_command(infer_spec(model, weights), run_name="r", workdir=W)[1] == script


def test_pre_infer_cleanup_clears_the_labels_of_the_run() -> None:
    assert pre_infer_cleanup(infer_output_dir(W, "job-9")) == ["rm", "-rf", "--", f"{W}/runs/detect/job-9/labels"]


@pytest.mark.parametrize("bad", ["", "/", "runs/detect/job-9", "/opt/../", "/opt/job/../../"])
def test_pre_infer_cleanup_refuses_dangerous_folders(bad: str) -> None:
    with pytest.raises(ValueError):
        pre_infer_cleanup(bad)


# --- validation and export -------------------------------------------------------------


def test_val_command() -> None:
    spec = JobSpec(name="v", team="vision-qa", kind=Kind.val, model="yolov9-s", data=DATA,
                   val=ValSpec(weights="s3://m/helmet/best.pt", batch=16))
    assert val_command(spec, run_name="job-3", workdir=W) == [
        "python3", "val_dual.py",
        "--data", f"{W}/data/data.yaml", "--weights", f"{W}/weights/best.pt",
        "--batch-size", "16", "--imgsz", "640", "--task", "val", "--device", "0",
        "--project", f"{W}/runs/val", "--name", "job-3", "--exist-ok",
    ]


def export_spec(**export: object) -> JobSpec:
    return JobSpec(name="e", team="vision-qa", kind=Kind.export, model="yolov9-s",
                   export=ExportSpec(**{"weights": "s3://m/helmet/best.pt", **export}))


@pytest.mark.parametrize(
    ("options", "tail"),
    [
        ({"formats": ("onnx", "engine"), "half": True},
         ["--include", "onnx", "engine", "--device", "0", "--half"]),
        ({"formats": ("engine", "onnx", "openvino"), "dynamic": True},
         ["--include", "engine", "onnx", "openvino", "--device", "0", "--dynamic"]),
        ({}, ["--include", "onnx", "--device", "0"]),
    ],
)
def test_export_command(options: dict[str, object], tail: list[str]) -> None:
    argv = export_command(export_spec(**options), workdir=W)
    assert argv == ["python3", "export.py", "--weights", f"{W}/weights/best.pt", "--imgsz", "640", "640", *tail]
    assert argv.count("--include") == 1


def test_export_refuses_half_with_dynamic() -> None:
    with pytest.raises(UserError) as info:
        export_command(export_spec(half=True, dynamic=True), workdir=W)
    assert info.value.fix


def test_staged_inputs() -> None:
    assert staged_inputs(train_spec(), W) == [
        ("s3://vision-qa-datasets/helmet", f"{W}/data"),
        ("s3://models/pretrained/yolov9-s.pt", f"{W}/weights/yolov9-s.pt"),
    ]
    assert staged_inputs(infer_spec(), W) == [
        ("s3://traffic-models/cams/best.pt", f"{W}/weights/best.pt"),
        ("s3://frames/junction/", f"{W}/source"),
    ]
    assert staged_inputs(train_spec(weights="yolov9-s.pt"), W) == [("s3://vision-qa-datasets/helmet", f"{W}/data")]


# --- results.csv ------------------------------------------------------------------------

KEYS = ["train/box_loss", "train/cls_loss", "train/dfl_loss", "metrics/precision", "metrics/recall",
        "metrics/mAP_0.5", "metrics/mAP_0.5:0.95", "val/box_loss", "val/cls_loss", "val/dfl_loss",
        "x/lr0", "x/lr1", "x/lr2"]


def header() -> str:
    # Written the way YOLOv9's CSV logger pads its columns: 20 characters, right-aligned.
    return ",".join(f"{k:>20}" for k in ["epoch", *KEYS]) + "\n"


def row(epoch: int, p: float, r: float, m50: float, m5095: float) -> str:
    values = [epoch, 1.1, 2.2, 1.3, p, r, m50, m5095, 1.0, 2.0, 1.5, 0.0033, 0.0033, 0.0701]
    return ",".join(f"{v:>20.5g}" for v in values) + "\n"


def test_parse_results_csv_reads_padded_columns() -> None:
    text = header() + row(0, 0.5, 0.4, 0.35, 0.2) + row(1, 0.61234, 0.5, 0.45, 0.28)
    assert parse_results_csv(text) == [
        EpochResult(epoch=0, precision=0.5, recall=0.4, map50=0.35, map50_95=0.2),
        EpochResult(epoch=1, precision=0.61234, recall=0.5, map50=0.45, map50_95=0.28),
    ]


def test_parse_results_csv_skips_a_line_still_being_written() -> None:
    text = header() + row(0, 0.5, 0.4, 0.35, 0.2) + row(1, 0.6, 0.5, 0.45, 0.28)[:50]
    assert [r.epoch for r in parse_results_csv(text)] == [0]


def test_parse_results_csv_keeps_the_rerun_of_an_epoch() -> None:
    # Preempted after logging epoch 1 but before saving last.pt: the resume redoes epoch 1.
    text = header() + row(0, 0.5, 0.4, 0.35, 0.2) + row(1, 0.6, 0.5, 0.45, 0.28) + row(1, 0.62, 0.51, 0.46, 0.29)
    results = parse_results_csv(text)
    assert [r.epoch for r in results] == [0, 1]
    assert results[1].map50_95 == 0.29


@pytest.mark.parametrize(
    "text",
    [
        header().replace("metrics/mAP_0.5:0.95", "metrics/mAP_other"),
        header() + row(0, 0.5, 0.4, 0.35, 0.2).replace("0.35", "oops") + row(1, 0.6, 0.5, 0.45, 0.28),
    ],
    ids=["missing-column", "garbled-middle-row"],
)
def test_parse_results_csv_refuses_a_broken_file(text: str) -> None:
    with pytest.raises(GpuschedError):
        parse_results_csv(text)


def test_parse_results_csv_of_an_empty_file() -> None:
    assert parse_results_csv("") == [] and parse_results_csv(header()) == []


@pytest.mark.parametrize("output, oom", [
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.2 GiB (GPU 0; 22 GiB total)", True),
    ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB", True),
    ("RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported", True),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", True),
    ("FileNotFoundError: Dataset not found, missing paths", False),
    ("RuntimeError: DataLoader worker (pid 42) is killed by signal: Killed.", False),  # host RAM, not the GPU
])
def test_out_of_memory_is_read_from_the_output(output, oom):
    assert yolo.ran_out_of_memory(output) is oom


@pytest.mark.parametrize("total, gpus, halved", [(64, 1, 32), (3, 1, 1), (2, 1, 1), (1, 1, None),
                                                  (64, 4, 32), (12, 4, 4), (8, 8, None), (24, 8, 8)])
def test_a_halved_batch_stays_a_multiple_of_the_gpu_count(total, gpus, halved):
    assert yolo.halved_batch(total, gpus) == halved


def test_a_machine_without_a_gpu_runs_every_script_on_the_cpu() -> None:
    assert yolo.device_list(0) == "cpu" and yolo.device_list(2) == "0,1"
    val = JobSpec(name="v", team="vision-qa", kind=Kind.val, model="yolov9-s", data=DATA,
                  val=ValSpec(weights="s3://m/helmet/best.pt", batch=16))
    assert val_command(val, run_name="j", workdir=W, gpu_count=0)[-7:-5] == ["--device", "cpu"]
    assert val_command(val, run_name="j", workdir=W, gpu_count=4)[-7:-5] == ["--device", "0"]  # one process
    exported = export_command(export_spec(formats=("onnx",)), workdir=W, gpu_count=0)
    assert exported[-2:] == ["--device", "cpu"]
    assert resume_opt_patch("batch_size: 16\ndevice: '0'\n", 4, device="cpu") == "batch_size: 4\ndevice: 'cpu'\n"
    with pytest.raises(ValueError):
        yolo.device_list(-1)


def test_val_metrics_are_read_from_the_all_row() -> None:
    output = (
        "                 Class     Images  Instances          P          R      mAP50   mAP50-95\n"
        "                   all          4          4     0.0123      0.25     0.0456     0.0101\n"
        "Speed: 0.4ms pre-process, 120.3ms inference, 2.1ms NMS per image at shape (32, 3, 128, 128)\n"
    )
    metrics = yolo.parse_val_metrics(output)
    assert metrics is not None and (metrics.images, metrics.instances) == (4, 4)
    assert (metrics.precision, metrics.recall, metrics.map50, metrics.map50_95) == (0.0123, 0.25, 0.0456, 0.0101)
    assert yolo.parse_val_metrics("Traceback (most recent call last):\n  ...") is None


@pytest.mark.parametrize("before", [
    "Exception in thread ",  # a plot thread's traceback starts while the row is written (threading's excepthook)
    "Thread-2 (plot_images)",
    "\x1b[0m",
])
def test_the_all_row_is_found_behind_another_threads_words(before: str) -> None:
    """val.py plots in threads; a plot thread's traceback is printed in pieces, so its first words can share
    the row's line (seen in the YOLOv9 tier: val exited 0 and the agent reported no metrics)."""
    output = (
        "                 Class     Images  Instances          P          R      mAP50   mAP50-95: 100%| 1/1 00:00\n"
        f"{before}                   all          4          5    0.00167        0.2   0.000925   0.000278\n"
        "Thread-2 (plot_images):\nTraceback (most recent call last):\n"
    )
    metrics = yolo.parse_val_metrics(output)
    assert metrics is not None and (metrics.images, metrics.instances, metrics.recall) == (4, 5, 0.2)


def test_a_class_named_like_the_all_row_is_not_taken_for_it() -> None:
    output = "                   all          4          5          0          0          0          0\n" \
             "                   ball          4          5        0.5        0.5        0.5        0.5\n"
    metrics = yolo.parse_val_metrics(output)
    assert metrics is not None and metrics.precision == 0
