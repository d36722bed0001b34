"""A leader you can kill: two real `gpusched daemon` processes on one PostgreSQL and one shared cloud.

The cloud is the Alibaba ECS emulator in a process of its own (``tests/app/ha_cloud.py``), so both daemons
see the same machines, and it keeps its own record of every instance ever launched. The daemons, the
emulator and the simulated agents run on one sped-up clock (``GPUSCHED_SANDBOX_SPEEDUP`` from a shared
``GPUSCHED_SANDBOX_CLOCK_START``); the lease runs in real seconds.

Two ordeals, each mid-work (machines running, jobs still queued):

* SIGKILL the leader. The other daemon must lead within ``LEASE_S + RENEW_S`` of the kill (the dead
  leader's last renewal was at most ``RENEW_S`` before it, and the survivor tries every ``RENEW_S``),
  with a little slack for scheduling on a busy machine.
* Restart the database under both (a private PostgreSQL cluster, so the shared server is left alone).
  Neither daemon dies; one leads again within ``LEASE_S + RENEW_S`` of the database coming back.

After each: every job submitted (to either daemon: followers take submissions) succeeds; the cloud
launched exactly one instance per (job, attempt), none twice; and every instance still running is one
the store owns.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.exc import NoSuchModuleError, OperationalError

from providers.base import TAG_ATTEMPT, TAG_INSTANCE, TAG_JOB
from scheduler.clock import SystemClock
from scheduler.jobs.jobfile import load_job_file
from scheduler.states import INSTANCE_LIVE
from scheduler.store.database import Store, parse_url
from scheduler.store.lease import read as read_lease
from scheduler.store.tables import AttemptRow, InstanceRow, JobRow

pytest.importorskip("aliyunsdkcore", reason="the Alibaba SDK (gpusched[alibaba]) is not installed")

REPO = Path(__file__).resolve().parents[2]
PG_URL = os.environ.get("GPUSCHED_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")  # as conftest
TOKEN = "failover-test-token-0123456789"
SPEEDUP = 600  # a sandbox hour in six real seconds
# Short, to keep the suite quick; GPUSCHED_TEST_LEASE_S / _RENEW_S measure the hand-over at other settings.
LEASE_S = float(os.environ.get("GPUSCHED_TEST_LEASE_S", "3"))
RENEW_S = float(os.environ.get("GPUSCHED_TEST_RENEW_S", str(LEASE_S / 3)))
TICK_S = 0.3
# Scheduling slack on top of lease + renew: APScheduler's wake-up, a busy CPU, the database round trip.
SLACK_S = 1.5
WALL = SystemClock()
_PAUSE = threading.Event()  # never set: its wait() is the tests' pause, on the real clock


def wait_for(check: Callable[[], object], timeout: float, every: float = 0.1) -> object:
    deadline = WALL.now() + timedelta(seconds=timeout)
    while WALL.now() < deadline:
        got = check()
        if got:
            return got
        _PAUSE.wait(every)
    return check()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job_spec(name: str, kind: str) -> dict:
    source = "helmet-s-train.yaml" if kind == "train" else "helmet-val.yaml"
    spec = load_job_file(REPO / "examples" / source).model_dump(mode="json", exclude_none=True)
    spec["name"] = name
    spec["where"] = {"providers": ["alibaba"], "regions": ["cn-hangzhou"]}
    spec["policy"].update(deadline="3d", budget="5000 CNY")
    if kind == "train":
        spec["train"]["epochs"] = 12  # about 20 sandbox minutes on an A10: a couple of real seconds
    return spec


class Daemon:
    def __init__(self, name: str, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.name, self.proc, self.port, self.log = name, proc, port, log
        self.url = f"http://127.0.0.1:{port}"

    def health(self) -> dict | None:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return None

    def leads(self) -> bool:
        h = self.health()
        return bool(h and h.get("role") == "leader")

    def submit(self, spec: dict) -> str:
        r = httpx.post(f"{self.url}/v1/jobs", json={"spec": spec, "source": f"{spec['name']}.yaml"},
                       headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert r.status_code == 201, r.text
        return r.json()["id"]


class Cluster:
    """The shared cloud and the daemons on one database; everything it starts is stopped by ``close``."""

    def __init__(self, tmp_path: Path, db_url: str) -> None:
        self.tmp, self.db_url = tmp_path, db_url
        self.clock_start = datetime.now(timezone.utc)
        self.procs: list[subprocess.Popen] = []
        self.daemons: list[Daemon] = []
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}
        self.base_env = env | {"PYTHONPATH": str(REPO)}
        cloud = subprocess.Popen(
            [sys.executable, "-m", "tests.app.ha_cloud", "--speedup", str(SPEEDUP),
             "--clock-start", self.clock_start.isoformat()],
            cwd=REPO, env=self.base_env, stdout=subprocess.PIPE, stderr=open(tmp_path / "cloud.log", "w"), text=True)
        self.procs.append(cloud)
        self.cloud = json.loads(cloud.stdout.readline())
        self.store: Store | None = None

    def start_daemon(self, name: str) -> Daemon:
        port = free_port()
        data = self.tmp / name
        data.mkdir()
        env = self.base_env | {
            "GPUSCHED_DATABASE_URL": self.db_url, "GPUSCHED_DATA_DIR": str(data), "GPUSCHED_API_TOKEN": TOKEN,
            "GPUSCHED_API_PORT": str(port), "GPUSCHED_CLUSTER": "ha", "GPUSCHED_BACKEND": "live",
            "GPUSCHED_PROVIDERS": "alibaba", "GPUSCHED_SIM_AGENTS": "true",
            "GPUSCHED_SANDBOX_SPEEDUP": str(SPEEDUP), "GPUSCHED_SANDBOX_CLOCK_START": self.clock_start.isoformat(),
            "GPUSCHED_TICK_SECONDS": str(TICK_S), "GPUSCHED_LEADER_LEASE_S": str(LEASE_S),
            "GPUSCHED_LEADER_RENEW_S": str(RENEW_S),
            # The simulated agents heartbeat from the leader's tick: none beat while the lease changes hands
            # (minutes of sandbox time), which a real fleet's agents, reporting to any replica, would.
            "GPUSCHED_AGENT_SILENCE_MINUTES": "0",
            "GPUSCHED_ALIBABA_ENDPOINT": self.cloud["endpoint"], "GPUSCHED_ALIBABA_PROTOCOL": "http",
            "GPUSCHED_ALIBABA_ACCESS_KEY_ID": self.cloud["key_id"],
            "GPUSCHED_ALIBABA_ACCESS_KEY_SECRET": self.cloud["secret"],
            "GPUSCHED_ALIBABA_REGIONS": json.dumps([self.cloud["region"]]),
            "GPUSCHED_ALIBABA_IMAGE_ID": "m-ha", "GPUSCHED_LOG_FORMAT": "json", "GPUSCHED_LOG_LEVEL": "info",
        }
        log = self.tmp / f"{name}.log"
        proc = subprocess.Popen([sys.executable, "-m", "scheduler.app.cli", "daemon"], cwd=data, env=env,
                                stdout=open(log, "w"), stderr=subprocess.STDOUT)
        self.procs.append(proc)
        daemon = Daemon(name, proc, port, log)
        self.daemons.append(daemon)
        return daemon

    def ready(self, *daemons: Daemon, timeout: float = 40) -> None:
        for d in daemons:
            assert wait_for(lambda d=d: d.proc.poll() is None and d.health(), timeout), self.logs()
        if self.store is None:
            self.store = Store(self.db_url)

    def records(self) -> list[dict]:
        return httpx.get(self.cloud["records"], timeout=5).json()

    def jobs(self) -> dict[str, str]:
        assert self.store is not None
        with self.store.session(write=False) as s:
            return dict(s.execute(select(JobRow.id, JobRow.state)).tuples().all())

    def running_attempts(self) -> int:
        assert self.store is not None
        with self.store.session(write=False) as s:
            return len(s.scalars(select(AttemptRow.id).where(AttemptRow.state == "running")).all())

    def logs(self) -> str:
        parts = []
        for path in sorted(self.tmp.glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()[-40:]
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()
        if self.store is not None:
            self.store.dispose()


def submit_wave(daemons: list[Daemon], prefix: str, n: int) -> list[str]:
    """``n`` jobs, trains and validations, handed to the daemons in turn (a follower takes submissions too)."""
    return [daemons[i % len(daemons)].submit(job_spec(f"{prefix}-{i}", "train" if i % 3 else "val"))
            for i in range(n)]


def mid_work(cluster: Cluster, job_ids: list[str]) -> bool:
    """Machines running jobs while others still wait or boot."""
    states = cluster.jobs()
    unfinished = [j for j in job_ids if states.get(j) not in ("succeeded", "failed", "cancelled")]
    return cluster.running_attempts() >= 1 and len(unfinished) >= 2


def all_done(cluster: Cluster, job_ids: list[str]) -> bool:
    states = cluster.jobs()
    return all(states.get(j) in ("succeeded", "failed", "cancelled") for j in job_ids)


def assert_one_launch_per_attempt_and_no_leak(cluster: Cluster, job_ids: list[str]) -> None:
    """The cloud's own records against the store: no double launch, no lost job, no leaked instance."""
    assert cluster.store is not None
    states = cluster.jobs()
    assert {j: states.get(j) for j in job_ids} == {j: "succeeded" for j in job_ids}, cluster.logs()
    records = cluster.records()
    assert records, "the cloud launched nothing"
    per_attempt = Counter((r["tags"][TAG_JOB], r["tags"][TAG_ATTEMPT]) for r in records)
    doubled = {k: n for k, n in per_attempt.items() if n > 1}
    assert doubled == {}, f"launched twice for one (job, attempt): {doubled}"
    assert len({r["tags"][TAG_INSTANCE] for r in records}) == len(records), "two instances for one intent row"
    with cluster.store.session(write=False) as s:
        rows = {r.id: r for r in s.scalars(select(InstanceRow))}
        attempts = Counter(job for (job,) in s.execute(select(AttemptRow.job_id)))
    assert {r["tags"][TAG_JOB] for r in records} <= set(job_ids)
    for r in records:
        row = rows.get(r["tags"][TAG_INSTANCE])
        assert row is not None, f"cloud instance {r['instance_id']} has no row in the store"
        assert row.cloud_id == r["instance_id"], (row.id, row.cloud_id, r["instance_id"])
        if r["state"] in ("pending", "running", "stopping"):
            assert row.state in {s.value for s in INSTANCE_LIVE}, f"{r['instance_id']} runs but its row is {row.state}"
    # No spot reclaims and no silent agents here: a job needed a second attempt only if the scheduler erred.
    assert {j: attempts[j] for j in job_ids} == {j: 1 for j in job_ids}


# --- the databases


def _admin_engine():
    server = parse_url(PG_URL)
    try:
        admin = create_engine(server, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
        with admin.connect() as conn:
            conn.execute(text("SELECT 1"))
    except (OperationalError, NoSuchModuleError, ImportError) as exc:
        reason = f"PostgreSQL not reachable at {server.render_as_string(hide_password=True)} ({type(exc).__name__})"
        if os.environ.get("GPUSCHED_REQUIRE_PG"):
            pytest.fail(reason)
        pytest.skip(reason)
    return server, admin


@pytest.fixture
def shared_pg() -> Iterator[str]:
    """A database of its own on the test server (the daemons migrate it), dropped afterwards."""
    server, admin = _admin_engine()
    name = f"gpusched_failover_{os.getpid()}_{os.urandom(4).hex()}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


class PrivatePostgres:
    """A PostgreSQL cluster of the test's own (initdb, pg_ctl) on a free port, which it may restart at will."""

    def __init__(self, bindir: Path, root: Path) -> None:
        self.bindir, self.data, self.port = bindir, root / "pgdata", free_port()
        self.sockets = root / "pgsock"
        self.sockets.mkdir()
        self.log = root / "postgres.log"
        self.user = None
        if os.geteuid() == 0:  # initdb refuses root: run the cluster as the postgres account
            self.user = pwd.getpwnam("postgres")
            for path in (root, self.sockets):
                os.chown(path, self.user.pw_uid, self.user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
        conf = f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = '{self.sockets}'\n" \
               "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(conf)
        self.start()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bindir / tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "30", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")


def _postgres_bindir() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True)
    if found:
        return found[0].parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    bindir = _postgres_bindir()
    if bindir is None or not (bindir / "initdb").exists():
        pytest.skip("no initdb/pg_ctl (PostgreSQL server binaries) to run a private cluster that the test restarts")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root, and no postgres account to run a private PostgreSQL cluster as")
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser to start a private PostgreSQL cluster as postgres")
    # Not under pytest's temporary folder: that one is private to this user, and the cluster may run as postgres.
    root = Path(tempfile.mkdtemp(prefix="gpusched-pg-"))
    cluster = PrivatePostgres(bindir, root)
    try:
        yield cluster
    finally:
        try:
            cluster.stop()
        except (RuntimeError, subprocess.SubprocessError):
            pass
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def cluster_on(tmp_path: Path) -> Iterator[Callable[[str], Cluster]]:
    made: list[Cluster] = []

    def make(db_url: str) -> Cluster:
        made.append(Cluster(tmp_path, db_url))
        return made[-1]

    yield make
    for c in made:
        c.close()


# --- the ordeals


def test_killing_the_leader_mid_work_hands_over_within_lease_plus_renew(shared_pg, cluster_on) -> None:
    cluster = cluster_on(shared_pg)
    a, b = cluster.start_daemon("a"), cluster.start_daemon("b")
    cluster.ready(a, b)
    leader = wait_for(lambda: next((d for d in (a, b) if d.leads()), None), LEASE_S + RENEW_S + 5)
    assert leader is not None, cluster.logs()
    survivor = b if leader is a else a
    assert survivor.health()["role"] == "follower"
    assert survivor.health()["leader"]["holder"] == leader.health()["leader"]["me"]

    first = submit_wave([survivor, leader], "before", 8)
    assert wait_for(lambda: mid_work(cluster, first), 40, every=0.05), cluster.logs()
    with cluster.store.session(write=False) as s:
        old = read_lease(s, "tick")
    leader.proc.send_signal(signal.SIGKILL)
    killed_at = WALL.now()
    states, launched = cluster.jobs(), len(cluster.records())
    print(f"\nat the kill: {sum(states[j] != 'succeeded' for j in first)} of {len(first)} jobs unfinished, "
          f"{launched} machines launched")
    leader.proc.wait(timeout=10)
    second = submit_wave([survivor], "after", 4)  # taken while nobody leads

    assert wait_for(survivor.leads, LEASE_S + RENEW_S + SLACK_S + 5, every=0.05), cluster.logs()
    with cluster.store.session(write=False) as s:
        new = read_lease(s, "tick")
    failover_s = (new.acquired_at - killed_at).total_seconds()
    print(f"\nfailover: the survivor took the lease {failover_s:.2f} s after SIGKILL "
          f"(lease {LEASE_S:g} s, renew {RENEW_S:g} s)")
    assert new.holder == survivor.health()["leader"]["me"] != old.holder
    assert new.term == old.term + 1
    assert 0 < failover_s <= LEASE_S + RENEW_S + SLACK_S

    assert wait_for(lambda: all_done(cluster, first + second), 60, every=0.2), cluster.logs()
    assert_one_launch_per_attempt_and_no_leak(cluster, first + second)
    metrics = httpx.get(f"{survivor.url}/metrics", timeout=5).text
    assert "gpusched_leader 1.0" in metrics
    assert f'gpusched_leader_info{{holder="{new.holder}"}} 1.0' in metrics
    assert "gpusched_leadership_changes_total 1.0" in metrics


def test_restarting_the_database_under_both_daemons_loses_and_doubles_nothing(private_pg, cluster_on) -> None:
    cluster = cluster_on(private_pg.url)
    a, b = cluster.start_daemon("a"), cluster.start_daemon("b")
    cluster.ready(a, b)
    assert wait_for(lambda: a.leads() or b.leads(), LEASE_S + RENEW_S + 5), cluster.logs()

    first = submit_wave([a, b], "before", 8)
    assert wait_for(lambda: mid_work(cluster, first), 40, every=0.05), cluster.logs()
    private_pg.stop()
    _PAUSE.wait(LEASE_S)  # down longer than the lease: every lease has run out when it comes back
    private_pg.start()
    back_at = WALL.now()

    def renewed_since_restart() -> bool:
        try:
            with cluster.store.session(write=False) as s:
                lease = read_lease(s, "tick")
        except OperationalError:
            return False
        return lease is not None and lease.renewed_at >= back_at and lease.expires_at > WALL.now()

    assert wait_for(renewed_since_restart, LEASE_S + RENEW_S + SLACK_S + 5, every=0.05), cluster.logs()
    led_again_s = (WALL.now() - back_at).total_seconds()
    print(f"\ndatabase restart: a daemon led again {led_again_s:.2f} s after PostgreSQL came back")
    assert led_again_s <= LEASE_S + RENEW_S + SLACK_S
    assert a.proc.poll() is None and b.proc.poll() is None, cluster.logs()  # neither died with the database

    second = submit_wave([a, b], "after", 4)
    assert wait_for(lambda: all_done(cluster, first + second), 60, every=0.2), cluster.logs()
    assert_one_launch_per_attempt_and_no_leak(cluster, first + second)
    leaders = [d for d in (a, b) if d.leads()]
    assert len(leaders) == 1, [d.health() for d in (a, b)]


def test_a_paused_leader_wakes_as_a_follower_and_doubles_nothing(shared_pg, cluster_on) -> None:
    """SIGSTOP, not SIGKILL: the old leader's process and its connections live on, frozen perhaps mid-tick.
    The other daemon takes the lease; when the old one wakes, its lease has run out by its own clock and
    its next transaction's fence sees the new term, so it writes nothing more and follows."""
    cluster = cluster_on(shared_pg)
    a, b = cluster.start_daemon("a"), cluster.start_daemon("b")
    cluster.ready(a, b)
    leader = wait_for(lambda: next((d for d in (a, b) if d.leads()), None), LEASE_S + RENEW_S + 5)
    assert leader is not None, cluster.logs()
    survivor = b if leader is a else a

    first = submit_wave([leader, survivor], "before", 8)
    assert wait_for(lambda: mid_work(cluster, first), 40, every=0.05), cluster.logs()
    leader.proc.send_signal(signal.SIGSTOP)
    try:
        assert wait_for(survivor.leads, LEASE_S + RENEW_S + SLACK_S + 5, every=0.05), cluster.logs()
        second = submit_wave([survivor], "after", 4)
    finally:
        leader.proc.send_signal(signal.SIGCONT)
    assert wait_for(lambda: (leader.health() or {}).get("role") == "follower", RENEW_S + SLACK_S + 5), cluster.logs()

    assert wait_for(lambda: all_done(cluster, first + second), 60, every=0.2), cluster.logs()
    assert_one_launch_per_attempt_and_no_leak(cluster, first + second)
    assert leader.proc.poll() is None and survivor.leads() and not leader.leads()
    events = [json.loads(line)["event"] for line in leader.log.read_text().splitlines() if line.startswith("{")]
    assert "leadership_lost" in events
