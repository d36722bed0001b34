"""What the tier's agents meet on a cloud, run locally: the daemon's real API (uvicorn on a port), an S3
bucket (a moto server), the instance metadata service (``tests.fakes.metadata``), and machines booted the
way cloud-init boots them.

``boot`` renders a machine's user-data with the daemon's own code (``bootstrap.user_data_for``), reads
back what cloud-init would act on (the env file and the systemd unit's ``ExecStart``) and runs that
command as a process with that environment, in a fresh machine's layout under a temporary root:

- the unit's program (``/opt/gpusched/bin/gpusched``: what cloud-init's pip install makes) is this
  test environment's ``gpusched`` entry point, linked at ``<root>/opt/gpusched/bin/gpusched``;
- the machine's layout adds what the machine itself gives the agent and user-data never carries: the root
  folders moved under ``<root>`` (the work dir, the boot mark), the image's YOLOv9 checkout and Python,
  the metadata service's address, the instance role (moto's keys and endpoint), a PATH whose
  ``shutdown`` only writes down its arguments, the GPU driver's variables where this machine has them,
  no GPU on a CPU machine (GPUSCHED_AGENT_GPU_COUNT=0), and short polls. No layout key replaces a
  user-data key (``boot`` checks it), so every setting user-data gives reaches the agent as it is.

Nothing else is inherited from the test's own environment: systemd starts a unit with a clean one.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import yaml

from scheduler.agent.bootstrap import STARTED_MARK, user_data_for
from scheduler.agent.config import AgentConfig
from scheduler.app.api import create_app
from scheduler.clock import Clock, SystemClock
from scheduler.lifecycle import service
from scheduler.models import JobSpec
from scheduler.settings import Settings
from scheduler.store.database import Store
from tests.agent.machines import put_on_machine
from tests.fakes.metadata import MetadataServer
from tests.yolo.dataset import write_dataset

TOKEN = "yolo-tier-agent-api-token-0123456789"
BUCKET = "ci-bucket"
ENV_FILE = "/etc/gpusched/agent.env"
UNIT_FILE = "/etc/systemd/system/gpusched-agent.service"
JOB_TIMEOUT = 600  # seconds for one job on 2 shared cores; each takes a fraction of it
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # systemd's default PATH
# What the GPU driver's setup gives every process of a machine (a container's GPU runtime sets them): kept.
DRIVER_VARS = ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")


# --- the daemon -----------------------------------------------------------------------------------


class Daemon:
    """The daemon's HTTP API over ``store``, served by uvicorn from a thread on a free local port."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store, self.clock = store, clock
        app = create_app(store, clock, Settings(_env_file=None, api_token=TOKEN))
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            assert time.monotonic() < deadline and self._thread.is_alive(), "the daemon's API did not start"
            time.sleep(0.05)
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)

    def job(self, job_id: str) -> dict[str, Any]:
        r = self.http.get(f"/v1/jobs/{job_id}")
        r.raise_for_status()
        return r.json()

    def close(self) -> None:
        self.http.close()
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


# --- the bucket -----------------------------------------------------------------------------------


class Bucket:
    """An S3 bucket on a moto server; ``role_env`` is what the instance role gives boto3 on a machine."""

    def __init__(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.role_env = {"AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_ACCESS_KEY_ID": "ASIAGPUSCHEDTIER",
                         "AWS_SECRET_ACCESS_KEY": "tier-secret", "AWS_SESSION_TOKEN": "tier-session",
                         "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
        import boto3

        self.s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                               aws_access_key_id="ASIAGPUSCHEDTIER", aws_secret_access_key="tier-secret")
        self.s3.create_bucket(Bucket=BUCKET)

    def put_folder(self, folder: Path, prefix: str) -> str:
        """Upload every file under ``folder`` to ``s3://ci-bucket/<prefix>/...``; returns that URI."""
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            self.s3.upload_file(str(path), BUCKET, f"{prefix}/{path.relative_to(folder).as_posix()}")
        return f"s3://{BUCKET}/{prefix}"

    def keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (an ``s3://ci-bucket/...`` URI or a bare key prefix)."""
        prefix = prefix.removeprefix(f"s3://{BUCKET}/")
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def get(self, uri: str) -> bytes:
        return self.s3.get_object(Bucket=BUCKET, Key=uri.removeprefix(f"s3://{BUCKET}/"))["Body"].read()

    def close(self) -> None:
        self._server.stop()


# --- machines -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """What cloud-init would act on: the unit's environment (its EnvironmentFile) and its ExecStart."""

    env: dict[str, str]
    argv: list[str]


def read_user_data(text: str) -> Unit:
    """Parse ``#cloud-config`` user-data as cloud-init and systemd would: the unit that runcmd enables,
    the env file it names (``KEY=VALUE`` lines), and its ExecStart."""
    assert text.startswith("#cloud-config\n"), text[:40]
    doc = yaml.safe_load(text)
    files = {f["path"]: f["content"] for f in doc["write_files"]}
    unit_name = Path(UNIT_FILE).name
    assert ["systemctl", "enable", "--now", unit_name] in doc["runcmd"], doc["runcmd"]
    service: dict[str, str] = {}
    section = ""
    for line in files[UNIT_FILE].splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and "=" in line:
            key, _, value = line.partition("=")
            service[key] = value
    assert service["EnvironmentFile"] == ENV_FILE
    env = {}
    for line in files[service["EnvironmentFile"]].splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    return Unit(env=env, argv=shlex.split(service["ExecStart"]))


def rooted(root: Path, path: str) -> Path:
    """A root folder of the machine (``/opt/...``) in the fresh layout under ``root``."""
    return root / path.lstrip("/")


@dataclass
class Machine:
    """A booted machine: its agent's process, its root folder, and what the agent logs (its journal)."""

    name: str
    instance_id: str
    root: Path
    proc: subprocess.Popen[bytes]
    journal: Path
    unit: Unit
    env: dict[str, str]

    @property
    def workdir(self) -> Path:
        return Path(self.env["GPUSCHED_AGENT_WORKDIR"])

    def job_log(self, job_name: str, attempt: int) -> str:
        return (self.workdir / "logs" / f"{job_name}-a{attempt}.log").read_text(errors="replace")

    def logged(self, event: str) -> int:
        """How many of the agent's log lines name ``event``."""
        return sum(event in line.split() for line in self.journal.read_text(errors="replace").splitlines())

    def rss_kib(self) -> int:
        """The agent process's resident memory (VmRSS in /proc/<pid>/status), in KiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS line")

    def tail(self, chars: int = 3000) -> str:
        return f"--- {self.name}'s agent ({self.journal}):\n{self.journal.read_text(errors='replace')[-chars:]}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass(frozen=True)
class Image:
    """The job image the machines boot: its YOLOv9 checkout, its Python, and a TrueType font that the
    image keeps where YOLOv9 looks for it (root's ``~/.config/Ultralytics``)."""

    yolov9_dir: Path
    python: str
    font: Path


def boot(name: str, instance_id: str, *, daemon: Daemon, bucket: Bucket, metadata_url: str, image: Image,
         root: Path, gpu: str, gpu_count: int | None, cloud: str = "aws", python: str | None = None,
         layout: dict[str, str] | None = None) -> Machine:
    """Boot machine ``name`` (instance row ``instance_id``) from its user-data; ``gpu_count`` None: a
    machine without a GPU (the layout says 0: its jobs run on the CPU). ``python``: the image's Python as
    this machine runs it (a wrapper, for the OOM machine). ``layout``: more of the machine's own settings."""
    # package=None: the install of the daemon's wheel is proven apart (tests/agent/test_agent_install.py);
    # the env file and the unit are the same with or without it.
    unit = read_user_data(user_data_for(daemon.url, TOKEN, instance_id, daemon.clock.now(), 1.0, package=None,
                                        gpu=gpu, gpu_count=gpu_count, cloud=cloud))
    program = Path(sys.executable).parent / "gpusched"  # this test environment's entry point
    assert program.is_file(), f"no gpusched entry point beside {sys.executable}"
    exec_path = rooted(root, unit.argv[0])
    exec_path.parent.mkdir(parents=True, exist_ok=True)
    exec_path.symlink_to(program)
    home = rooted(root, "/root")
    fonts = home / ".config" / "Ultralytics"
    fonts.mkdir(parents=True)
    (fonts / "Arial.ttf").symlink_to(image.font)
    bin_dir = rooted(root, "/usr/local/sbin")
    bin_dir.mkdir(parents=True)
    shutdown = bin_dir / "shutdown"  # the backstop's: written down, never run on this machine
    shutdown.write_text(f"#!/bin/sh\necho \"$@\" >> {shlex.quote(str(root / 'shutdown-calls'))}\n")
    shutdown.chmod(shutdown.stat().st_mode | stat.S_IXUSR)
    machine_layout = {
        "PATH": f"{bin_dir}:{SYSTEM_PATH}",
        "LANG": "C.UTF-8",
        "HOME": str(home),
        "GPUSCHED_AGENT_WORKDIR": str(rooted(root, AgentConfig.workdir)),
        "GPUSCHED_AGENT_STARTED_MARK": str(rooted(root, STARTED_MARK)),
        "GPUSCHED_AGENT_YOLOV9_DIR": str(image.yolov9_dir),
        "GPUSCHED_AGENT_PYTHON": python or image.python,
        "GPUSCHED_AGENT_METADATA_URL": metadata_url,
        "GPUSCHED_AGENT_POLL_SECONDS": "0.5",
        "GPUSCHED_AGENT_RECLAIM_POLL_SECONDS": "0.3",
        "GPUSCHED_AGENT_WORKERS": "0",  # 2 shared cores: the dataloader in the training process
        **bucket.role_env,
        **{k: os.environ[k] for k in DRIVER_VARS if k in os.environ},
        **({"GPUSCHED_AGENT_GPU_COUNT": "0"} if gpu_count is None else {}),
        **(layout or {}),
    }
    clash = sorted(set(machine_layout) & set(unit.env))
    assert not clash, f"the test's layout would replace user-data's {clash}"
    env = {**unit.env, **machine_layout}
    journal = root / "journal.log"
    with open(journal, "ab") as out:
        proc = subprocess.Popen([str(exec_path), *unit.argv[1:]], env=env, cwd=root, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    return Machine(name=name, instance_id=instance_id, root=root, proc=proc, journal=journal, unit=unit, env=env)


# --- the world the tests share ---


class Cloud:
    """A test module's world: the daemon (its store, on the system clock: the agents' tokens are real), the
    bucket holding the dataset, the metadata service, the image, and the machines booted so far."""

    def __init__(self, root: Path, image: Image, *, train_images: int = 8, val_images: int = 4,
                 size: int = 128) -> None:
        self.root, self.image = root, image
        self.clock = SystemClock()
        self.store = Store(f"sqlite:///{root / 'daemon' / 'gpusched.db'}")
        self.store.migrate()
        self.daemon = Daemon(self.store, self.clock)
        self.bucket = Bucket()
        self.metadata = MetadataServer()
        self.machines: dict[str, Machine] = {}
        # As a user uploads it: relative paths, no path: (the agent's staging rewrites it).
        folder = write_dataset(root / "user-dataset", train=train_images, val=val_images, size=size).parent
        self.data = self.bucket.put_folder(folder, "datasets/boxes")

    def boot(self, name: str, instance_id: str, **kw: object) -> Machine:
        m = boot(name, instance_id, daemon=self.daemon, bucket=self.bucket, metadata_url=self.metadata.url,
                 image=self.image, root=self.root / name, **kw)  # type: ignore[arg-type]
        self.machines[name] = m
        return m

    def submit(self, spec: JobSpec) -> str:
        return service.submit(self.store, self.clock, spec, source=f"{spec.name}.yaml").id

    def put(self, job: str, attempt: int, instance_id: str, **row: object) -> None:
        put_on_machine(self.store, self.clock, job, attempt, instance_id=instance_id, **row)

    def finished(self, job: str, *machines: Machine) -> dict:
        return wait_for(f"job {job} to end", lambda: _ended(self.daemon.job(job)), timeout=JOB_TIMEOUT,
                        machines=list(machines))

    def reclaim_when(self, job: str, done: int, machine: Machine) -> dict:
        """Serve a reclaim notice once the job has ``done`` epochs or shards reported; the job's detail then."""
        wait_for(f"{job} to report {done}", lambda: self.daemon.job(job)["epochs_done"] >= done,
                 timeout=JOB_TIMEOUT, machines=[machine], every=0.1)
        self.metadata.notify("aws", self.clock.now() + timedelta(minutes=2))
        try:
            code = machine.proc.wait(timeout=120)
        finally:
            self.metadata.clear()
        assert code == 0, f"the agent exits 0 when its machine goes away\n{machine.tail()}"
        return self.daemon.job(job)

    def close(self) -> None:
        for m in self.machines.values():
            m.stop()
        self.daemon.close()
        self.bucket.close()
        self.metadata.close()
        self.store.dispose()


def _ended(detail: dict) -> dict | None:
    return detail if detail["state"] in ("succeeded", "failed", "cancelled") else None


# --- waiting --------------------------------------------------------------------------------------


def wait_for(what: str, ready: Callable[[], Any], *, timeout: float, machines: Iterator[Machine] | list[Machine],
             every: float = 0.2) -> Any:
    """Poll ``ready()`` until it returns something true; fail with the machines' logs after ``timeout`` s,
    or as soon as one of them has exited."""
    deadline = time.monotonic() + timeout
    machines = list(machines)
    while True:
        value = ready()
        if value:
            return value
        gone = [m for m in machines if m.proc.poll() is not None]
        if gone or time.monotonic() > deadline:
            why = (f"{', '.join(f'{m.name} exited {m.proc.returncode}' for m in gone)}" if gone
                   else f"{timeout:.0f} s passed")
            raise AssertionError(f"waiting for {what}: {why}\n" + "\n".join(m.tail() for m in machines))
        time.sleep(every)

