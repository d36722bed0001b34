"""A kill campaign: the real daemon against the emulators, SIGKILLed again and again, then judged.

One campaign is one store (SQLite file or PostgreSQL), one pair of emulators and a run of daemon
*lives*. Each life is started, given one way to die, and killed:

* ``launch_before``: at its next RunInstances, before the cloud sees it (kill point (a));
* ``launch_after``: at its next RunInstances, once the cloud made the instance, before the daemon reads
  the answer (b);
* ``stop_after`` / ``terminate_after``: at its next stop / terminate (ECS StopInstance(s),
  DeleteInstance(s); CVM StopInstances, TerminateInstances), once the cloud acted (c);
* ``random``: at a random instant from its start: during start-up, inside a tick, between ticks.

A life meant to die at a call that does not come within ``arm_timeout`` seconds is killed there and
then (counted as ``random``, with the fallback counted too). A launch life first submits one job
through the daemon's API, so there is always a launch to die at; stop and terminate lives are only
drawn while some machine of ours is up. Every ``orphan_every`` lives a tagged orphan is planted on
one cloud; someone else's machines (untagged, another cluster's) are planted at the start.

After the last kill the daemon runs undisturbed until it has drained (every job ended, every row
terminated, every planted orphan gone) and is stopped with SIGTERM. ``Outcome`` then holds the
clouds' records, the store's rows and the kills for tests/kills/invariants.py to judge. With
``kills=0`` and every job submitted at once it is the run without kills that billing is measured
against.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from providers.base import TAG_MANAGED
from scheduler.store.database import Store
from scheduler.store.tables import AttemptRow, EventRow, InstanceRow, JobRow
from tests.kills.daemon import Daemon, Mode
from tests.kills.invariants import GONE, Findings, JobView, RowView, StoreView, billed_hours, check
from tests.kills.proxy import Trap, When
from tests.kills.world import CLOUDS, REGION, CloudInstance, World

TOKEN = "kills-tier-api-token-0123456789abcdef"
# kind -> (the calls it dies at, before or after the cloud acted); "random" has none.
TARGETED: dict[str, tuple[frozenset[str], When]] = {
    "launch_before": (frozenset({"RunInstances"}), "before"),
    "launch_after": (frozenset({"RunInstances"}), "after"),
    "stop_after": (frozenset({"StopInstances", "StopInstance"}), "after"),
    "terminate_after": (frozenset({"DeleteInstances", "DeleteInstance", "TerminateInstances"}), "after"),
}
KINDS = (*TARGETED, "random")
DEFAULT_MIX = {"launch_before": 0.25, "launch_after": 0.25, "stop_after": 0.15, "terminate_after": 0.15,
               "random": 0.20}


@dataclass(frozen=True)
class Plan:
    """What one campaign does. Times are real seconds; the clouds and the daemon run ``speedup`` faster."""

    kills: int
    seed: int
    folder: Path
    database_url: str = ""  # empty: a SQLite file in the folder
    mode: Mode = "fork"
    speedup: float = 60.0
    tick_seconds: float = 0.25
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    schedule: tuple[str, ...] = ()  # the kinds of the first lives, in order (drawn from ``mix`` after)
    jobs_upfront: list[dict[str, Any]] = field(default_factory=list)  # submitted at once in the first life
    orphan_every: int = 20
    foreign: bool = True
    arm_timeout: float = 8.0
    random_within: float = 3.0
    api_timeout: float = 90.0
    drain_timeout: float = 240.0
    fault_share: float = 0.0  # emulator faults (tests/kills/world.py, emulator_faults)
    plant: str | None = None  # a planted bug in the daemon (tests/kills/zygote.py), for the self-test


@dataclass(frozen=True)
class Kill:
    life: int
    kind: str
    cloud: str | None
    action: str | None
    after_s: float  # seconds from the life's start
    meant: str | None = None  # for a fallback: the kind whose call did not come in time


@dataclass
class Outcome:
    plan: Plan
    kills: list[Kill]
    submitted: dict[str, str]  # job id -> name
    specs: list[dict[str, Any]]  # what was submitted, in order (the run without kills replays them)
    instances: list[CloudInstance]
    store: StoreView
    findings: Findings
    billed_hours: float
    drained: bool
    lives: int
    wall_s: float
    calls: dict[str, int]
    stop_status: int | None
    orphans_planted: int
    foreign_planted: int
    unexpected_exits: list[tuple[int, int | None]]
    serving_after: list[float]
    launches_answered: int  # RunInstances calls the clouds carried out (a re-sent token answers its instance)

    def kills_by_kind(self) -> dict[str, int]:
        counts = Counter(k.kind for k in self.kills)
        return {kind: counts.get(kind, 0) for kind in KINDS}

    def fallbacks(self) -> int:
        return sum(k.meant is not None for k in self.kills)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job_spec(n: int, rng: random.Random) -> dict[str, Any]:
    """The n-th job of a campaign: alternate clouds, training and export, spot and on-demand; about
    6 to 20 minutes of cloud time each, so one runs through several daemon lives."""
    cloud = CLOUDS[n % 2]
    spec: dict[str, Any] = {
        "name": f"kill-{n:04d}",
        "team": "kills",
        "model": "yolov9-t",
        "where": {"providers": [cloud], "regions": [REGION[cloud]]},
        # Tencent sells no spot in ap-guangzhou's catalog: its jobs run on-demand.
        "policy": {"capacity": rng.choice(["on-demand", "spot"]) if cloud == "alibaba" else "on-demand",
                   "idle_stop_minutes": 0, "max_restarts": 20},
    }
    if rng.random() < 0.7:
        spec.update(kind="train", data={"uri": "s3://kills/data", "train_images": rng.randrange(2000, 5000, 100),
                                        "val_images": 300},
                    train={"epochs": rng.randint(4, 10), "img_size": 640, "batch": 32, "weights": ""})
    else:
        spec.update(kind="export", export={"weights": "s3://kills/best.pt", "formats": ["onnx"]})
    return spec


class Campaign:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.jobs_rng = random.Random(plan.seed + 1)
        self.trap = Trap(self._kill_from_proxy)
        self.world = World(speedup=plan.speedup, epoch=datetime.now(timezone.utc), seed=plan.seed, trap=self.trap,
                           fault_share=plan.fault_share)
        try:
            plan.folder.mkdir(parents=True, exist_ok=True)
            self.db_url = plan.database_url or f"sqlite:///{plan.folder / 'data' / 'gpusched.db'}"
            self.store = Store(self.db_url)
            self.store.migrate()
            self.port = free_port()
            self.daemon = Daemon(plan.folder, self._env(), mode=plan.mode, plant=plan.plant)
        except BaseException:
            self.world.close()
            raise
        self.api = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30,
                                headers={"Authorization": f"Bearer {TOKEN}"})
        self.kills: list[Kill] = []
        self.submitted: dict[str, str] = {}
        self.specs: list[dict[str, Any]] = []
        self._died = threading.Event()
        self._unexpected: list[tuple[int, int | None]] = []
        self.serving_after: list[float] = []  # seconds from a life's start to its API answering

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}
        env.update(self.world.daemon_env())
        env.update({
            "GPUSCHED_DATA_DIR": str(self.plan.folder / "data"),
            "GPUSCHED_DATABASE_URL": self.db_url,
            "GPUSCHED_API_HOST": "127.0.0.1",
            "GPUSCHED_API_PORT": str(self.port),
            "GPUSCHED_API_TOKEN": TOKEN,
            "GPUSCHED_TICK_SECONDS": f"{self.plan.tick_seconds:g}",
            "GPUSCHED_IDLE_WARM": "fixed",
            "GPUSCHED_IDLE_STOP_MINUTES": "0",
            # A stopped machine is retired (terminated) 3 minutes later: every campaign ends with
            # every machine terminated, and terminate calls come as often as stops.
            "GPUSCHED_STOPPED_RETENTION_HOURS": "0.05",
            "GPUSCHED_LOG_FORMAT": "json",
            "GPUSCHED_LOG_LEVEL": "info",
        })
        return env

    # --- kills -----------------------------------------------------------------------------------

    def _kill_from_proxy(self, life: int, kind: str, cloud: str, action: str) -> bool:
        if not self.daemon.kill(life):
            return False
        self.kills.append(Kill(life, kind, cloud, action, self._age()))
        self._died.set()
        return True

    def _kill_now(self, life: int, *, meant: str | None = None) -> None:
        self.trap.disarm()
        age = self._age()
        if self.daemon.kill(life):
            self.kills.append(Kill(life, "random", None, None, age, meant))
        self._died.set()

    def _age(self) -> float:
        return round(time.monotonic() - self.daemon.started_at, 3)

    # --- the daemon's API ---------------------------------------------------------------------------

    def _wait_api(self, life: int) -> None:
        deadline = time.monotonic() + self.plan.api_timeout
        while time.monotonic() < deadline:
            if not self.daemon.alive():
                raise AssertionError(f"daemon life {life} exited by itself before serving:\n{self.daemon.tail()}")
            try:
                if self.api.get("/healthz", timeout=2).status_code in (200, 503):
                    self.serving_after.append(self._age())
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"daemon life {life} did not serve within {self.plan.api_timeout} s:\n"
                             f"{self.daemon.tail()}")

    def _submit(self, spec: dict[str, Any]) -> None:
        r = self.api.post("/v1/jobs", json={"spec": spec, "source": f"kills/{spec['name']}.yaml"})
        if r.status_code != 201:
            raise AssertionError(f"submitting {spec['name']}: {r.status_code} {r.text}")
        self.submitted[r.json()["id"]] = spec["name"]
        self.specs.append(spec)

    # --- the campaign ---------------------------------------------------------------------------------

    def _machines_up(self) -> bool:
        return any(i.state not in GONE for i in self.world.instances()
                   if i.tags.get(TAG_MANAGED) == self.world.cluster and not i.client_token.startswith("planted"))

    def _draw(self, n: int) -> str:
        if n <= len(self.plan.schedule):
            return self.plan.schedule[n - 1]
        mix = dict(self.plan.mix)
        if not self._machines_up():  # nothing to stop or terminate yet
            mix.pop("stop_after", None)
            mix.pop("terminate_after", None)
        kinds = list(mix)
        return self.rng.choices(kinds, weights=[mix[k] for k in kinds])[0]

    def _one_life(self, n: int) -> None:
        if self.plan.orphan_every and n % self.plan.orphan_every == 0:
            self.world.plant_orphan(CLOUDS[(n // self.plan.orphan_every) % 2])
        kind = self._draw(n)
        self._died.clear()
        life = self.daemon.start()
        if kind == "random":
            if not self._died.wait(self.rng.uniform(0, self.plan.random_within)):
                self._exited_by_itself(life)
                self._kill_now(life)
            return
        self._wait_api(life)
        if kind.startswith("launch"):
            self._submit(job_spec(len(self.specs) + 1, self.jobs_rng))
        actions, when = TARGETED[kind]
        self.trap.arm(life, kind, actions, when)
        if not self._died.wait(self.plan.arm_timeout):
            self._exited_by_itself(life)
            self._kill_now(life, meant=kind)

    def _exited_by_itself(self, life: int) -> None:
        if not self.daemon.alive() and self.daemon.exits and self.daemon.exits[-1][0] == life:
            self._unexpected.append(self.daemon.exits[-1])
            raise AssertionError(f"daemon life {life} exited by itself ({self.daemon.exits[-1][1]}):\n"
                                 f"{self.daemon.tail()}")

    def _drained(self) -> bool:
        view = self.snapshot()
        if any(j.state not in ("succeeded", "failed", "cancelled") for j in view.jobs.values()):
            return False
        if len(view.jobs) < len(self.submitted) or any(r.state != "terminated" for r in view.rows.values()):
            return False
        planted = set(self.world.planted_tagged)
        return all(i.state in GONE for i in self.world.instances() if (i.cloud, i.instance_id) in planted)

    def run(self) -> Outcome:
        started = time.monotonic()
        try:
            if self.plan.foreign:
                for cloud in CLOUDS:
                    self.world.plant_foreign(cloud, other_cluster=False)
                    self.world.plant_foreign(cloud, other_cluster=True)
            if self.plan.orphan_every:
                self.world.plant_orphan(CLOUDS[0])
            for n in range(1, self.plan.kills + 1):
                self._one_life(n)
            life = self.daemon.start()
            self._wait_api(life)
            for spec in self.plan.jobs_upfront:
                self._submit(spec)
            deadline = time.monotonic() + self.plan.drain_timeout
            drained = False
            while time.monotonic() < deadline:
                if not self.daemon.alive():
                    raise AssertionError(f"the last daemon life exited by itself:\n{self.daemon.tail()}")
                if self._drained():
                    drained = True
                    break
                time.sleep(0.5)
            stop_status = self.daemon.stop()
            return self._outcome(drained, stop_status, time.monotonic() - started)
        finally:
            self.close()

    def snapshot(self) -> StoreView:
        with self.store.session(write=False) as s:
            attempts = Counter(s.scalars(select(AttemptRow.job_id)).all())
            jobs = {j.id: JobView(j.id, j.name, j.state, j.reason, attempts.get(j.id, 0))
                    for j in s.scalars(select(JobRow))}
            rows = {r.id: RowView(r.id, r.provider, r.cloud_id, r.state, r.job_id)
                    for r in s.scalars(select(InstanceRow))}
            events = Counter(s.scalars(select(EventRow.kind)).all())
        return StoreView(jobs=jobs, rows=rows, events=dict(events))

    def _outcome(self, drained: bool, stop_status: int | None, wall_s: float) -> Outcome:
        instances = self.world.instances()
        store = self.snapshot()
        planted_tagged, planted_foreign = set(self.world.planted_tagged), set(self.world.planted_foreign)
        findings = check(instances, store, cluster=self.world.cluster, submitted=self.submitted,
                         planted_tagged=planted_tagged, planted_foreign=planted_foreign)
        return Outcome(
            plan=self.plan, kills=list(self.kills), submitted=dict(self.submitted), specs=list(self.specs),
            instances=instances, store=store, findings=findings,
            billed_hours=billed_hours(instances, self.world.cluster, planted_tagged | planted_foreign,
                                      self.world.now()),
            drained=drained, lives=self.daemon.life, wall_s=wall_s, calls=dict(self.trap.calls),
            stop_status=stop_status, orphans_planted=len(planted_tagged), foreign_planted=len(planted_foreign),
            unexpected_exits=list(self._unexpected), serving_after=list(self.serving_after),
            launches_answered=self.world.launches_answered(),
        )

    def close(self) -> None:
        self.trap.disarm()
        self.daemon.close()
        self.api.close()
        self.world.close()
        self.store.dispose()
