"""Cloud-init user-data that installs and starts the on-instance agent for one job attempt.

What travels in user-data is readable by anything on the instance (and by anyone
with DescribeInstanceAttribute), so it carries only: where the daemon's API is,
which job and attempt this machine runs (for a multi-node job also its node rank and
the node count), and a short-lived token scoped to that (job, attempt). No API token,
no cloud credential: the agent reads data and
checkpoints with the instance's role (AWS instance profile, Alibaba RAM role,
Tencent CAM role). A shutdown timer is the backstop if the daemon is gone.
"""

from __future__ import annotations

import shlex
from datetime import datetime, timedelta

import yaml

from scheduler.agent import tokens as agent_token

# Installed on the instance; pin the same version the daemon runs.
AGENT_PACKAGE = "gpusched"
# The agent touches STARTED_MARK once it has its job; without it this long after boot, the machine stops.
BOOT_BACKSTOP_MINUTES = 30
STARTED_MARK = "/run/gpusched/agent-started"


def render_user_data(
    *,
    api_url: str,
    job_id: str,
    attempt: int,
    token: str,
    max_hours: float,
    package: str = AGENT_PACKAGE,
    resume_from: str | None = None,
    node_rank: int = 0,
    nodes: int = 1,
    gpu: str | None = None,
    gpu_count: int | None = None,
) -> str:
    """A ``#cloud-config`` document; ``max_hours`` bounds the machine's life (shutdown terminates it).

    ``gpu`` and ``gpu_count`` are the machine's as the offer sells it (the agent picks the batch and
    the device list from them). An agent that has not started ``BOOT_BACKSTOP_MINUTES`` after boot
    never will: the machine then shuts itself down instead of idling until ``max_hours``.

    A node of a multi-node job also learns its rank and the node count (not secrets); a
    single machine's document is left exactly as it was (the agent defaults to rank 0 of 1).
    """
    if not 0 <= node_rank < nodes:
        raise ValueError(f"node_rank {node_rank} is not in 0..{nodes - 1}")
    env_lines = [
        f"GPUSCHED_AGENT_API={api_url}",
        f"GPUSCHED_AGENT_JOB={job_id}",
        f"GPUSCHED_AGENT_ATTEMPT={attempt}",
        f"GPUSCHED_AGENT_TOKEN={token}",
    ]
    if resume_from:
        env_lines.append(f"GPUSCHED_AGENT_RESUME={resume_from}")
    if gpu:
        env_lines.append(f"GPUSCHED_AGENT_GPU={gpu}")
    if gpu_count:
        env_lines.append(f"GPUSCHED_AGENT_GPU_COUNT={gpu_count}")
    if nodes > 1:
        env_lines += [f"GPUSCHED_NODE_RANK={node_rank}", f"GPUSCHED_NODES={nodes}"]
    unit = "\n".join([
        "[Unit]",
        "Description=gpusched on-instance agent",
        "After=network-online.target",
        "Wants=network-online.target",
        "[Service]",
        "EnvironmentFile=/etc/gpusched/agent.env",
        "ExecStart=/opt/gpusched/bin/gpusched agent",
        "Restart=on-failure",
        "RestartSec=10",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])
    minutes = max(10, int(max_hours * 60))
    doc = {
        "write_files": [
            {"path": "/etc/gpusched/agent.env", "permissions": "0600", "owner": "root:root",
             "content": "\n".join(env_lines) + "\n"},
            {"path": "/etc/systemd/system/gpusched-agent.service", "permissions": "0644", "content": unit},
        ],
        "runcmd": [
            ["python3", "-m", "venv", "/opt/gpusched"],
            ["/opt/gpusched/bin/pip", "install", "--quiet", package],
            ["systemctl", "daemon-reload"],
            ["systemctl", "enable", "--now", "gpusched-agent.service"],
            # Backstop: if nobody stops this machine, it stops itself (and the cloud terminates it).
            ["sh", "-c", f"shutdown -h +{minutes} {shlex.quote('gpusched: job time limit')}"],
            # And sooner if the agent never comes up (a broken image, an install that failed).
            ["sh", "-c", f"(sleep {BOOT_BACKSTOP_MINUTES * 60}; [ -e {STARTED_MARK} ] || "
                         f"shutdown -h now {shlex.quote('gpusched: the agent never started')}) >/dev/null 2>&1 &"],
        ],
    }
    return "#cloud-config\n" + yaml.safe_dump(doc, sort_keys=False, width=1000)


def user_data_for(api_url: str, api_token: str, job_id: str, attempt: int, now: datetime, est_hours: float,
                  resume_from: str | None = None, node_rank: int = 0, nodes: int = 1,
                  gpu: str | None = None, gpu_count: int | None = None) -> str:
    """User-data with a fresh agent token valid for three times the estimate (at least a day).

    Every node of a gang gets the same (job, attempt) token: it is scoped to the attempt, not the machine."""
    ttl = timedelta(hours=max(24.0, 3 * est_hours))
    token = agent_token.issue(agent_token.signing_key(api_token), job_id, attempt, now, ttl)
    return render_user_data(api_url=api_url, job_id=job_id, attempt=attempt, token=token,
                            max_hours=ttl.total_seconds() / 3600, resume_from=resume_from,
                            node_rank=node_rank, nodes=nodes, gpu=gpu, gpu_count=gpu_count)
