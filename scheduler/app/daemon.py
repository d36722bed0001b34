"""The long-running process: the lifecycle tick and the monthly report on APScheduler, the API on uvicorn.

The tick and the report arrive as plain callables, so this module knows nothing
about clouds or reports, and the demo and tests drive the same tick without it.
A tick that raises is logged and counted; the next one runs as usual, because
most failures (a cloud API down, a locked database) pass by themselves.

``/healthz`` is readiness: it answers 503 when the scheduler has stopped, when
no tick has finished for a long while (``stalled``: a hung tick blocks every later
one, since at most one runs at a time), or when ticks run but fail (``failing``:
the last ``FAILING_TICKS`` ticks raised, or none has succeeded for ``MIN_STALL`` /
``STALL_TICKS`` ticks), with the last tick error in the body. A job the tick cannot
handle is set aside by the tick itself and does not make it fail; ``/metrics``
counts both (``gpusched_tick_errors_total``, ``gpusched_jobs_set_aside_total``).

With a ``Leadership`` (several daemons on one database) the daemon renews the leader lease every
``renew_seconds`` on a job of its own, and only the leader runs the tick, the report and the budget
alerts; a follower's tick is a round that finds it does not lead (it still counts, so a follower is
neither stalled nor failing). A report due while this daemon follows waits up to
``REPORT_MISFIRE_GRACE_S`` for it to lead: the leader that died at the report's hour does not take
the month's report with it (the report's own claim keeps it from going out twice).
"""

from __future__ import annotations

import errno
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from types import FrameType
from typing import Any

import uvicorn
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from scheduler.app.api import require_token
from scheduler.app.metrics import DaemonMetrics, render
from scheduler.app.startup import store_fix
from scheduler.clock import Clock, SystemClock
from scheduler.errors import GpuschedError, ProviderError, SettingsError, UserError
from scheduler.lifecycle.leadership import Leadership
from scheduler.logs import get_logger
from scheduler.settings import Settings
from scheduler.store.database import Store, store_trouble

log = get_logger(__name__)

TICK_JOB = "tick"
REPORT_JOB = "monthly-report"
BUDGET_JOB = "budget-alerts"
LEASE_JOB = "leader-lease"
REPORT_CATCH_UP_JOB = "monthly-report-catch-up"
# A report that could not start on time (the pool busy) may still start this late.
REPORT_MISFIRE_GRACE_S = 3600
MIN_STALL = timedelta(minutes=5)
STALL_TICKS = 10
FAILING_TICKS = 3  # this many failed ticks in a row make the daemon not ready
# APScheduler fires on the wall clock whatever clock the tick itself reads.
_SCHEDULER_CLOCK = SystemClock()


@dataclass(frozen=True)
class FollowerRound:
    """What a tick is on a daemon that does not lead: nothing done, on purpose."""

    led: bool = False
    set_aside: int = 0


@dataclass
class _Runs:
    """What happened to one scheduled job so far (guarded by the Daemon's lock)."""

    count: int = 0
    errors: int = 0
    consecutive_errors: int = 0
    last_at: datetime | None = None
    last_ok_at: datetime | None = None
    last_ok_wall: datetime | None = None
    set_aside: int = 0  # jobs the tick failed or held rather than failing itself
    last_error: str | None = None
    last_error_at: datetime | None = None
    last_duration_s: float | None = None
    last_done_wall: datetime | None = None


def _iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt is not None else None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OperationalError):  # without the SQL and SQLAlchemy's background link
        return store_trouble(exc)
    text = exc.message if isinstance(exc, GpuschedError) else str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _bind_trouble(host: str, port: int) -> tuple[str, str]:
    """Why the API could not listen, asked again of the OS once uvicorn gave up (it only logs the cause), and
    what to do: a host that names no address of this machine wants another fix than a port in use."""
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        why = f": {(exc.strerror or str(exc)).split(' (while attempting')[0]}"
        if exc.errno == errno.EADDRINUSE:
            return why, "another process holds the port: stop it or set GPUSCHED_API_PORT"
        if exc.errno == errno.EACCES:
            return why, "a port below 1024 needs privileges: set GPUSCHED_API_PORT to 1024 or above"
        return why, "set GPUSCHED_API_HOST to an address of this machine (0.0.0.0: all of them)"
    return "", "another process may hold the port; stop it or set GPUSCHED_API_PORT / GPUSCHED_API_HOST"


class Daemon:
    """Runs ``tick`` every ``settings.tick_seconds`` and ``monthly_report`` on ``settings.report_cron``.

    ``clock`` stamps what health reports (the tick's own time). ``wall`` measures
    real elapsed time for stall detection; APScheduler itself always runs on the
    wall clock. ``app`` may be set after construction (the app's /healthz needs
    ``daemon.health``).
    """

    def __init__(
        self,
        settings: Settings,
        store: Store,
        clock: Clock,
        *,
        tick: Callable[[], object],
        monthly_report: Callable[[], object],
        budget_check: Callable[[], object] | None = None,
        app: FastAPI | None = None,
        wall: Clock | None = None,
        leadership: Leadership | None = None,
    ) -> None:
        require_token(settings)  # refuse to start an API that anyone could use
        self.settings = settings
        self.store = store
        self.clock = clock
        self.app = app
        self.wall = wall or SystemClock()
        self._tick = tick
        self._report = monthly_report
        self._budget_check = budget_check
        self.leadership = leadership
        self._report_due_until: datetime | None = None  # a report this follower owes if it leads in time
        self._tick_trigger = IntervalTrigger(seconds=settings.tick_seconds, timezone=timezone.utc)
        self._report_trigger = _cron(settings.report_cron)
        self.scheduler = BackgroundScheduler(timezone=timezone.utc)
        self._lock = threading.Lock()
        self._ticks = _Runs()
        self._reports = _Runs()
        self.registry = CollectorRegistry(auto_describe=True)
        self.counters = DaemonMetrics(self.registry, leader_from_lease=leadership is not None)
        self._budget_checks = _Runs()
        self._started_wall: datetime | None = None
        self._server: uvicorn.Server | None = None
        self._stop_signal: str | None = None

    # --- the scheduled jobs

    def start_jobs(self) -> None:
        """Register the tick (first one at once) and the report, and start the scheduler. Idempotent."""
        if self.scheduler.running:
            return
        if self.leadership is not None:
            self.run_lease()  # before the first tick, so that a daemon alone leads from its first tick
            self.scheduler.add_job(
                self.run_lease,
                IntervalTrigger(seconds=self.leadership.renew_seconds, timezone=timezone.utc),
                id=LEASE_JOB,
                name="leader lease",
                max_instances=1,
                coalesce=True,
                misfire_grace_time=max(1, int(self.leadership.renew_seconds)),
                replace_existing=True,
            )
        self.scheduler.add_job(
            self.run_tick,
            self._tick_trigger,
            id=TICK_JOB,
            name="lifecycle tick",
            max_instances=1,  # a slow tick delays the next; two at once would fight over the same rows
            coalesce=True,  # after a stall, one catch-up tick, not a burst
            misfire_grace_time=max(1, int(self.settings.tick_seconds)),
            next_run_time=_SCHEDULER_CLOCK.now(),  # the first tick at once, not after one interval
            replace_existing=True,
        )
        self.scheduler.add_job(
            self.run_monthly_report,
            self._report_trigger,
            id=REPORT_JOB,
            name="monthly report",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=REPORT_MISFIRE_GRACE_S,
            replace_existing=True,
        )
        if self._budget_check is not None:
            self.scheduler.add_job(
                self.run_budget_check,
                IntervalTrigger(minutes=self.settings.budget_check_minutes, timezone=timezone.utc),
                id=BUDGET_JOB,
                name="budget alerts",
                max_instances=1,
                coalesce=True,
                misfire_grace_time=max(1, int(self.settings.budget_check_minutes * 60)),
                replace_existing=True,
            )
        self._started_wall = self.wall.now()
        self.scheduler.start()
        log.info(
            "scheduler_started",
            tick_seconds=self.settings.tick_seconds,
            report_cron=self.settings.report_cron,
            next_report=_iso(self.scheduler.get_job(REPORT_JOB).next_run_time),
        )

    def run_tick(self) -> None:
        """One lifecycle tick (on a follower, a round that does nothing); never raises (the error is logged
        and kept for /healthz)."""
        self._run(self._tick if self._leads() else FollowerRound, self._ticks, "tick")

    def run_monthly_report(self) -> None:
        """The monthly report; never raises. A follower owes it for ``REPORT_MISFIRE_GRACE_S`` instead."""
        if not self._leads():
            with self._lock:
                self._report_due_until = self.wall.now() + timedelta(seconds=REPORT_MISFIRE_GRACE_S)
            log.info("monthly_report_deferred", why="this daemon follows; the leader sends it, or this daemon "
                     "if it leads within the grace period and the month is still unsent",
                     grace_s=REPORT_MISFIRE_GRACE_S)
            return
        with self._lock:
            self._report_due_until = None
        self._run(self._report, self._reports, "monthly_report")

    def run_budget_check(self) -> None:
        """Team and project budget alerts (scheduler/accounting/budget_alerts.py), by the leader; never raises."""
        if self._budget_check is not None and self._leads():
            self._run(self._budget_check, self._budget_checks, "budget_check")

    def _leads(self) -> bool:
        return self.leadership is None or self.leadership.leads()

    def run_lease(self) -> None:
        """Take or renew the leader lease; never raises (a database that is down is logged: leadership then
        lasts as long as the lease last got). A report this daemon owes runs once it leads."""
        assert self.leadership is not None
        try:
            renewal = self.leadership.renew()
        except Exception as exc:  # noqa: BLE001 - the next renewal tries again
            log.warning("lease_renew_failed", error=_describe(exc), leads=self.leadership.leads())
        else:
            self.counters.lease_seen(leads=self.leadership.leads(), holder=renewal.lease.holder,
                                     term=renewal.lease.term, changes=renewal.changes)
            self._catch_up_report()
            return
        self.counters.lease_seen(leads=self.leadership.leads(), holder=None, term=None, changes=0)

    def _catch_up_report(self) -> None:
        with self._lock:
            due = self._report_due_until
            if due is None or not self._leads():
                return
            self._report_due_until = None
        if self.wall.now() > due:
            log.warning("monthly_report_not_sent_by_this_daemon", why="it did not lead within the grace period")
            return
        if self.scheduler.running:
            self.scheduler.add_job(self.run_monthly_report, id=REPORT_CATCH_UP_JOB, name="monthly report (owed)",
                                   replace_existing=True)

    def _run(self, job: Callable[[], object], runs: _Runs, what: str) -> None:
        started = self.clock.now()
        wall_start = self.wall.now()
        error: Exception | None = None
        result: object = None
        try:
            result = job()
        except Exception as exc:  # noqa: BLE001 - the daemon outlives any one failed round
            error = exc
        wall_done = self.wall.now()
        duration = (wall_done - wall_start).total_seconds()
        with self._lock:
            runs.count += 1
            runs.last_at = started
            runs.last_done_wall = wall_done
            runs.last_duration_s = duration
            set_aside = getattr(result, "set_aside", 0)  # the tick's TickReport; the report has none
            runs.set_aside += set_aside if isinstance(set_aside, int) else 0
            if error is None:
                runs.last_ok_at = started
                runs.last_ok_wall = wall_done
                runs.consecutive_errors = 0
            else:
                runs.errors += 1
                runs.consecutive_errors += 1
                runs.last_error = _describe(error)
                runs.last_error_at = started
            n, streak = runs.count, runs.consecutive_errors
        if runs is self._ticks:
            self.counters.tick_done(started=started, duration_s=duration, failed=error is not None,
                                    in_a_row=streak, result=result)
            if isinstance(error, ProviderError):
                self.counters.cloud_error(error.provider or "unknown", error.code or type(error).__name__)
        elif runs is self._budget_checks:
            self.counters.budget_check_done(failed=error is not None)
        else:
            self.counters.report_done(failed=error is not None)
        if error is None:
            log.debug(f"{what}_done", run=n, duration_s=round(duration, 3))
            return
        fields: dict[str, Any] = {"run": n, "failures_in_a_row": streak, "duration_s": round(duration, 3)}
        if isinstance(error, ProviderError):
            vendor = error.log_fields()  # its "error" and "message" are already in ours
            fields.update({k: vendor[k] for k in ("provider", "vendor_code", "request_id")})
        if isinstance(error, OperationalError):
            # The store locked or out of reach: a condition of the machine, not a fault in the code; its fix, not a
            # traceback (the next run tries again).
            fields["fix"] = store_fix(self.store, error)
        else:
            fields["exc_info"] = error
        log.error(f"{what}_failed", error=_describe(error), **fields)

    # --- health and metrics

    def _window(self) -> timedelta:
        return max(MIN_STALL, timedelta(seconds=STALL_TICKS * self.settings.tick_seconds))

    def _stalled(self, now_wall: datetime) -> bool:
        if self._started_wall is None:
            return False
        last = self._ticks.last_done_wall or self._started_wall
        return now_wall - last > self._window()

    def _failing(self, now_wall: datetime) -> bool:
        t = self._ticks
        if t.consecutive_errors >= FAILING_TICKS:
            return True
        if self._started_wall is None:
            return False
        return now_wall - (t.last_ok_wall or self._started_wall) > self._window()

    def _database(self) -> str:
        try:
            with self.store.session(write=False) as s:
                s.execute(text("SELECT 1"))
        except Exception as exc:  # noqa: BLE001 - reported, not raised: health must answer
            return f"unreachable: {type(exc).__name__}"
        return "ok"

    def health(self) -> dict[str, Any]:
        """For /healthz: status ok | stopped | stalled, when the tick and report last ran, the database; with
        a leadership, this daemon's role and the lease's holder, term and expiry (a follower is ready too).

        A database outage is shown but does not make the daemon unhealthy: a restart would not fix it.
        """
        database = self._database()
        now_wall = self.wall.now()
        with self._lock:
            t, r = self._ticks, self._reports
            if not self.scheduler.running:
                status = "stopped"
            elif self._stalled(now_wall):
                status = "stalled"
            elif self._failing(now_wall):
                status = "failing"
            else:
                status = "ok"
            body: dict[str, Any] = {
                "status": status,
                "last_tick": _iso(t.last_at),
                "last_tick_ok": _iso(t.last_ok_at),
                "last_tick_duration_s": t.last_duration_s,
                "ticks": t.count,
                "tick_errors": t.errors,
                "tick_errors_in_a_row": t.consecutive_errors,
                "jobs_set_aside": t.set_aside,
                "last_error": t.last_error,
                "last_error_at": _iso(t.last_error_at),
                "last_report": _iso(r.last_at),
                "last_report_error": r.last_error if r.consecutive_errors else None,
                "next_report": self._next_report(),
                "last_budget_check": _iso(self._budget_checks.last_at),
                "last_budget_check_error": self._budget_checks.last_error
                if self._budget_checks.consecutive_errors else None,
                "database": database,
            }
        if self.leadership is not None:
            leader = self.leadership.view()
            body["role"] = "leader" if leader["leads"] else "follower"
            body["leader"] = leader
        return body

    def _next_report(self) -> str | None:
        job = self.scheduler.get_job(REPORT_JOB) if self.scheduler.running else None
        return _iso(job.next_run_time) if job is not None else None

    def metrics(self) -> str:
        """Prometheus text for the daemon's own series (the API adds what the store knows)."""
        return render(self.registry).decode()

    # --- serving

    def serve(self) -> None:
        """Start the jobs, serve the API in the foreground until SIGTERM/SIGINT, then shut down cleanly."""
        if self.app is None:
            raise GpuschedError("Daemon.serve() needs the API app", fix="pass app=create_app(...) or set daemon.app")
        s = self.settings
        config = uvicorn.Config(
            self.app,
            host=s.api_host,
            port=s.api_port,
            log_config=None,  # logs.configure_logging owns logging; uvicorn's loggers propagate to it
            access_log=s.log_level == "debug",  # probes hit /healthz every few seconds
            server_header=False,
            timeout_graceful_shutdown=10,
        )
        server = uvicorn.Server(config)
        self._server = server
        self.start_jobs()
        log.info("daemon_serving", api=f"http://{s.api_host}:{s.api_port}")
        try:
            with self._stop_on_signals():
                server.run()
        except SystemExit:
            # uvicorn exits the process when it cannot bind; say why in our words.
            if server.started:
                raise
            why, fix = _bind_trouble(s.api_host, s.api_port)
            raise UserError(f"cannot serve the API on {s.api_host}:{s.api_port}{why}", fix=fix) from None
        finally:
            self.shutdown()

    def stop(self, reason: str = "asked to stop") -> None:
        """Ask a running ``serve`` to return (from a signal handler or another thread)."""
        self._stop_signal = reason
        if self._server is not None:
            self._server.should_exit = True

    def shutdown(self) -> None:
        """Stop the scheduler, waiting for a running tick to finish. Idempotent."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)
            log.info("daemon_stopped", reason=self._stop_signal or "server ended", ticks=self._ticks.count)
            if self.leadership is not None:
                try:  # hand over now rather than make the next leader wait out the lease
                    self.leadership.release()
                except Exception as exc:  # noqa: BLE001 - the lease then simply runs out
                    log.warning("lease_release_failed", error=_describe(exc))

    @contextmanager
    def _stop_on_signals(self) -> Iterator[None]:
        """SIGTERM/SIGINT stop the server and let ``serve`` return normally.

        uvicorn installs its own handlers while it runs and re-raises the signal
        after it stops; ours must be the ones it restores, or a re-raised SIGTERM
        would kill the process before the scheduler shut down.
        """
        if threading.current_thread() is not threading.main_thread():
            yield  # signals reach only the main thread; whoever started us calls stop()
            return

        def _handle(signum: int, _frame: FrameType | None) -> None:
            self.stop(signal.Signals(signum).name)

        previous = {sig: signal.signal(sig, _handle) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


_CRON_FIX = "five fields: minute hour day month weekday, e.g. '0 6 1 * *' (06:00 UTC on the 1st)"
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")  # cron numbers them 0-6 from Sunday (7 too)


def _cron(expr: str) -> CronTrigger:
    """A crontab line as cron means it, in UTC.

    Not ``CronTrigger.from_crontab``: APScheduler 3 counts weekdays from Monday,
    so it would run "30 2 * * 1" on Tuesdays. Weekdays are translated to names here.
    """
    fields = expr.split()
    try:
        if len(fields) != 5:
            raise ValueError(f"it has {len(fields)} fields, not 5")
        minute, hour, day, month, weekday = fields
        if day != "*" and weekday != "*":
            # cron runs when either matches, APScheduler only when both do: refuse rather than differ.
            raise ValueError("give either a day of the month or a weekday, not both")
        return CronTrigger(
            minute=minute, hour=hour, day=day, month=month, day_of_week=_weekday_names(weekday), timezone="UTC"
        )
    except ValueError as exc:
        raise SettingsError(f"GPUSCHED_REPORT_CRON {expr!r} is not a crontab line: {exc}", fix=_CRON_FIX) from None


def _weekday_names(field: str) -> str:
    """Cron's weekday field ("1-5", "0,6", "*/2", "mon") as APScheduler weekday names."""
    if field == "*":
        return field
    days: set[int] = set()
    for item in field.split(","):
        span, _, step_text = item.partition("/")
        step = int(step_text) if step_text else 1
        if step < 1:
            raise ValueError(f"weekday step {step_text!r} must be at least 1")
        if span == "*":
            first, last = 0, 6
        else:
            low, _, high = span.partition("-")
            first, last = _weekday(low), _weekday(high) if high else _weekday(low)
            if high and last == 0 and first > 0:
                last = 7  # "5-7" / "fri-sun": up to Sunday at the end of the week
            if last < first:
                raise ValueError(f"weekday range {span!r} runs backwards")
            if step_text and not high:
                last = 6  # "1/2" means from Monday on, every second day
        days.update(d % 7 for d in range(first, last + 1, step))
    return ",".join(_WEEKDAYS[d] for d in sorted(days))


def _weekday(text: str) -> int:
    name = text.strip().lower()
    if name in _WEEKDAYS:
        return _WEEKDAYS.index(name)
    if name.isdigit() and 0 <= int(name) <= 7:
        return int(name)  # 7 is Sunday again; the caller folds it
    raise ValueError(f"{text!r} is not a weekday (0-7 or sun-sat)")
