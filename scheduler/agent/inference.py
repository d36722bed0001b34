"""An inference attempt: detect.py shard by shard (``infer_shards``), each shard's labels uploaded, then
the shard reported, so the daemon's resume point never names a shard whose output is lost with the
machine; a resumed attempt starts at the first unfinished shard."""

from __future__ import annotations

import shutil
from pathlib import Path

from scheduler.agent.attempt import Attempt, AttemptFailed, Outcome, store_error
from scheduler.agent.link import send_progress
from scheduler.agent.process import failure_message, log_size
from scheduler.errors import GpuschedError
from scheduler.jobs import infer_shards, yolo


def run_infer_shards(a: Attempt) -> Outcome:
    """Run detect.py over every shard from ``work.epochs_done`` on; the images are staged already."""
    spec, cfg, work = a.spec, a.cfg, a.work
    source = Path(yolo.source_dir(cfg.workdir))
    files = sorted(p.name for p in source.iterdir() if p.is_file() and infer_shards.is_image(p.name))
    shards = infer_shards.shard_count(spec.infer.images)  # type: ignore[union-attr]
    out = infer_shards.output_uri(spec)
    for index in range(work.epochs_done, shards):
        start, end = infer_shards.shard_bounds(len(files), shards, index)
        name = infer_shards.shard_name(index)
        labels = Path(yolo.infer_output_dir(cfg.workdir, spec.name)) / name / "labels"
        if end > start:
            shard_dir = Path(infer_shards.shard_source_dir(cfg.workdir, index))
            shutil.rmtree(shard_dir, ignore_errors=True)
            shard_dir.mkdir(parents=True)
            for f in files[start:end]:
                (shard_dir / f).symlink_to(source / f)
            shutil.rmtree(labels, ignore_errors=True)  # YOLOv9 appends to label files: start clean
            argv = yolo.infer_command(spec, run_name=spec.name, workdir=cfg.workdir, source=str(shard_dir),
                                      shard=name, gpu_count=cfg.gpu_count)
            since = log_size(a.log_path)
            code = a.wait(a.launch(argv))
            if code != 0:
                return Outcome(False, failure_message(code, a.log_path, since, where=name))
            if labels.is_dir():  # images without detections get no file; a shard may have none at all
                try:
                    a.stored("labels", lambda labels=labels: a.store(out).upload_tree(labels, f"{out}labels/"))
                except (GpuschedError, OSError) as exc:
                    raise AttemptFailed(store_error(f"cannot upload the labels of {name} to {out}labels/",
                                                    exc)) from None
        send_progress(a.link, work, index + 1, out, must_arrive=True)  # a shard is worth keeping
        a.progress(f"shard {index + 1}/{shards}", index + 1)
    return Outcome(True, f"{shards} shards; labels in {out}labels/", out)
