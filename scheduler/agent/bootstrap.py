"""Cloud-init user-data that installs and starts the on-instance agent, once per machine.

What travels in user-data is readable by anything on the instance (and by anyone
with DescribeInstanceAttribute), so it carries only: where the daemon's API is,
which instance row this machine is (``GPUSCHED_AGENT_INSTANCE``), the GPUs the offer
sells, and a token scoped to that instance that expires with the machine's life bound.
No job, no API token, no cloud credential: the agent asks the daemon for its work
(``GET /v1/agent/work``), so a warm machine given its next job needs no new user-data,
and it reads data and checkpoints with the instance's role (AWS instance profile,
Alibaba RAM role, Tencent CAM role). A shutdown timer is the backstop if the daemon is
gone: set to the token's expiry at boot, and pushed back by the agent each time the
daemon renews its token.
"""

from __future__ import annotations

import shlex
from datetime import datetime, timedelta

import yaml

from scheduler.agent import tokens as agent_token

# Installed on the instance; pin the same version the daemon runs.
AGENT_PACKAGE = "gpusched"
# The agent touches STARTED_MARK once the daemon has heard it; without it this long after boot, the machine stops.
BOOT_BACKSTOP_MINUTES = 30
STARTED_MARK = "/run/gpusched/agent-started"
# The systemd unit's message when the backstop fires; the agent uses the same words when it pushes it back.
BACKSTOP_MESSAGE = "gpusched: machine life bound reached"


def machine_ttl(est_hours: float) -> timedelta:
    """How long a machine token lives, and with it the machine: three times the work's estimate,
    at least a day. The agent renews it (and pushes the shutdown backstop) while its instance is live."""
    return timedelta(hours=max(24.0, 3 * est_hours))


def render_user_data(
    *,
    api_url: str,
    instance_id: str,
    token: str,
    max_hours: float,
    package: str = AGENT_PACKAGE,
    gpu: str | None = None,
    gpu_count: int | None = None,
    cloud: str | None = None,
) -> str:
    """A ``#cloud-config`` document; ``max_hours`` bounds the machine's life (shutdown terminates it)
    unless its agent renews its token, which pushes the bound back.

    ``gpu`` and ``gpu_count`` are the machine's as the offer sells them: the agent's fallback when
    it cannot ask the driver (``machine.discover``). ``cloud`` is the offer's provider (aws, alibaba,
    tencent): where the agent of a spot machine reads the reclaim notice (``reclaim.py``). An agent that has not started
    ``BOOT_BACKSTOP_MINUTES`` after boot never will: the machine then shuts itself down instead of
    idling until ``max_hours``. The unit runs the long-lived ``gpusched agent``; ``Restart=on-failure``
    restarts an agent that crashed, which asks the daemon for its work again (a job it already
    reported is never handed out again).
    """
    env_lines = [
        f"GPUSCHED_AGENT_API={api_url}",
        f"GPUSCHED_AGENT_INSTANCE={instance_id}",
        f"GPUSCHED_AGENT_TOKEN={token}",
        "GPUSCHED_AGENT_SHUTDOWN_BACKSTOP=1",  # this machine's agent pushes the shutdown timer on renewal
    ]
    if gpu:
        env_lines.append(f"GPUSCHED_AGENT_GPU={gpu}")
    if gpu_count:
        env_lines.append(f"GPUSCHED_AGENT_GPU_COUNT={gpu_count}")
    if cloud:
        env_lines.append(f"GPUSCHED_AGENT_CLOUD={cloud}")
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
            ["sh", "-c", f"shutdown -h +{minutes} {shlex.quote(BACKSTOP_MESSAGE)}"],
            # And sooner if the agent never comes up (a broken image, an install that failed).
            ["sh", "-c", f"(sleep {BOOT_BACKSTOP_MINUTES * 60}; [ -e {STARTED_MARK} ] || "
                         f"shutdown -h now {shlex.quote('gpusched: the agent never started')}) >/dev/null 2>&1 &"],
        ],
    }
    return "#cloud-config\n" + yaml.safe_dump(doc, sort_keys=False, width=1000)


def user_data_for(api_url: str, api_token: str, instance_id: str, now: datetime, est_hours: float,
                  gpu: str | None = None, gpu_count: int | None = None, cloud: str | None = None) -> str:
    """User-data with a fresh machine token for instance row ``instance_id``, valid ``machine_ttl``.

    Every node of a gang is its own instance row, so each gets its own token; the daemon tells each
    agent its node rank with its work."""
    ttl = machine_ttl(est_hours)
    token = agent_token.issue(agent_token.signing_key(api_token), instance_id, now, ttl)
    return render_user_data(api_url=api_url, instance_id=instance_id, token=token,
                            max_hours=ttl.total_seconds() / 3600, gpu=gpu, gpu_count=gpu_count, cloud=cloud)
