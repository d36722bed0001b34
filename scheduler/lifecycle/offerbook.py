"""Offers from every provider, cached between refreshes, and the stock-out memory.

The planner is pure, so whatever it must know about the market comes from here:
the latest offers of each provider and the offers that recently failed with
NoCapacity (avoided for ``avoid_seconds``, as Karpenter does for 3 minutes).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Mapping

import structlog

from providers.base import Provider, ProviderError
from scheduler.models import Capacity, Offer

log = structlog.get_logger("gpusched.offers")


def avoid_key(offer: Offer, capacity: Capacity) -> str:
    return f"{offer.key}|{capacity.value}"


class OfferBook:
    def __init__(self, refresh_seconds: float = 600, avoid_seconds: float = 180) -> None:
        self.refresh = timedelta(seconds=refresh_seconds)
        self.avoid_for = timedelta(seconds=avoid_seconds)
        self._offers: dict[str, list[Offer]] = {}
        self._fetched_at: dict[str, datetime] = {}
        self._avoid: dict[str, datetime] = {}

    def offers(self, providers: Mapping[str, Provider], now: datetime) -> list[Offer]:
        """Every provider's offers, refreshed when stale; a failing provider keeps its last list."""
        for name, provider in sorted(providers.items()):
            fetched = self._fetched_at.get(name)
            if fetched is not None and now - fetched < self.refresh:
                continue
            try:
                self._offers[name] = list(provider.offers())
                self._fetched_at[name] = now
            except ProviderError as exc:
                log.warning("offers_refresh_failed", **exc.log_fields())
        return [o for name in sorted(self._offers) for o in self._offers[name]]

    def invalidate(self, provider: str | None = None) -> None:
        if provider is None:
            self._fetched_at.clear()
        else:
            self._fetched_at.pop(provider, None)

    def avoid(self, offer: Offer, capacity: Capacity, now: datetime) -> None:
        self.avoid_key(avoid_key(offer, capacity), now)

    def avoid_key(self, key: str, now: datetime) -> None:
        self._avoid[key] = now + self.avoid_for

    def avoided(self, now: datetime) -> frozenset[str]:
        for key in [k for k, until in self._avoid.items() if until <= now]:
            del self._avoid[key]
        return frozenset(self._avoid)
