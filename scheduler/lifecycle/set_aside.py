"""One bad job never stops everyone's scheduling: a job the tick cannot read, plan, price or write is
set aside with its reason, and the tick goes on with every other job.

Two ways, as the job deserves:

* **failed**: what the job itself brought is unusable, so no later tick can do better: its stored job
  file no longer passes the job file's validation (a job stored before ``scheduler.limits`` existed,
  with a budget of ``1e999999999`` say, or a row written by hand). Resubmitting a corrected file is
  the fix, and the reason says what to correct.
* **held**: planning or writing it failed for a reason that may pass (or a bug that an upgrade
  fixes): it stays queued, its reason says why it is held, and the next tick tries it again.

Either way the job's reason (``gpusched status``) and an event (``job_set_aside`` / ``job_held``) say
what happened, the tick report counts it (``set_aside``, read by the daemon's metrics), and the log
has the traceback.
"""

from __future__ import annotations

from datetime import datetime

import structlog
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from scheduler.errors import GpuschedError
from scheduler.lifecycle.context import TickContext, TickReport
from scheduler.lifecycle.transitions import set_job
from scheduler.states import JOB_OPEN, JOB_TERMINAL, JobState
from scheduler.store.database import add_event, store_trouble
from scheduler.store.tables import JobRow

log = structlog.get_logger("gpusched.tick")

J = JobState
_REASON_CHARS = 500

__all__ = ["describe", "screen_stored_specs", "set_aside"]


def describe(exc: BaseException) -> str:
    """One line for a job's reason: the error's own words, never a traceback."""
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors(include_url=False)[:3]:
            where = ".".join(str(p) for p in err["loc"]) or "(file)"
            parts.append(f"{where}: {str(err['msg']).removeprefix('Value error, ')}")
        text = "; ".join(parts)
    elif isinstance(exc, GpuschedError):
        text = exc.message
    elif isinstance(exc, SQLAlchemyError):  # the driver's words, without the SQL and the background link
        text = store_trouble(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # a reason is printed and stored
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 3] + "..."


# Asked every tick: built once (``scheduler.store.database``, "Statements built once").
_OPEN_JOB_IDS = select(JobRow.id).where(JobRow.state.in_(JOB_OPEN))


def screen_stored_specs(ctx: TickContext, now: datetime, report: TickReport) -> None:
    """Fail every live job whose stored job file cannot be read back, before any phase trips on it.

    Each job's spec is validated once (``ctx.spec_of`` keeps it), so a tick reads only new jobs' specs.
    """
    with ctx.store.session(write=False) as s:
        live = s.scalars(_OPEN_JOB_IDS).all()
        unread = [job_id for job_id in live if job_id not in ctx.specs]
        if not unread:
            return
        stored = s.execute(select(JobRow.id, JobRow.spec_json).where(JobRow.id.in_(unread))).all()
    for job_id, spec_json in stored:
        try:
            ctx.spec_of(job_id, spec_json)
        except Exception as exc:  # noqa: BLE001 - whatever is wrong with one job's data stays with that job
            set_aside(ctx, now, report, job_id, f"its stored job file is not valid any more ({describe(exc)}); "
                      "correct it and submit it again", fail=True, exc=exc)


def set_aside(ctx: TickContext, now: datetime, report: TickReport, job_id: str, reason: str, *, fail: bool,
              exc: BaseException | None = None) -> None:
    """Fail or hold ``job_id`` with ``reason``; never raises (a store that cannot write it is logged)."""
    report.set_aside += 1
    report.errors.append(f"job {job_id}: {reason}")
    log.warning("job_set_aside", job=job_id, failed=fail, reason=reason, exc_info=exc)
    try:
        with ctx.store.session() as s:
            job = s.get(JobRow, job_id)
            if job is None or J(job.state) in JOB_TERMINAL:
                return
            if fail:
                if J(job.state) is J.planned:
                    set_job(job, J.queued, now)  # planned -> failed is no move of its own
                set_job(job, J.failed, now, f"set aside: {reason}")
                job.finished_at = now
                add_event(s, now, "job_set_aside", reason, job_id=job_id)
                return
            held = f"held: {reason}; tried again on the next tick"
            if J(job.state) is not J.queued or job.reason == held:
                return  # launched meanwhile (the write-ahead intents carry on), or already said
            set_job(job, J.queued, now, held)
            add_event(s, now, "job_held", reason, job_id=job_id)
    except Exception as write_error:  # noqa: BLE001 - the other jobs must still be scheduled
        log.error("job_set_aside_not_written", job=job_id, error=describe(write_error), exc_info=write_error)
