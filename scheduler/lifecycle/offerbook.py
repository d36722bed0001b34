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
        # The joined list and its indexes, made again only after a refresh: several phases of every
        # tick ask for them, and joining or indexing ~600 offers each time was a cost of its own.
        self._joined: list[Offer] | None = None
        self._by_key: dict[str, Offer] | None = None
        self._first_by_key: dict[str, Offer] | None = None

    def offers(self, providers: Mapping[str, Provider], now: datetime) -> list[Offer]:
        """Every provider's offers, refreshed when stale; a failing provider keeps its last list.

        The same list object until a refresh: callers read it, never change it."""
        for name, provider in sorted(providers.items()):
            fetched = self._fetched_at.get(name)
            if fetched is not None and now - fetched < self.refresh:
                continue
            try:
                self._offers[name] = list(provider.offers())
                self._fetched_at[name] = now
                self._joined = self._by_key = self._first_by_key = None
            except ProviderError as exc:
                log.warning("offers_refresh_failed", **exc.log_fields())
        if self._joined is None:
            self._joined = [o for name in sorted(self._offers) for o in self._offers[name]]
        return self._joined

    def by_key(self, providers: Mapping[str, Provider], now: datetime) -> dict[str, Offer]:
        """``offers`` by ``Offer.key`` (the last of a key, as a dict made from the list keeps it)."""
        offers = self.offers(providers, now)
        if self._by_key is None:
            self._by_key = {o.key: o for o in offers}
        return self._by_key

    def find(self, providers: Mapping[str, Provider], now: datetime, key: str) -> Offer | None:
        """The first of ``offers`` whose ``Offer.key`` is ``key``, or None."""
        offers = self.offers(providers, now)
        if self._first_by_key is None:
            first: dict[str, Offer] = {}
            for o in offers:
                first.setdefault(o.key, o)
            self._first_by_key = first
        return self._first_by_key.get(key)

    def invalidate(self, provider: str | None = None) -> None:
        """Refetch at the next ``offers`` (every provider, or one)."""
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
