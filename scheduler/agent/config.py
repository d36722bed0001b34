"""What one machine's agent is told: its settings (``AgentConfig``, from ``/etc/gpusched/agent.env``) and
one assignment from the daemon (``Work``, from ``GET /v1/agent/work``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from scheduler.agent.bootstrap import STARTED_MARK
from scheduler.errors import SettingsError
from scheduler.jobs import yolo
from scheduler.models import JobSpec


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
    workers: int = 8  # YOLOv9's dataloader processes (--workers; written into opt.yaml on a resume)
    cloud: str | None = None  # the offer's provider: where a spot machine reads its reclaim notice
    metadata_url: str | None = None  # replaces the cloud's metadata address (tests, a proxy)
    reclaim_poll_seconds: float = 5.0  # how often a spot machine asks for a reclaim notice

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
                   shutdown_backstop=env.get("GPUSCHED_AGENT_SHUTDOWN_BACKSTOP", "") == "1",
                   workers=int(env.get("GPUSCHED_AGENT_WORKERS", cls.workers)),
                   cloud=env.get("GPUSCHED_AGENT_CLOUD") or None,
                   metadata_url=env.get("GPUSCHED_AGENT_METADATA_URL") or None,
                   reclaim_poll_seconds=float(env.get("GPUSCHED_AGENT_RECLAIM_POLL_SECONDS",
                                                      cls.reclaim_poll_seconds)))


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
    capacity: str | None = None  # the machine's: "spot" machines watch for the cloud's reclaim notice

    @classmethod
    def from_answer(cls, body: dict[str, Any]) -> Work:
        return cls(job_id=body["job_id"], attempt=int(body["attempt"]), spec=JobSpec.model_validate(body["spec"]),
                   epochs_done=int(body.get("epochs_done") or 0), checkpoint_uri=body.get("checkpoint_uri"),
                   node_rank=int(body.get("node_rank") or 0), nodes=int(body.get("nodes") or 1),
                   master_addr=body.get("master_addr"), capacity=body.get("capacity"))

    @property
    def key(self) -> tuple[str, int]:
        return self.job_id, self.attempt
