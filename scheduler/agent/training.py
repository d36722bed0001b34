"""A training attempt on this machine: fetch the resume point, run train_dual.py / train.py, keep a
checkpoint you can trust in object storage after every epoch, retry with half the batch when CUDA runs
out of memory, and upload the run's outputs at the end.

Checkpoints: YOLOv9 writes an epoch's row to results.csv, then saves last.pt. When results.csv shows
epoch e finished, the agent copies last.pt and uploads the copy only once it holds epoch e
(``checkpoints``), with the run's opt.yaml (a resume reads its options there), results.csv and a new
best.pt beside it, last.pt last, under the run's folder (``outputs.run_prefix``); then it reports e+1
epochs done with that checkpoint. So the daemon's resume point is always a whole checkpoint that
exists, with what resuming it needs.

A resumed attempt fetches those files back into the run folder and rewrites opt.yaml for this machine
(its GPUs, its batch, its paths): ``--resume`` takes every option from that file. A checkpoint that
is final (YOLOv9 strips last.pt when training ends) means a previous attempt finished the training and
uploaded its outputs (last.pt goes last): the attempt reports success without training again.

CUDA out of memory (the run exits non-zero and its output says so): the run starts again on the same
machine with half the batch (``yolo.halved_batch``; YOLOv9 accumulates gradients to keep the effective
batch), resuming from this run's last checkpoint when it has one, until one image per GPU does not fit
either; single-node runs only (a node of a gang cannot change the batch alone: its failure is
reported). The first progress report of each run says the batch that trained there
(``physical_batch``), and the finish message says the batch was halved.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from scheduler.agent.attempt import Attempt, AttemptFailed, Outcome, Reclaimed, store_error
from scheduler.agent.checkpoints import FINAL, checkpoint_epoch, complete_copy
from scheduler.agent.config import AgentConfig
from scheduler.agent.link import Stale, send_progress
from scheduler.agent.outputs import BEST, LAST, OPT, RESULTS, outputs_prefix, upload_training
from scheduler.agent.process import failure_message, log_size, log_text, stop_process
from scheduler.agent.staging import fetch_checkpoint, patch_opt
from scheduler.errors import GpuschedError
from scheduler.jobs import yolo
from scheduler.jobs.perf_memory import physical_batch
from scheduler.models import JobSpec, TrainSpec

log = structlog.get_logger("gpusched.agent")

# On a reclaim notice, how long to wait for last.pt to catch up with a row results.csv already shows.
RECLAIM_CHECKPOINT_WAIT_SECONDS = 15.0


@dataclass
class _Run:
    """What one training attempt knows across its runs (an OOM retry is another run)."""

    prefix: str | None  # the run's folder in object storage
    reported: int  # epochs the daemon has as done
    total: int  # --batch: images per step over every GPU
    world: int  # GPUs over every node
    announce: bool = True  # the next progress report says the batch that trained (once per run)
    best_sent: tuple[float, int] | None = None  # best.pt's (mtime, size) when last uploaded
    halved: list[int] = field(default_factory=list)  # the totals that ran out of memory, in order

    @property
    def per_gpu(self) -> int:
        return self.total // self.world


def initial_total(spec: JobSpec, cfg: AgentConfig, nodes: int = 1) -> int:
    """The --batch to start with: the memory model's per-GPU batch for this machine's GPU, times the GPUs."""
    train = spec.train if spec.train is not None else TrainSpec()
    per_gpu = physical_batch(spec.model, cfg.gpu, train.img_size, train.batch) or 1
    return yolo.total_batch(spec, physical_batch=per_gpu, gpu_count=max(cfg.gpu_count, 1), nnodes=nodes)


def train_argv(spec: JobSpec, cfg: AgentConfig, total: int, resume: str | None, master: str | None, *,
               nodes: int = 1, node_rank: int = 0) -> list[str]:
    """The training command with ``total`` images per step over every GPU (``resume``: the last.pt to resume)."""
    processes = max(cfg.gpu_count, 1)
    return yolo.train_command(spec, physical_batch=max(total // (processes * nodes), 1), gpu_count=cfg.gpu_count,
                              run_name=spec.name, workdir=cfg.workdir, resume_from=resume, workers=cfg.workers,
                              nnodes=nodes, node_rank=node_rank, master_addr=master)


def run_training(a: Attempt, master: str | None = None) -> Outcome:
    """The training attempt from its resume point to its outcome (see the module docstring). Raises
    ``AttemptFailed`` (inputs or outputs that cannot be fetched or uploaded), ``Stale`` and ``Reclaimed``."""
    cfg, work = a.cfg, a.work
    run_dir = Path(yolo.run_dir(cfg.workdir, "train", a.spec.name))
    state = _Run(prefix=outputs_prefix(a.spec, work.checkpoint_uri), reported=work.epochs_done,
                 total=initial_total(a.spec, cfg, work.nodes), world=max(cfg.gpu_count, 1) * work.nodes)
    resume: str | None = None
    if work.epochs_done and work.checkpoint_uri:
        point = fetch_checkpoint(a, run_dir)
        if point.epoch == FINAL:
            return _finished_before(a, run_dir, state)
        patch_opt(a, run_dir, state.total)
        resume = str(point.last)
    else:
        shutil.rmtree(run_dir, ignore_errors=True)  # a warm machine may hold an earlier run of this job
    while True:
        since = log_size(a.log_path)
        proc = a.launch(train_argv(a.spec, cfg, state.total, resume, master, nodes=work.nodes,
                                    node_rank=work.node_rank))
        state.announce = True
        try:
            code = _watch(a, proc, run_dir, state)
        except Stale:
            stop_process(proc)
            raise
        if code == 0:
            return _succeeded(a, run_dir, state)
        retry = _after_oom(a, run_dir, state, resume, code, since)
        if isinstance(retry, Outcome):
            return retry
        resume = retry or None


def _watch(a: Attempt, proc: subprocess.Popen, run_dir: Path, state: _Run) -> int:
    """Poll the run until it exits, uploading and reporting each finished epoch's checkpoint."""
    while True:
        done = proc.poll() is not None
        if done:
            return proc.returncode
        if a.stale():
            raise Stale("the heartbeat was answered 409")
        if a.speaks:
            _checkpoint(a, run_dir, state)
        notice = a.notice()
        if notice is not None:
            if a.speaks:  # the newest complete epoch first: the machine has a minute or two left
                _checkpoint(a, run_dir, state, wait=RECLAIM_CHECKPOINT_WAIT_SECONDS)
            raise Reclaimed(notice, proc)
        a.pause()


def epochs_in(run_dir: Path) -> int:
    """Epochs results.csv shows finished (YOLOv9 numbers them from 0); 0 while it has none."""
    try:
        rows = yolo.parse_results_csv((run_dir / RESULTS).read_text())
    except (OSError, GpuschedError):
        return 0
    return max((r.epoch + 1 for r in rows), default=0)


def _checkpoint(a: Attempt, run_dir: Path, state: _Run, *, wait: float = 0.0, must_arrive: bool = False) -> None:
    """Upload and report the newest finished epoch's checkpoint, if results.csv shows one the daemon does
    not have and last.pt holds it (waiting up to ``wait`` seconds for last.pt to catch up). A failed
    upload is logged and tried again at the next poll."""
    epochs = epochs_in(run_dir)
    if epochs <= state.reported or state.prefix is None:
        return
    snapshots = Path(a.cfg.workdir) / "snapshots" / a.spec.name
    step = min(1.0, a.cfg.poll_seconds)
    held = None
    for _ in range(int(wait / step) + 1 if wait else 1):
        held = complete_copy(run_dir / LAST, snapshots / "last.pt")
        if held is not None and held >= epochs - 1:
            break
        if wait:
            a.clock.sleep(step)
    if held is None or held < epochs - 1:
        return  # last.pt does not hold that epoch yet (or is final: the run is ending); next poll
    epochs = held + 1  # training may have moved on since results.csv was read
    prefix = state.prefix
    try:
        store = a.store(prefix)
        for name in (OPT, RESULTS):
            if (run_dir / name).is_file():
                a.stored(name, lambda name=name: store.upload(run_dir / name, prefix + name))
        _upload_best(a, run_dir, snapshots, state)
        a.stored("checkpoint", lambda: store.upload(snapshots / "last.pt", prefix + LAST))
    except (GpuschedError, OSError) as exc:
        log.warning("checkpoint_not_uploaded", job_id=a.work.job_id, epoch=epochs - 1,
                    error=store_error("upload", exc))
        return
    _report(a, state, epochs, prefix + LAST, must_arrive=must_arrive)


def _upload_best(a: Attempt, run_dir: Path, snapshots: Path, state: _Run) -> None:
    best = run_dir / BEST
    try:
        stat = best.stat()
    except OSError:
        return
    mark = (stat.st_mtime, stat.st_size)
    if mark == state.best_sent or complete_copy(best, snapshots / "best.pt") is None:
        return
    store = a.store(state.prefix or "")
    a.stored("best.pt", lambda: store.upload(snapshots / "best.pt", (state.prefix or "") + BEST))
    state.best_sent = mark


def _report(a: Attempt, state: _Run, epochs: int, uri: str | None, *, must_arrive: bool) -> None:
    batch = state.per_gpu if state.announce and a.cfg.gpu_count >= 1 else None
    if send_progress(a.link, a.work, epochs, uri, must_arrive=must_arrive, physical_batch=batch):
        state.reported = epochs
        state.announce = False
        total = a.spec.train.epochs if a.spec.train is not None else None
        a.progress(f"epoch {epochs}/{total}", epochs)


def _halving_note(state: _Run) -> str:
    if not state.halved:
        return ""
    steps = " -> ".join(str(t) for t in [*state.halved, state.total])
    return f"; CUDA ran out of memory, so the batch was halved: {steps} ({state.per_gpu} per GPU)"


def _succeeded(a: Attempt, run_dir: Path, state: _Run) -> Outcome:
    """The run exited 0: its outputs go up (last.pt last), then the last epochs are reported."""
    if not a.speaks:
        return Outcome(True, "")
    epochs = epochs_in(run_dir)
    if state.prefix is None:
        if epochs > state.reported:
            _report(a, state, epochs, None, must_arrive=True)
        return Outcome(True, f"{epochs} epochs; the job names no dataset bucket, so its outputs stayed on the "
                             f"machine{_halving_note(state)}")
    prefix = state.prefix
    a.progress("uploading the outputs")
    try:
        store = a.store(prefix)
        sent, missing = a.stored("outputs", lambda: upload_training(store, run_dir, prefix))
    except (GpuschedError, OSError) as exc:
        raise AttemptFailed(store_error(f"the training finished, but its outputs could not be uploaded to {prefix}",
                                        exc)) from None
    if LAST in missing:
        return Outcome(False, f"training exited 0 but left no {LAST} in {run_dir}{_halving_note(state)}")
    if epochs > state.reported:
        _report(a, state, epochs, prefix + LAST, must_arrive=True)
    note = f"; no {BEST} (no epoch was validated)" if BEST in missing else ""
    return Outcome(True, f"trained {epochs} epochs; outputs in {prefix} (weights/best.pt, weights/last.pt, "
                         f"results.csv, opt.yaml){note}{_halving_note(state)}", prefix)


def _finished_before(a: Attempt, run_dir: Path, state: _Run) -> Outcome:
    """The checkpoint is final: an earlier attempt finished training and uploaded everything."""
    epochs = epochs_in(run_dir)
    if a.speaks and epochs > state.reported:
        _report(a, state, epochs, a.work.checkpoint_uri, must_arrive=True)
    return Outcome(True, f"the training had finished on an earlier attempt (its final last.pt is at "
                         f"{a.work.checkpoint_uri}); outputs in {state.prefix}", state.prefix)


def _after_oom(a: Attempt, run_dir: Path, state: _Run, resume: str | None, code: int,
               since: int) -> Outcome | str:
    """After a run that failed: the outcome to report, or what to run next with half the batch (the
    checkpoint to resume from, or '' for a fresh start)."""
    output = log_text(a.log_path, since)
    failed = failure_message(code, a.log_path, since)
    if not yolo.ran_out_of_memory(output) or a.work.nodes > 1 or a.cfg.gpu_count < 1:
        return _failed(a, run_dir, state, failed)
    smaller = yolo.halved_batch(state.total, state.world)
    if smaller is None:
        return _failed(a, run_dir, state, f"CUDA ran out of memory even at one image per GPU; {failed}")
    last = run_dir / LAST
    held = checkpoint_epoch(last) if last.is_file() else None
    log.warning("cuda_out_of_memory", job_id=a.work.job_id, batch=state.total, retry_with=smaller)
    state.halved.append(state.total)
    state.total = smaller
    a.progress(f"CUDA out of memory at batch {state.halved[-1]}: again with {smaller}")
    if held is not None and held >= 0 and (run_dir / OPT).is_file():
        if a.speaks:
            _checkpoint(a, run_dir, state, must_arrive=True)
        patch_opt(a, run_dir, smaller)
        return str(last)
    if resume is not None:
        return _failed(a, run_dir, state, f"CUDA ran out of memory and the run left no checkpoint to resume "
                                          f"with a smaller batch; {failed}")
    shutil.rmtree(run_dir, ignore_errors=True)
    return ""


def _failed(a: Attempt, run_dir: Path, state: _Run, message: str) -> Outcome:
    if a.speaks:
        _checkpoint(a, run_dir, state, must_arrive=True)  # what the run finished is kept for the record
    return Outcome(False, message + _halving_note(state))
