"""The job's process on the machine: where it runs (the YOLOv9 checkout, the image's Python), its
environment, its output (one log per attempt), how it is stopped, and what its output says."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from scheduler.agent.config import AgentConfig
from scheduler.jobs import yolo

Launch = Callable[[Sequence[str]], subprocess.Popen]

LOG_TAIL_LINES = 15
MESSAGE_TAIL_CHARS = 1500  # the API takes a finish message of at most 2,000 characters
READ_TAIL_BYTES = 256 * 1024  # what is read of a long log to judge how the run ended
FONT = "Arial.ttf"  # what YOLOv9's check_font() fetches from the internet when its config folder lacks it


def log_path_for(cfg: AgentConfig, job_name: str, attempt: int) -> Path:
    """The job's output for one attempt (every run of it, OOM retries included, appends here)."""
    return Path(cfg.workdir) / "logs" / f"{job_name}-a{attempt}.log"


def machine_problem(cfg: AgentConfig) -> str | None:
    """Why this machine cannot run a job at all (reported as the attempt's failure), or None.

    Creates the work directory: nothing else on a fresh machine does."""
    try:
        Path(cfg.workdir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create the work directory {cfg.workdir}: {exc.strerror or exc}"
    if not Path(cfg.yolov9_dir, "train_dual.py").is_file():
        return (f"no YOLOv9 checkout at {cfg.yolov9_dir} (train_dual.py missing): the image must carry it, "
                "or set GPUSCHED_AGENT_YOLOV9_DIR")
    return None


def mark_started(path: str) -> None:
    """Tell the boot backstop (``bootstrap``) that the agent is up; best effort: it only stops a machine."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).touch()
    except OSError:
        pass


def job_launcher(cfg: AgentConfig, log_path: Path) -> Launch:
    """Start a job command in the YOLOv9 checkout with the image's Python; its output goes to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)

    def launch(argv: Sequence[str]) -> subprocess.Popen:
        argv = [cfg.python, *argv[1:]] if argv and argv[0] == yolo.PYTHON else list(argv)
        with open(log_path, "ab") as out:  # the child keeps its own descriptor
            return subprocess.Popen(argv, cwd=cfg.yolov9_dir, stdout=out, stderr=subprocess.STDOUT,
                                    env=job_environment(cfg))
    return launch


def job_environment(cfg: AgentConfig) -> dict[str, str]:
    """The job's environment: the machine's, plus what the official scripts need to run unattended.

    PyTorch >= 2.6 loads checkpoints with ``weights_only`` and refuses YOLOv9's own (every ``--resume``
    and the end-of-training validation fail): the checkpoints are ours, so the old behaviour is safe.
    YOLOv9 downloads a font on first use unless its config folder has one (a machine without internet
    fails there): the image's copy is used where it has one, in ``YOLOV5_CONFIG_DIR`` when the unit's
    environment sets it, else in YOLOv9's default folder (``~/.config/Ultralytics``, where running
    YOLOv9 once while building the image leaves it); otherwise a folder in the work directory."""
    env = dict(os.environ)
    env.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    cached = Path.home() / ".config" / "Ultralytics"
    env.setdefault("YOLOV5_CONFIG_DIR", str(cached if (cached / FONT).is_file() else Path(cfg.workdir) / "yolo-config"))
    env.pop("GPUSCHED_AGENT_TOKEN", None)  # the job's code never needs the agent's token
    return env


def stop_process(proc: subprocess.Popen | None, grace_seconds: float = 30) -> None:
    """Stop a job's process that is no longer this machine's work: SIGTERM, then SIGKILL."""
    if proc is None or not hasattr(proc, "poll") or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def log_size(log_path: Path) -> int:
    """Where the log ends now: a run's own output is what is written after this offset."""
    try:
        return log_path.stat().st_size
    except OSError:
        return 0


def log_text(log_path: Path, since: int = 0) -> str:
    """The log from ``since`` on (at most its last ``READ_TAIL_BYTES``); '' when there is none."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(since, log_size(log_path) - READ_TAIL_BYTES))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def failure_message(returncode: int, log_path: Path, since: int = 0, where: str = "") -> str:
    """``exit status N`` (``in <where>``) and the last lines of the job's output (of this run: from
    ``since`` on): what a user needs to see why."""
    head = f"exit status {returncode}" + (f" in {where}" if where else "")
    lines = [line for line in log_text(log_path, since).splitlines() if line.strip()]
    tail = "\n".join(lines[-LOG_TAIL_LINES:])[-MESSAGE_TAIL_CHARS:]
    return f"{head}; the job's last output:\n{tail}" if tail else head
