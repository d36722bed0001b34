"""The clouds a kill campaign runs against: the Alibaba ECS and Tencent CVM emulators on one sped-up clock.

The emulators run in the test process (their records are what the campaign is judged by), on a
``ScaledClock`` anchored at ``epoch``: a daemon started with the same GPUSCHED_SANDBOX_SPEEDUP and
GPUSCHED_SANDBOX_CLOCK_START reads the same time, and so does every daemon restarted after a kill. Between each
emulator and the daemon sits a ``KillProxy`` (tests/kills/proxy.py); the daemon's endpoints point at the
proxies.

``plant_*`` put instances on the clouds behind the daemon's back, the way a crashed older deployment or
a colleague would: tagged with our cluster but owned by no row (the orphan sweep must terminate them),
untagged, or tagged for another cluster (both must be left alone).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from providers.base import TAG_INSTANCE, TAG_JOB, TAG_MANAGED, InstanceState
from providers.catalog import filter_offers, load_catalog
from providers.emulators.alibaba_ecs import AlibabaEcsEmulator
from providers.emulators.tencent_cvm import TencentCvmEmulator
from providers.sandbox.provider import SandboxCloud
from scheduler.clock import ScaledClock
from scheduler.models import Capacity
from tests.kills.proxy import KillProxy, Trap

KEY_ID, SECRET = "kills-key-id", "kills-secret-value"
REGION = {"alibaba": "cn-hangzhou", "tencent": "ap-guangzhou"}
IMAGE = {"alibaba": "m-kills", "tencent": "img-kills"}
CLOUDS = ("alibaba", "tencent")
LIST_DELAY_S = 90  # cloud seconds before a new instance shows in listings
BILLING = (InstanceState.pending, InstanceState.running)  # what a cloud bills for (stop-charging stops it)


def emulator_faults(share: float, seed: int) -> dict[str, Any]:
    """Keyword arguments that make both emulators fail ``share`` of their calls (throttle, 5xx, timeout,
    answer lost after the action), seeded. This is the one place the tier asks for emulator faults:
    it needs the emulators' fault switch (``providers.emulators.faults.FaultPlan``, passed as ``faults=``)."""
    if not share:
        return {}
    try:
        from providers.emulators.faults import FaultPlan  # type: ignore[import-not-found]
    except ImportError:
        pytest.fail(f"--kills-fault-share {share} needs the emulators' fault switch "
                    "(providers/emulators/faults.py, FaultPlan), which this checkout lacks", pytrace=False)
    return {"faults": FaultPlan(rate=share, seed=seed)}


@dataclass(frozen=True)
class CloudInstance:
    """One instance as its cloud remembers it at the end: who launched it, and when it billed."""

    cloud: str
    instance_id: str
    client_token: str
    tags: dict[str, str]
    state: InstanceState
    history: tuple[tuple[datetime, InstanceState], ...]

    def billed_hours(self, now: datetime) -> float:
        """Hours spent in a billing state (pending, running), over every span (a stopped machine
        started again bills again)."""
        total = 0.0
        for (at, state), nxt in itertools.zip_longest(self.history, self.history[1:]):
            if state in BILLING:
                end = nxt[0] if nxt is not None else now
                total += (end - at).total_seconds() / 3600
        return total

    @property
    def ever_stopped_or_terminated(self) -> bool:
        return any(state not in BILLING for _, state in self.history)


class World:
    """Both emulators, their sandboxes and the kill proxies in front of them."""

    def __init__(self, *, speedup: float, epoch: datetime, seed: int, trap: Trap, fault_share: float = 0.0,
                 cluster: str = "kills") -> None:
        self.speedup = speedup
        self.epoch = epoch
        self.cluster = cluster
        self.clock = ScaledClock(speedup, since=epoch)
        catalog = load_catalog()
        self.sandboxes: dict[str, SandboxCloud] = {}
        self.emulators: dict[str, Any] = {}
        self.proxies: dict[str, KillProxy] = {}
        faults = emulator_faults(fault_share, seed)
        for i, cloud in enumerate(CLOUDS):
            # No spot reclaims: a run with kills and one without must differ only by the kills. New
            # instances reach listings 90 s late, as on a real cloud: a daemon restarted within that
            # window can only find its launch again by re-sending it with the same client token.
            sandbox = SandboxCloud(self.clock, filter_offers(catalog, providers=[cloud], regions=[REGION[cloud]]),
                                   seed=seed * 10 + i, interruption_scale=0.0, list_delay_seconds=LIST_DELAY_S,
                                   id_prefix=f"{cloud[:3]}")
            if cloud == "alibaba":
                emulator: Any = AlibabaEcsEmulator(sandbox, {KEY_ID: SECRET}, **faults)
            else:
                emulator = TencentCvmEmulator(sandbox, self.clock, {KEY_ID: SECRET}, seed=seed, **faults)
            self.sandboxes[cloud] = sandbox
            self.emulators[cloud] = emulator
            self.proxies[cloud] = KillProxy(cloud, emulator.endpoint, trap)
        self._planted = itertools.count(1)
        self.planted_tagged: list[tuple[str, str]] = []  # (cloud, sandbox id): must be terminated
        self.planted_foreign: list[tuple[str, str]] = []  # untagged or another cluster's: must be left alone

    def daemon_env(self) -> dict[str, str]:
        """The GPUSCHED_* settings that point a daemon at the proxies, on this world's clock."""
        env = {
            "GPUSCHED_BACKEND": "live",
            "GPUSCHED_PROVIDERS": ",".join(CLOUDS),
            "GPUSCHED_SIM_AGENTS": "true",
            "GPUSCHED_CLUSTER": self.cluster,
            "GPUSCHED_SANDBOX_SPEEDUP": f"{self.speedup:g}",
            "GPUSCHED_SANDBOX_CLOCK_START": self.epoch.isoformat(),
            # The leader lease stays at its default (30 s): a SIGKILLed daemon's successor on the same host
            # takes the lease of its dead predecessor at once (scheduler/lifecycle/leadership.py), and must.
            "GPUSCHED_ALIBABA_ENDPOINT": self.proxies["alibaba"].endpoint,
            "GPUSCHED_ALIBABA_PROTOCOL": "http",
            "GPUSCHED_ALIBABA_ACCESS_KEY_ID": KEY_ID,
            "GPUSCHED_ALIBABA_ACCESS_KEY_SECRET": SECRET,
            "GPUSCHED_ALIBABA_REGIONS": f'["{REGION["alibaba"]}"]',
            "GPUSCHED_ALIBABA_IMAGE_ID": IMAGE["alibaba"],
            "GPUSCHED_TENCENT_ENDPOINT": self.proxies["tencent"].endpoint,
            "GPUSCHED_TENCENT_PROTOCOL": "http",
            "GPUSCHED_TENCENT_SECRET_ID": KEY_ID,
            "GPUSCHED_TENCENT_SECRET_KEY": SECRET,
            "GPUSCHED_TENCENT_REGIONS": f'["{REGION["tencent"]}"]',
            "GPUSCHED_TENCENT_IMAGE_ID": IMAGE["tencent"],
            "GPUSCHED_TENCENT_CURRENCY": "USD",  # never guessed (the adapter requires it): the catalog's prices
        }
        return env

    # --- planting ---------------------------------------------------------------------------------

    def _plant(self, cloud: str, tags: dict[str, str]) -> str:
        sandbox = self.sandboxes[cloud]
        offer = min((o for o in sandbox.offers() if o.on_demand is not None),
                    key=lambda o: (o.on_demand.per_hour.amount, o.key))
        n = next(self._planted)
        machine = sandbox.launch(region=offer.region, zone=offer.zone, instance_type=offer.instance_type,
                                 capacity=Capacity.on_demand, client_token=f"planted-{n}", tags=tags,
                                 name=f"planted-{n}", image=IMAGE[cloud])
        return machine.instance_id

    def plant_orphan(self, cloud: str) -> str:
        """An instance with our cluster's tags whose row does not exist (a launch from a store that was
        lost, or a row deleted by hand): the orphan sweep must terminate it."""
        n = len(self.planted_tagged) + 1
        sid = self._plant(cloud, {TAG_MANAGED: self.cluster, TAG_INSTANCE: f"inst-orphan{n:04d}",
                                  TAG_JOB: f"job-orphan{n:04d}"})
        self.planted_tagged.append((cloud, sid))
        return sid

    def plant_foreign(self, cloud: str, *, other_cluster: bool) -> str:
        """Someone else's instance: untagged, or tagged for another gpusched cluster. Never touched."""
        tags = {TAG_MANAGED: "someone-else", TAG_INSTANCE: "inst-theirs"} if other_cluster else {"owner": "ml-ops"}
        sid = self._plant(cloud, tags)
        self.planted_foreign.append((cloud, sid))
        return sid

    # --- what the clouds remember ---------------------------------------------------------------

    def instances(self) -> list[CloudInstance]:
        """Every instance either cloud ever created, with its whole history."""
        out = []
        for cloud, sandbox in self.sandboxes.items():
            for machine in sandbox.all_instances():
                out.append(CloudInstance(cloud=cloud, instance_id=machine.instance_id,
                                         client_token=machine.client_token, tags=dict(machine.tags),
                                         state=machine.state,
                                         history=tuple(sandbox.history(machine.instance_id))))
        return out

    def launches_answered(self) -> int:
        """RunInstances calls the clouds carried out, successful ones (a re-sent token included)."""
        ali = sum(1 for c in self.emulators["alibaba"].calls if c.action == "RunInstances" and c.status == 200)
        return ali + int(self.emulators["tencent"].action_counts.get("RunInstances", 0))

    def now(self) -> datetime:
        return self.clock.now()

    def sim(self, real_seconds: float) -> timedelta:
        return timedelta(seconds=real_seconds * self.speedup)

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()
        for emulator in self.emulators.values():
            emulator.close()
