"""Machines run on a sandbox cloud for a bill reader's tests to read back: launched together, terminated together."""

from __future__ import annotations

from datetime import timedelta

from providers.base import TAG_INSTANCE, TAG_MANAGED
from providers.sandbox.cloud import SandboxCloud
from scheduler.clock import SimClock
from scheduler.models import Capacity, Offer


def run_machines(cloud: SandboxCloud, clock: SimClock, offer: Offer, n: int, minutes: float,
                 capacity: Capacity = Capacity.on_demand) -> list[str]:
    """Launch ``n`` machines of ``offer``, let them run ``minutes`` (and a second), terminate them, and let 30 s
    pass so the terminations settle. Returns the cloud's ids, in launch order."""
    ids = []
    for i in range(n):
        made = cloud.launch(region=offer.region, zone=offer.zone, instance_type=offer.instance_type,
                            capacity=capacity, client_token=f"t{len(cloud.all_instances())}-{i}",
                            tags={TAG_MANAGED: "bills", TAG_INSTANCE: f"gi-{i}"})
        ids.append(made.instance_id)
    clock.advance(timedelta(minutes=minutes, seconds=1))
    for instance_id in ids:
        cloud.terminate(instance_id)
    clock.advance(timedelta(seconds=30))
    return ids
