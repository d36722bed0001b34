"""The daemon with a leader lease: who ticks, what /healthz and /metrics say, the report a follower owes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from scheduler.app.api import create_app
from scheduler.app.daemon import LEASE_JOB, REPORT_CATCH_UP_JOB, REPORT_MISFIRE_GRACE_S, Daemon
from scheduler.clock import SimClock
from scheduler.lifecycle.leadership import Leadership
from scheduler.logs import forget_secrets
from scheduler.store.database import Store
from tests.app.test_daemon import NOW, settings, wait_for

LEASE_S = 30.0


class Calls:
    def __init__(self) -> None:
        self.ticks = self.reports = self.budget_checks = 0

    def tick(self) -> None:
        self.ticks += 1

    def report(self) -> None:
        self.reports += 1

    def budget(self) -> None:
        self.budget_checks += 1


class Replica:
    """One daemon of several on the store: its own calls, its own lease side, a shared lease clock."""

    def __init__(self, store: Store, lease_clock: SimClock, name: str, wall: SimClock | None = None) -> None:
        self.calls = Calls()
        self.leadership = Leadership(store, lease_clock, lease_seconds=LEASE_S, holder=name)
        self.daemon = Daemon(settings(tick_seconds=3600, report_cron="0 6 1 * *"), store, SimClock(NOW),
                             tick=self.calls.tick, monthly_report=self.calls.report, budget_check=self.calls.budget,
                             leadership=self.leadership, wall=wall)

    def metric(self, name: str, **labels: str) -> float | None:
        for family in text_string_to_metric_families(self.daemon.metrics()):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return None


@pytest.fixture
def lease_clock() -> SimClock:
    return SimClock(NOW)


@pytest.fixture
def replicas(store: Store, lease_clock: SimClock) -> Iterator[tuple[Replica, Replica]]:
    a, b = Replica(store, lease_clock, "daemon-a"), Replica(store, lease_clock, "daemon-b")
    yield a, b
    for r in (a, b):
        r.daemon.stop()
        r.daemon.shutdown()
    forget_secrets()


def test_only_the_leader_ticks_reports_and_checks_budgets(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    a.daemon.run_lease()
    b.daemon.run_lease()
    for r in (a, b):
        r.daemon.run_tick()
        r.daemon.run_budget_check()
    a.daemon.run_monthly_report()
    assert (a.calls.ticks, a.calls.budget_checks, a.calls.reports) == (1, 1, 1)
    assert (b.calls.ticks, b.calls.budget_checks, b.calls.reports) == (0, 0, 0)
    # A follower's round still counts: it is neither stalled nor failing.
    follower = b.daemon.health()
    assert follower["ticks"] == 1 and follower["tick_errors"] == 0 and follower["last_tick_ok"] is not None


def test_healthz_names_the_leader_on_every_replica_and_a_follower_is_ready(replicas: tuple[Replica, Replica],
                                                                          store: Store) -> None:
    a, b = replicas
    a.daemon.start_jobs()  # each renews the lease once before its first tick
    b.daemon.start_jobs()
    api = TestClient(create_app(store, SimClock(NOW), b.daemon.settings, health=b.daemon.health))
    r = api.get("/healthz")
    assert r.status_code == 200, r.text  # a follower serves reads and submissions: it is ready
    body = r.json()
    assert body["role"] == "follower"
    leader = body["leader"]
    assert leader["leads"] is False and leader["me"] == "daemon-b" and leader["holder"] == "daemon-a"
    assert leader["term"] == 1 and leader["expires_at"] == (NOW + timedelta(seconds=LEASE_S)).isoformat()
    assert leader["lease_seconds"] == LEASE_S and leader["renew_seconds"] == LEASE_S / 3
    assert a.daemon.health()["role"] == "leader" and a.daemon.health()["leader"]["holder"] == "daemon-a"
    livez = api.get("/livez")
    assert livez.status_code == 200 and set(livez.json()) == {"status", "last_tick"}  # process-only, as before


def test_metrics_say_who_leads_and_count_changes_of_hands(replicas: tuple[Replica, Replica],
                                                          lease_clock: SimClock) -> None:
    a, b = replicas
    a.daemon.run_lease()
    b.daemon.run_lease()
    assert (a.metric("gpusched_leader"), b.metric("gpusched_leader")) == (1, 0)
    for r in (a, b):
        assert r.metric("gpusched_leader_info", holder="daemon-a") == 1
        assert r.metric("gpusched_leader_term") == 1
        assert r.metric("gpusched_leadership_changes_total") == 0
    a.daemon.run_tick()
    assert a.metric("gpusched_leader") == 1  # a tick without the tick lock's word does not flip the lease's gauge

    lease_clock.advance(timedelta(seconds=LEASE_S))  # a died
    b.daemon.run_lease()
    assert b.metric("gpusched_leader") == 1
    assert b.metric("gpusched_leader_info", holder="daemon-b") == 1
    assert b.metric("gpusched_leader_info", holder="daemon-a") is None  # one holder named at a time
    assert b.metric("gpusched_leader_term") == 2 and b.metric("gpusched_leadership_changes_total") == 1
    a.daemon.run_lease()  # a comes back: it follows now
    assert a.metric("gpusched_leader") == 0 and a.daemon.health()["role"] == "follower"
    assert a.metric("gpusched_leadership_changes_total") == 1


def test_a_clean_stop_hands_the_lease_over_at_once(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    a.daemon.start_jobs()
    assert a.daemon.scheduler.get_job(LEASE_JOB).trigger.interval == timedelta(seconds=LEASE_S / 3)
    assert a.leadership.leads()  # the first renewal runs before the first tick
    b.daemon.run_lease()
    assert not b.leadership.leads()
    with capture_logs() as logs:
        a.daemon.shutdown()
    assert "leadership_released" in [e["event"] for e in logs]
    b.daemon.run_lease()  # no waiting out the lease
    assert b.leadership.leads() and b.leadership.term == 2


def test_a_report_due_on_a_follower_is_sent_once_it_leads(replicas: tuple[Replica, Replica],
                                                          lease_clock: SimClock) -> None:
    a, b = replicas
    a.daemon.run_lease()
    b.daemon.start_jobs()
    with capture_logs() as logs:
        b.daemon.run_monthly_report()  # the cron fires on both; the leader dies before sending
    assert b.calls.reports == 0 and "monthly_report_deferred" in [e["event"] for e in logs]
    lease_clock.advance(timedelta(seconds=LEASE_S))
    b.daemon.run_lease()
    assert wait_for(lambda: b.calls.reports == 1)
    b.daemon.run_lease()
    assert b.daemon.scheduler.get_job(REPORT_CATCH_UP_JOB) is None and b.calls.reports == 1  # owed once


def test_a_follower_that_leads_only_after_the_grace_period_does_not_send(store: Store, lease_clock: SimClock) -> None:
    wall = SimClock(NOW)
    a, b = Replica(store, lease_clock, "daemon-a"), Replica(store, lease_clock, "daemon-b", wall=wall)
    try:
        a.daemon.run_lease()
        b.daemon.run_lease()
        b.daemon.run_monthly_report()
        wall.advance(timedelta(seconds=REPORT_MISFIRE_GRACE_S + 1))
        lease_clock.advance(timedelta(seconds=LEASE_S))
        with capture_logs() as logs:
            b.daemon.run_lease()
        assert b.leadership.leads() and b.calls.reports == 0
        assert "monthly_report_not_sent_by_this_daemon" in [e["event"] for e in logs]
    finally:
        forget_secrets()


def test_a_lease_the_database_refuses_is_logged_and_leadership_runs_out(tmp_path: Path,
                                                                       lease_clock: SimClock) -> None:
    gone = Store(f"sqlite:///{tmp_path / 'gone.db'}")
    (tmp_path / "gone.db").mkdir()  # a folder where the file should be: no connection possible
    r = Replica(gone, lease_clock, "daemon-a")
    try:
        with capture_logs() as logs:
            r.daemon.run_lease()  # never raises
        assert [e["event"] for e in logs] == ["lease_renew_failed"]
        health = r.daemon.health()
        assert health["role"] == "follower" and health["leader"]["error"].startswith("OperationalError")
        assert r.metric("gpusched_leader") == 0
        r.daemon.run_tick()
        assert r.calls.ticks == 0
    finally:
        forget_secrets()
