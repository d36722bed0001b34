"""/metrics through prometheus_client's own parser: a sandbox month with a reclaim, an orphan, an idle stop,
a failing cloud call and a team over its budget, and every series the ops dashboard and alerts read."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from providers.base import TAG_ATTEMPT, TAG_INSTANCE, TAG_JOB, TAG_MANAGED, ProviderUnavailable
from scheduler.accounting import ledger
from scheduler.app.api import create_app
from scheduler.app.daemon import Daemon
from scheduler.logs import forget_secrets
from scheduler.models import Capacity
from scheduler.settings import Settings
from scheduler.states import JobState
from tests.lifecycle.test_lifecycle import World, job_spec

TOKEN = "metrics-test-token-0123456789"


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """name -> [(labels, value)], parsed by prometheus_client (a malformed exposition raises here)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _one(samples: dict, name: str, **labels: str) -> float:
    found = [v for got, v in samples.get(name, []) if all(got.get(k) == want for k, want in labels.items())]
    assert found, f"no {name}{labels} in {sorted(samples)}"
    return sum(found)


def test_metrics_parse_and_carry_what_ops_alert_on(store, sim_clock) -> None:
    w = World(store, sim_clock)
    settings = Settings(_env_file=None, api_token=SecretStr(TOKEN), cluster="t", providers=["alibaba"],  # type: ignore[call-arg]
                        team_budgets={"vision-qa": "1 CNY"}, report_currency="CNY")
    daemon = Daemon(settings, store, sim_clock, tick=lambda: None, monthly_report=lambda: None)

    def tick() -> None:  # the daemon's own path: _run feeds its counters from each tick's report
        daemon._tick = lambda: lifecycle_tick(w)
        daemon.run_tick()

    job_id = w.submit(job_spec(capacity="spot"))
    # A launch the cloud keeps refusing (inside the tick: counted from the tick's report) ...
    w.cloud.fail_next("launch", ProviderUnavailable("busy", provider="alibaba", code="Throttling"), times=10)
    for _ in range(2000):
        if w.job(job_id).epochs_done >= 3:
            break
        tick()
    [row] = w.instances()
    w.cloud.preempt(row.cloud_id)  # a reclaim, counted by cloud / zone / GPU
    offer = w.provider.offers()[0]
    w.cloud.launch(region=offer.region, zone=offer.zone, instance_type=offer.instance_type,
                   capacity=Capacity.on_demand, client_token="leak-1",
                   tags={TAG_MANAGED: "t", TAG_INSTANCE: "inst-nobody", TAG_JOB: "job-x", TAG_ATTEMPT: "1"})
    # ... and a listing that fails the whole tick (counted by the daemon from the error itself).
    w.cloud.fail_next("instances", ProviderUnavailable("down", provider="alibaba", code="ServiceUnavailable"), times=10)
    for _ in range(3000):
        if w.job(job_id).state == JobState.succeeded.value and any(
                i.state in ("stopped", "terminated") for i in w.instances() if i.job_id is None and i.idle_since):
            break
        tick()
    for _ in range(40):  # past the idle stop
        tick()

    with TestClient(create_app(store, sim_clock, settings, health=daemon.health, metrics=daemon.metrics)) as c:
        r = c.get("/metrics")
    forget_secrets()
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    m = _samples(r.text)

    assert _one(m, "gpusched_jobs", state="succeeded", team="vision-qa") == 1
    assert _one(m, "gpusched_jobs", state="queued") == 0  # every state present, even when empty
    assert _one(m, "gpusched_queue_wait_seconds_count", team="vision-qa") == 1
    assert _one(m, "gpusched_queue_wait_seconds_bucket", team="vision-qa", le="+Inf") == 1
    spend = _one(m, "gpusched_spend_month", team="vision-qa", cloud="alibaba", currency="CNY")
    with store.session(write=False) as s:  # the report's own sum: written records plus what is not written yet
        lines = ledger.cost_lines(s, sim_clock.now().strftime("%Y-%m"), sim_clock.now())
    assert spend == pytest.approx(float(sum(line.amount for line in lines if line.team == "vision-qa")), rel=1e-9)
    assert spend > 0
    assert "gpusched_spend_rate_per_hour" in {f.name for f in text_string_to_metric_families(r.text)}
    assert _one(m, "gpusched_team_budget_month", team="vision-qa", currency="CNY") == 1.0
    assert _one(m, "gpusched_team_budget_used_ratio", team="vision-qa") == spend / 1.0 > 1  # budget crossed
    assert _one(m, "gpusched_reclaims_total", cloud="alibaba", zone=row.zone, gpu="A10") == 1
    assert _one(m, "gpusched_idle_stops_total", cloud="alibaba") >= 1
    assert _one(m, "gpusched_orphans_terminated_total") == 1
    assert _one(m, "gpusched_cloud_api_errors_total", cloud="alibaba", code="Throttling") >= 1
    failed_listings = _one(m, "gpusched_cloud_api_errors_total", cloud="alibaba", code="ServiceUnavailable")
    assert failed_listings >= 1
    ticks = _one(m, "gpusched_ticks_total")
    assert _one(m, "gpusched_tick_duration_seconds_count") == ticks > 50
    assert _one(m, "gpusched_leader") == 1
    # The tick-failure series kept their names (dashboards and alerts use them).
    assert _one(m, "gpusched_tick_errors_total") == failed_listings  # each failed listing failed its tick
    assert _one(m, "gpusched_tick_errors_in_a_row") == 0
    assert _one(m, "gpusched_jobs_set_aside_total") == 0


def lifecycle_tick(w: World) -> object:
    w.agents.step(w.clock.now())
    from scheduler.lifecycle import tick as lifecycle

    report = lifecycle.tick(w.ctx)
    w.clock.advance(timedelta(minutes=1))
    return report


def test_a_tick_that_raises_a_cloud_error_counts_it_by_code_and_in_a_row(store, sim_clock) -> None:
    settings = Settings(_env_file=None, api_token=SecretStr(TOKEN))  # type: ignore[call-arg]

    def failing() -> None:
        raise ProviderUnavailable("throttled", provider="aws", code="RequestLimitExceeded")

    daemon = Daemon(settings, store, sim_clock, tick=failing, monthly_report=lambda: None)
    daemon.run_tick()
    daemon.run_tick()
    forget_secrets()
    m = _samples(daemon.metrics())
    assert _one(m, "gpusched_tick_errors_total") == 2 and _one(m, "gpusched_tick_errors_in_a_row") == 2
    assert _one(m, "gpusched_cloud_api_errors_total", cloud="aws", code="RequestLimitExceeded") == 2
