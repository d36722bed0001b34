"""What the kill tier (tests/kills) found, kept as fast regressions on the sandbox cloud.

* A launch answered late in a long tick is not taken for a machine that vanished. Found by the tier's
  run without kills: a tick that launches a hundred machines takes minutes of cloud time, and a machine
  launched late in it shows in listings only after the cloud's listing delay. Its row's grace period must
  run from the answer, not from the tick's start, or the next tick finds it "vanished from the cloud's
  list", requeues its job and launches it again.
* A machine whose idle stop (or terminate) the cloud carried out just before the daemon was killed is not
  handed to the next job as a warm machine: the job would be lost with it a tick later and start over.
"""

from __future__ import annotations

from datetime import timedelta

from providers.base import InstanceRef, InstanceState
from scheduler.clock import SimClock
from scheduler.states import InstanceRowState
from tests.lifecycle.test_lifecycle import World, job_spec


class SlowLaunch:
    """The sandbox provider, with every launch call taking ``seconds`` of cloud time (a long tick, a slow API)."""

    def __init__(self, inner, clock: SimClock, seconds: float) -> None:
        self._inner, self._clock, self._delay = inner, clock, timedelta(seconds=seconds)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def launch(self, request):
        self._clock.advance(self._delay)
        return self._inner.launch(request)


def test_a_machine_launched_late_in_a_tick_is_found_once_listed_and_launched_once(store, sim_clock):
    w = World(store, sim_clock, list_delay_seconds=90)
    w.provider = SlowLaunch(w.provider, sim_clock, seconds=150)  # longer than the 120 s launch grace
    w.ctx = w.new_ctx()
    job_id = w.submit(job_spec(capacity="on-demand"))
    w.run_until(lambda: w.job(job_id).state == "succeeded")
    assert len(w.cloud.all_instances()) == 1
    assert [a.number for a in w.attempts(job_id)] == [1]


def test_a_machine_the_cloud_is_stopping_after_a_crash_is_not_reused_by_the_next_job(store, sim_clock):
    w = World(store, sim_clock)
    first = w.submit(job_spec(capacity="on-demand", idle_stop_minutes=60))
    w.run_until(lambda: w.job(first).state == "succeeded")
    [row] = w.instances()
    assert row.state == InstanceRowState.running.value and row.job_id is None  # warm, kept for reuse
    # The reaper's stop reached the cloud; the daemon died before it stored the answer.
    w.provider.stop(InstanceRef(provider="alibaba", region=row.region, instance_id=row.cloud_id))
    assert w.cloud.get(row.cloud_id).state is InstanceState.stopping
    w.ctx = w.new_ctx()  # the restarted daemon
    second = w.submit(job_spec(capacity="on-demand", idle_stop_minutes=0))
    w.run_until(lambda: w.job(second).state == "succeeded")
    [attempt] = w.attempts(second)
    assert attempt.instance_id != row.id  # a fresh machine, not the one on its way out
    assert w.job(second).preemptions == 0
    assert [i.state for i in w.instances() if i.id == row.id] in (["stopped"], ["terminated"], ["stopping"])
