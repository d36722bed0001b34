"""`gpusched agent`: the on-instance agent, one per machine, that runs every job the daemon puts there.

Started by the cloud-init user-data (``bootstrap.py``) as a systemd service, with its settings in
``/etc/gpusched/agent.env``: the API address, the machine's instance row (``GPUSCHED_AGENT_INSTANCE``),
a token scoped to that instance, and the GPUs the offer sold. ``run_machine_agent`` says hello
(with the GPUs the machine really has, ``machine.py``), then asks the daemon for work for as
long as the machine lives: ``run`` an attempt, ``wait`` (a warm machine between jobs), or ``exit``
(the machine is being stopped). A warm machine's next job arrives the same way: no new boot, no new
user-data. A heartbeat thread tells the daemon every ``poll_seconds`` that the agent lives and what
it runs (the daemon takes a machine whose agent is silent as lost), and renews the machine token,
pushing the machine's shutdown backstop back with it. A failed job is reported once, and the agent
asks for work again: it exits 0 only when told to, so systemd's ``Restart=on-failure`` restarts an
agent that crashed, and the daemon never hands out again a job that was reported finished.

One assignment (``run_agent``): it runs the YOLOv9 command from ``yolo.py``, watches
``results.csv`` (one row per finished epoch) and reports every new epoch as the job's resume point,
then reports the exit. Every report names the job and attempt; a 409 says they are no longer this
machine's work (cancelled, moved, lost): the agent stops the job's process and asks again. An
inference job runs shard by shard (``infer_shards``): each shard's labels are uploaded, then the
shard is reported, and a resumed attempt starts at the first unfinished one. The nodes of a
multi-node job (each its own machine, told its rank with its work) meet through the daemon: rank 0
advertises the address the daemon sees it from (or ``GPUSCHED_NODE_ADDR``) for this attempt, the
other ranks wait for it, and every node starts PyTorch's launcher with the node count, its rank and
that address; only rank 0 reports. It never sees the API token or a cloud credential; data and
checkpoints are read and written with the machine's role: checkpoints are copied with the cloud's
CLI (aws s3 / ossutil / coscli); staging the dataset is the image's job (the commands expect it
under the work directory, as ``yolo.staged_inputs`` lists).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import structlog

from scheduler.agent import machine
from scheduler.agent import tokens as agent_token
from scheduler.agent.bootstrap import STARTED_MARK
from scheduler.clock import Clock, SystemClock
from scheduler.errors import SettingsError
from scheduler.jobs import infer_shards, yolo
from scheduler.jobs.perf_memory import physical_batch
from scheduler.models import JobSpec, Kind

log = structlog.get_logger("gpusched.agent")


@dataclass(frozen=True)
class AgentConfig:
    api: str
    instance_id: str  # this machine's instance row: what its token is scoped to
    token: str
    workdir: str = "/opt/gpusched/work"
    # The YOLOv9 checkout the job's scripts run in (the official image keeps it at /root/yolov9), and the
    # Python that runs them (the image's own, with torch; never the agent's virtual environment).
    yolov9_dir: str = "/root/yolov9"
    python: str = yolo.PYTHON
    started_mark: str | None = None  # touched once the daemon has heard the agent: the boot backstop stands down
    gpu: str = "A10"  # the offer's; the agent's hello replaces them with what the driver reports
    gpu_count: int = 1
    poll_seconds: float = 30.0
    advertise_addr: str | None = None  # rank 0: the address the other ranks dial (default: local_address)
    shutdown_backstop: bool = False  # push the machine's shutdown timer back on each token renewal

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> AgentConfig:
        env = dict(os.environ if env is None else env)
        missing = [k for k in ("GPUSCHED_AGENT_API", "GPUSCHED_AGENT_INSTANCE", "GPUSCHED_AGENT_TOKEN")
                   if not env.get(k)]
        if missing:
            raise SettingsError(f"the agent needs {', '.join(missing)}", fix="see /etc/gpusched/agent.env")
        return cls(api=env["GPUSCHED_AGENT_API"], instance_id=env["GPUSCHED_AGENT_INSTANCE"],
                   token=env["GPUSCHED_AGENT_TOKEN"],
                   workdir=env.get("GPUSCHED_AGENT_WORKDIR", cls.workdir),
                   yolov9_dir=env.get("GPUSCHED_AGENT_YOLOV9_DIR", cls.yolov9_dir),
                   python=env.get("GPUSCHED_AGENT_PYTHON", cls.python),
                   started_mark=env.get("GPUSCHED_AGENT_STARTED_MARK", STARTED_MARK),
                   gpu=env.get("GPUSCHED_AGENT_GPU", cls.gpu),
                   gpu_count=int(env.get("GPUSCHED_AGENT_GPU_COUNT", cls.gpu_count)),
                   poll_seconds=float(env.get("GPUSCHED_AGENT_POLL_SECONDS", cls.poll_seconds)),
                   advertise_addr=env.get("GPUSCHED_NODE_ADDR") or None,
                   shutdown_backstop=env.get("GPUSCHED_AGENT_SHUTDOWN_BACKSTOP", "") == "1")


@dataclass(frozen=True)
class Work:
    """One assignment, as ``GET /v1/agent/work`` hands it out (``"action": "run"``)."""

    job_id: str
    attempt: int
    spec: JobSpec
    epochs_done: int = 0  # epochs (train) or shards (infer) already done: where this attempt resumes
    checkpoint_uri: str | None = None
    node_rank: int = 0  # this machine's place in a multi-node job; rank 0 speaks for the gang
    nodes: int = 1
    master_addr: str | None = None

    @classmethod
    def from_answer(cls, body: dict[str, Any]) -> Work:
        return cls(job_id=body["job_id"], attempt=int(body["attempt"]), spec=JobSpec.model_validate(body["spec"]),
                   epochs_done=int(body.get("epochs_done") or 0), checkpoint_uri=body.get("checkpoint_uri"),
                   node_rank=int(body.get("node_rank") or 0), nodes=int(body.get("nodes") or 1),
                   master_addr=body.get("master_addr"))

    @property
    def key(self) -> tuple[str, int]:
        return self.job_id, self.attempt


class Stale(Exception):
    """409: the job and attempt named are not this machine's work any more (or the machine is going)."""


class Refused(Exception):
    """401: the daemon refuses this machine's token (expired, or not ours): nothing left to do."""


# Renew the machine token this long before it expires (it lives at least a day: ``bootstrap.machine_ttl``).
RENEW_BEFORE = timedelta(hours=12)


class DaemonLink:
    """The agent's line to the daemon: requests with the machine token (renewed in place), and
    ``deliver`` for what must arrive (a report is retried through a daemon restart or a network blip)."""

    def __init__(self, cfg: AgentConfig, http: httpx.Client, clock: Clock,
                 on_renew: Callable[[datetime], None] | None = None) -> None:
        self.cfg, self.http, self.clock, self.on_renew = cfg, http, clock, on_renew
        self._token = cfg.token
        self._lock = threading.Lock()

    @property
    def token(self) -> str:
        with self._lock:
            return self._token

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        r = self.http.request(method, f"{self.cfg.api}/v1/agent{path}", json=body,
                              headers={"Authorization": f"Bearer {self.token}"})
        if r.status_code == 401:
            raise Refused(_error_of(r))
        if r.status_code == 409:
            raise Stale(_error_of(r))
        r.raise_for_status()
        return r

    def deliver(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        """``request``, retried every ``poll_seconds`` while the daemon cannot be reached or fails (5xx)."""
        while True:
            try:
                return self.request(method, path, body)
            except httpx.TransportError as exc:
                log.warning("daemon_unreachable", path=path, error=str(exc))
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code < 500:
                    raise
                log.warning("daemon_failed", path=path, status=exc.response.status_code)
            self.clock.sleep(self.cfg.poll_seconds)

    def renew_if_due(self) -> bool:
        """Renew the machine token when it has less than ``RENEW_BEFORE`` left; True if it did."""
        try:
            left = agent_token.expires_at(self.token) - self.clock.now()
        except agent_token.AgentTokenError:
            return False
        if left > RENEW_BEFORE:
            return False
        answer = self.request("POST", "/token").json()
        with self._lock:
            self._token = answer["token"]
        if self.on_renew is not None:
            self.on_renew(agent_token.expires_at(answer["token"]))
        log.info("agent_token_renewed", expires_at=answer.get("expires_at"))
        return True


def _error_of(r: httpx.Response) -> str:
    try:
        return str(r.json().get("error") or r.status_code)
    except ValueError:
        return str(r.status_code)


class Heartbeat:
    """Tells the daemon every ``interval`` seconds that the agent lives and what it runs, from a thread
    of its own, so that a long download or a retried report never silences the machine. It renews
    the machine token when due. A 409 for the attempt it names marks that attempt stale: the loop
    running it stops the job's process."""

    def __init__(self, link: DaemonLink, interval: float,
                 gpu_util: Callable[[], float | None] = machine.utilization) -> None:
        self.link, self.interval, self.gpu_util = link, interval, gpu_util
        self.refused = threading.Event()
        self._lock = threading.Lock()
        self._work: tuple[str, int] | None = None
        self._progress: tuple[str, int | None] = ("", None)
        self._stale: set[tuple[str, int]] = set()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpusched-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def working(self, work: Work) -> None:
        with self._lock:
            self._work, self._progress = work.key, ("", None)

    def idle(self) -> None:
        with self._lock:
            self._work, self._progress = None, ("", None)

    def progress(self, text: str, epochs_done: int | None = None) -> None:
        with self._lock:
            self._progress = (text[:200], epochs_done)

    def is_stale(self, work: Work) -> bool:
        with self._lock:
            return work.key in self._stale

    def mark_stale(self, work: Work) -> None:
        with self._lock:
            self._stale.add(work.key)

    def beat(self) -> None:
        """One heartbeat now (the thread sends one every ``interval``)."""
        with self._lock:
            work, (text, epochs) = self._work, self._progress
        try:
            self.link.renew_if_due()
            self.link.request("POST", "/heartbeat", {
                "job_id": work[0] if work else None, "attempt": work[1] if work else None,
                "progress": text, "epochs_done": epochs, "gpu_util": self.gpu_util()})
        except Stale:
            if work is not None:
                with self._lock:
                    self._stale.add(work)
        except Refused:
            self.refused.set()
        except (httpx.TransportError, httpx.HTTPStatusError) as exc:
            log.warning("heartbeat_failed", error=str(exc))

    def _run(self) -> None:
        while not self._halt.wait(self.interval):
            self.beat()


def hello_body(gpus: machine.MachineGpus) -> dict[str, Any]:
    return {"gpu_name": gpus.name[:128], "gpu_model": gpus.model, "gpu_count": gpus.count,
            "gpu_memory_mib": gpus.memory_mib, "source": gpus.source}


def with_machine_gpus(cfg: AgentConfig, gpus: machine.MachineGpus) -> AgentConfig:
    """The config with the GPUs the driver reports, where it named a model we know (the batch and the
    device list follow the machine, not the offer); otherwise the offer's figures stand."""
    if gpus.source == "user-data" or gpus.model is None or gpus.count < 1:
        return cfg
    return replace(cfg, gpu=gpus.model, gpu_count=gpus.count)


def run_machine_agent(cfg: AgentConfig, http: httpx.Client, *, clock: Clock | None = None,
                      launch: Callable[[Sequence[str]], subprocess.Popen] | None = None,
                      copy: Callable[[str, str], None] | None = None,
                      copy_tree: Callable[[str, str], None] | None = None,
                      address: Callable[[str], str] | None = None,
                      discover: Callable[[], machine.MachineGpus] | None = None,
                      gpu_util: Callable[[], float | None] = machine.utilization,
                      backstop: Callable[[datetime], None] | None = None,
                      stop: threading.Event | None = None) -> None:
    """The machine's agent: hello, then run whatever work the daemon gives, until it says ``exit``.

    ``launch``, ``copy``, ``copy_tree``, ``address`` go to ``run_agent``; ``discover`` replaces the
    GPU discovery, ``gpu_util`` the heartbeat's utilisation figure; ``backstop`` is called with the
    new expiry after each token renewal (the CLI pushes the machine's shutdown timer there);
    ``stop`` ends the loop between assignments (tests). Returns normally when told to exit or when
    the daemon refuses the token; a job's failure is reported, never raised."""
    clock = clock or SystemClock()
    gpus = (discover or (lambda: machine.discover(cfg.gpu, cfg.gpu_count)))()
    cfg = with_machine_gpus(cfg, gpus)
    link = DaemonLink(cfg, http, clock, on_renew=backstop)
    try:
        link.deliver("POST", "/hello", hello_body(gpus))
    except (Stale, Refused) as exc:
        log.info("agent_exit", why=f"hello refused: {exc}")
        return
    if cfg.started_mark:
        mark_started(cfg.started_mark)
    log.info("agent_up", instance=cfg.instance_id, gpu=gpus.name, count=gpus.count, source=gpus.source)
    beat = Heartbeat(link, cfg.poll_seconds, gpu_util=gpu_util)
    beat.start()
    ran: set[tuple[str, int]] = set()  # attempts this process ran: a rank > 0 waits for rank 0's report
    extra = {k: v for k, v in (("launch", launch), ("copy", copy), ("copy_tree", copy_tree),
                               ("address", address)) if v is not None}
    try:
        while not (stop is not None and stop.is_set()) and not beat.refused.is_set():
            try:
                answer = link.request("GET", "/work").json()
            except Refused:
                return
            except (Stale, httpx.TransportError, httpx.HTTPStatusError) as exc:
                log.warning("work_unavailable", error=str(exc))
                clock.sleep(cfg.poll_seconds)
                continue
            action = answer.get("action")
            if action == "exit":
                log.info("agent_exit", why="the daemon says this machine is going away")
                return
            if action == "run":
                work = Work.from_answer(answer)
                if work.key not in ran:
                    ran.add(work.key)
                    run_agent(cfg, http, work, clock=clock, link=link, beat=beat, **extra)
                    continue
            clock.sleep(min(float(answer.get("poll_seconds") or cfg.poll_seconds), cfg.poll_seconds))
    except Refused:
        return
    finally:
        beat.stop()


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


def command_for(spec: JobSpec, cfg: AgentConfig, resume_from: str | None, master_addr: str | None = None, *,
                node_rank: int = 0, nodes: int = 1) -> list[str]:
    """The one command of a train, val or export attempt (inference runs per shard: ``run_infer_shards``).

    ``master_addr``: rank 0's address, for a training job on more than one node."""
    run = f"{spec.name}"
    if spec.kind is Kind.train:
        batch = physical_batch(spec.model, cfg.gpu, spec.train.img_size, spec.train.batch) or 1  # type: ignore[union-attr]
        return yolo.train_command(spec, physical_batch=batch, gpu_count=cfg.gpu_count, run_name=run,
                                  workdir=cfg.workdir, resume_from=resume_from, nnodes=nodes,
                                  node_rank=node_rank, master_addr=master_addr)
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


def rendezvous(cfg: AgentConfig, link: DaemonLink, work: Work, clock: Clock,
               address: Callable[[str], str] = local_address) -> str | None:
    """Rank 0's address for this attempt: rank 0 advertises it, the others wait for it (None: give up,
    or the attempt is no longer this machine's work)."""
    if work.node_rank == 0:
        addr = cfg.advertise_addr or address(cfg.api)
        try:
            link.deliver("POST", "/rendezvous", {"job_id": work.job_id, "attempt": work.attempt,
                                                 "node_rank": 0, "addr": addr})
        except Stale:
            return None  # the daemon moved the job on while this machine booted
        return addr
    give_up = clock.now() + RENDEZVOUS_TIMEOUT
    addr = work.master_addr
    while not addr:
        if clock.now() >= give_up:
            return None
        clock.sleep(cfg.poll_seconds)
        answer = link.deliver("GET", "/work").json()
        if answer.get("action") != "run" or (answer.get("job_id"), answer.get("attempt")) != work.key:
            return None
        addr = answer.get("master_addr")
    return addr


def run_agent(cfg: AgentConfig, http: httpx.Client, work: Work | None = None, *, clock: Clock | None = None,
              launch: Callable[[Sequence[str]], subprocess.Popen] | None = None,
              copy: Callable[[str, str], None] = copy_with_cli,
              copy_tree: Callable[[str, str], None] = copy_tree_with_cli,
              address: Callable[[str], str] = local_address,
              link: DaemonLink | None = None, beat: Heartbeat | None = None) -> bool:
    """Run one assignment to its end; returns whether it succeeded. ``work``: what ``GET /work`` said
    (None: ask now; nothing to run is False). ``launch``, ``copy`` and ``address`` are injectable. A
    node of a multi-node job first meets the others (``rendezvous``); a rank that cannot (its attempt
    is over, or rank 0 never came up) launches nothing and returns False. An attempt the daemon says
    is no longer this machine's (409 on a report, or on the heartbeat) has its process stopped and
    is dropped unreported (False).

    A resumed attempt first fetches the last checkpoint; after every finished epoch ``last.pt`` is
    uploaded, and only then reported: the daemon's resume point is always a checkpoint that exists.
    """
    clock = clock or SystemClock()
    link = link or DaemonLink(cfg, http, clock)
    if work is None:
        answer = link.request("GET", "/work").json()
        if answer.get("action") != "run":
            return False
        work = Work.from_answer(answer)
    if beat is not None:
        beat.working(work)
    try:
        return _run_work(cfg, link, work, clock=clock, launch=launch, copy=copy, copy_tree=copy_tree,
                         address=address, beat=beat)
    except Stale as exc:
        log.info("attempt_dropped", job_id=work.job_id, attempt=work.attempt, why=str(exc))
        return False
    finally:
        if beat is not None:
            beat.idle()


def _run_work(cfg: AgentConfig, link: DaemonLink, work: Work, *, clock: Clock,
              launch: Callable[[Sequence[str]], subprocess.Popen] | None, copy: Callable[[str, str], None],
              copy_tree: Callable[[str, str], None], address: Callable[[str], str],
              beat: Heartbeat | None) -> bool:
    spec = work.spec
    speaks = work.node_rank == 0  # in a multi-node job only rank 0 reports for the gang
    log_path = Path(cfg.workdir) / "logs" / f"{spec.name}-a{work.attempt}.log"
    if launch is None:
        problem = machine_problem(cfg)
        if problem:
            if speaks:
                _report_exit(link, work, False, problem)
            return False
        launch = job_launcher(cfg, log_path)
    if spec.kind is Kind.infer:
        ok, message = run_infer_shards(spec, cfg, link, work, clock=clock, launch=launch, copy_tree=copy_tree,
                                       beat=beat)
        _report_exit(link, work, ok, message)
        return ok
    master = None
    if work.nodes > 1:
        master = rendezvous(cfg, link, work, clock, address)
        if master is None:
            return False
    local_ckpt = yolo.checkpoint_path(cfg.workdir, spec.name)
    remote_ckpt = work.checkpoint_uri or remote_checkpoint(spec)
    resume = None
    if work.epochs_done and work.checkpoint_uri:
        Path(local_ckpt).parent.mkdir(parents=True, exist_ok=True)
        copy(work.checkpoint_uri, local_ckpt)
        resume = local_ckpt
    proc = launch(command_for(spec, cfg, resume, master, node_rank=work.node_rank, nodes=work.nodes))
    results = Path(yolo.run_dir(cfg.workdir, "train", spec.name)) / "results.csv"
    reported = work.epochs_done
    total = spec.train.epochs if spec.train is not None else None
    try:
        while True:
            done = proc.poll() is not None
            if beat is not None and beat.is_stale(work):
                raise Stale("the heartbeat was answered 409")
            if speaks and spec.kind is Kind.train and results.exists():
                rows = yolo.parse_results_csv(results.read_text())
                epochs = max((r.epoch + 1 for r in rows), default=0)  # YOLOv9 numbers epochs from 0
                if epochs > reported and remote_ckpt and Path(local_ckpt).exists():
                    copy(local_ckpt, remote_ckpt)
                    if _report_progress(link, work, epochs, remote_ckpt, must_arrive=done):
                        reported = epochs
                        if beat is not None:
                            beat.progress(f"epoch {epochs}/{total}", epochs)
            if done:
                break
            clock.sleep(cfg.poll_seconds)
    except Stale:
        stop_process(proc)
        raise
    ok = proc.returncode == 0
    message = "" if ok else failure_message(proc.returncode, log_path)
    if ok and spec.kind is Kind.export:
        missing = [fmt for fmt, path in yolo.export_outputs(spec, cfg.workdir).items() if not Path(path).exists()]
        if missing:
            # export.py exits 0 even when every format failed: the files are the proof, not the status.
            ok, message = False, f"export wrote no {', '.join(missing)} file{'s' if len(missing) > 1 else ''}; " \
                                 + failure_message(0, log_path)
    if speaks:
        _report_exit(link, work, ok, message)
    return ok


def _report_progress(link: DaemonLink, work: Work, done: int, uri: str | None, *, must_arrive: bool) -> bool:
    """Report ``done`` epochs (or shards) and their resume point; whether it was reported. Units add up,
    so a report lost to a network blip is sent with the next one, except one that ``must_arrive``
    before the exit does (the last), which is retried until it does."""
    body = {"job_id": work.job_id, "attempt": work.attempt, "epochs_done": done, "checkpoint_uri": uri}
    if must_arrive:
        link.deliver("POST", "/progress", body)
        return True
    try:
        link.request("POST", "/progress", body)
        return True
    except (httpx.TransportError, httpx.HTTPStatusError) as exc:
        log.warning("progress_not_reported", job_id=work.job_id, done=done, error=str(exc))
        return False


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


def _report_exit(link: DaemonLink, work: Work, ok: bool, message: str) -> None:
    """The attempt's outcome, once: retried until the daemon has it (a 409 means it is not ours to report)."""
    link.deliver("POST", "/finished", {"job_id": work.job_id, "attempt": work.attempt, "ok": ok,
                                       "message": message[:2000]})


def _wait(proc: subprocess.Popen, clock: Clock, poll_seconds: float, stale: Callable[[], bool] = lambda: False) -> int:
    while proc.poll() is None:
        if stale():
            stop_process(proc)
            raise Stale("the heartbeat was answered 409")
        clock.sleep(poll_seconds)
    return proc.returncode


def run_infer_shards(spec: JobSpec, cfg: AgentConfig, link: DaemonLink, work: Work, *, clock: Clock,
                     launch: Callable[[Sequence[str]], subprocess.Popen], copy_tree: Callable[[str, str], None],
                     beat: Heartbeat | None = None) -> tuple[bool, str]:
    """Run detect.py shard by shard from ``work.epochs_done`` on; each shard's labels are uploaded, then reported.

    Returns (ok, message). A shard is reported done only after its labels are in the object store,
    so the daemon's resume point never names a shard whose output is lost with the machine.
    """
    source = Path(yolo.source_dir(cfg.workdir))
    files = sorted(p.name for p in source.iterdir() if p.is_file() and infer_shards.is_image(p.name))
    shards = infer_shards.shard_count(spec.infer.images)  # type: ignore[union-attr]
    out = infer_shards.output_uri(spec)
    stale = (lambda: beat.is_stale(work)) if beat is not None else (lambda: False)
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
                                      shard=name)
            code = _wait(launch(argv), clock, cfg.poll_seconds, stale)
            if code != 0:
                return False, f"exit status {code} in {name}"
            if labels.is_dir():  # images without detections get no file; a shard may have none at all
                copy_tree(str(labels), f"{out}labels/")
        _report_progress(link, work, index + 1, out, must_arrive=True)  # a shard is worth keeping
        if beat is not None:
            beat.progress(f"shard {index + 1}/{shards}", index + 1)
    return True, f"{shards} shards, labels in {out}labels/"
