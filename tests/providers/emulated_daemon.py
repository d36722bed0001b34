"""The daemon's own tick, store and API over one cloud emulator: what the lifecycle-level adapter tests drive.

Not a test module: ``tests/providers/test_*_lifecycle.py`` build an ``EmulatedDaemon`` and step it.
Settings say ``backend=live`` with the endpoint pointed at the emulator, as an operator's would.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from providers.catalog import filter_offers, load_catalog
from providers.registry import build_live
from providers.sandbox.provider import SandboxCloud
from scheduler.app.api import create_app
from scheduler.clock import SimClock
from scheduler.jobs.jobfile import load_job_file
from scheduler.lifecycle import tick as lifecycle
from scheduler.lifecycle.context import TickContext
from scheduler.settings import Settings
from scheduler.simulation.simagent import SimAgents
from scheduler.store.database import Store

TOKEN = "emulated-api-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
KEY_ID, SECRET = "emulated-key-id", "emulated-secret-value"
REGION = {"alibaba": "cn-hangzhou", "tencent": "ap-guangzhou"}


class EmulatedDaemon:
    """One cloud's emulator over a sandbox on a SimClock, and the daemon's parts configured for it."""

    def __init__(self, cloud: str, tmp_path: Path, start: datetime, *, emulator: Mapping[str, Any] | None = None,
                 config: Mapping[str, Any] | None = None, sandbox: Mapping[str, Any] | None = None,
                 agents: bool = True, **settings: Any) -> None:
        from providers.emulators.alibaba_ecs import AlibabaEcsEmulator
        from providers.emulators.tencent_cvm import TencentCvmEmulator

        self.name = cloud
        self.clock = SimClock(start)
        offers = filter_offers(load_catalog(), providers=[cloud], regions=[REGION[cloud]])
        self.sandbox = SandboxCloud(self.clock, offers, seed=5, interruption_scale=0.0, **dict(sandbox or {}))
        if cloud == "alibaba":
            self.emulator: Any = AlibabaEcsEmulator(self.sandbox, {KEY_ID: SECRET}, **dict(emulator or {}))
            fields: dict[str, Any] = {"access_key_id": KEY_ID, "access_key_secret": SECRET, "image_id": "m-emulated"}
        else:
            self.emulator = TencentCvmEmulator(self.sandbox, self.clock, {KEY_ID: SECRET}, seed=5,
                                               **dict(emulator or {}))
            fields = {"secret_id": KEY_ID, "secret_key": SECRET, "image_id": "img-emulated", "currency": "USD"}
        fields.update(endpoint=self.emulator.endpoint, protocol="http", regions=(REGION[cloud],), **dict(config or {}))
        self.settings = Settings(_env_file=None, backend="live", providers=[cloud], cluster="emulated",
                                 api_token=TOKEN, sim_agents=True, data_dir=tmp_path, **settings)
        self.store = Store(self.settings.db_url)
        self.store.migrate()
        self.api = TestClient(create_app(self.store, self.clock, self.settings))
        self.providers = build_live(self.settings, self.clock, **{cloud: fields})
        self.ctx = TickContext(store=self.store, providers=self.providers, clock=self.clock, settings=self.settings)
        self.agents = SimAgents(self.store, self.providers, "emulated", seed=1) if agents else None

    def submit(self, epochs: int = 5, **policy: Any) -> str:
        spec = load_job_file("examples/helmet-s-train.yaml").model_dump(mode="json")
        spec["where"] = {"providers": [self.name], "regions": [REGION[self.name]]}
        spec["train"]["epochs"] = epochs
        spec["policy"].update(policy)
        reply = self.api.post("/v1/jobs", json={"spec": spec, "source": "helmet.yaml"}, headers=AUTH)
        assert reply.status_code == 201, reply.text
        return str(reply.json()["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self.api.get(f"/v1/jobs/{job_id}", headers=AUTH).json())

    def step(self, minutes: float = 2) -> None:
        if self.agents is not None:
            self.agents.step(self.clock.now())
        lifecycle.tick(self.ctx)
        self.clock.advance(timedelta(minutes=minutes))

    def close(self) -> None:
        self.api.close()
        self.store.dispose()
        self.emulator.close()
