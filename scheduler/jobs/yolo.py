"""JobSpec -> the exact YOLOv9 command lines an instance runs, and YOLOv9's outputs -> records.

Every command is an argv list (no shell quoting to get wrong) run with the
working directory set to the YOLOv9 checkout in the job image, so script names
and ``models/detect/<model>.yaml`` are relative to it. The job's own files live
under ``workdir`` on the instance, laid out as:

==============================  ==================================================
``<workdir>/data/``             the dataset folder (``data.uri``), with data.yaml
``<workdir>/weights/<file>``    weights named in the job (a URI's last part, or
                                a bare ``.pt`` name the image or agent provides)
``<workdir>/source/``           images to run inference on (``infer.source``)
``<workdir>/runs/train/<run>``  training output: opt.yaml, results.csv, weights/
``<workdir>/runs/detect/<run>`` inference output: labels/<image>.txt
``<workdir>/runs/val/<run>``    validation output
==============================  ==================================================

``staged_inputs`` lists what the on-instance agent downloads before a command.
Keep ``workdir`` the same on every instance of a job: a resumed run reads paths
from the opt.yaml that the first instance wrote.
"""

from __future__ import annotations

import csv
import io
import posixpath
import re

from scheduler.errors import GpuschedError, UserError
from scheduler.models import Frozen, JobSpec, Kind, TrainSpec

__all__ = [
    "MASTER_PORT",
    "EpochResult",
    "train_command",
    "infer_command",
    "val_command",
    "export_command",
    "pre_infer_cleanup",
    "resume_opt_patch",
    "parse_results_csv",
    "total_batch",
    "device_list",
    "staged_inputs",
    "run_dir",
    "checkpoint_path",
    "data_yaml_path",
    "infer_output_dir",
    "source_dir",
    "local_weights",
    "export_outputs",
    "ran_out_of_memory",
    "parse_val_metrics",
    "halved_batch",
]

PYTHON = "python3"  # Debian 12 and the official images have python3; the agent may name another
MASTER_PORT = 9527
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# results.csv columns (names are right-aligned to 20 characters in the file).
_COL_EPOCH = "epoch"
_COL_PRECISION = "metrics/precision"
_COL_RECALL = "metrics/recall"
_COL_MAP50 = "metrics/mAP_0.5"
_COL_MAP50_95 = "metrics/mAP_0.5:0.95"
_REQUIRED_COLUMNS = (_COL_EPOCH, _COL_PRECISION, _COL_RECALL, _COL_MAP50, _COL_MAP50_95)


class EpochResult(Frozen):
    """One row of results.csv. ``epoch`` counts from 0, as YOLOv9 writes it."""

    epoch: int
    precision: float
    recall: float
    map50: float
    map50_95: float


# --- where things are on the instance -------------------------------------------


def data_yaml_path(workdir: str) -> str:
    return posixpath.join(_dir(workdir), "data", "data.yaml")


def source_dir(workdir: str) -> str:
    return posixpath.join(_dir(workdir), "source")


def local_weights(weights: str, workdir: str) -> str:
    """Where the weights named in the job are on the instance; '' (from scratch) stays ''."""
    if not weights:
        return ""
    return posixpath.join(_dir(workdir), "weights", posixpath.basename(weights.rstrip("/")))


def run_dir(workdir: str, task: str, run_name: str) -> str:
    """``task`` is YOLOv9's project folder: train, detect or val."""
    if task not in ("train", "detect", "val"):
        raise ValueError(f"task must be train, detect or val, not {task!r}")
    return posixpath.join(_dir(workdir), "runs", task, _name(run_name))


def checkpoint_path(workdir: str, run_name: str) -> str:
    """The last.pt a preempted run resumes from (rewritten after every epoch)."""
    return posixpath.join(run_dir(workdir, "train", run_name), "weights", "last.pt")


def staged_inputs(spec: JobSpec, workdir: str) -> list[tuple[str, str]]:
    """(URI, local path) pairs the agent must download before running the job's command."""
    pairs: list[tuple[str, str]] = []
    if spec.data is not None and spec.kind in (Kind.train, Kind.val):
        pairs.append((spec.data.uri, posixpath.join(_dir(workdir), "data")))
    weights = _weights_of(spec)
    if "://" in weights:
        pairs.append((weights, local_weights(weights, workdir)))
    if spec.kind is Kind.infer and spec.infer is not None:
        pairs.append((spec.infer.source, source_dir(workdir)))
    return pairs


# --- training ----------------------------------------------------------------------


def device_list(gpu_count: int) -> str:
    """``4`` -> ``"0,1,2,3"``: the --device value for the GPUs of one machine; ``0`` -> ``"cpu"`` (a machine
    without a GPU: the real-YOLOv9 test tier; YOLOv9 refuses ``--device 0`` without CUDA)."""
    if gpu_count < 0:
        raise ValueError("gpu_count must be at least 0")
    return ",".join(str(i) for i in range(gpu_count)) or "cpu"


def total_batch(spec: JobSpec, *, physical_batch: int, gpu_count: int, nnodes: int = 1) -> int:
    """The --batch value: the total over all GPUs.

    At most ``physical_batch`` per GPU (what fits in memory) and at most the
    job's ``train.batch`` (more would change the training the user asked for),
    and a multiple of the GPU count, which DDP requires. YOLOv9 accumulates
    gradients up to a nominal batch of 64, so a smaller total keeps the
    effective batch near 64.
    """
    if physical_batch < 1:
        raise ValueError("physical_batch must be at least 1")
    world = _world(gpu_count, nnodes)
    wanted = min(_train(spec).batch, physical_batch * world)
    return max(wanted // world, 1) * world


def train_command(
    spec: JobSpec,
    *,
    physical_batch: int,
    gpu_count: int,
    run_name: str,
    workdir: str,
    resume_from: str | None = None,
    workers: int = 8,
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: str | None = None,
) -> list[str]:
    """The training argv; ``train_dual.py`` for yolov9-*, ``train.py`` for gelan-*.

    ``physical_batch`` is per GPU; the argv carries the total (see
    ``total_batch``). More than one GPU runs under torch.distributed.launch with
    ``--use_env``: since torch 2.0 the launcher otherwise passes ``--local-rank``,
    which YOLOv9's argument parser rejects; YOLOv9 reads LOCAL_RANK from the
    environment anyway.

    ``resume_from`` is the folder holding last.pt (``<run>/weights``) or the .pt
    itself. A resumed run takes every option from the run's opt.yaml, not from
    this argv, so before running it on other hardware rewrite that file with
    ``resume_opt_patch(text, batch=total_batch(...), device=device_list(n))``.
    """
    if spec.kind is not Kind.train:
        raise ValueError(f"train_command needs a train job, not {spec.kind.value}")
    if workers < 0:
        raise ValueError("workers must be >= 0")
    if gpu_count == 0 and nnodes > 1:
        raise ValueError("a run on the CPU (gpu_count 0) is one process on one machine")
    processes = max(gpu_count, 1)  # the CPU runs as one process, like one GPU
    world = _world(processes, nnodes)
    script = "train_dual.py" if spec.model.startswith("yolov9-") else "train.py"
    argv = _launcher(processes, nnodes, node_rank, master_addr) + [script]
    if resume_from is not None:
        checkpoint = resume_from if resume_from.endswith(".pt") else posixpath.join(resume_from, "last.pt")
        return argv + ["--resume", checkpoint]
    train = _train(spec)
    argv += [
        "--workers", str(workers),
        "--device", device_list(gpu_count),
        "--batch", str(total_batch(spec, physical_batch=physical_batch, gpu_count=processes, nnodes=nnodes)),
        "--data", data_yaml_path(workdir),
        "--img", str(train.img_size),
        "--cfg", f"models/detect/{spec.model}.yaml",
        "--weights", local_weights(train.weights, workdir),
        "--hyp", train.hyp,
        "--min-items", "0",
        "--epochs", str(train.epochs),
        "--close-mosaic", str(train.close_mosaic),
        "--patience", str(train.patience),
        "--project", posixpath.dirname(run_dir(workdir, "train", run_name)),
        "--name", _name(run_name),
        "--exist-ok",
    ]
    if world > 1:
        argv.append("--sync-bn")
    return argv


_OPT_LINE = {key: re.compile(rf"^{key}:[^\n]*$", re.MULTILINE)
             for key in ("batch_size", "device", "data", "workers", "save_dir")}
_PLAIN_PATH = re.compile(r"^/[A-Za-z0-9_./-]*$")


def resume_opt_patch(opt_yaml_text: str, batch: int, *, device: str | None = None, data: str | None = None,
                     workers: int | None = None, save_dir: str | None = None) -> str:
    """Rewrite a run's opt.yaml so a resume fits the new machine; everything else is kept byte for byte.

    ``--resume`` replaces all command-line options with opt.yaml, so a smaller
    GPU (``batch``) or a different GPU count (``device``, e.g. ``"0,1"``) has to
    be written there. ``data`` (the staged data.yaml), ``workers`` (dataloader
    processes) and ``save_dir`` (the run folder) follow the new machine too, where
    the file has them: a line that is not there is left out (``batch_size`` and
    ``device`` must be there).
    """
    if batch < 1:
        raise ValueError("batch must be at least 1")
    text = _replace_opt(opt_yaml_text, "batch_size", str(batch))
    if device is not None:
        if not re.fullmatch(r"\d+(,\d+)*|cpu", device):
            raise ValueError(f"device must look like '0', '0,1,2,3' or 'cpu', not {device!r}")
        text = _replace_opt(text, "device", f"'{device}'")
    if workers is not None:
        if workers < 0:
            raise ValueError("workers must be >= 0")
        text = _replace_opt(text, "workers", str(workers), required=False)
    for key, path in (("data", data), ("save_dir", save_dir)):
        if path is not None:
            text = _replace_opt(text, key, _yaml_path(key, path), required=False)
    return text


def _yaml_path(key: str, path: str) -> str:
    """An absolute path as a YAML scalar: plain when it is plain, else single-quoted."""
    if not path.startswith("/") or "\n" in path or "\0" in path:
        raise ValueError(f"{key} must be an absolute path on one line, not {path!r}")
    return path if _PLAIN_PATH.fullmatch(path) else "'" + path.replace("'", "''") + "'"


def _replace_opt(text: str, key: str, value: str, *, required: bool = True) -> str:
    pattern = _OPT_LINE[key]
    if not pattern.search(text):
        if not required:
            return text
        raise GpuschedError(
            f"opt.yaml has no top-level {key}: line",
            fix="resume needs the opt.yaml YOLOv9 wrote next to weights/; restart the run from its last.pt",
        )
    return pattern.sub(lambda _m: f"{key}: {value}", text, count=1)


# CUDA's and PyTorch's words for "the batch did not fit": torch.cuda.OutOfMemoryError's message, the
# older RuntimeError's, and cuBLAS failing to allocate its workspace under the same pressure.
_OUT_OF_MEMORY = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED")


class ValMetrics(Frozen):
    """The ``all`` row val.py prints: every class together."""

    images: int
    instances: int
    precision: float
    recall: float
    map50: float
    map50_95: float


# The row is anchored at its end, not at the start of a line: val.py plots in threads, and a plot thread's
# traceback (Pillow 10 removed FreeTypeFont.getsize, which YOLOv9's plots call) is printed in pieces, so
# its first words can land on the row's line ahead of it. The row itself is one write, never split.
_VAL_ALL = re.compile(r"(?:^|\s)all[ \t]+(\d+)[ \t]+(\d+)[ \t]+(\S+)[ \t]+(\S+)[ \t]+(\S+)[ \t]+(\S+)[ \t\r]*$",
                      re.MULTILINE)


def parse_val_metrics(output: str) -> ValMetrics | None:
    """The last ``all`` row of val.py's output (the script prints it once; a log may hold retries)."""
    rows = _VAL_ALL.findall(output)
    if not rows:
        return None
    images, instances, p, r, m50, m = rows[-1]
    try:
        return ValMetrics(images=int(images), instances=int(instances), precision=float(p), recall=float(r),
                          map50=float(m50), map50_95=float(m))
    except ValueError:
        return None


def ran_out_of_memory(output: str) -> bool:
    """Did a run fail because its batch did not fit in GPU memory? (Read from the end of its output.)"""
    return _OUT_OF_MEMORY.search(output) is not None


def halved_batch(total: int, gpu_count: int) -> int | None:
    """The --batch to retry with after running out of memory: half, still a multiple of the GPU count
    (DDP splits it evenly); None when one image per GPU did not fit either. YOLOv9 accumulates
    gradients to a nominal batch of 64, so the effective batch stays what the job asked for."""
    if gpu_count < 1 or total < 1:
        raise ValueError("total and gpu_count must be at least 1")
    per_gpu = total // gpu_count
    if per_gpu <= 1:
        return None
    return (per_gpu // 2) * gpu_count


# --- inference, validation, export ------------------------------------------------


def infer_command(spec: JobSpec, *, run_name: str, workdir: str, source: str | None = None,
                  shard: str | None = None, gpu_count: int = 1) -> list[str]:
    """Detection over ``source`` (default ``<workdir>/source``) writing labels/<image>.txt (class, box,
    confidence) under ``infer_output_dir``, or under ``<that>/<shard>`` for one shard (``infer_shards``).

    Run ``pre_infer_cleanup`` first on every attempt: YOLOv9 appends to label
    files, so a retry would otherwise duplicate lines.
    """
    if spec.kind is not Kind.infer or spec.infer is None:
        raise ValueError("infer_command needs an infer job with an infer: section")
    infer = spec.infer
    return [
        PYTHON,
        "detect_dual.py" if _is_dual(spec.model, infer.weights) else "detect.py",
        "--weights", local_weights(infer.weights, workdir),
        "--source", source or source_dir(workdir),
        "--imgsz", str(infer.img_size),
        "--conf-thres", str(infer.conf),
        "--iou-thres", str(infer.iou),
        "--device", device_list(min(gpu_count, 1)),  # detect.py runs one process: one GPU
        "--save-txt",
        "--save-conf",
        "--nosave",
        *(("--project", run_dir(workdir, "detect", run_name), "--name", _name(shard)) if shard else
          ("--project", posixpath.dirname(run_dir(workdir, "detect", run_name)), "--name", _name(run_name))),
        "--exist-ok",
    ]


def infer_output_dir(workdir: str, run_name: str) -> str:
    return run_dir(workdir, "detect", run_name)


def pre_infer_cleanup(output_dir: str) -> list[str]:
    """argv that empties ``<output_dir>/labels`` before an inference attempt."""
    clean = posixpath.normpath(output_dir) if output_dir else ""
    if not clean.startswith("/") or clean == "/" or ".." in clean.split("/"):
        raise ValueError(f"refusing to clean {output_dir!r}: give the run's absolute output folder")
    return ["rm", "-rf", "--", posixpath.join(clean, "labels")]


def val_command(spec: JobSpec, *, run_name: str, workdir: str, gpu_count: int = 1) -> list[str]:
    """val.py's metrics (P, R, mAP) are read from its output (``parse_val_metrics``). No --save-json: that
    is COCO's own evaluation, which pip-installs pycocotools at run time and wants COCO's annotations."""
    if spec.kind is not Kind.val or spec.val is None:
        raise ValueError("val_command needs a val job with a val: section")
    val = spec.val
    return [
        PYTHON,
        "val_dual.py" if _is_dual(spec.model, val.weights) else "val.py",
        "--data", data_yaml_path(workdir),
        "--weights", local_weights(val.weights, workdir),
        "--batch-size", str(val.batch),
        "--imgsz", str(val.img_size),
        "--task", "val",
        "--device", device_list(min(gpu_count, 1)),
        "--project", posixpath.dirname(run_dir(workdir, "val", run_name)),
        "--name", _name(run_name),
        "--exist-ok",
    ]


def export_command(spec: JobSpec, *, workdir: str, gpu_count: int = 1) -> list[str]:
    """export.py writes each format next to the weights file, under ``<workdir>/weights/``."""
    if spec.kind is not Kind.export or spec.export is None:
        raise ValueError("export_command needs an export job with an export: section")
    export = spec.export
    if export.half and export.dynamic:
        raise UserError(
            "export cannot use half and dynamic together (YOLOv9's export.py refuses it)",
            fix="set export.dynamic: false, or export.half: false",
        )
    argv = [
        PYTHON,
        "export.py",
        "--weights", local_weights(export.weights, workdir),
        "--imgsz", str(export.img_size), str(export.img_size),
        # One --include followed by every format: argparse keeps only the last
        # of repeated --include options.
        "--include", *export.formats,
        # export.py defaults to the CPU, where --half and engine are refused.
        "--device", device_list(min(gpu_count, 1)),
    ]
    if export.half:
        argv.append("--half")
    if export.dynamic:
        argv.append("--dynamic")
    return argv


# --- outputs ------------------------------------------------------------------------

# What export.py writes for each format, next to the weights: a file, or a folder (ending in "/").
_EXPORT_OUTPUTS = {
    "torchscript": ".torchscript", "onnx": ".onnx", "openvino": "_openvino_model/", "engine": ".engine",
    "coreml": ".mlmodel", "saved_model": "_saved_model/", "pb": ".pb", "tflite": "-fp16.tflite",
}


def export_outputs(spec: JobSpec, workdir: str) -> dict[str, str]:
    """Format -> the path export.py writes it to (a folder's path ends in "/"). export.py exits 0 even
    when a format failed, so these paths, not its exit status, say what was exported."""
    if spec.kind is not Kind.export or spec.export is None:
        raise ValueError("export_outputs needs an export job")
    stem = local_weights(spec.export.weights, workdir).removesuffix(".pt")
    return {fmt: stem + _EXPORT_OUTPUTS[fmt] for fmt in spec.export.formats}



def parse_results_csv(text: str) -> list[EpochResult]:
    """results.csv -> one record per epoch, in epoch order.

    Column names and values are space-padded in the file. A last line that is
    cut short is skipped (the file is read while training writes it). When an
    epoch appears twice, the later row wins: a run preempted after writing an
    epoch's row but before saving last.pt repeats that epoch on resume.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = [name.strip() for name in next(csv.reader([lines[0]]))]
    missing = [c for c in _REQUIRED_COLUMNS if c not in header]
    if missing:
        raise GpuschedError(
            f"results.csv lacks the column(s) {', '.join(missing)}",
            fix="read the results.csv that YOLOv9's train.py / train_dual.py writes",
        )
    at = {name: header.index(name) for name in _REQUIRED_COLUMNS}
    by_epoch: dict[int, EpochResult] = {}
    rows = list(csv.reader(io.StringIO("\n".join(lines[1:]))))
    for n, row in enumerate(rows):
        try:
            if len(row) != len(header):
                raise ValueError(f"{len(row)} columns, header has {len(header)}")
            result = EpochResult(
                epoch=int(float(row[at[_COL_EPOCH]])),
                precision=float(row[at[_COL_PRECISION]]),
                recall=float(row[at[_COL_RECALL]]),
                map50=float(row[at[_COL_MAP50]]),
                map50_95=float(row[at[_COL_MAP50_95]]),
            )
        except ValueError as exc:
            if n == len(rows) - 1:
                break  # still being written
            raise GpuschedError(f"results.csv row {n + 2} is unreadable: {exc}") from None
        by_epoch[result.epoch] = result
    return [by_epoch[e] for e in sorted(by_epoch)]


# --- helpers ----------------------------------------------------------------------


def _launcher(gpu_count: int, nnodes: int, node_rank: int, master_addr: str | None) -> list[str]:
    if gpu_count * nnodes == 1:
        return [PYTHON]
    argv = [PYTHON, "-m", "torch.distributed.launch", "--use_env", "--nproc_per_node", str(gpu_count)]
    if nnodes > 1:
        if master_addr is None or not 0 <= node_rank < nnodes:
            raise ValueError("a multi-node run needs master_addr and 0 <= node_rank < nnodes")
        argv += ["--nnodes", str(nnodes), "--node_rank", str(node_rank), "--master_addr", master_addr]
    return argv + ["--master_port", str(MASTER_PORT)]


def _world(gpu_count: int, nnodes: int) -> int:
    if gpu_count < 1 or nnodes < 1:
        raise ValueError("gpu_count and nnodes must be at least 1")
    return gpu_count * nnodes


def _train(spec: JobSpec) -> TrainSpec:
    # jobfile requires a train: section; a spec built in code may leave it to defaults.
    return spec.train if spec.train is not None else TrainSpec()


def _weights_of(spec: JobSpec) -> str:
    section = {Kind.train: spec.train, Kind.infer: spec.infer, Kind.val: spec.val, Kind.export: spec.export}[spec.kind]
    return getattr(section, "weights", "") or ""


def _is_dual(model: str, weights: str) -> bool:
    """Dual-branch weights need the *_dual.py scripts.

    A trained yolov9-* checkpoint keeps its auxiliary branch; gelan-* has none,
    and YOLOv9's re-parameterised "converted" checkpoints have dropped it.
    """
    return model.startswith("yolov9-") and weights.endswith(".pt") and "converted" not in posixpath.basename(weights)


def _dir(workdir: str) -> str:
    if not workdir:
        raise ValueError("workdir must not be empty")
    return workdir.rstrip("/") or "/"


def _name(run_name: str) -> str:
    # The name becomes a folder that pre_infer_cleanup deletes from: keep it plain.
    if not _SAFE_NAME.fullmatch(run_name):
        raise ValueError(f"run_name must be letters, digits, '.', '_' or '-', not {run_name!r}")
    return run_name
