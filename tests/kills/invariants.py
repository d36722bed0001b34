"""What must hold after any number of kills: the clouds' own records against the store.

Pure functions over two snapshots taken once the daemon has drained (every job ended, every row it
owns terminated): ``CloudInstance`` records from the emulators (every instance ever created, its client
token, tags and history) and ``StoreView`` rows read from the daemon's store. docs/reliability.md
names the promises; each is one field of ``Findings``:

* leaked: an instance still billing (or merely stopped) at the end that is not someone else's;
* doubled: two instances for one launch intent (one ``gpusched:instance`` row) or for one (job, attempt);
* unowned: an instance with our cluster's tags whose row does not exist and that we did not plant
  (a launch sent before its intent was written);
* lost: a submitted job the store does not have;
* stuck: a job not in a terminal state;
* unexplained: a job that failed without a reason;
* foreign_touched: someone else's instance (untagged, or another cluster's) stopped or terminated;
* orphans_left: a planted tagged orphan not terminated;
* rows_astray: a store row not terminated, or terminated while its cloud instance still lives.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from providers.base import TAG_ATTEMPT, TAG_INSTANCE, TAG_JOB, TAG_MANAGED, InstanceState
from tests.kills.world import CloudInstance

TERMINAL = {"succeeded", "failed", "cancelled"}
GONE = (InstanceState.terminating, InstanceState.terminated)


@dataclass(frozen=True)
class JobView:
    id: str
    name: str
    state: str
    reason: str | None
    attempts: int


@dataclass(frozen=True)
class RowView:
    id: str
    provider: str
    cloud_id: str | None
    state: str
    job_id: str | None


@dataclass(frozen=True)
class StoreView:
    jobs: dict[str, JobView]
    rows: dict[str, RowView]
    events: dict[str, int] = field(default_factory=dict)  # event kind -> how many (what paths ran)


@dataclass
class Findings:
    leaked: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    unowned: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    unexplained: list[str] = field(default_factory=list)
    foreign_touched: list[str] = field(default_factory=list)
    orphans_left: list[str] = field(default_factory=list)
    rows_astray: list[str] = field(default_factory=list)

    def problems(self) -> dict[str, list[str]]:
        return {name: items for name, items in vars(self).items() if items}


def ours(instance: CloudInstance, cluster: str) -> bool:
    return instance.tags.get(TAG_MANAGED) == cluster


def check(instances: list[CloudInstance], store: StoreView, *, cluster: str, submitted: dict[str, str],
          planted_tagged: set[tuple[str, str]], planted_foreign: set[tuple[str, str]]) -> Findings:
    """``submitted``: job id -> name of every job the API accepted. Planted sets hold (cloud, sandbox id)."""
    f = Findings()
    launched = [i for i in instances if ours(i, cluster) and (i.cloud, i.instance_id) not in planted_tagged]

    for i in instances:
        key = (i.cloud, i.instance_id)
        if key in planted_foreign:
            if i.ever_stopped_or_terminated or i.state is not InstanceState.running:
                f.foreign_touched.append(f"{i.cloud} {i.instance_id} {dict(i.tags)}: {i.state.value}")
        elif key in planted_tagged:
            if i.state not in GONE:
                f.orphans_left.append(f"{i.cloud} {i.instance_id}: {i.state.value}")
        elif i.state not in GONE:
            f.leaked.append(f"{i.cloud} {i.instance_id} ({i.tags.get(TAG_INSTANCE)}, token {i.client_token}): "
                            f"{i.state.value}")

    by_intent: dict[str, list[CloudInstance]] = defaultdict(list)
    by_attempt: dict[tuple[str, str], list[CloudInstance]] = defaultdict(list)
    for i in launched:
        by_intent[i.tags.get(TAG_INSTANCE, "")].append(i)
        by_attempt[(i.tags.get(TAG_JOB, ""), i.tags.get(TAG_ATTEMPT, ""))].append(i)
        if i.tags.get(TAG_INSTANCE) not in store.rows:
            f.unowned.append(f"{i.cloud} {i.instance_id}: no row {i.tags.get(TAG_INSTANCE)!r}")
    for intent, group in sorted(by_intent.items()):
        if len(group) > 1:
            f.doubled.append(f"intent {intent}: {', '.join(f'{i.cloud} {i.instance_id}' for i in group)}")
    for (job, attempt), group in sorted(by_attempt.items()):
        intents = {i.tags.get(TAG_INSTANCE) for i in group}
        if len(group) > len(intents):  # a gang's nodes are one intent each; more instances than intents is a double
            f.doubled.append(f"job {job} attempt {attempt}: {len(group)} instances for {len(intents)} intents")

    for job_id, name in sorted(submitted.items()):
        job = store.jobs.get(job_id)
        if job is None:
            f.lost.append(f"{job_id} ({name})")
        elif job.state not in TERMINAL:
            f.stuck.append(f"{job_id} ({name}): {job.state}")
        elif job.state == "failed" and not (job.reason or "").strip():
            f.unexplained.append(f"{job_id} ({name})")

    for row in store.rows.values():
        if row.state != "terminated":
            f.rows_astray.append(f"row {row.id}: {row.state}")
        elif any(i.state not in GONE for i in by_intent.get(row.id, [])):
            f.rows_astray.append(f"row {row.id}: terminated, but its {row.provider} instance lives")
    return f


def billed_hours(instances: list[CloudInstance], cluster: str, planted: set[tuple[str, str]],
                 now: datetime) -> float:
    """Hours the clouds billed for the instances gpusched launched (planted ones left out)."""
    return sum(i.billed_hours(now) for i in instances
               if ours(i, cluster) and (i.cloud, i.instance_id) not in planted)
