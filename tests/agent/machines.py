"""Tests' shorthand for what the tick leaves behind: a job's attempt running on a machine (an instance
row working for it), and that machine's agent token."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from sqlalchemy import select

from scheduler.agent import tokens as agent_token
from scheduler.clock import Clock
from scheduler.store.database import Store
from scheduler.store.tables import AttemptRow, InstanceRow, JobRow


def machine_row(instance_id: str, clock: Clock, *, job_id: str | None, client_token: str, state: str = "running",
                provider: str = "aws", region: str = "us-east-1", zone: str = "us-east-1a",
                instance_type: str = "g5.xlarge", gpu: str = "A10G", gpu_count: int = 1,
                capacity: str = "on-demand", team: str = "vision-qa") -> InstanceRow:
    return InstanceRow(id=instance_id, provider=provider, region=region, zone=zone, instance_type=instance_type,
                       gpu=gpu, gpu_count=gpu_count, capacity=capacity, cloud_id=f"i-{instance_id[-8:]}",
                       client_token=client_token, state=state, job_id=job_id, team=team,
                       price_amount=Decimal("1.0"), price_currency="USD", on_demand_amount=Decimal("1.0"),
                       created_at=clock.now(), running_at=clock.now() if state == "running" else None)


def put_on_machine(store: Store, clock: Clock, job_id: str, attempt: int = 1, *,
                   instance_id: str = "inst-00000000000a", earlier: str = "preempted", **row: object) -> str:
    """Attempt ``attempt`` of the job runs on instance ``instance_id`` (made if new), as the tick leaves
    it; earlier attempts ended ``earlier`` (those already in the store are left as they are). Returns
    the instance id."""
    with store.session() as s:
        job = s.get(JobRow, job_id)
        job.state, job.attempt = "running", attempt
        inst = s.get(InstanceRow, instance_id)
        if inst is None:
            s.add(machine_row(instance_id, clock, job_id=job_id, client_token=f"gs-{job_id}-a{attempt}", **row))
        else:
            inst.job_id = job_id
        s.flush()  # the attempt refers to the instance row
        have = set(s.scalars(select(AttemptRow.number).where(AttemptRow.job_id == job_id)))
        for n in (n for n in range(1, attempt + 1) if n not in have):
            s.add(AttemptRow(job_id=job_id, number=n, state="running" if n == attempt else earlier,
                             client_token=f"gs-{job_id}-a{n}", provider=str(row.get("provider", "aws")),
                             region="us-east-1", zone="us-east-1a", instance_type="g5.xlarge",
                             capacity="on-demand", start_epoch=0, created_at=clock.now(),
                             started_at=clock.now(), instance_id=instance_id if n == attempt else None))
    return instance_id


def machine_token(api_token: str, instance_id: str, clock: Clock, hours: float = 2) -> str:
    return agent_token.issue(agent_token.signing_key(api_token), instance_id, clock.now(), timedelta(hours=hours))


def machine_auth(api_token: str, instance_id: str, clock: Clock) -> dict[str, str]:
    return {"Authorization": f"Bearer {machine_token(api_token, instance_id, clock)}"}
