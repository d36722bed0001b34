"""The jobs' output in the store: what each attempt's agent shipped (``POST /v1/agent/logs``, or the
simulated agent directly), kept per attempt up to a limit (``GPUSCHED_JOB_LOG_BYTES``), read by
``GET /v1/jobs/{id}/logs`` and ``gpusched logs``.

An attempt's output is one stream of whole lines; positions in it are UTF-8 bytes from its start. The
agent says where each batch starts (``start``): a batch sent again (its answer was lost) or partly
again (an agent that restarted reads its log from the top) is stored once, since cleaning
(``jobs/output_text.py``) gives both sides the same bytes. Past the limit the oldest pieces go;
a reader that asks for a position no longer kept is told how many bytes it missed (``dropped``).

Small batches are appended to the newest piece until it holds ``PIECE_BYTES``, so an attempt keeps a
few dozen rows, not one per batch.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from scheduler.jobs.output_text import clean_lines, utf8_size
from scheduler.models import Frozen
from scheduler.states import JOB_TERMINAL, AttemptState, JobState
from scheduler.store.tables import AttemptRow, JobLogRow, JobRow

PIECE_BYTES = 32 << 10  # a piece smaller than this takes the next batch in
READ_BYTES = 1 << 20  # at most this much text per answer; the reader asks again from next_offset
_LIVE = (AttemptState.launching.value, AttemptState.running.value)


class JobLogs(Frozen):
    """A stretch of one attempt's output, as ``GET /v1/jobs/{id}/logs`` answers."""

    job_id: str
    state: JobState  # the job's
    attempt: int | None  # None: the job has not run yet
    attempts: list[int]  # every attempt that ran or runs, oldest first
    offset: int  # where ``text`` starts in the attempt's output (bytes)
    next_offset: int  # where it ends: ask from here for what follows
    end: int  # how much of the attempt's output the daemon has received so far
    dropped: int  # bytes from the position asked for up to ``offset`` that are no longer kept
    text: str  # whole lines
    done: bool  # the attempt has ended: no more output will come for it
    limit_bytes: int  # how much of each attempt's output the daemon keeps


def output_end(s: Session, job_id: str, attempt: int) -> int:
    """How many bytes of the attempt's output the store has received (kept or dropped)."""
    end = s.scalar(select(func.max(JobLogRow.start + JobLogRow.size))
                   .where(JobLogRow.job_id == job_id, JobLogRow.attempt == attempt))
    return int(end or 0)


def append_output(s: Session, job_id: str, attempt: int, start: int, text: str, now: datetime, *,
                  limit: int) -> int:
    """Store ``text`` (lines; cleaned here) at ``start`` bytes into the attempt's output, then drop the
    oldest pieces past ``limit``; returns the attempt's end. What the store already has is not stored
    again; a batch past the end (an agent that lost some) is stored where it says, leaving a gap."""
    data = clean_lines(text).encode("utf-8")
    newest = s.scalars(select(JobLogRow).where(JobLogRow.job_id == job_id, JobLogRow.attempt == attempt)
                       .order_by(JobLogRow.start.desc()).limit(1)).first()
    end = newest.start + newest.size if newest is not None else 0
    if start < end:  # sent before, in whole or in part
        data, start = data[end - start:], end
    if not data:
        return end
    piece = data.decode("utf-8", errors="ignore")
    if newest is not None and newest.start + newest.size == start and newest.size < PIECE_BYTES:
        newest.text += piece
        newest.size += len(data)
        newest.at = now
    else:
        s.add(JobLogRow(job_id=job_id, attempt=attempt, start=start, size=len(data), text=piece, at=now))
    s.flush()
    _trim(s, job_id, attempt, limit)
    return start + len(data)


def append_lines(s: Session, job_id: str, attempt: int, text: str, now: datetime, *, limit: int) -> int:
    """``append_output`` at the attempt's end: for output the daemon writes itself (the simulated agent)."""
    return append_output(s, job_id, attempt, output_end(s, job_id, attempt), text, now, limit=limit)


def _trim(s: Session, job_id: str, attempt: int, limit: int) -> None:
    """Keep the newest ``limit`` bytes: whole older pieces go, and a newest piece over the limit on its own
    loses its first lines."""
    pieces = s.execute(select(JobLogRow.id, JobLogRow.size)
                       .where(JobLogRow.job_id == job_id, JobLogRow.attempt == attempt)
                       .order_by(JobLogRow.start.desc())).all()
    kept, gone = 0, []
    for piece_id, size in pieces:  # newest first: once one is dropped, every older one goes too
        if gone or (kept > 0 and kept + size > limit):
            gone.append(piece_id)
        else:
            kept += size
    if gone:
        s.execute(delete(JobLogRow).where(JobLogRow.id.in_(gone)))
    if pieces and pieces[0].size > limit:
        row = s.get(JobLogRow, pieces[0].id)
        if row is not None:
            _cut_head(row, limit)


def _cut_head(row: JobLogRow, limit: int) -> None:
    """Drop the first lines of ``row`` until it holds at most ``limit`` bytes (whole lines stay whole)."""
    data = row.text.encode("utf-8")
    cut = len(data) - limit
    newline = data.find(b"\n", cut - 1) if cut > 0 else -1
    keep = data[newline + 1:] if newline >= 0 else b""
    row.start += len(data) - len(keep)
    row.size = len(keep)
    row.text = keep.decode("utf-8", errors="ignore")


def read_output(s: Session, job: JobRow, attempt: int | None, offset: int, *, limit: int,
                max_bytes: int = READ_BYTES) -> JobLogs:
    """The attempt's output from ``offset`` on (at most about ``max_bytes``); ``attempt`` None: the latest.
    Raises LookupError (with the job's attempt numbers) for an attempt the job never had."""
    numbers = list(s.scalars(select(AttemptRow.number).where(AttemptRow.job_id == job.id)
                             .order_by(AttemptRow.number)))
    state = JobState(job.state)
    if attempt is None:
        attempt = numbers[-1] if numbers else None
    elif attempt not in numbers:
        raise LookupError(numbers)
    if attempt is None:
        return JobLogs(job_id=job.id, state=state, attempt=None, attempts=numbers, offset=0, next_offset=0,
                       end=0, dropped=0, text="", done=state in JOB_TERMINAL, limit_bytes=limit)
    row_state = s.scalar(select(AttemptRow.state).where(AttemptRow.job_id == job.id, AttemptRow.number == attempt))
    done = row_state not in _LIVE or state in JOB_TERMINAL or attempt != numbers[-1]
    pieces = s.scalars(select(JobLogRow).where(JobLogRow.job_id == job.id, JobLogRow.attempt == attempt,
                                               JobLogRow.start + JobLogRow.size > offset)
                       .order_by(JobLogRow.start)).all()
    end = output_end(s, job.id, attempt)
    offset = max(0, min(offset, end))
    parts: list[bytes] = []
    at = first = None
    taken = 0
    for piece in pieces:
        if at is not None and (piece.start != at or taken >= max_bytes):
            break  # a gap (pieces lost in transit) is reported as dropped on the next read
        data = piece.text.encode("utf-8")
        skip = max(0, offset - piece.start)
        parts.append(data[skip:])
        taken += len(data) - skip
        first = piece.start + skip if first is None else first
        at = piece.start + piece.size
    if first is None:
        first = offset
    text = b"".join(parts).decode("utf-8", errors="ignore")
    return JobLogs(job_id=job.id, state=state, attempt=attempt, attempts=numbers, offset=first,
                   next_offset=first + utf8_size(text), end=end, dropped=max(0, first - offset), text=text,
                   done=done, limit_bytes=limit)
