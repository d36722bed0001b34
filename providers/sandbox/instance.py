"""One instance of the sandbox cloud: the snapshot callers see and the record the cloud keeps.

``SandboxInstance`` is the frozen view ``SandboxCloud`` hands out; ``_Machine``
is the cloud's own mutable record behind it. They live apart from the cloud
only to keep ``providers/sandbox/cloud.py`` readable; ``_Machine`` is private
to the sandbox cloud and nothing else should build one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime
from typing import Mapping

from providers.base import InstanceState
from scheduler.models import Capacity, Offer

__all__ = ["PREEMPT_REASON", "SandboxInstance"]

PREEMPT_REASON = "spot-interruption"


@dataclass(frozen=True)
class SandboxInstance:
    """One instance as the sandbox cloud sees it at one moment (a snapshot)."""

    instance_id: str
    offer: Offer  # the catalog offer it was launched from
    capacity: Capacity
    client_token: str
    tags: Mapping[str, str]
    state: InstanceState
    state_since: datetime
    launched_at: datetime
    preempted: bool
    preempt_reason: str | None
    interruption_notice_at: datetime | None
    name: str
    image: str
    user_data: str

    @property
    def region(self) -> str:
        return self.offer.region

    @property
    def zone(self) -> str:
        return self.offer.zone

    @property
    def instance_type(self) -> str:
        return self.offer.instance_type


@dataclass
class _Machine:
    """The cloud's mutable record of one instance."""

    instance_id: str
    offer: Offer
    capacity: Capacity
    client_token: str
    tags: dict[str, str]
    name: str
    image: str
    user_data: str
    launched_at: datetime
    rng: random.Random
    state: InstanceState = InstanceState.pending
    history: list[tuple[datetime, InstanceState]] = field(default_factory=list)
    next_change: tuple[datetime, InstanceState] | None = None
    reclaim_at: datetime | None = None
    notice_at: datetime | None = None
    preempted: bool = False
    preempt_reason: str | None = None
    # The last snapshot handed out, with what it was taken of (``SandboxCloud._snapshot``): a machine that
    # did not change is listed as the same object, which the provider then knows without comparing fields.
    snapshot: tuple[tuple, SandboxInstance] | None = field(default=None, repr=False, compare=False)

    @property
    def state_since(self) -> datetime:
        return self.history[-1][0]
