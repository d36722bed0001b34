"""Keeping an idle machine warm only where it pays: the verdict table, then the reaper on the sandbox."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select

from scheduler.lifecycle.idle_window import MIN_SAMPLES, judge
from scheduler.store.tables import EventRow, IdleStopRow
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
