"""Validation and export attempts: one command each, then what it made goes to object storage.

Validation: val.py's metrics are read from its output (``yolo.parse_val_metrics``), written to
``metrics.json`` in the run folder, and the folder is uploaded to ``<data.uri>/runs/<job name>/``; the
finish message carries the metrics. Export: export.py exits 0 even when a format failed, so the files
(``yolo.export_outputs``) are the proof; each is uploaded next to the exported weights.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from scheduler.agent.attempt import Attempt, AttemptFailed, Outcome, store_error
from scheduler.agent.outputs import export_prefix, metrics_line, run_prefix, upload_export, write_metrics
from scheduler.agent.process import failure_message, log_size, log_text
from scheduler.errors import GpuschedError
from scheduler.jobs import yolo


def run_val(a: Attempt) -> Outcome:
    spec, cfg = a.spec, a.cfg
    run_dir = Path(yolo.run_dir(cfg.workdir, "val", spec.name))
    shutil.rmtree(run_dir, ignore_errors=True)  # a warm machine may hold an earlier run of this job
    since = log_size(a.log_path)
    code = a.wait(a.launch(yolo.val_command(spec, run_name=spec.name, workdir=cfg.workdir,
                                            gpu_count=cfg.gpu_count)))
    if code != 0:
        return Outcome(False, failure_message(code, a.log_path, since))
    metrics = yolo.parse_val_metrics(log_text(a.log_path, since))
    if metrics is None:
        return Outcome(False, "val.py printed no metrics (no 'all' row in its output); "
                       + failure_message(code, a.log_path, since))
    prefix = run_prefix(spec)
    if not a.speaks or prefix is None:
        return Outcome(True, metrics_line(metrics))
    write_metrics(run_dir, metrics)
    a.progress("uploading the outputs")
    try:
        a.stored("outputs", lambda: a.store(prefix).upload_tree(run_dir, prefix))
    except (GpuschedError, OSError) as exc:
        raise AttemptFailed(store_error(f"validation finished ({metrics_line(metrics)}), but its outputs could "
                                        f"not be uploaded to {prefix}", exc)) from None
    return Outcome(True, f"{metrics_line(metrics)}; metrics.json and the run folder in {prefix}", prefix)


def run_export(a: Attempt) -> Outcome:
    spec, cfg = a.spec, a.cfg
    prefix = export_prefix(spec)
    if prefix is None:
        raise AttemptFailed(f"the weights {spec.export.weights!r} are not in an object store and the job names "  # type: ignore[union-attr]
                            "no dataset: the exported files would have nowhere to go; name the weights by URI")
    wanted = yolo.export_outputs(spec, cfg.workdir)
    for path in wanted.values():  # what an earlier export on this warm machine left must not pass for this one's
        target = Path(path)
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)
    since = log_size(a.log_path)
    code = a.wait(a.launch(yolo.export_command(spec, workdir=cfg.workdir, gpu_count=cfg.gpu_count)))
    if code != 0:
        return Outcome(False, failure_message(code, a.log_path, since))
    missing = [fmt for fmt, path in wanted.items() if not Path(path).exists()]
    if missing:
        # export.py exits 0 even when every format failed: the files are the proof, not the status.
        return Outcome(False, f"export wrote no {', '.join(missing)} file{'s' if len(missing) > 1 else ''}; "
                       + failure_message(0, a.log_path, since))
    if not a.speaks:
        return Outcome(True, "")
    a.progress("uploading the outputs")
    try:
        sent = a.stored("outputs", lambda: upload_export(a.store(prefix), spec, cfg.workdir, prefix))
    except (GpuschedError, OSError) as exc:
        raise AttemptFailed(store_error(f"export finished, but its files could not be uploaded to {prefix}",
                                        exc)) from None
    return Outcome(True, f"exported {', '.join(wanted)} to {prefix}: {', '.join(sent)}", prefix)
