"""`gpusched agent`: the on-instance agent that runs one job attempt and reports to the daemon.

Started by the cloud-init user-data (``bootstrap.py``) with four settings in
``/etc/gpusched/agent.env``: the API address, the job, the attempt and a
job-scoped token (a node of a multi-node job also gets ``GPUSCHED_NODE_RANK`` and
``GPUSCHED_NODES``; only rank 0 reports). It fetches the job, runs the YOLOv9 command from ``yolo.py``,
watches ``results.csv`` (one row per finished epoch) and reports every new epoch
as the job's resume point, then reports the exit. An inference job runs shard by
shard (``infer_shards``): each shard's labels are uploaded, then the shard is
reported, and a resumed attempt starts at the first unfinished one. The nodes of a multi-node
job meet through the daemon: rank 0 advertises the address the daemon sees it from (or
``GPUSCHED_NODE_ADDR``) for this attempt, the other ranks wait for it, and every node starts
PyTorch's launcher with the node count, its rank and that address. It never sees the API token or
a cloud credential; data and checkpoints are read and written with the machine's
role: checkpoints are copied with the cloud's CLI (aws s3 / ossutil / coscli); staging
the dataset is the image's job (the commands expect it under the work directory, as
``yolo.staged_inputs`` lists).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from scheduler.agent.bootstrap import STARTED_MARK
from scheduler.clock import Clock, SystemClock
from scheduler.errors import SettingsError
from scheduler.jobs import infer_shards, yolo
from scheduler.jobs.perf_memory import physical_batch
from scheduler.models import JobSpec, Kind


@dataclass(frozen=True)
class AgentConfig:
    api: str
    job_id: str
    attempt: int
    token: str
    workdir: str = "/opt/gpusched/work"
    # The YOLOv9 checkout the job's scripts run in (the official image keeps it at /root/yolov9), and the
    # Python that runs them (the image's own, with torch; never the agent's virtual environment).
    yolov9_dir: str = "/root/yolov9"
    python: str = yolo.PYTHON
    started_mark: str | None = None  # touched once the job is known: the boot backstop stands down
    gpu: str = "A10"
    gpu_count: int = 1
    poll_seconds: float = 30.0
    node_rank: int = 0  # this machine's place in a multi-node job; rank 0 speaks for the gang
    nodes: int = 1
    advertise_addr: str | None = None  # rank 0: the address the other ranks dial (default: local_address)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> AgentConfig:
        env = dict(os.environ if env is None else env)
        missing = [k for k in ("GPUSCHED_AGENT_API", "GPUSCHED_AGENT_JOB", "GPUSCHED_AGENT_ATTEMPT",
                               "GPUSCHED_AGENT_TOKEN") if not env.get(k)]
        if missing:
            raise SettingsError(f"the agent needs {', '.join(missing)}", fix="see /etc/gpusched/agent.env")
        return cls(api=env["GPUSCHED_AGENT_API"], job_id=env["GPUSCHED_AGENT_JOB"],
                   attempt=int(env["GPUSCHED_AGENT_ATTEMPT"]), token=env["GPUSCHED_AGENT_TOKEN"],
                   workdir=env.get("GPUSCHED_AGENT_WORKDIR", cls.workdir),
                   yolov9_dir=env.get("GPUSCHED_AGENT_YOLOV9_DIR", cls.yolov9_dir),
                   python=env.get("GPUSCHED_AGENT_PYTHON", cls.python),
                   started_mark=env.get("GPUSCHED_AGENT_STARTED_MARK", STARTED_MARK),
                   gpu=env.get("GPUSCHED_AGENT_GPU", cls.gpu),
                   gpu_count=int(env.get("GPUSCHED_AGENT_GPU_COUNT", cls.gpu_count)),
                   node_rank=int(env.get("GPUSCHED_NODE_RANK", cls.node_rank)),
                   nodes=int(env.get("GPUSCHED_NODES", cls.nodes)),
                   advertise_addr=env.get("GPUSCHED_NODE_ADDR") or None)


# Object-store CLIs that read credentials from the instance role (no keys on the machine).
COPY_TOOLS = {"s3": ["aws", "s3", "cp"], "oss": ["ossutil", "cp", "-f"], "cos": ["coscli", "cp"]}


def copy_with_cli(src: str, dst: str) -> None:
    """Copy one file to or from s3:// oss:// cos:// with that cloud's CLI."""
    remote = dst if "://" in dst else src
    tool = COPY_TOOLS.get(remote.split("://", 1)[0])
    if tool is None:
        raise ValueError(f"no copy tool for {remote!r}")
    subprocess.run([*tool, src, dst], check=True)


# The same CLIs, for a whole folder.
COPY_TREE_TOOLS = {"s3": ["aws", "s3", "cp", "--recursive"], "oss": ["ossutil", "cp", "-r", "-f"],
                   "cos": ["coscli", "cp", "-r"]}


def copy_tree_with_cli(src_dir: str, dst: str) -> None:
    """Upload a local folder's files under the s3:// oss:// cos:// prefix ``dst``."""
    tool = COPY_TREE_TOOLS.get(dst.split("://", 1)[0])
    if tool is None:
        raise ValueError(f"no copy tool for {dst!r}")
    subprocess.run([*tool, src_dir, dst], check=True)


def remote_checkpoint(spec: JobSpec) -> str | None:
    """Where last.pt lives between attempts: next to the dataset, under runs/<job name>/."""
    if spec.data is None:
        return None
    return f"{spec.data.uri.rstrip('/')}/runs/{spec.name}/weights/last.pt"


def command_for(spec: JobSpec, cfg: AgentConfig, resume_from: str | None,
                master_addr: str | None = None) -> list[str]:
    """The one command of a train, val or export attempt (inference runs per shard: ``run_infer_shards``).

    ``master_addr``: rank 0's address, for a training job on more than one node."""
    run = f"{spec.name}"
    if spec.kind is Kind.train:
        batch = physical_batch(spec.model, cfg.gpu, spec.train.img_size, spec.train.batch) or 1  # type: ignore[union-attr]
        return yolo.train_command(spec, physical_batch=batch, gpu_count=cfg.gpu_count, run_name=run,
                                  workdir=cfg.workdir, resume_from=resume_from, nnodes=cfg.nodes,
                                  node_rank=cfg.node_rank, master_addr=master_addr)
    if spec.kind is Kind.val:
        return yolo.val_command(spec, run_name=run, workdir=cfg.workdir)
    return yolo.export_command(spec, workdir=cfg.workdir)


# How long the other ranks of a gang wait for rank 0 to advertise its address. Rank 0 boots
# with them; longer than this, its machine is gone and the daemon is relaunching the gang.
RENDEZVOUS_TIMEOUT = timedelta(minutes=30)


def local_address(api: str) -> str:
    """This machine's address on the route to the daemon: the interface its peers in the same VPC reach.

    A UDP socket "connected" to the API only picks the route; no packet is sent."""
    parts = urlsplit(api)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_DGRAM)
    family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.connect(sockaddr)
        return sock.getsockname()[0]


def rendezvous(cfg: AgentConfig, http: httpx.Client, auth: dict[str, str], clock: Clock,
               address: Callable[[str], str] = local_address) -> str | None:
    """Rank 0's address for this attempt: rank 0 advertises it, the others wait for it (None: give up)."""
    if cfg.node_rank == 0:
        addr = cfg.advertise_addr or address(cfg.api)
        r = http.post(f"{cfg.api}/v1/agent/rendezvous", headers=auth, json={"node_rank": 0, "addr": addr})
        if r.status_code == 409:
            return None  # the daemon moved the job on while this machine booted
        r.raise_for_status()
        return addr
    give_up = clock.now() + RENDEZVOUS_TIMEOUT
    while True:
        r = http.get(f"{cfg.api}/v1/agent/job", headers=auth)
        r.raise_for_status()
        addr = r.json().get("master_addr")
        if addr:
            return addr
        if clock.now() >= give_up:
            return None
        clock.sleep(cfg.poll_seconds)


def run_agent(cfg: AgentConfig, http: httpx.Client, *, clock: Clock | None = None,
              launch: Callable[[Sequence[str]], subprocess.Popen] | None = None,
              copy: Callable[[str, str], None] = copy_with_cli,
              copy_tree: Callable[[str, str], None] = copy_tree_with_cli,
              address: Callable[[str], str] = local_address) -> bool:
    """Run the attempt to its end; returns whether it succeeded. ``launch``, ``copy`` and ``address`` are
    injectable. A node of a multi-node job first meets the others (``rendezvous``); a rank that
    cannot (its attempt is over, or rank 0 never came up) launches nothing and returns False.

    A resumed attempt first fetches the last checkpoint; after every finished epoch ``last.pt`` is
    uploaded, and only then reported: the daemon's resume point is always a checkpoint that exists.
    """
    clock = clock or SystemClock()
    auth = {"Authorization": f"Bearer {cfg.token}"}
    job = http.get(f"{cfg.api}/v1/agent/job", headers=auth)
    job.raise_for_status()
    body = job.json()
    spec = JobSpec.model_validate(body["spec"])
    if cfg.started_mark:
        mark_started(cfg.started_mark)
    log_path = Path(cfg.workdir) / "logs" / f"{spec.name}-a{cfg.attempt}.log"
    if launch is None:
        problem = machine_problem(cfg)
        if problem:
            if cfg.node_rank == 0:
                _report_exit(cfg, http, auth, False, problem)
            return False
        launch = job_launcher(cfg, log_path)
    if spec.kind is Kind.infer:
        ok, message = run_infer_shards(spec, cfg, http, auth, int(body.get("epochs_done") or 0), clock=clock,
                                       launch=launch, copy_tree=copy_tree)
        _report_exit(cfg, http, auth, ok, message)
        return ok
    master = None
    if cfg.nodes > 1:
        master = rendezvous(cfg, http, auth, clock, address)
        if master is None:
            return False
    local_ckpt = yolo.checkpoint_path(cfg.workdir, spec.name)
    remote_ckpt = body.get("checkpoint_uri") or remote_checkpoint(spec)
    resume = None
    if body.get("epochs_done") and body.get("checkpoint_uri"):
        Path(local_ckpt).parent.mkdir(parents=True, exist_ok=True)
        copy(body["checkpoint_uri"], local_ckpt)
        resume = local_ckpt
    proc = launch(command_for(spec, cfg, resume, master))
    results = Path(yolo.run_dir(cfg.workdir, "train", spec.name)) / "results.csv"
    reported = int(body.get("epochs_done") or 0)
    # In a multi-node job only rank 0 writes results.csv and last.pt and reports for the gang:
    # another rank's exit would otherwise end the attempt for every node.
    speaks = cfg.node_rank == 0
    while True:
        done = proc.poll() is not None
        if speaks and spec.kind is Kind.train and results.exists():
            rows = yolo.parse_results_csv(results.read_text())
            epochs = max((r.epoch + 1 for r in rows), default=0)  # YOLOv9 numbers epochs from 0
            if epochs > reported and remote_ckpt and Path(local_ckpt).exists():
                copy(local_ckpt, remote_ckpt)
                http.post(f"{cfg.api}/v1/agent/progress", headers=auth,
                          json={"epochs_done": epochs, "checkpoint_uri": remote_ckpt}).raise_for_status()
                reported = epochs
        if done:
            break
        clock.sleep(cfg.poll_seconds)
    ok = proc.returncode == 0
    message = "" if ok else failure_message(proc.returncode, log_path)
    if ok and spec.kind is Kind.export:
        missing = [fmt for fmt, path in yolo.export_outputs(spec, cfg.workdir).items() if not Path(path).exists()]
        if missing:
            # export.py exits 0 even when every format failed: the files are the proof, not the status.
            ok, message = False, f"export wrote no {', '.join(missing)} file{'s' if len(missing) > 1 else ''}; " \
                                 + failure_message(0, log_path)
    if speaks:
        _report_exit(cfg, http, auth, ok, message)
    return ok


def mark_started(path: str) -> None:
    """Tell the boot backstop (``bootstrap``) that the agent is up; best effort: it only stops a machine."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).touch()
    except OSError:
        pass


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


def job_launcher(cfg: AgentConfig, log_path: Path) -> Callable[[Sequence[str]], subprocess.Popen]:
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
    work directory so that an image's copy (``YOLOV5_CONFIG_DIR``) wins when it sets one."""
    env = dict(os.environ)
    env.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    env.setdefault("YOLOV5_CONFIG_DIR", str(Path(cfg.workdir) / "yolo-config"))
    env.pop("GPUSCHED_AGENT_TOKEN", None)  # the job's code never needs the agent's token
    return env


LOG_TAIL_LINES = 15
MESSAGE_TAIL_CHARS = 1500  # the API takes a finish message of at most 2,000 characters


def failure_message(returncode: int, log_path: Path) -> str:
    """``exit status N`` and the last lines of the job's output: what a user needs to see why."""
    head = f"exit status {returncode}"
    try:
        lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return head
    tail = "\n".join(lines[-LOG_TAIL_LINES:])[-MESSAGE_TAIL_CHARS:]
    return f"{head}; the job's last output:\n{tail}" if tail else head


def _report_exit(cfg: AgentConfig, http: httpx.Client, auth: dict[str, str], ok: bool, message: str) -> None:
    http.post(f"{cfg.api}/v1/agent/finished", headers=auth, json={"ok": ok, "message": message}).raise_for_status()


def _wait(proc: subprocess.Popen, clock: Clock, poll_seconds: float) -> int:
    while proc.poll() is None:
        clock.sleep(poll_seconds)
    return proc.returncode


def run_infer_shards(spec: JobSpec, cfg: AgentConfig, http: httpx.Client, auth: dict[str, str], shards_done: int,
                     *, clock: Clock, launch: Callable[[Sequence[str]], subprocess.Popen],
                     copy_tree: Callable[[str, str], None]) -> tuple[bool, str]:
    """Run detect.py shard by shard from ``shards_done`` on; each shard's labels are uploaded, then reported.

    Returns (ok, message). A shard is reported done only after its labels are in the object store,
    so the daemon's resume point never names a shard whose output is lost with the machine.
    """
    source = Path(yolo.source_dir(cfg.workdir))
    files = sorted(p.name for p in source.iterdir() if p.is_file() and infer_shards.is_image(p.name))
    shards = infer_shards.shard_count(spec.infer.images)  # type: ignore[union-attr]
    out = infer_shards.output_uri(spec)
    for index in range(shards_done, shards):
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
                                      shard=name)
            code = _wait(launch(argv), clock, cfg.poll_seconds)
            if code != 0:
                return False, f"exit status {code} in {name}"
            if labels.is_dir():  # images without detections get no file; a shard may have none at all
                copy_tree(str(labels), f"{out}labels/")
        http.post(f"{cfg.api}/v1/agent/progress", headers=auth,
                  json={"epochs_done": index + 1, "checkpoint_uri": out}).raise_for_status()
    return True, f"{shards} shards, labels in {out}labels/"
