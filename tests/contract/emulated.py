"""What the contract harnesses of the emulated clouds do alike: a SimClock, a SandboxCloud behind an emulator
speaking the cloud's wire protocol, and the real SDK's provider in front of it.

A subclass sets ``clock``, ``cloud``, ``emulator``, ``config`` and ``provider``, and says how to
``build`` a provider from a config and which config field holds the secret. Faults are the
emulator's to deal (``providers.emulators.faults``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import SecretStr

from providers.base import Instance, Provider, ProviderError
from scheduler.clock import SimClock
from scheduler.models import Capacity, Offer

__all__ = ["EmulatedHarness"]


class EmulatedHarness:
    clock: SimClock
    cloud: Any  # SandboxCloud
    emulator: Any
    config: Any
    provider: Any
    secret_field = "secret_key"
    title = "the contract catalog"

    def build(self, config: Any) -> Any:
        raise NotImplementedError

    def advance(self, seconds: float) -> None:
        self.clock.advance(timedelta(seconds=seconds))

    def sell_out(self, offer: Offer, capacity: Capacity) -> None:
        self.emulator.sell_out(offer, capacity)

    def preempt(self, instance: Instance) -> None:
        self.emulator.preempt(instance.ref.instance_id)

    def fail_next(self, operation: str, error: ProviderError, times: int = 1) -> None:
        self.emulator.fail_next(operation, error, times)

    def lose_next_launch_response(self) -> None:
        self.emulator.lose_next_launch_response()

    def offers_in_the_cloud(self, offer: Offer) -> bool:
        """Whether the cloud behind the emulator sells ``offer`` (a provider may list more than it holds)."""
        return True

    def offer(self, gpu: str | None = None) -> Offer:
        for o in self.provider.offers():
            if (gpu is None or o.gpu == gpu) and o.on_demand is not None and o.spot is not None \
                    and self.offers_in_the_cloud(o):
                return o
        raise LookupError(f"{self.title} has no offer with gpu={gpu!r}")

    def provider_with_wrong_secret(self) -> Provider | None:
        return self.build(self.config.model_copy(update={self.secret_field: SecretStr("not-the-secret")}))  # type: ignore[no-any-return]

    def machines(self) -> list[tuple[Mapping[str, str], str]]:
        return [(dict(m.tags), m.state.value) for m in self.cloud.all_instances()]

    def faults_dealt(self) -> dict[str, int]:
        return dict(self.emulator.faults.drawn)

    def close(self) -> None:
        self.emulator.close()
