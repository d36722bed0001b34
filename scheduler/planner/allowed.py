"""What a job file allows: the offers its filters let through, and the capacities it asks for.

One definition, read by the planner, the lower bound and the trace generator. The planner
narrows the capacities further by its own rules (``plan._planner_capacities``: the
simulator's baselines, and the restart budget of ``spot_allowed``); the lower bound takes
them as they are (``simulation.lower_bound_options`` says why).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from scheduler.models import Capacity, JobSpec


class Sold(Protocol):
    """Anything sold like an offer: an ``Offer``, or a planner ``Group`` of them."""

    @property
    def gpu(self) -> str: ...

    @property
    def gpu_count(self) -> int: ...

    @property
    def provider(self) -> str: ...

    @property
    def region(self) -> str: ...


class OfferFilter(NamedTuple):
    """A job file's ``resources.gpus``, ``resources.gpu_count``, ``where.providers`` and ``where.regions``
    (None: any); the planner lifts one at a time to tell a refused job which filter to widen."""

    gpus: tuple[str, ...] | None
    gpu_count: int
    providers: tuple[str, ...] | None
    regions: tuple[str, ...] | None

    @classmethod
    def of(cls, spec: JobSpec) -> OfferFilter:
        res, where = spec.resources, spec.where
        # ``tuple.__new__``: the NamedTuple's own ``__new__`` is Python code, and the planner makes one a job.
        return tuple.__new__(cls, (res.gpus, res.gpu_count, where.providers, where.regions))

    def admits(self, x: Sold) -> bool:
        """Whether ``x`` passes every filter: one of the GPUs, exactly the GPU count, a provider and a region."""
        return (
            (self.gpus is None or x.gpu in self.gpus)
            and x.gpu_count == self.gpu_count
            and (self.providers is None or x.provider in self.providers)
            and (self.regions is None or x.region in self.regions)
        )


_ANY = frozenset(Capacity)
_ONLY = {c.value: frozenset({c}) for c in Capacity}


def job_capacities(wanted: str) -> frozenset[Capacity]:
    """The capacities a job file's ``policy.capacity`` allows: ``auto`` any, otherwise the one it names."""
    return _ANY if wanted == "auto" else _ONLY[wanted]
