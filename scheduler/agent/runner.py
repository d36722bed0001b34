"""`gpusched agent`: the on-instance agent, one per machine, that runs every job the daemon puts there.

Started by the cloud-init user-data (``bootstrap.py``) as a systemd service, with its settings in
``/etc/gpusched/agent.env``: the API address, the machine's instance row (``GPUSCHED_AGENT_INSTANCE``),
a token scoped to that instance, the GPUs the offer sold and the cloud it runs in. ``run_machine_agent``
says hello (with the GPUs the machine really has, ``machine.py``; those are what its jobs run with),
then asks the daemon for work for as long as the machine lives: ``run`` an attempt, ``wait`` (a warm
machine between jobs), or ``exit`` (the machine is being stopped). A warm machine's next job arrives
the same way: no new boot, no new user-data. A heartbeat thread (``link.Heartbeat``) tells the daemon
every ``poll_seconds`` that the agent lives and what it runs (the daemon takes a machine whose agent is
silent as lost), and renews the machine token, pushing the machine's shutdown backstop back with it.
A failed job is reported once, and the agent asks for work again: it exits 0 only when told to, so
systemd's ``Restart=on-failure`` restarts an agent that crashed, and the daemon never hands out again
a job that was reported finished.

One assignment (``run_agent``), in the modules beside this one:

1. inputs (``staging.py``): the dataset folder, the weights, the images to run inference on, from
   object storage (``storage/``, with the machine's role; ``stores`` is injectable);
2. a multi-node job's nodes meet through the daemon (``rendezvous``): rank 0 advertises the address the
   daemon sees it from (or ``GPUSCHED_NODE_ADDR``) for this attempt, the other ranks wait for it, and
   every node starts PyTorch's launcher with the node count, its rank and that address; only rank 0
   reports and uploads;
3. the job (``training.py``: a checkpoint you can trust after every epoch, resume on another machine,
   half the batch after CUDA runs out of memory; ``inference.py``: shard by shard;
   ``val_export.py``), its process in the YOLOv9 checkout (``process.py``);
4. its outputs to object storage (``outputs.py``), and the outcome reported with where they went.

All along, the job's stdout and stderr go to the daemon in batches (``logship.py``), for ``gpusched logs``.

Every report names the job and attempt; a 409 says they are no longer this machine's work (cancelled,
moved, lost): the agent stops the job's process and asks again. On a spot machine a watch thread asks
the cloud's metadata service for a reclaim notice every few seconds (``reclaim.py``); on one, the agent
uploads the newest complete checkpoint, tells the daemon (``POST /v1/agent/reclaiming``: the job is
requeued at once), stops the job's process and asks for work again. The agent never sees the API token
or a cloud credential.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
import structlog

from scheduler.agent import machine
from scheduler.agent.attempt import Attempt, AttemptFailed, Outcome, Reclaimed, StoreFor
from scheduler.agent.config import AgentConfig, Work
from scheduler.agent.inference import run_infer_shards
from scheduler.agent.link import (
    RENEW_BEFORE,
    DaemonLink,
    Heartbeat,
    Refused,
    Stale,
    send_finished,
    send_reclaiming,
)
from scheduler.agent.logship import SHIP_SECONDS, OutputShipper
from scheduler.agent.outputs import remote_checkpoint
from scheduler.agent.process import (
    LOG_TAIL_LINES,
    MESSAGE_TAIL_CHARS,
    Launch,
    failure_message,
    job_environment,
    job_launcher,
    log_path_for,
    machine_problem,
    mark_started,
    stop_process,
)
from scheduler.agent.reclaim import METADATA_URLS, ReclaimNotice, ReclaimWatch, notice_reader
from scheduler.agent.staging import stage_inputs
from scheduler.agent.storage.choose import store_for
from scheduler.agent.training import initial_total, run_training, train_argv
from scheduler.agent.val_export import run_export, run_val
from scheduler.clock import Clock, SystemClock
from scheduler.jobs import yolo
from scheduler.models import JobSpec, Kind

__all__ = [
    "LOG_TAIL_LINES", "MESSAGE_TAIL_CHARS", "RENDEZVOUS_TIMEOUT", "RENEW_BEFORE", "AgentConfig", "DaemonLink",
    "Heartbeat", "Refused", "Stale", "Work", "command_for", "failure_message", "hello_body", "job_environment",
    "job_launcher", "local_address", "machine_problem", "mark_started", "remote_checkpoint", "rendezvous",
    "run_agent", "run_machine_agent", "stop_process", "with_machine_gpus",
]

log = structlog.get_logger("gpusched.agent")

# Reads the cloud's reclaim notice for this machine (``reclaim.notice_reader``); None: no notice yet.
NoticeCheck = Callable[[], "ReclaimNotice | None"]


def hello_body(gpus: machine.MachineGpus) -> dict[str, object]:
    return {"gpu_name": gpus.name[:128], "gpu_model": gpus.model, "gpu_count": gpus.count,
            "gpu_memory_mib": gpus.memory_mib, "source": gpus.source}


def with_machine_gpus(cfg: AgentConfig, gpus: machine.MachineGpus) -> AgentConfig:
    """The config with the GPUs the driver reports (the batch and the device list follow the machine,
    not the offer): their count whenever the driver was asked and saw some, their model where it is one
    we know (the memory model sizes the batch by it; otherwise the offer's model stands). A driver that
    sees no GPU leaves the offer's figures: the job then fails loudly rather than train on the CPU."""
    if gpus.source == "user-data" or gpus.count < 1:
        return cfg
    return replace(cfg, gpu=gpus.model or cfg.gpu, gpu_count=gpus.count)


def run_machine_agent(cfg: AgentConfig, http: httpx.Client, *, clock: Clock | None = None,
                      launch: Launch | None = None,
                      stores: StoreFor | None = None,
                      reclaim_check: NoticeCheck | None = None,
                      address: Callable[[str], str] | None = None,
                      discover: Callable[[], machine.MachineGpus] | None = None,
                      gpu_util: Callable[[], float | None] = machine.utilization,
                      backstop: Callable[[datetime], None] | None = None,
                      stop: threading.Event | None = None) -> None:
    """The machine's agent: hello, then run whatever work the daemon gives, until it says ``exit``.

    ``launch``, ``stores``, ``reclaim_check``, ``address`` go to ``run_agent``; ``discover`` replaces the
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
    extra = {k: v for k, v in (("launch", launch), ("stores", stores), ("reclaim_check", reclaim_check),
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


def command_for(spec: JobSpec, cfg: AgentConfig, resume_from: str | None, master_addr: str | None = None, *,
                node_rank: int = 0, nodes: int = 1) -> list[str]:
    """The first command of a train, val or export attempt with this machine's GPUs (inference runs per
    shard: ``inference.py``). ``master_addr``: rank 0's address, for a training job on more than one node."""
    if spec.kind is Kind.train:
        return train_argv(spec, cfg, initial_total(spec, cfg, nodes), resume_from, master_addr, nodes=nodes,
                          node_rank=node_rank)
    if spec.kind is Kind.val:
        return yolo.val_command(spec, run_name=spec.name, workdir=cfg.workdir, gpu_count=cfg.gpu_count)
    return yolo.export_command(spec, workdir=cfg.workdir, gpu_count=cfg.gpu_count)


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
              launch: Launch | None = None, stores: StoreFor = store_for,
              reclaim_check: NoticeCheck | None = None, address: Callable[[str], str] = local_address,
              link: DaemonLink | None = None, beat: Heartbeat | None = None) -> bool:
    """Run one assignment to its end; returns whether it succeeded. ``work``: what ``GET /work`` said
    (None: ask now; nothing to run is False). Injectable: ``launch`` (starts the job's command),
    ``stores`` (the object store for a URI), ``reclaim_check`` (reads the cloud's reclaim notice; by
    default the metadata service of ``cfg.cloud``, asked only on a spot machine) and ``address``.

    A node of a multi-node job meets the others (``rendezvous``) once its inputs are staged; a rank that
    cannot (its attempt is over, or rank 0 never came up) launches nothing and returns False. An attempt
    the daemon says is no longer this machine's (409 on a report, or on the heartbeat) has its process
    stopped and is dropped unreported (False); so is one whose machine the cloud reclaims, after the
    daemon is told.
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
        return _run_work(cfg, link, work, clock=clock, launch=launch, stores=stores, reclaim_check=reclaim_check,
                         address=address, beat=beat)
    except Stale as exc:
        log.info("attempt_dropped", job_id=work.job_id, attempt=work.attempt, why=str(exc))
        return False
    finally:
        if beat is not None:
            beat.idle()


def reclaim_watch(cfg: AgentConfig, work: Work, check: NoticeCheck | None) -> ReclaimWatch | None:
    """A started watch for the cloud's reclaim notice while a spot machine runs ``work``; None otherwise
    (an on-demand machine, or a cloud whose metadata service we do not know)."""
    if work.capacity != "spot":
        return None
    if check is None:
        if cfg.cloud not in METADATA_URLS:
            log.warning("reclaim_unwatched", cloud=cfg.cloud, why="GPUSCHED_AGENT_CLOUD names no cloud we read")
            return None
        check = notice_reader(cfg.cloud, cfg.metadata_url)
    return ReclaimWatch(check, cfg.reclaim_poll_seconds).start()


def _run_work(cfg: AgentConfig, link: DaemonLink, work: Work, *, clock: Clock, launch: Launch | None,
              stores: StoreFor, reclaim_check: NoticeCheck | None, address: Callable[[str], str],
              beat: Heartbeat | None) -> bool:
    spec = work.spec
    speaks = work.node_rank == 0  # in a multi-node job only rank 0 reports for the gang
    log_path = log_path_for(cfg, spec.name, work.attempt)
    if launch is None:
        problem = machine_problem(cfg)
        if problem:
            if speaks:
                send_finished(link, work, False, problem)
            return False
        launch = job_launcher(cfg, log_path)
    watch = reclaim_watch(cfg, work, reclaim_check)
    a = Attempt(cfg=cfg, link=link, work=work, clock=clock, launch=launch, stores=stores, log_path=log_path,
                beat=beat, watch=watch)
    # The job's output to the daemon while it runs (rank 0 speaks for the gang), the rest before the outcome.
    output = OutputShipper(link, work, log_path, interval=min(SHIP_SECONDS, max(cfg.poll_seconds, 1.0))).start() \
        if speaks else None
    try:
        try:
            try:
                stage_inputs(a)
                master = None
                if work.nodes > 1:
                    master = rendezvous(cfg, link, work, clock, address)
                    if master is None:
                        return False
                a.check(None)  # a notice that came while the inputs were fetched: nothing to start
                outcome = _run_kind(a, master)
            except AttemptFailed as exc:
                outcome = Outcome(False, exc.message, exc.outputs)
        except Reclaimed as exc:
            try:
                if output is not None:
                    output.finish(must_arrive=False)  # one try: the machine has a minute or two left
                send_reclaiming(link, work, exc.notice.at)
                log.warning("attempt_reclaimed", job_id=work.job_id, attempt=work.attempt,
                            at=exc.notice.at.isoformat())
            finally:
                stop_process(exc.proc)
            return False
        finally:
            if watch is not None:
                watch.stop()
        if output is not None:
            output.finish(must_arrive=True)
        if speaks:
            send_finished(link, work, outcome.ok, outcome.message, outcome.outputs)
        return outcome.ok
    finally:
        if output is not None:
            output.stop()


def _run_kind(a: Attempt, master: str | None) -> Outcome:
    kind = a.spec.kind
    if kind is Kind.train:
        return run_training(a, master)
    if kind is Kind.infer:
        return run_infer_shards(a)
    if kind is Kind.val:
        return run_val(a)
    return run_export(a)
