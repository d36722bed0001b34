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

The agent itself comes from the daemon, never from a package index by name: the user-data carries a
small install script that downloads the daemon's own wheel (``package.AgentPackage``), refuses it
unless its sha256 is the one pinned here, and pip-installs that file with the ``agent`` extra.
"""

from __future__ import annotations

import shlex
from datetime import datetime, timedelta
from string import Template

import yaml

from scheduler.agent import tokens as agent_token
from scheduler.agent.package import AgentPackage

ENV_FILE = "/etc/gpusched/agent.env"
PREFIX = "/opt/gpusched"  # the agent's virtual environment; the unit runs PREFIX/bin/gpusched
INSTALL_SCRIPT = "/etc/gpusched/install-agent.py"
# The agent touches STARTED_MARK once the daemon has heard it; without it this long after boot, the machine stops.
BOOT_BACKSTOP_MINUTES = 30
STARTED_MARK = "/run/gpusched/agent-started"
# The systemd unit's message when the backstop fires; the agent uses the same words when it pushes it back.
BACKSTOP_MESSAGE = "gpusched: machine life bound reached"


# Run once by cloud-init (as root, with the image's python3): fetch the daemon's wheel, check its pinned
# sha256, then make the agent's virtual environment and install that file. The machine token goes only
# to the daemon's own route, read from the env file (never on a command line or in the output), and a
# redirect is not followed with it. Messages start with "gpusched:" in /var/log/cloud-init-output.log.
_INSTALL = Template("""\
# gpusched: install the agent this machine's daemon runs (gpusched $version), pinned by its sha256.
import hashlib, subprocess, sys, time, urllib.error, urllib.request
from pathlib import Path

URL = $url
SHA256 = $sha256
FILENAME = $filename
PREFIX = $prefix
WHEEL = Path(PREFIX, "dist", FILENAME)
ENV_FILE = $env_file
SEND_TOKEN = $send_token  # True only for the daemon's own route
TRIES = 8


def token():
    for line in Path(ENV_FILE).read_text().splitlines():
        key, _, value = line.partition("=")
        if key == "GPUSCHED_AGENT_TOKEN":
            return value.strip()
    sys.exit("gpusched: no GPUSCHED_AGENT_TOKEN in " + ENV_FILE)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # the token is for the daemon alone


def fetch():
    request = urllib.request.Request(URL)
    opener = urllib.request.build_opener()
    if SEND_TOKEN:
        request.add_header("Authorization", "Bearer " + token())
        opener = urllib.request.build_opener(NoRedirect)
    for attempt in range(1, TRIES + 1):
        try:
            with opener.open(request, timeout=120) as answer:
                return answer.read()
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 429:
                sys.exit(f"gpusched: {URL} answered {exc.code} {exc.reason}: the agent is not installed")
            problem = f"{exc.code} {exc.reason}"
        except OSError as exc:
            problem = str(exc)
        print(f"gpusched: cannot download {URL} ({problem}), try {attempt} of {TRIES}", file=sys.stderr, flush=True)
        if attempt < TRIES:
            time.sleep(min(60, 5 * attempt))
    sys.exit(f"gpusched: {URL} unreachable from this machine: the agent is not installed")


data = fetch()
digest = hashlib.sha256(data).hexdigest()
if digest != SHA256:
    sys.exit(f"gpusched: {URL} sent {len(data)} bytes with sha256 {digest}, not the pinned {SHA256}: "
             "the agent is not installed")
WHEEL.parent.mkdir(parents=True, exist_ok=True)
WHEEL.write_bytes(data)
subprocess.run([sys.executable, "-m", "venv", PREFIX], check=True)
subprocess.run([PREFIX + "/bin/pip", "install", "--quiet", str(WHEEL) + "[agent]"], check=True)
print(f"gpusched: installed {WHEEL.name} (sha256 {digest})", flush=True)
""")


class _Block(str):
    """A multi-line string YAML writes as a literal block: an operator reads the script as it runs."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Block, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text,
                                                                               style="|"))


def install_script(package: AgentPackage, api_url: str) -> str:
    """The Python that installs ``package`` on a machine whose daemon is at ``api_url``."""
    return _INSTALL.substitute(
        version=package.version, url=repr(package.download_url(api_url)), sha256=repr(package.sha256),
        filename=repr(package.filename), prefix=repr(PREFIX), env_file=repr(ENV_FILE),
        send_token=repr(package.served_by_daemon))


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
    package: AgentPackage | None,
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

    ``package`` is the wheel to install (``package.agent_package``); None only for machines that boot
    nothing (the sandbox, the emulators): their user-data has no install step.
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
    write_files = [
        {"path": ENV_FILE, "permissions": "0600", "owner": "root:root", "content": "\n".join(env_lines) + "\n"},
        {"path": "/etc/systemd/system/gpusched-agent.service", "permissions": "0644", "content": unit},
    ]
    runcmd: list[list[str]] = [
        # Backstop: if nobody stops this machine, it stops itself (and the cloud terminates it). Set
        # first, so that an install that hangs or fails cannot keep the machine alive.
        ["sh", "-c", f"shutdown -h +{minutes} {shlex.quote(BACKSTOP_MESSAGE)}"],
        # And sooner if the agent never comes up (a broken image, an install that failed).
        ["sh", "-c", f"(sleep {BOOT_BACKSTOP_MINUTES * 60}; [ -e {STARTED_MARK} ] || "
                     f"shutdown -h now {shlex.quote('gpusched: the agent never started')}) >/dev/null 2>&1 &"],
    ]
    if package is not None:
        write_files.append({"path": INSTALL_SCRIPT, "permissions": "0700", "owner": "root:root",
                            "content": _Block(install_script(package, api_url))})
        runcmd.append(["python3", INSTALL_SCRIPT])
    runcmd += [
        ["systemctl", "daemon-reload"],
        ["systemctl", "enable", "--now", "gpusched-agent.service"],
    ]
    doc = {"write_files": write_files, "runcmd": runcmd}
    return "#cloud-config\n" + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000)


def user_data_for(api_url: str, api_token: str, instance_id: str, now: datetime, est_hours: float, *,
                  package: AgentPackage | None, gpu: str | None = None, gpu_count: int | None = None,
                  cloud: str | None = None) -> str:
    """User-data with a fresh machine token for instance row ``instance_id``, valid ``machine_ttl``,
    that installs ``package`` (None: a machine that boots nothing, see ``render_user_data``).

    Every node of a gang is its own instance row, so each gets its own token; the daemon tells each
    agent its node rank with its work."""
    ttl = machine_ttl(est_hours)
    token = agent_token.issue(agent_token.signing_key(api_token), instance_id, now, ttl)
    return render_user_data(api_url=api_url, instance_id=instance_id, token=token,
                            max_hours=ttl.total_seconds() / 3600, package=package, gpu=gpu, gpu_count=gpu_count,
                            cloud=cloud)
