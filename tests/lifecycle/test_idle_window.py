"""Keeping an idle machine warm only where it pays: the verdict table, then the reaper on the sandbox."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlalchemy import select

from scheduler.lifecycle.idle_window import MIN_SAMPLES, WarmMemo, judge, pooled, verdicts
from scheduler.store.tables import AttemptRow, EventRow, IdleStopRow, InstanceRow, JobRow, UsageIntervalRow
from tests.lifecycle.test_lifecycle import World, job_spec

T0 = datetime(2026, 11, 2, tzinfo=timezone.utc)
W = timedelta(minutes=10)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


@pytest.mark.parametrize(("idle_starts", "launches", "keep", "wanted", "billed_h"), [
    # too little history: keep warm, as configured
    ([0, 60, 120, 180], [], True, 0, 4 * 10 / 60),
    # five idle starts, never wanted again: 50 warm minutes for nothing
    ([0, 60, 120, 180, 240], [], False, 0, 50 / 60),
    # wanted again 2 min after every idle start: 5 x 0.15 h saved for 10 min billed
    ([0, 60, 120, 180, 240], [2, 62, 122, 182, 242], True, 5, 10 / 60),
    # a launch 11 min later is outside the window: billed 10 min each, nothing saved
    ([0, 60, 120, 180, 240], [11, 71, 131, 191, 251], False, 0, 50 / 60),
    # one quick reuse of five: 0.15 h saved for 42 min billed
    ([0, 60, 120, 180, 240], [2], False, 1, (2 + 40) / 60),
    # a launch before the idle start does not count
    ([10, 70, 130, 190, 250], [5, 65, 125, 185, 245], False, 0, 50 / 60),
])
def test_verdict(idle_starts, launches, keep, wanted, billed_h):
    v = judge([at(m) for m in idle_starts], [at(m) for m in launches], W, restart_hours=0.15)
    assert (v.keep_warm, v.wanted_again, v.idle_starts) == (keep, wanted, len(idle_starts))
    assert v.billed_hours == pytest.approx(billed_h)
    assert v.saved_hours == pytest.approx(wanted * 0.15)


def test_min_samples_is_what_the_table_assumes():
    assert MIN_SAMPLES == 5


def _run_jobs_one_after_another(w: World, n: int, **policy) -> list[str]:
    ids = []
    for _ in range(n):
        job_id = w.submit(job_spec(capacity="on-demand", **policy))
        w.run_until(lambda: w.job(job_id).state == "succeeded")
        w.run_until(lambda: not any(r.state == "running" for r in w.instances()), limit=60)
        w.step(60)  # an hour with nothing to run: no machine of this kind was wanted again
        ids.append(job_id)
    return ids


def _stop_delays(w: World, ids: list[str]) -> list[timedelta]:
    with w.store.session(write=False) as s:
        stops = s.scalars(select(IdleStopRow).order_by(IdleStopRow.at)).all()
    return [stop.at - w.job(job_id).finished_at for stop, job_id in zip(stops, ids)]


def test_with_no_reuse_in_sight_machines_stop_as_soon_as_their_job_ends(store, sim_clock):
    w = World(store, sim_clock)
    ids = _run_jobs_one_after_another(w, MIN_SAMPLES + 2)
    delays = _stop_delays(w, ids)
    assert len(delays) == len(ids)
    # The first machines wait the configured 10 minutes: there is no history yet.
    assert all(d >= timedelta(minutes=10) for d in delays[:MIN_SAMPLES])
    # Then history says nobody wanted that kind of machine within 10 minutes: stopped at the next tick.
    assert all(d <= timedelta(minutes=1) for d in delays[-2:])
    with store.session(write=False) as s:
        last = s.scalars(select(EventRow).where(EventRow.kind == "idle_stop").order_by(EventRow.id.desc())).first()
    assert "not kept warm" in last.message and "0 of 6 machines of this kind were wanted again" in last.message


def test_fixed_warm_time_and_a_job_s_own_idle_stop_minutes_are_kept(store, sim_clock):
    w = World(store, sim_clock)
    w.settings = w.settings.model_copy(update={"idle_warm": "fixed"})
    w.ctx = w.new_ctx()
    ids = _run_jobs_one_after_another(w, MIN_SAMPLES + 1)
    w.settings = w.settings.model_copy(update={"idle_warm": "learned"})
    w.ctx = w.new_ctx()
    ids += _run_jobs_one_after_another(w, 1, idle_stop_minutes=10)  # the job asks for 10 minutes itself
    assert all(d >= timedelta(minutes=10) for d in _stop_delays(w, ids))


def test_kinds_pool_their_history_when_one_has_too_little():
    from scheduler.lifecycle.idle_window import Verdict, pooled

    few = Verdict(keep_warm=True, idle_starts=2, wanted_again=0, saved_hours=0.0, billed_hours=2 / 6)
    more = Verdict(keep_warm=True, idle_starts=3, wanted_again=1, saved_hours=0.15, billed_hours=0.3)
    both = pooled([few, more])
    assert (both.idle_starts, both.wanted_again, both.keep_warm) == (5, 1, False)
    assert pooled([few]).keep_warm  # still too little evidence in all


def test_a_new_kind_of_machine_borrows_the_fleet_s_history(store, sim_clock):
    w = World(store, sim_clock)
    ids = _run_jobs_one_after_another(w, MIN_SAMPLES)  # on-demand machines, never wanted again
    job_id = w.submit(job_spec(capacity="spot"))  # a kind with no history of its own
    w.run_until(lambda: w.job(job_id).state == "succeeded")
    w.run_until(lambda: not any(r.state == "running" for r in w.instances()), limit=60)
    assert _stop_delays(w, ids + [job_id])[-1] <= timedelta(minutes=1)


# --- the memo reads only what was added since its last refresh (SQLite), with the same verdicts ------------


def test_the_memo_reads_what_was_added_and_gives_the_verdicts_of_a_full_read(store):
    """Idle starts and launches of three kinds over nine days (two past the memo's week), some written with a
    start earlier than rows already there (the ledger dates billing by the cloud's own start): every twenty
    minutes the memo, which reads only the rows added since its last refresh, says what ``verdicts`` over
    the whole store says."""
    rng = random.Random(7)
    kinds = [("aws", "us-east-1", "g5.xlarge", "spot"), ("aws", "us-east-1", "g5.xlarge", "on-demand"),
             ("alibaba", "cn-beijing", "ecs.gn7i-c8g1.2xlarge", "spot")]
    memo = WarmMemo()
    with store.session() as s:
        s.add(JobRow(id="job-1", name="job-1", team="vision", kind="train", model="yolov9-s", spec_json={},
                     state="running", submitted_at=T0, updated_at=T0))
        for k, (provider, region, itype, capacity) in enumerate(kinds):
            s.add(InstanceRow(id=f"inst-{k}", provider=provider, region=region, zone=f"{region}a",
                              instance_type=itype, gpu="A10G", gpu_count=1, capacity=capacity, client_token=f"t-{k}",
                              state="running", team="vision", price_amount=Decimal(1), price_currency="USD",
                              on_demand_amount=Decimal(1), created_at=T0))
        s.add(InstanceRow(id="inst-r", provider="aws", region="us-east-1", zone="us-east-1a",
                          instance_type="g5.xlarge", gpu="A10G", gpu_count=1, capacity="on-demand",
                          reserved=True, client_token="t-r", state="running", team="vision",
                          price_amount=Decimal(0), price_currency="USD", on_demand_amount=Decimal(1), created_at=T0))
    attempts, compared, now = 0, 0, T0
    while now < T0 + timedelta(days=9):
        now += timedelta(minutes=20)
        with store.session() as s:
            for _ in range(rng.randrange(4)):
                k = rng.randrange(len(kinds))
                back = timedelta(minutes=rng.choice([0, 0, 0, 5, 30]))
                s.add(UsageIntervalRow(instance_id=rng.choice([f"inst-{k}", "inst-r"]), job_id=None, team="vision",
                                       project=None, kind="idle", provider=kinds[k][0], region=kinds[k][1],
                                       gpu="A10G", instance_type=kinds[k][2], capacity=kinds[k][3],
                                       start=now - back, end=None, accounted=False))
            for _ in range(rng.randrange(3)):
                attempts += 1
                provider, region, itype, capacity = kinds[rng.randrange(len(kinds))]
                s.add(AttemptRow(job_id="job-1", number=attempts, state="succeeded", client_token=f"a-{attempts}",
                                 provider=provider, region=region, zone=f"{region}a", instance_type=itype,
                                 capacity=capacity, start_epoch=0,
                                 created_at=now - timedelta(minutes=rng.randrange(3))))
        with store.session(write=False) as s:
            full = verdicts(s, now, W, 0.15)
            for kind in kinds:
                assert memo.get(s, kind, now, W, 0.15) == _full(full, kind)
            compared += 1
    assert compared == 3 * 24 * 9 and attempts > 300


def _full(known, kind):
    own = known.get(kind)
    return own if own is not None and own.idle_starts >= MIN_SAMPLES else pooled(known.values())
