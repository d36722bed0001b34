"""The idle reaper against the cloud emulators when a stop does not stop the bill.

ECS stops a type it cannot stop economically (local disks) in KeepCharging mode without an error; CVM
refuses STOP_CHARGING for such an instance (``UnsupportedOperation.StoppedModeStopCharging``). Either
way the idle machine would bill on: the ledger must count those hours and the daemon must terminate it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest
from sqlalchemy import select

from scheduler.accounting import ledger
from scheduler.store.tables import EventRow, InstanceRow
from scheduler.times import utc

pytest.importorskip("aliyunsdkcore", reason="the Alibaba Cloud SDK is an extra: pip install '.[alibaba]'")
pytest.importorskip("tencentcloud.cvm.v20170312", reason="the Tencent SDK is optional: pip install '.[tencent]'")

from tests.providers.emulated_daemon import EmulatedDaemon  # noqa: E402

START = datetime(2026, 11, 2, 1, 0, tzinfo=timezone.utc)


def _run_until_idle_stop(world: EmulatedDaemon, job_id: str) -> None:
    for _ in range(400):
        if world.job(job_id)["state"] in ("succeeded", "failed"):
            break
        world.step()
    assert world.job(job_id)["state"] == "succeeded"


def test_a_stop_that_keeps_billing_is_billed_and_the_machine_terminated(tmp_path) -> None:
    # Every type of this emulator stops in KeepCharging mode, as gn5 (local disks) does on ECS.
    world = EmulatedDaemon("alibaba", tmp_path, START, emulator={"keep_charging_types": ("ecs.",)},
                           idle_stop_minutes=10)
    try:
        job_id = world.submit(epochs=3)
        _run_until_idle_stop(world, job_id)
        for _ in range(30):  # idle 10 min, the stop, the cloud's answer, the termination
            world.step()
        with world.store.session() as s:
            (row,) = s.scalars(select(InstanceRow)).all()
            lines = [x for x in ledger.cost_lines(s, "2026-11", world.clock.now()) if x.instance_id == row.id]
            events = [e.kind for e in s.scalars(select(EventRow).where(EventRow.instance_id == row.id))]
            stop_asked = next(utc(e.at) for e in s.scalars(select(EventRow).where(
                EventRow.instance_id == row.id, EventRow.kind == "idle_stop")))
            state, ended = row.state, row.terminated_at
    finally:
        world.close()

    assert world.sandbox.all_instances()[0].state.value == "terminated"
    assert state == "terminated" and ended is not None
    assert "stop_keeps_billing" in events
    # The hours between the stop and the termination are billed, as idle time.
    billed_until = max(utc(x.end) for x in lines)
    assert billed_until >= utc(ended)
    stopped_time = [x for x in lines if x.kind == "idle" and utc(x.start) >= stop_asked]
    assert stopped_time and sum((x.hours for x in stopped_time), Decimal(0)) > 0


def test_a_stop_the_cloud_refuses_to_make_economical_terminates_the_idle_machine(tmp_path) -> None:
    world = EmulatedDaemon("tencent", tmp_path, START, idle_stop_minutes=10)
    try:
        job_id = world.submit(epochs=3, capacity="on-demand")
        _run_until_idle_stop(world, job_id)
        world.emulator.script_error("StopInstances", "UnsupportedOperation.StoppedModeStopCharging",
                                    "this instance cannot stop without charging", times=5)
        for _ in range(30):
            world.step()
        with world.store.session() as s:
            (row,) = s.scalars(select(InstanceRow)).all()
            state = row.state
    finally:
        world.close()

    assert world.sandbox.all_instances()[0].state.value == "terminated"
    assert state == "terminated"
    assert world.emulator.action_counts.get("StopInstances", 0) == 1
