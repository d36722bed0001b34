"""What a job needs on the machine before its command runs, fetched from object storage with the
machine's role (``Attempt.store``): the dataset folder (train, val), the weights it names, the images
to run inference on, and a resumed training run's checkpoint with the options it was started with.

Every input lands where ``yolo.py``'s commands expect it (``yolo.staged_inputs``), in a folder
emptied first: a warm machine keeps the previous job's files. A job's weights are an object-store
URI or a bare file name (``yolov9-s.pt``) that the YOLOv9 checkout in the image must hold (YOLOv9
would otherwise try to download it from GitHub, which a machine in a private subnet cannot).

A problem here fails the attempt with a message that says what could not be fetched, from where,
and why (``AttemptFailed``); it never crashes the agent.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import NamedTuple

from scheduler.agent.attempt import Attempt, AttemptFailed, store_error
from scheduler.agent.checkpoints import checkpoint_epoch
from scheduler.agent.dataset import stage_dataset
from scheduler.agent.outputs import BEST, LAST, OPT, RESULTS, prefix_of_checkpoint
from scheduler.errors import GpuschedError, NotFound
from scheduler.jobs import yolo
from scheduler.models import JobSpec, Kind

_ERRORS = (GpuschedError, OSError, ValueError)


def job_weights(spec: JobSpec) -> str:
    """The weights the job names ('' for a training run from scratch)."""
    section = {Kind.train: spec.train, Kind.infer: spec.infer, Kind.val: spec.val, Kind.export: spec.export}[spec.kind]
    return getattr(section, "weights", "") or ""


def bare_weights(name: str, yolov9_dir: str) -> Path | None:
    """A bare weights name in the YOLOv9 checkout (at its top, or under weights/), or None."""
    root = Path(yolov9_dir)
    for candidate in (root / name, root / "weights" / Path(name).name):
        if candidate.is_file():
            return candidate
    return None


def stage_inputs(a: Attempt) -> None:
    """Fetch everything the job's command reads (``yolo.staged_inputs``), and a bare-named weights file
    from the YOLOv9 checkout. Raises ``AttemptFailed``."""
    spec, workdir = a.spec, a.cfg.workdir
    weights = job_weights(spec)
    if weights and "://" not in weights:
        found = bare_weights(weights, a.cfg.yolov9_dir)
        if found is None:
            raise AttemptFailed(
                f"the job's weights {weights!r} are not an object-store URI and the YOLOv9 checkout at "
                f"{a.cfg.yolov9_dir} has no such file: name the weights by URI (s3://, oss://, cos://)"
                + (", or '' to train from scratch" if spec.kind is Kind.train else ""))
        local = Path(yolo.local_weights(weights, workdir))
        try:
            local.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(found, local)
        except OSError as exc:
            raise AttemptFailed(store_error(f"cannot copy the weights {found} to {local}", exc)) from None
    for uri, local_path in yolo.staged_inputs(spec, workdir):
        local = Path(local_path)
        try:
            if spec.data is not None and uri == spec.data.uri and local == Path(workdir) / "data":
                a.progress("staging the dataset")
                _empty(local)
                a.stored("dataset", lambda uri=uri, local=local: stage_dataset(a.store(uri), uri, local))
            elif spec.kind is Kind.infer and local == Path(yolo.source_dir(workdir)):
                a.progress("staging the images")
                _empty(local)
                a.stored("images", lambda uri=uri, local=local: a.store(uri).download_tree(uri, local))
            else:
                a.progress("staging the weights")
                a.stored("weights", lambda uri=uri, local=local: a.store(uri).download(uri, local))
        except _ERRORS as exc:
            raise AttemptFailed(store_error(f"cannot stage {uri} to {local}", exc)) from None


class ResumePoint(NamedTuple):
    last: Path  # <run>/weights/last.pt, as the resume reads it
    epoch: int  # the epoch it holds (0-based), or checkpoints.FINAL: the training had finished
    prefix: str  # the run's folder in object storage


def fetch_checkpoint(a: Attempt, run_dir: Path) -> ResumePoint:
    """A resumed training run's files from object storage into ``run_dir``: last.pt and opt.yaml (``--resume``
    reads both), and results.csv and best.pt when they are there (YOLOv9 appends to the first and keeps
    the second unless a later epoch does better). Raises ``AttemptFailed``."""
    uri = a.work.checkpoint_uri
    assert uri, "fetch_checkpoint needs the work's checkpoint_uri"
    prefix = prefix_of_checkpoint(uri)
    a.progress("fetching the checkpoint")
    try:
        _empty(run_dir)
        store = a.store(uri)
        a.stored("checkpoint", lambda: store.download(uri, run_dir / LAST))
        try:
            a.stored("opt.yaml", lambda: store.download(prefix + OPT, run_dir / OPT))
        except NotFound:
            raise AttemptFailed(f"no {OPT} beside the checkpoint at {prefix}: --resume takes its options (batch, "
                                "device, data) from that file, so the run cannot resume on this machine") from None
        for optional in (RESULTS, BEST):
            try:
                a.stored(optional, lambda optional=optional: store.download(prefix + optional, run_dir / optional))
            except NotFound:
                pass
    except AttemptFailed:
        raise
    except _ERRORS as exc:
        raise AttemptFailed(store_error(f"cannot fetch the checkpoint {uri}", exc)) from None
    epoch = checkpoint_epoch(run_dir / LAST)
    if epoch is None:
        raise AttemptFailed(f"the checkpoint at {uri} is not a whole, readable checkpoint")
    return ResumePoint(last=run_dir / LAST, epoch=epoch, prefix=prefix)


def patch_opt(a: Attempt, run_dir: Path, total_batch: int) -> None:
    """Rewrite the run's opt.yaml for this machine (``yolo.resume_opt_patch``): the batch (``total_batch``,
    over every GPU), this machine's GPUs, the staged data.yaml, the dataloader workers, the run folder."""
    opt = run_dir / OPT
    try:
        text = opt.read_text(encoding="utf-8")
        opt.write_text(yolo.resume_opt_patch(
            text, total_batch, device=yolo.device_list(a.cfg.gpu_count),
            data=yolo.data_yaml_path(a.cfg.workdir) if a.spec.data is not None else None,
            workers=a.cfg.workers, save_dir=str(run_dir)), encoding="utf-8")
    except _ERRORS as exc:
        raise AttemptFailed(store_error(f"cannot rewrite {opt} for this machine", exc)) from None


def _empty(folder: Path) -> None:
    """Remove ``folder`` (what a previous job on this warm machine left there) and make it again."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
