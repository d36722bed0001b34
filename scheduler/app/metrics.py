"""``/metrics`` with prometheus_client: what the store knows, read at scrape time, plus the daemon's own counters.

Two sources, on purpose:

- ``StoreCollector`` reads the store on each scrape (a handful of GROUP BY queries): jobs by state and
  team, the queue wait of every job that started, this month's spend and the spend rate by team / cloud /
  capacity, budgets, reclaims by cloud / zone / GPU, idle stops, orphans terminated. Counted from rows,
  these survive a restart and read the same on every replica (alert on ``max`` across replicas).
- ``DaemonMetrics`` is what only the running process sees: ticks, tick failures, tick duration, jobs set
  aside, cloud API errors by vendor code, and leadership: whether this daemon holds the leader lease, who
  does as it last read the lease, and how often the lease changed hands.

Money is a float in the report currency (label ``currency``), converted with the settings' FX rates:
Prometheus has no Decimal, and a dashboard adds series, so one currency it must be.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from decimal import Decimal

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client import Counter as PromCounter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from scheduler.accounting import ledger
from scheduler.clock import Clock
from scheduler.money import Money
from scheduler.settings import Settings
from scheduler.states import InstanceRowState, JobState
from scheduler.store.database import Store
from scheduler.store.tables import AttemptRow, CostRecordRow, EventRow, IdleStopRow, InstanceRow, JobRow

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds from submission to the first attempt running: minutes for a free GPU, hours behind a budget.
QUEUE_WAIT_BUCKETS = (60.0, 300.0, 900.0, 1800.0, 3600.0, 3 * 3600.0, 6 * 3600.0, 12 * 3600.0, 24 * 3600.0,
                      72 * 3600.0)
# A steady tick is well under a second; one that talks to three slow clouds takes tens.
TICK_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# Instances in these states bill by the hour.
BILLING = (InstanceRowState.pending, InstanceRowState.running, InstanceRowState.stopping)


class StoreCollector(Collector):
    """Metrics computed from the store on each scrape."""

    def __init__(self, store: Store, clock: Clock, settings: Settings) -> None:
        self.store, self.clock, self.settings = store, clock, settings

    def collect(self) -> Iterator[Metric]:
        now = self.clock.now()
        cur = self.settings.report_currency
        with self.store.session(write=False) as s:
            jobs = s.execute(select(JobRow.state, JobRow.team, func.count()).group_by(JobRow.state, JobRow.team)).all()
            instances = s.execute(select(InstanceRow.state, func.count()).group_by(InstanceRow.state)).all()
            first_start = (select(AttemptRow.job_id, func.min(AttemptRow.started_at).label("started"))
                           .where(AttemptRow.started_at.is_not(None)).group_by(AttemptRow.job_id).subquery())
            waits = s.execute(select(JobRow.team, JobRow.submitted_at, first_start.c.started)
                              .join(first_start, first_start.c.job_id == JobRow.id)).all()
            month = now.strftime("%Y-%m")
            # Written records summed in SQL (a month may hold tens of thousands), plus what is not written yet.
            written = s.execute(
                select(CostRecordRow.team, CostRecordRow.provider, CostRecordRow.capacity, CostRecordRow.currency,
                       func.sum(CostRecordRow.amount))
                .where(CostRecordRow.month == month)
                .group_by(CostRecordRow.team, CostRecordRow.provider, CostRecordRow.capacity, CostRecordRow.currency)
            ).all()
            month_lines = [(line.team, line.provider, line.capacity, line.currency, line.amount)
                           for line in ledger.pending_lines(s, month, now)]
            billing = s.execute(
                select(InstanceRow.team, InstanceRow.provider, InstanceRow.capacity, InstanceRow.price_currency,
                       func.sum(InstanceRow.price_amount))
                .where(InstanceRow.state.in_([b.value for b in BILLING]))
                .group_by(InstanceRow.team, InstanceRow.provider, InstanceRow.capacity, InstanceRow.price_currency)
            ).all()
            reclaims = s.execute(
                select(InstanceRow.provider, InstanceRow.zone, InstanceRow.gpu, func.count())
                .where(InstanceRow.preempted.is_(True))
                .group_by(InstanceRow.provider, InstanceRow.zone, InstanceRow.gpu)
            ).all()
            idle_stops = s.execute(
                select(IdleStopRow.provider, IdleStopRow.gpu, IdleStopRow.action, func.count())
                .group_by(IdleStopRow.provider, IdleStopRow.gpu, IdleStopRow.action)
            ).all()
            orphans = s.scalar(select(func.count()).select_from(EventRow)
                               .where(EventRow.kind == "orphan_terminated")) or 0

        yield self._jobs(jobs)
        g = GaugeMetricFamily("gpusched_instances", "Instances in the store, by state.", labels=["state"])
        counts = {state.value: 0 for state in InstanceRowState} | {state: n for state, n in instances}
        for state, n in counts.items():
            g.add_metric([state], n)
        yield g
        yield _queue_wait(waits)
        yield from self._money([*written, *month_lines], billing, cur)
        c = CounterMetricFamily("gpusched_reclaims", "Spot instances the cloud took back, by cloud, zone and GPU.",
                                labels=["cloud", "zone", "gpu"])
        for provider, zone, gpu, n in reclaims:
            c.add_metric([provider, zone, gpu], n)
        yield c
        c = CounterMetricFamily("gpusched_idle_stops", "Idle machines stopped or terminated, by cloud, GPU and action.",
                                labels=["cloud", "gpu", "action"])
        for provider, gpu, action, n in idle_stops:
            c.add_metric([provider, gpu, action], n)
        yield c
        yield CounterMetricFamily("gpusched_orphans_terminated",
                                  "Instances carrying this cluster's tags that no record owned, terminated.",
                                  value=orphans)

    @staticmethod
    def _jobs(rows: Iterable[tuple[str, str, int]]) -> GaugeMetricFamily:
        g = GaugeMetricFamily("gpusched_jobs", "Jobs in the store, by state and team.", labels=["state", "team"])
        by_state: Counter[str] = Counter()
        for state, team, n in rows:
            g.add_metric([state, team], n)
            by_state[state] += n
        for state in JobState:  # every state present, so "no queued jobs" reads 0, not "no data"
            if by_state[state.value] == 0:
                g.add_metric([state.value, ""], 0)
        return g

    def _money(self, spent: Iterable[tuple[str, str, str, str, Decimal]],
               billing: Iterable[tuple[str, str, str, str, Decimal]], cur: str) -> Iterator[Metric]:
        """``spent`` and ``billing``: (team, cloud, capacity, currency, amount) rows, this month and per hour."""
        fx = self.settings.fx
        spend: dict[tuple[str, str, str], Decimal] = {}
        by_team: dict[str, Decimal] = {}
        for team, cloud, capacity, currency, total in spent:
            amount = fx.convert(Money(amount=total or Decimal(0), currency=currency), cur).amount
            spend[(team, cloud, capacity)] = spend.get((team, cloud, capacity), Decimal(0)) + amount
            by_team[team] = by_team.get(team, Decimal(0)) + amount
        g = GaugeMetricFamily("gpusched_spend_month", "Spend this month so far (running machines included), "
                              "by team, cloud and capacity, in the report currency.",
                              labels=["team", "cloud", "capacity", "currency"])
        for (team, cloud, capacity), amount in sorted(spend.items()):
            g.add_metric([team, cloud, capacity, cur], float(amount))
        yield g
        rate: dict[tuple[str, str, str], Decimal] = {}
        for team, cloud, capacity, currency, amount in billing:
            per_hour = fx.convert(Money(amount=amount or Decimal(0), currency=currency), cur).amount
            rate[(team, cloud, capacity)] = rate.get((team, cloud, capacity), Decimal(0)) + per_hour
        g = GaugeMetricFamily("gpusched_spend_rate_per_hour", "What the machines billing now cost per hour, "
                              "by team, cloud and capacity, in the report currency.",
                              labels=["team", "cloud", "capacity", "currency"])
        for (team, cloud, capacity), amount in sorted(rate.items()):
            g.add_metric([team, cloud, capacity, cur], float(amount))
        yield g
        budget = GaugeMetricFamily("gpusched_team_budget_month", "A team's monthly budget, in the report currency.",
                                   labels=["team", "currency"])
        used = GaugeMetricFamily("gpusched_team_budget_used_ratio",
                                 "This month's spend over the team's monthly budget (1 = all of it).", labels=["team"])
        for team, monthly in sorted(self.settings.team_budgets.items()):
            limit = fx.convert(monthly, cur).amount
            budget.add_metric([team, cur], float(limit))
            spent = by_team.get(team, Decimal(0))
            used.add_metric([team], float(spent / limit) if limit > 0 else (0.0 if spent == 0 else float("inf")))
        yield budget
        yield used


def _queue_wait(rows: Iterable[tuple[str, datetime, datetime]]) -> HistogramMetricFamily:
    """Seconds from submission to the first attempt running, per team, over every job that started."""
    by_team: dict[str, list[float]] = {}
    for team, submitted, started in rows:
        by_team.setdefault(team, []).append(max(0.0, (started - submitted).total_seconds()))
    h = HistogramMetricFamily("gpusched_queue_wait_seconds",
                              "Seconds from submission to the first attempt running, per team.", labels=["team"])
    for team, waits in sorted(by_team.items()):
        buckets = [(_le(b), sum(1 for w in waits if w <= b)) for b in QUEUE_WAIT_BUCKETS]
        buckets.append(("+Inf", len(waits)))
        h.add_metric([team], buckets, sum_value=sum(waits))
    return h


def _le(bound: float) -> str:
    return f"{bound:g}" if bound < 1e6 else repr(bound)


class DaemonMetrics:
    """The running daemon's own series, in a registry of their own (one per daemon, so tests can make many)."""

    def __init__(self, registry: CollectorRegistry, *, leader_from_lease: bool = False) -> None:
        """``leader_from_lease``: ``gpusched_leader`` follows the leader lease's renewals (``lease_seen``);
        without one (a lone daemon, tests) it follows whether the last tick got the tick lock."""
        self.leader_from_lease = leader_from_lease
        self.ticks = PromCounter("gpusched_ticks", "Lifecycle ticks run since the daemon started.", registry=registry)
        self.tick_errors = PromCounter("gpusched_tick_errors", "Lifecycle ticks that raised.", registry=registry)
        self.tick_errors_in_a_row = Gauge("gpusched_tick_errors_in_a_row",
                                          "Lifecycle ticks that raised since the last one that did not.",
                                          registry=registry)
        self.set_aside = PromCounter("gpusched_jobs_set_aside", "Jobs a tick failed or held because it could not "
                                     "read, plan, price or write them.", registry=registry)
        self.tick_duration = Histogram("gpusched_tick_duration_seconds", "How long lifecycle ticks take.",
                                       buckets=TICK_BUCKETS, registry=registry)
        self.last_tick = Gauge("gpusched_last_tick_timestamp_seconds", "When the last tick began (Unix time).",
                               registry=registry)
        self.cloud_errors = PromCounter("gpusched_cloud_api_errors", "Cloud API calls that failed after retries, "
                                        "by cloud and the vendor's error code.", ["cloud", "code"], registry=registry)
        self.leader = Gauge("gpusched_leader", "1 while this daemon leads (holds the leader lease and runs the "
                            "tick), 0 while it follows.", registry=registry)
        self.leader_info = Gauge("gpusched_leader_info", "1 on the series naming the daemon that holds the leader "
                                 "lease, as this daemon last read it (no series while nobody holds it).",
                                 ["holder"], registry=registry)
        self.leader_term = Gauge("gpusched_leader_term", "The leader lease's term as this daemon last read it: it "
                                 "grows by one each time the lease changes hands.", registry=registry)
        self.leadership_changes = PromCounter("gpusched_leadership_changes", "Times the leader lease changed "
                                              "hands, as seen by this daemon since it started.", registry=registry)
        self.reports = PromCounter("gpusched_reports", "Monthly report runs since the daemon started.",
                                   registry=registry)
        self.report_errors = PromCounter("gpusched_report_errors", "Monthly report runs that raised.",
                                         registry=registry)
        self.budget_check_errors = PromCounter("gpusched_budget_check_errors", "Budget alert checks that raised.",
                                               registry=registry)

    def tick_done(self, *, started: datetime, duration_s: float, failed: bool, in_a_row: int, result: object) -> None:
        """Feed one tick's outcome; ``result`` is the tick's report (duck-typed: the daemon runs any callable)."""
        self.ticks.inc()
        self.tick_duration.observe(duration_s)
        self.last_tick.set(started.timestamp())
        self.tick_errors_in_a_row.set(in_a_row)
        if failed:
            self.tick_errors.inc()
        set_aside = getattr(result, "set_aside", 0)
        if isinstance(set_aside, int) and set_aside > 0:
            self.set_aside.inc(set_aside)
        led = getattr(result, "led", None)
        if isinstance(led, bool) and not self.leader_from_lease:
            self.leader.set(1 if led else 0)
        errors = getattr(result, "cloud_errors", None)
        if isinstance(errors, Mapping):
            for (cloud, code), n in errors.items():
                self.cloud_errors.labels(cloud=cloud, code=code).inc(n)

    def lease_seen(self, *, leads: bool, holder: str | None, term: int | None, changes: int) -> None:
        """After each renewal of the leader lease: ``holder``/``term`` None when the lease could not be read."""
        self.leader.set(1 if leads else 0)
        if holder is not None:
            self.leader_info.clear()
            if holder:
                self.leader_info.labels(holder=holder).set(1)
        if term is not None:
            self.leader_term.set(term)
        if changes > 0:
            self.leadership_changes.inc(changes)

    def cloud_error(self, cloud: str, code: str) -> None:
        """A cloud error that made the whole tick fail (the tick's own report never came back)."""
        self.cloud_errors.labels(cloud=cloud, code=code).inc()

    def budget_check_done(self, *, failed: bool) -> None:
        if failed:
            self.budget_check_errors.inc()

    def report_done(self, *, failed: bool) -> None:
        self.reports.inc()
        if failed:
            self.report_errors.inc()


def store_registry(store: Store, clock: Clock, settings: Settings) -> CollectorRegistry:
    """A registry with the store's metrics only (the API without a daemon: tests, `gpusched serve`)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, clock, settings))
    return registry


def render(*registries: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of every registry given, one after another (names never overlap)."""
    return b"".join(generate_latest(r) for r in registries)
