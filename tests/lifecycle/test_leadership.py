"""Leadership: one daemon's side of the election, and the fence that keeps a deposed leader's tick from writing.

Two ``Leadership`` objects on one store stand for two daemons; the lease runs on a clock of its own
(the daemon's is the real one), so a test moves the lease's time apart from the tick's.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from sqlalchemy import select
from structlog.testing import capture_logs

from scheduler.clock import SimClock
from scheduler.errors import LeadershipLost
from scheduler.lifecycle import tick as lifecycle
from scheduler.lifecycle.context import TickContext
from scheduler.lifecycle.leadership import Leadership, died_here
from scheduler.store.database import Store
from scheduler.store.lease import pid_namespace
from scheduler.store.tables import AttemptRow, InstanceRow
from tests.conftest import SIM_START
from tests.lifecycle.test_lifecycle import World, assert_invariants, job_spec

LEASE_S = 30.0


def pair(store: Store, clock: SimClock) -> tuple[Leadership, Leadership]:
    return (Leadership(store, clock, lease_seconds=LEASE_S, holder="daemon-a"),
            Leadership(store, clock, lease_seconds=LEASE_S, holder="daemon-b"))


@pytest.fixture
def lease_clock() -> SimClock:
    return SimClock(SIM_START)


def test_one_daemon_leads_and_the_other_follows_naming_it(any_store: Store, lease_clock: SimClock) -> None:
    a, b = pair(any_store, lease_clock)
    assert a.renew().leads and not b.renew().leads
    assert a.leads() and not b.leads()
    assert (a.term, b.term) == (1, None)
    view = b.view()
    assert view["leads"] is False and view["me"] == "daemon-b" and view["holder"] == "daemon-a"
    assert view["term"] == 1 and view["expires_at"] == (SIM_START + timedelta(seconds=LEASE_S)).isoformat()
    assert a.view()["leads"] is True and a.renew_seconds == LEASE_S / 3


def test_a_leader_that_stops_renewing_is_replaced_after_its_lease(any_store: Store, lease_clock: SimClock) -> None:
    a, b = pair(any_store, lease_clock)
    a.renew()
    lease_clock.advance(timedelta(seconds=LEASE_S - 1))
    assert a.leads() and not b.renew().leads  # not yet
    lease_clock.advance(timedelta(seconds=1))
    assert not a.leads()  # its lease ran out by its own clock: it stops acting, renewal or not
    with capture_logs() as logs:
        taken = b.renew()
    assert taken.leads and taken.lease.term == 2 and taken.changes == 1 and b.changes == 1
    assert [e for e in logs if e["event"] == "leadership_acquired"][0]["previous"] == "daemon-a"
    with capture_logs() as logs:
        stale = a.renew()  # a wakes and renews: too late
    assert not stale.leads and stale.lease.holder == "daemon-b" and a.term is None
    [lost] = [e for e in logs if e["event"] == "leadership_lost"]
    assert (lost["term"], lost["now_held_by"], lost["new_term"]) == (1, "daemon-b", 2)
    with any_store.session() as s, pytest.raises(LeadershipLost):
        a.fence(s)


def test_renewals_keep_a_leader_leading_past_its_first_lease(any_store: Store, lease_clock: SimClock) -> None:
    a, b = pair(any_store, lease_clock)
    a.renew()
    for _ in range(10):  # five lease lengths, renewed every third of one
        lease_clock.advance(timedelta(seconds=a.renew_seconds))
        assert a.renew().leads and not b.renew().leads
    assert a.term == 1 and a.changes == 0 and b.changes == 0


def test_release_lets_the_other_daemon_lead_at_once(any_store: Store, lease_clock: SimClock) -> None:
    a, b = pair(any_store, lease_clock)
    a.renew()
    assert not b.renew().leads
    assert a.release() and not a.leads()
    assert not a.release()  # nothing left to release
    assert b.renew().leads and b.term == 2


def test_a_follower_is_fenced_out_of_every_transaction(any_store: Store, lease_clock: SimClock) -> None:
    a, b = pair(any_store, lease_clock)
    a.renew()
    b.renew()
    with pytest.raises(LeadershipLost, match="does not hold"), any_store.fenced(b.fence).session():
        pass
    with any_store.fenced(a.fence).session() as s:  # the leader's go through
        assert s.get(InstanceRow, "nothing") is None


def test_a_deposed_leaders_tick_writes_nothing(any_store: Store, sim_clock: SimClock, lease_clock: SimClock) -> None:
    w = World(any_store, sim_clock)
    job_id = w.submit(job_spec())
    a, b = pair(any_store, lease_clock)
    a.renew()
    old = TickContext(store=any_store.fenced(a.fence), providers={"alibaba": w.provider}, clock=sim_clock,
                      settings=w.settings)
    lease_clock.advance(timedelta(seconds=LEASE_S))
    b.renew()  # a was paused past its lease; b leads now
    with capture_logs() as logs:
        report = lifecycle.tick(old)
    assert not report.led and report.launched == 0
    assert [e["event"] for e in logs if e["event"] == "tick_abandoned"] == ["tick_abandoned"]
    assert w.attempts(job_id) == [] and w.instances() == [] and w.cloud.all_instances() == []
    assert w.job(job_id).state == "queued"

    new = TickContext(store=any_store.fenced(b.fence), providers={"alibaba": w.provider}, clock=sim_clock,
                      settings=w.settings)
    assert lifecycle.tick(new).launched == 1


@pytest.mark.parametrize("point", ["after_intent", "after_launch"])
def test_a_leader_deposed_mid_launch_never_launches_twice(any_store: Store, sim_clock: SimClock,
                                                          lease_clock: SimClock, point: str) -> None:
    """The old leader freezes right after writing its intent (or right after the cloud call); the new leader
    takes over and ticks; the old one wakes and carries on. One instance for the attempt, whoever sent it."""
    w = World(any_store, sim_clock)
    job_id = w.submit(job_spec())
    a, b = pair(any_store, lease_clock)
    a.renew()

    def ctx_for(leader: Leadership, **kw: object) -> TickContext:
        return TickContext(store=any_store.fenced(leader.fence), providers={"alibaba": w.provider}, clock=sim_clock,
                           settings=w.settings, ids=random.Random(len(w.cloud.all_instances())), **kw)

    new_leader_ticks = []

    def freeze_and_take_over(name: str) -> None:
        if name != point or new_leader_ticks:
            return
        lease_clock.advance(timedelta(seconds=LEASE_S))  # the freeze outlasts the lease
        assert b.renew().leads
        # On PostgreSQL the old tick still holds the tick lock, so this one skips; on SQLite it runs.
        new_leader_ticks.append(lifecycle.tick(ctx_for(b)))

    report = lifecycle.tick(ctx_for(a, crashpoint=freeze_and_take_over))
    assert not report.led and new_leader_ticks  # the old tick found itself deposed and stopped
    with any_store.session(write=False) as s:
        rows = s.scalars(select(InstanceRow)).all()
        attempts = s.scalars(select(AttemptRow)).all()
    assert len(rows) == 1 and len(attempts) == 1
    assert len(w.cloud.all_instances()) <= 1

    w.agents.step(sim_clock.now())
    for _ in range(400):
        if w.job(job_id).state == "succeeded":
            break
        sim_clock.advance(timedelta(minutes=1))
        lease_clock.advance(timedelta(seconds=b.renew_seconds))
        assert b.renew().leads
        w.agents.step(sim_clock.now())
        lifecycle.tick(ctx_for(b))
    assert w.job(job_id).state == "succeeded"
    [instance] = w.cloud.all_instances()  # the new leader re-sent the intent's token: the same machine
    assert instance.client_token == attempts[0].client_token
    assert [a.number for a in w.attempts(job_id)] == [1]
    assert_invariants(w)


# --- a restarted daemon on the same machine takes over from its dead predecessor at once


def _holder_for(pid: int) -> str:
    return f"{socket.gethostname()}:{pid}:0a1b2c3d:{pid_namespace()}"


def test_a_reaped_process_of_this_host_is_dead_and_a_running_one_is_not() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not died_here(_holder_for(child.pid))
    finally:
        child.kill()
        child.wait()
    assert died_here(_holder_for(child.pid))


def test_a_killed_process_not_yet_reaped_counts_as_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    os.kill(child.pid, signal.SIGKILL)
    try:
        for _ in range(200):  # the kernel makes it a zombie a moment after the signal
            if died_here(_holder_for(child.pid)):
                break
            threading.Event().wait(0.01)
        assert died_here(_holder_for(child.pid))
    finally:
        child.wait()


@pytest.mark.parametrize("holder", [
    f"{socket.gethostname()}:{os.getpid()}:0a1b2c3d:{pid_namespace()}",  # this very process
    f"another-host-{socket.gethostname()}:999999:0a1b2c3d:{pid_namespace()}",  # a pid elsewhere means nothing here
    f"{socket.gethostname()}:999999:0a1b2c3d:1",  # nor in another pid namespace
    f"{socket.gethostname()}:999999:0a1b2c3d:-",  # nor where the namespace is unknown
    "daemon-a",
], ids=["this-process", "another-host", "another-pid-namespace", "unknown-namespace", "no-pid"])  # no pid in an id:
# parallel workers (pytest -n) must collect the same tests
def test_a_holder_that_cannot_be_known_dead_is_not(holder: str) -> None:
    assert not died_here(holder)


def test_a_daemon_takes_over_at_once_from_a_holder_it_knows_died(any_store: Store, lease_clock: SimClock) -> None:
    dead_ones: set[str] = set()
    a = Leadership(any_store, lease_clock, lease_seconds=LEASE_S, holder="daemon-a", is_dead=dead_ones.__contains__)
    b = Leadership(any_store, lease_clock, lease_seconds=LEASE_S, holder="daemon-b", is_dead=dead_ones.__contains__)
    a.renew()
    lease_clock.advance(timedelta(seconds=1))
    assert not b.renew().leads  # alive: b follows
    dead_ones.add("daemon-a")
    with capture_logs() as logs:
        taken = b.renew()
    assert taken.leads and taken.lease.term == 2 and b.leads()
    assert taken.lease.expires_at == lease_clock.now() + timedelta(seconds=LEASE_S)
    event = [e for e in logs if e["event"] == "leadership_taken_from_dead_process"][0]
    assert event["dead"] == "daemon-a" and event["dead_term"] == 1 and event["lease_left_s"] == LEASE_S - 1
    assert not a.renew().leads  # had it only seemed dead, it is now a follower, and its fence refuses it


def test_a_real_restart_on_this_host_leads_before_the_dead_ones_lease_runs_out(any_store: Store,
                                                                               lease_clock: SimClock) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    Leadership(any_store, lease_clock, lease_seconds=LEASE_S, holder=_holder_for(child.pid)).renew()
    successor = Leadership(any_store, lease_clock, lease_seconds=LEASE_S)
    assert not successor.renew().leads
    child.kill()
    child.wait()
    assert successor.renew().leads
