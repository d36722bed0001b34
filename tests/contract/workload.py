"""A small job runner over one Provider, written the way the daemon's tick works, for the fault cases.

Each job is launched under an intent (job, attempt) whose client token is fixed before the first call;
every call goes through ``providers.retry.call_with_retry``; a launch whose outcome is unknown is
re-issued with the same token on the next round; a refused launch starts a new attempt (a new token).
Each round lists the cloud by the cluster tag and terminates what no current intent owns (the sweeper).
A job runs ``WORK_SECONDS`` on its machine, then terminates it and is done once the cloud shows the
machine gone. What the runner saw is kept for the invariants the contract checks.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from providers.base import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_MANAGED,
    Instance,
    InstanceRef,
    InstanceRequest,
    InstanceState,
    ProviderError,
)
from providers.retry import call_with_retry
from scheduler.models import Capacity, Offer

if TYPE_CHECKING:
    from .conftest import ProviderHarness

T = TypeVar("T")
S = InstanceState
STEP_SECONDS = 15
WORK_SECONDS = 300
GONE = (S.terminated,)


@dataclass
class Job:
    name: str
    capacity: Capacity
    start_round: int = 1  # jobs arrive over time, as they do at a daemon
    attempt: int = 0
    state: str = "queued"  # queued -> launching -> booting -> working -> ending -> done
    instance: InstanceRef | None = None
    work_until: datetime | None = None
    refusals: list[str] = field(default_factory=list)


@dataclass
class Report:
    rounds: int = 0
    failed_calls: int = 0  # ProviderErrors that survived their retries
    intents: dict[str, set[str]] = field(default_factory=dict)  # client token -> instance ids listed for it
    swept: list[str] = field(default_factory=list)  # instances the sweeper terminated


class Workload:
    def __init__(self, harness: ProviderHarness, offer: Offer, jobs: int, *, seed: int = 7) -> None:
        self.harness = harness
        self.offer = offer
        self.rng = random.Random(seed)
        self.jobs = [Job(f"w{n}", Capacity.spot if n % 2 else Capacity.on_demand, start_round=1 + 4 * n)
                     for n in range(jobs)]
        self.report = Report()

    # --- one call, retried as the daemon retries it --------------------------------------------------

    def _call(self, fn: Callable[[], T]) -> T:
        assert self.harness.clock is not None
        return call_with_retry(fn, clock=self.harness.clock, rng=self.rng, base_seconds=0.5, cap_seconds=20)

    def token(self, job: Job) -> str:
        return f"{self.harness.cluster}-{job.name}-a{job.attempt}"

    def request(self, job: Job) -> InstanceRequest:
        assert self.harness.clock is not None
        return InstanceRequest(
            offer=self.offer, capacity=job.capacity, client_token=self.token(job),
            tags={TAG_MANAGED: self.harness.cluster, TAG_JOB: job.name, TAG_ATTEMPT: str(job.attempt)},
            name=f"workload-{job.name}-a{job.attempt}",
            # Written ahead with the intent: every re-issue of this launch sends the same parameters.
            requested_at=self._intent_at[self.token(job)],
        )

    # --- the rounds ------------------------------------------------------------------------------------

    def run(self, max_rounds: int = 400) -> Report:
        self._intent_at: dict[str, datetime] = {}
        while self.report.rounds < max_rounds and any(j.state != "done" for j in self.jobs):
            self.report.rounds += 1
            listed = self._list()
            for job in self.jobs:
                self._advance(job, listed)
            if listed is not None:
                self._sweep(listed)
            self.harness.advance(STEP_SECONDS)
        return self.report

    def _list(self) -> dict[str, Instance] | None:
        try:
            found = self._call(lambda: self.harness.provider.instances({TAG_MANAGED: self.harness.cluster}))
        except ProviderError:
            self.report.failed_calls += 1
            return None  # "could not list" never means "gone"
        for inst in found:
            token = f"{self.harness.cluster}-{inst.tags.get(TAG_JOB)}-a{inst.tags.get(TAG_ATTEMPT)}"
            self.report.intents.setdefault(token, set()).add(inst.ref.instance_id)
        return {i.ref.instance_id: i for i in found}

    def _advance(self, job: Job, listed: dict[str, Instance] | None) -> None:
        assert self.harness.clock is not None
        now = self.harness.clock.now()
        if job.state == "queued" and self.report.rounds < job.start_round:
            return
        if job.state == "queued":
            job.attempt += 1
            self._intent_at[self.token(job)] = now
            job.state = "launching"
        if job.state == "launching":
            try:
                made = self._call(lambda: self.harness.provider.launch(self.request(job)))
            except ProviderError as exc:
                if exc.retryable:
                    self.report.failed_calls += 1  # outcome unknown: the next round re-issues the same token
                else:
                    job.refusals.append(f"{type(exc).__name__}:{exc.code}")
                    job.state = "queued"  # refused, nothing made: a new attempt, a new token
                return
            job.instance, job.state = made.ref, "booting"
            return
        if listed is None or job.instance is None:
            return
        current = listed.get(job.instance.instance_id)
        if job.state == "booting":
            if current is not None and current.state is S.running:
                job.work_until, job.state = now + timedelta(seconds=WORK_SECONDS), "working"
            elif current is not None and current.state in GONE:
                job.state = "queued"  # lost before it ran: start again
        elif job.state == "working" and job.work_until is not None and now >= job.work_until:
            if self._terminate(job.instance):
                job.state = "ending"
        elif job.state == "ending" and (current is None or current.state in GONE):
            job.state = "done"

    def _terminate(self, ref: InstanceRef) -> bool:
        try:
            self._call(lambda: self.harness.provider.terminate(ref))
        except ProviderError:
            self.report.failed_calls += 1
            return False
        return True

    def _sweep(self, listed: dict[str, Instance]) -> None:
        """Terminate what no current intent owns (the daemon's orphan sweep, without its grace period:
        this runner writes every intent before it calls the cloud)."""
        owned = {self.token(j) for j in self.jobs if j.state in ("launching", "booting", "working")}
        for inst in listed.values():
            if inst.state in (S.terminating, S.terminated):
                continue
            token = f"{self.harness.cluster}-{inst.tags.get(TAG_JOB)}-a{inst.tags.get(TAG_ATTEMPT)}"
            if token not in owned and self._terminate(inst.ref):
                self.report.swept.append(inst.ref.instance_id)
