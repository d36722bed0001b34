"""The daemon's parts over one cloud emulator, as an operator configures them (``backend=live``, the
provider's endpoint pointed at the emulator): the store, the HTTP API, the tick and simulated agents."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from providers.catalog import filter_offers, load_catalog
from providers.registry import build_live
from providers.sandbox.provider import SandboxCloud
from scheduler.app.api import create_app
from scheduler.clock import SimClock
from scheduler.lifecycle import tick as lifecycle
from scheduler.lifecycle.context import TickContext
from scheduler.models import Offer
from scheduler.settings import Settings
from scheduler.simulation.simagent import SimAgents
from scheduler.store.database import Store

START = datetime(2026, 11, 2, 1, 0, tzinfo=timezone.utc)
TOKEN = "e2e-api-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
KEY_ID, SECRET = "e2e-key-id", "e2e-secret-value"


class DaemonOnEmulator:
    """A subclass starts ``self.emulator`` over ``self.sandbox`` in ``serve``, which returns the adapter's config."""

    def __init__(self, cloud: str, region: str, tmp_path: Path) -> None:
        self.name = cloud
        self.clock = SimClock(START)
        offers = filter_offers(load_catalog(), providers=[cloud], regions=[region])
        self.sandbox = SandboxCloud(self.clock, offers, seed=5, interruption_scale=0.0)
        config = self.serve(offers)
        self.settings = Settings(_env_file=None, backend="live", providers=[cloud], cluster="e2e",  # type: ignore[call-arg]
                                 api_token=TOKEN, sim_agents=True, data_dir=tmp_path, idle_stop_minutes=10)
        self.providers = build_live(self.settings, self.clock, **{cloud: config})
        self.connected()
        self.store = Store(self.settings.db_url)
        self.store.migrate()
        self.api = TestClient(create_app(self.store, self.clock, self.settings))
        self.ctx = TickContext(store=self.store, providers=self.providers, clock=self.clock, settings=self.settings)
        # The agents see which instances run through the adapter's own listing, as a real fleet would.
        self.agents = SimAgents(self.store, self.providers, "e2e", seed=1)

    def serve(self, offers: Sequence[Offer]) -> dict[str, Any]:
        raise NotImplementedError

    def connected(self) -> None:
        """After the adapter is built: what a test needs to set on its SDK clients."""

    def step(self, minutes: int = 2) -> None:
        self.agents.step(self.clock.now())
        lifecycle.tick(self.ctx)
        self.clock.advance(timedelta(minutes=minutes))

    def close(self) -> None:
        self.api.close()
        self.store.dispose()
        self.emulator.close()
