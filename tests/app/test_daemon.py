"""The daemon: APScheduler wiring, failing ticks, health, serving and a clean stop on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from pydantic import SecretStr
from sqlalchemy import text
from structlog.testing import capture_logs

from scheduler.app.api import create_app
from scheduler.app.client import ApiClient
from scheduler.app.daemon import BUDGET_JOB, REPORT_JOB, TICK_JOB, Daemon
from scheduler.clock import SimClock, SystemClock
from scheduler.errors import NoCapacity, SettingsError, UserError
from scheduler.logs import forget_secrets
from scheduler.settings import Settings
from scheduler.store.database import Store

TOKEN = "daemon-test-token-0123456789"
NOW = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)
REPO = Path(__file__).resolve().parents[2]


def settings(**overrides: object) -> Settings:
    values: dict[str, object] = {"api_token": SecretStr(TOKEN), "tick_seconds": 10.0}
    return Settings(_env_file=None, **(values | overrides))  # type: ignore[arg-type]


def nothing() -> None:
    return None


def make_daemon(store: Store, clock: SimClock | SystemClock | None = None, **kwargs: object) -> Daemon:
    s = kwargs.pop("settings", None) or settings()
    tick = kwargs.pop("tick", nothing)
    report = kwargs.pop("monthly_report", nothing)
    clock = clock or SimClock(NOW)
    return Daemon(s, store, clock, tick=tick, monthly_report=report, **kwargs)  # type: ignore[arg-type]


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``check`` on the real clock (the daemon's threads run in real time)."""
    wall, pause = SystemClock(), threading.Event()
    deadline = wall.now() + timedelta(seconds=timeout)
    while wall.now() < deadline:
        if check():
            return True
        pause.wait(0.02)
    return check()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    """Every daemon a test starts is shut down afterwards, even when the test fails."""
    started: list[Daemon] = []
    yield started
    for d in started:
        d.stop()
        d.shutdown()
    forget_secrets()


# --- construction


@pytest.mark.parametrize("token", [None, ""])
def test_refuses_to_start_without_an_api_token(store: Store, token: str | None) -> None:
    with pytest.raises(SettingsError) as caught:
        make_daemon(store, settings=settings(api_token=SecretStr(token) if token is not None else None))
    assert "GPUSCHED_API_TOKEN" in (caught.value.fix or "")


@pytest.mark.parametrize("cron", ["every month", "0 6 1 *", "61 6 1 * *", "0 6 * * 8", "0 6 1 * 1", "0 6 * * 5-1"])
def test_a_bad_report_cron_is_a_settings_error(store: Store, cron: str) -> None:
    with pytest.raises(SettingsError, match="GPUSCHED_REPORT_CRON"):
        make_daemon(store, settings=settings(report_cron=cron))


# --- the scheduled jobs


@pytest.mark.parametrize(
    ("cron", "after", "next_report"),
    [
        ("0 6 1 * *", NOW, datetime(2026, 12, 1, 6, 0, tzinfo=timezone.utc)),
        # NOW is a Friday. Cron counts weekdays from Sunday = 0 (and 7); APScheduler 3 from Monday.
        ("30 2 * * 1", NOW, datetime(2026, 11, 23, 2, 30, tzinfo=timezone.utc)),
        ("0 6 * * 0", NOW, datetime(2026, 11, 22, 6, 0, tzinfo=timezone.utc)),
        ("0 6 * * 7", NOW, datetime(2026, 11, 22, 6, 0, tzinfo=timezone.utc)),
        ("0 6 * * 1-5", NOW, datetime(2026, 11, 23, 6, 0, tzinfo=timezone.utc)),
        ("0 6 * * 5-7", NOW, datetime(2026, 11, 21, 6, 0, tzinfo=timezone.utc)),
        ("0 6 * * 0-7", NOW, datetime(2026, 11, 21, 6, 0, tzinfo=timezone.utc)),
        ("0 6 * * */2", NOW, datetime(2026, 11, 21, 6, 0, tzinfo=timezone.utc)),  # Sun, Tue, Thu, Sat
        ("0 6 * * sat", NOW, datetime(2026, 11, 21, 6, 0, tzinfo=timezone.utc)),
        ("0 9 * * 5", NOW, datetime(2026, 11, 20, 9, 0, tzinfo=timezone.utc)),
    ],
)
def test_jobs_are_registered_with_their_triggers(
    store: Store, daemons: list[Daemon], cron: str, after: datetime, next_report: datetime
) -> None:
    d = make_daemon(store, settings=settings(tick_seconds=15, report_cron=cron))
    daemons.append(d)
    d.start_jobs()
    d.start_jobs()  # idempotent

    tick, report = d.scheduler.get_job(TICK_JOB), d.scheduler.get_job(REPORT_JOB)
    assert len(d.scheduler.get_jobs()) == 2
    assert isinstance(tick.trigger, IntervalTrigger)
    assert tick.trigger.interval == timedelta(seconds=15)
    assert (tick.max_instances, tick.coalesce, tick.misfire_grace_time) == (1, True, 15)
    assert isinstance(report.trigger, CronTrigger)
    assert report.trigger.get_next_fire_time(None, after) == next_report
    assert (report.max_instances, report.coalesce) == (1, True)
    assert d.health()["next_report"] is not None


def test_shutdown_is_clean_and_idempotent(store: Store) -> None:
    d = make_daemon(store)
    d.start_jobs()
    assert d.health()["status"] == "ok"
    d.shutdown()
    d.shutdown()
    assert not d.scheduler.running
    assert d.health()["status"] == "stopped"


def test_a_failing_tick_is_logged_and_the_next_one_runs(store: Store) -> None:
    clock = SimClock(NOW)
    outcomes: list[Exception | None] = [RuntimeError("cloud API down"), None]

    def tick() -> None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    d = make_daemon(store, clock, tick=tick)
    with capture_logs() as logs:
        d.run_tick()
    [failed] = [e for e in logs if e["event"] == "tick_failed"]
    assert failed["log_level"] == "error"
    assert isinstance(failed["exc_info"], RuntimeError)
    assert failed["error"] == "RuntimeError: cloud API down" and failed["failures_in_a_row"] == 1
    health = d.health()
    assert (health["ticks"], health["tick_errors"], health["tick_errors_in_a_row"]) == (1, 1, 1)
    assert health["last_error"] == "RuntimeError: cloud API down" and health["last_tick_ok"] is None

    clock.advance(timedelta(seconds=10))
    d.run_tick()

    health = d.health()
    assert (health["ticks"], health["tick_errors"], health["tick_errors_in_a_row"]) == (2, 1, 0)
    assert health["last_tick_ok"] == (NOW + timedelta(seconds=10)).isoformat()
    assert health["last_error"] == "RuntimeError: cloud API down"  # kept for the operator to see


def test_a_cloud_error_is_logged_with_its_vendor_code_and_request_id(store: Store) -> None:
    def tick() -> None:
        raise NoCapacity("no L4 left", provider="aws", code="InsufficientInstanceCapacity", request_id="req-7")

    with capture_logs() as logs:
        make_daemon(store, tick=tick).run_tick()
    [failed] = [e for e in logs if e["event"] == "tick_failed"]
    assert (failed["provider"], failed["vendor_code"], failed["request_id"]) == (
        "aws", "InsufficientInstanceCapacity", "req-7")


def test_the_real_scheduler_keeps_ticking_after_a_failure(store: Store, daemons: list[Daemon]) -> None:
    calls: list[int] = []
    third = threading.Event()

    def tick() -> None:
        calls.append(1)
        if len(calls) == 3:
            third.set()
        if len(calls) == 1:
            raise RuntimeError("first tick fails")

    d = make_daemon(store, SystemClock(), settings=settings(tick_seconds=0.05), tick=tick)
    daemons.append(d)
    with capture_logs():
        d.start_jobs()
        assert third.wait(10), "the scheduler stopped ticking after a failure"
        d.shutdown()
    health = d.health()
    assert health["tick_errors"] == 1 and health["ticks"] >= 3


def test_a_failing_report_is_kept_apart_from_the_tick(store: Store) -> None:
    def report() -> None:
        raise OSError("report dir is read-only")

    d = make_daemon(store, monthly_report=report)
    with capture_logs() as logs:
        d.run_monthly_report()
    assert [e["event"] for e in logs] == ["monthly_report_failed"]
    health = d.health()
    assert health["last_report_error"] == "OSError: report dir is read-only"
    assert health["tick_errors"] == 0 and health["last_report"] == NOW.isoformat()


def test_health_turns_stalled_when_no_tick_finishes_for_long(store: Store, daemons: list[Daemon]) -> None:
    wall = SimClock(NOW)
    d = make_daemon(store, settings=settings(tick_seconds=3600), wall=wall)
    daemons.append(d)
    with capture_logs():
        d.start_jobs()
        assert wait_for(lambda: d.health()["ticks"] >= 1)  # the first tick runs at once
    assert d.health()["status"] == "ok"

    wall.advance(timedelta(hours=9, minutes=59))
    assert d.health()["status"] == "ok"
    wall.advance(timedelta(minutes=2))  # ten intervals without a finished tick
    assert d.health()["status"] == "stalled"

    d.run_tick()
    assert d.health()["status"] == "ok"


def test_health_reports_the_database(store: Store, tmp_path: Path) -> None:
    assert make_daemon(store).health()["database"] == "ok"
    gone = Store(f"sqlite:///{tmp_path / 'gone.db'}?mode=ro")
    (tmp_path / "gone.db").mkdir()  # a folder where the file should be: no connection possible
    assert make_daemon(gone).health()["database"].startswith("unreachable")


def test_metrics_count_ticks_and_errors(store: Store) -> None:
    outcomes = iter([ValueError("x"), None, None])

    def tick() -> None:
        if (e := next(outcomes)) is not None:
            raise e

    d = make_daemon(store, tick=tick)
    with capture_logs():
        for _ in range(3):
            d.run_tick()
    samples = dict(line.split(" ") for line in d.metrics().splitlines() if not line.startswith("#"))
    assert float(samples["gpusched_ticks_total"]) == 3
    assert float(samples["gpusched_tick_errors_total"]) == 1
    assert float(samples["gpusched_last_tick_timestamp_seconds"]) == NOW.timestamp()
    assert "# TYPE gpusched_ticks_total counter" in d.metrics()


# --- serving


def test_serve_answers_http_until_stopped_then_shuts_the_scheduler_down(
    store: Store, daemons: list[Daemon]
) -> None:
    port = free_port()
    s = settings(api_port=port, tick_seconds=3600)
    clock = SystemClock()
    d = make_daemon(store, clock, settings=s)
    daemons.append(d)
    d.app = create_app(store, clock, s, health=d.health, metrics=d.metrics)
    server = threading.Thread(target=d.serve, daemon=True)
    with capture_logs():
        server.start()
        assert wait_for(lambda: _answers(f"http://127.0.0.1:{port}/healthz"))

        health = httpx.get(f"http://127.0.0.1:{port}/healthz").json()
        assert health["status"] == "ok" and health["database"] == "ok"
        assert ApiClient(f"http://127.0.0.1:{port}", TOKEN).list_jobs() == []
        assert "gpusched_ticks_total" in httpx.get(f"http://127.0.0.1:{port}/metrics").text

        d.stop()
        server.join(timeout=15)
    assert not server.is_alive()
    assert not d.scheduler.running


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_serve_without_an_app_is_refused(store: Store) -> None:
    with pytest.raises(Exception, match="needs the API app"):
        make_daemon(store).serve()


def test_a_taken_port_is_a_user_error_and_the_scheduler_stops(store: Store) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        s = settings(api_port=taken.getsockname()[1], tick_seconds=3600)
        d = make_daemon(store, settings=s)
        d.app = create_app(store, SimClock(NOW), s)
        forget_secrets()
        with capture_logs(), pytest.raises(UserError, match="cannot serve the API") as caught:
            d.serve()
    assert caught.value.message.endswith(": Address already in use")
    assert caught.value.fix == "another process holds the port: stop it or set GPUSCHED_API_PORT"
    assert not d.scheduler.running


def test_a_host_that_is_no_address_of_this_machine_is_told_so(store: Store) -> None:
    """It was told, as for every failure to listen, that another process may hold the port."""
    s = settings(api_host="192.0.2.1", api_port=8642, tick_seconds=3600)  # TEST-NET-1: never this machine's
    d = make_daemon(store, settings=s)
    d.app = create_app(store, SimClock(NOW), s)
    forget_secrets()
    with capture_logs(), pytest.raises(UserError, match="cannot serve the API on 192.0.2.1:8642: ") as caught:
        d.serve()
    assert caught.value.fix == "set GPUSCHED_API_HOST to an address of this machine (0.0.0.0: all of them)"


_DAEMON_SCRIPT = """
import sys
from pydantic import SecretStr
from scheduler.app.api import create_app
from scheduler.clock import SystemClock
from scheduler.app.daemon import Daemon
from scheduler.logs import configure_logging
from scheduler.settings import Settings
from scheduler.store.database import Store

port, db = int(sys.argv[1]), sys.argv[2]
configure_logging("json", "info")
settings = Settings(_env_file=None, api_token=SecretStr("sigterm-test-token"), api_port=port, tick_seconds=0.2)
store = Store(f"sqlite:///{db}")
store.migrate()
clock = SystemClock()
daemon = Daemon(settings, store, clock, tick=lambda: None, monthly_report=lambda: None)
daemon.app = create_app(store, clock, settings, health=daemon.health, metrics=daemon.metrics)
daemon.serve()
print("serve returned", flush=True)
"""


def test_sigterm_stops_the_daemon_cleanly(tmp_path: Path) -> None:
    # SIGINT takes the same path (one handler for both); one subprocess keeps the suite fast.
    sig = signal.SIGTERM
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _DAEMON_SCRIPT, str(port), str(tmp_path / "gpusched.db")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert wait_for(lambda: proc.poll() is None and _answers(f"http://127.0.0.1:{port}/healthz"), 30)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "serve returned" in out
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    [stopped] = [line for line in lines if line["event"] == "daemon_stopped"]
    assert stopped["reason"] == sig.name
    assert "sigterm-test-token" not in err


def test_budget_alerts_run_on_their_own_interval_and_fail_apart(store: Store, daemons: list[Daemon]) -> None:
    calls: list[int] = []

    def check() -> None:
        calls.append(1)
        raise OSError("smtp down")

    d = make_daemon(store, settings=settings(budget_check_minutes=5), budget_check=check)
    daemons.append(d)
    d.start_jobs()
    job = d.scheduler.get_job(BUDGET_JOB)
    assert isinstance(job.trigger, IntervalTrigger) and job.trigger.interval == timedelta(minutes=5)
    with capture_logs() as logs:
        d.run_budget_check()
    assert calls == [1] and [e["event"] for e in logs] == ["budget_check_failed"]
    health = d.health()
    assert health["last_budget_check_error"] == "OSError: smtp down" and health["tick_errors"] == 0
    assert "gpusched_budget_check_errors_total 1" in d.metrics()


def test_without_budgets_there_is_no_budget_job(store: Store, daemons: list[Daemon]) -> None:
    d = make_daemon(store)
    daemons.append(d)
    d.start_jobs()
    assert d.scheduler.get_job(BUDGET_JOB) is None


def test_a_tick_on_a_locked_store_says_what_holds_it_without_a_traceback(tmp_path: Path) -> None:
    """Another program's open transaction on the SQLite file (a sqlite3 shell, a backup): the tick waits out
    SQLite's busy timeout and fails. It logged SQLAlchemy's whole error and a traceback, as for a bug; now the
    driver's words and what to do, and the next tick, with the lock gone, runs."""
    import sqlite3

    store = Store(f"sqlite:///{tmp_path / 'gpusched.db'}", busy_timeout_ms=100)
    store.migrate()

    def tick() -> None:
        with store.session() as s:
            s.execute(text("SELECT 1"))

    d = make_daemon(store, tick=tick)
    holder = sqlite3.connect(tmp_path / "gpusched.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with capture_logs() as logs:
            d.run_tick()
    finally:
        holder.close()
    [failed] = [e for e in logs if e["event"] == "tick_failed"]
    assert failed["error"] == "the store: database is locked" and "exc_info" not in failed
    assert "write lock" in failed["fix"] and "GPUSCHED_DATABASE_URL" in failed["fix"]
    assert d.health()["last_error"] == "the store: database is locked"
    d.run_tick()
    assert d.health()["tick_errors_in_a_row"] == 0
    store.dispose()
