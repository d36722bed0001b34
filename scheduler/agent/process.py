"""The job's process on the machine: where it runs (the YOLOv9 checkout, the image's Python), its
environment, its output (one log per attempt), how it is stopped, and what its output says."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from scheduler.agent.config import AgentConfig
from scheduler.jobs import yolo

Launch = Callable[[Sequence[str]], subprocess.Popen]

LOG_TAIL_LINES = 15
MESSAGE_TAIL_CHARS = 1500  # the API takes a finish message of at most 2,000 characters
READ_TAIL_BYTES = 256 * 1024  # what is read of a long log to judge how the run ended
# The fonts YOLOv9 looks for in its config folder, and downloads when missing (utils/general.py:check_font):
# a machine without the internet would fail its first job there.
YOLO_FONTS = ("Arial.ttf", "Arial.Unicode.ttf")


def log_path_for(cfg: AgentConfig, job_name: str, attempt: int) -> Path:
    """The job's output for one attempt (every run of it, OOM retries included, appends here)."""
    return Path(cfg.workdir) / "logs" / f"{job_name}-a{attempt}.log"


def machine_problem(cfg: AgentConfig) -> str | None:
    """Why this machine cannot run a job at all (reported as the attempt's failure), or None.

    Creates the work directory: nothing else on a fresh machine does; and seeds YOLOv9's config folder there
    with the image's fonts (``seed_fonts``)."""
    try:
        Path(cfg.workdir).mkdir(parents=True, exist_ok=True)
        seed_fonts(cfg)
    except OSError as exc:
        return f"cannot create the work directory {cfg.workdir}: {exc.strerror or exc}"
    if not Path(cfg.yolov9_dir, "train_dual.py").is_file():
        return (f"no YOLOv9 checkout at {cfg.yolov9_dir} (train_dual.py missing): the image must carry it, "
                "or set GPUSCHED_AGENT_YOLOV9_DIR")
    return None


def image_config_dir() -> Path:
    """Where YOLOv9 keeps its font when nothing says otherwise (``~/.config/Ultralytics``, root's on a cloud
    image): an image that ran YOLOv9 once, or was built with the font, has it there."""
    return Path.home() / ".config" / "Ultralytics"


def seed_fonts(cfg: AgentConfig) -> None:
    """Copy the image's YOLOv9 fonts into the config folder the jobs use (``job_environment``), where
    missing; without them YOLOv9 downloads Arial.ttf on its first plot. Nothing to do when the machine
    names its own folder (``YOLOV5_CONFIG_DIR``) or the image has no font."""
    if os.environ.get("YOLOV5_CONFIG_DIR"):
        return
    target = Path(cfg.workdir) / "yolo-config"
    for name in YOLO_FONTS:
        source = image_config_dir() / name
        if source.is_file() and not (target / name).is_file():
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target / name)


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
    YOLOv9 downloads a font on first use unless its config folder has one; the folder is kept in the
    work directory (seeded from the image's, ``seed_fonts``) so that a folder the machine names
    (``YOLOV5_CONFIG_DIR``) wins when it sets one. YOLOv9 pip-installs a missing package at run time
    (``check_requirements``) unless told not to: a job never changes the image's Python (a missing
    package fails the job, and says which)."""
    env = dict(os.environ)
    env.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    env.setdefault("YOLOV5_CONFIG_DIR", str(Path(cfg.workdir) / "yolo-config"))
    env.setdefault("YOLOv5_AUTOINSTALL", "false")
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
