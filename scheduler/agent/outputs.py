"""Where a job's files live in object storage, and what the agent uploads when a job ends.

Train and val jobs keep their files under the dataset's bucket, ``<data.uri>/runs/<job name>/``
(``run_prefix``): a training run's checkpoint (``weights/last.pt``, with ``opt.yaml``,
``results.csv`` and ``weights/best.pt`` beside it) between attempts, then its outputs; a
validation run's folder and ``metrics.json``. An export job writes each format next to the weights
it exported (``export_prefix``), as export.py does on the machine. Inference labels go to
``infer_shards.output_uri``, shard by shard.

A finished training run is uploaded with ``weights/last.pt`` last: its final (stripped) last.pt
in storage means every other output is there too, so an attempt that starts from it knows the
training is over (``training.run_training``).
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path

from scheduler.agent.storage.base import ObjectStore
from scheduler.jobs import infer_shards, yolo
from scheduler.jobs.yolo import ValMetrics
from scheduler.models import JobSpec, Kind

# What a training run leaves at the top of its folder that is worth keeping: the options, the
# epochs' table, the plots YOLOv9 draws (results.png, confusion_matrix.png, the curves, labels.jpg).
RUN_FILE_SUFFIXES = (".yaml", ".csv", ".png", ".jpg")
LAST, BEST, OPT, RESULTS = "weights/last.pt", "weights/best.pt", "opt.yaml", "results.csv"
METRICS = "metrics.json"


def run_prefix(spec: JobSpec) -> str | None:
    """``<data.uri>/runs/<job name>/``: where a train or val job's files go; None without a dataset."""
    if spec.data is None:
        return None
    return f"{spec.data.uri.rstrip('/')}/runs/{spec.name}/"


def remote_checkpoint(spec: JobSpec) -> str | None:
    """Where last.pt lives between attempts: next to the dataset, under runs/<job name>/weights/."""
    prefix = run_prefix(spec)
    return prefix + LAST if prefix else None


def prefix_of_checkpoint(checkpoint_uri: str) -> str:
    """The run folder a checkpoint URI belongs to: ``.../runs/<name>/weights/last.pt`` -> ``.../runs/<name>/``."""
    if checkpoint_uri.endswith("/" + LAST):
        return checkpoint_uri[: -len(LAST)]
    return checkpoint_uri.rsplit("/", 1)[0] + "/"


def export_prefix(spec: JobSpec) -> str | None:
    """Where an export job's formats go: the folder of the weights it exports (export.py writes them next
    to the weights), else the dataset's runs/<job name>/; None when the job names no object store at all."""
    if spec.export is None:
        raise ValueError("export_prefix needs an export job")
    weights = spec.export.weights
    if "://" in weights:
        return weights.rsplit("/", 1)[0] + "/"
    return run_prefix(spec)


def outputs_prefix(spec: JobSpec, checkpoint_uri: str | None = None) -> str | None:
    """Where the job's outputs go, by kind (``checkpoint_uri``: a train job's resume point, whose folder wins)."""
    if spec.kind is Kind.infer:
        return infer_shards.output_uri(spec)
    if spec.kind is Kind.export:
        return export_prefix(spec)
    if spec.kind is Kind.train and checkpoint_uri:
        return prefix_of_checkpoint(checkpoint_uri)
    return run_prefix(spec)


def run_files(run_dir: Path) -> list[Path]:
    """The top-level files of a run folder worth keeping (``RUN_FILE_SUFFIXES``), by name."""
    if not run_dir.is_dir():
        return []
    return sorted(p for p in run_dir.iterdir() if p.is_file() and p.suffix in RUN_FILE_SUFFIXES)


def upload_training(store: ObjectStore, run_dir: Path, prefix: str) -> tuple[list[str], list[str]]:
    """A finished training run's outputs under ``prefix``: the run folder's files, best.pt, then last.pt.

    Returns (the URIs uploaded, what was missing: best.pt or last.pt). last.pt goes last (see the module
    docstring); nothing is uploaded when it is missing."""
    last, best = run_dir / LAST, run_dir / BEST
    if not last.is_file():
        return [], [LAST] + ([] if best.is_file() else [BEST])
    sent = [store.upload(path, prefix + path.name) for path in run_files(run_dir)]
    missing = []
    if best.is_file():
        sent.append(store.upload(best, prefix + BEST))
    else:
        missing.append(BEST)
    sent.append(store.upload(last, prefix + LAST))
    return sent, missing


def write_metrics(run_dir: Path, metrics: ValMetrics) -> Path:
    """metrics.json in the validation run's folder (it is uploaded with the folder)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / METRICS
    path.write_text(json.dumps(metrics.model_dump(), indent=2) + "\n", encoding="utf-8")
    return path


def metrics_line(metrics: ValMetrics) -> str:
    return (f"P {metrics.precision:.3f}, R {metrics.recall:.3f}, mAP50 {metrics.map50:.3f}, "
            f"mAP50-95 {metrics.map50_95:.3f} on {metrics.images} images ({metrics.instances} objects)")


def upload_export(store: ObjectStore, spec: JobSpec, workdir: str, prefix: str) -> list[str]:
    """Every format export.py wrote (``yolo.export_outputs``): a file to ``prefix/<name>``, a folder
    (openvino, saved_model) to ``prefix/<name>/``. Returns the URIs, one per format."""
    sent = []
    for path in yolo.export_outputs(spec, workdir).values():
        if path.endswith("/"):
            name = posixpath.basename(path.rstrip("/"))
            store.upload_tree(path, prefix + name + "/")
            sent.append(prefix + name + "/")
        else:
            sent.append(store.upload(path, prefix + posixpath.basename(path)))
    return sent
