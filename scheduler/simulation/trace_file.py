"""The trace file: JSON lines of ``{"at": <ISO time>, "job": <job.yaml as JSON>}``.

A trace is what ``gpusched simulate`` replays: each line submits one job at
``at``; a relative deadline (``"36h"``) counts from ``at``. Files are ``.jsonl``
or gzip-compressed ``.jsonl.gz``. Every job is validated as a job file is, and a
bad line is reported with its line number and every field at fault.

The first line may instead be ``{"market": {"reclaim_scale": {...}}}``: the market the month runs
in (``market.MarketSpec``, written by ``trace generate --reclaim-scale``); without it, the catalog's.
"""

from __future__ import annotations

import gzip
import io
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterable

from pydantic import AwareDatetime, ValidationError

from scheduler.errors import JobFileError, UserError
from scheduler.jobs.jobfile import parse_job, submit_problems
from scheduler.limits import EARLIEST_TIME, LATEST_TIME
from scheduler.models import Frozen, JobSpec
from scheduler.simulation.market import MarketSpec

__all__ = ["TraceEntry", "dump_trace", "entry_json", "load_trace", "load_trace_market"]


MAX_TRACE_BYTES = 256 << 20
MAX_SPAN = timedelta(days=366)  # from a trace's first submission to its last


class TraceEntry(Frozen):
    """One submission: ``job`` arrives at ``at``."""

    at: AwareDatetime
    job: JobSpec

    @property
    def deadline_at(self) -> datetime | None:
        return self.job.deadline_at(self.at)


def _is_gzip(path: Path) -> bool:
    return path.suffix == ".gz"


def load_trace(path: str | Path) -> list[TraceEntry]:
    """Every entry of a ``.jsonl`` / ``.jsonl.gz`` trace, in file order; blank lines are skipped.

    Raises ``UserError`` (a ``JobFileError`` for a bad job) naming the file and the line.
    """
    return load_trace_market(path)[0]


def load_trace_market(path: str | Path) -> tuple[list[TraceEntry], MarketSpec]:
    """``load_trace``'s entries and the market of the trace's first line (the catalog's when it has none)."""
    p = Path(path)
    try:
        with (gzip.open(p, "rb") if _is_gzip(p) else p.open("rb")) as f:
            raw = f.read(MAX_TRACE_BYTES + 1)  # never more: a gzip bomb, /dev/zero, the wrong file
        if len(raw) > MAX_TRACE_BYTES:
            raise UserError(f"{p}: over {MAX_TRACE_BYTES // 2**20} MiB of JSON lines (uncompressed)",
                            fix="a month of a busy cluster is a few MiB; split the trace or check the file")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise UserError(f"{p}: no such trace file",
                        fix="generate one: python -m scheduler.simulation.traces --out FILE") from None
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise UserError(f"{p}: cannot be read ({exc})", fix="a trace is .jsonl or gzip-compressed .jsonl.gz") from None
    except UnicodeDecodeError:
        raise UserError(f"{p}: is not UTF-8 text", fix="a trace is JSON lines in UTF-8") from None
    entries: list[TraceEntry] = []
    lines: list[int] = []  # each entry's line number
    market = None
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if market is None and not entries and _is_market(line):
            market = _market(line, f"{p}: line {n}")
            continue
        entries.append(_entry(line, f"{p}: line {n}"))
        lines.append(n)
    if not entries:
        raise UserError(f"{p}: holds no jobs", fix=_LINE_FIX + "; one line per job")
    first = min(range(len(entries)), key=lambda k: entries[k].at)
    last = max(range(len(entries)), key=lambda k: entries[k].at)
    if entries[last].at - entries[first].at > MAX_SPAN:
        days = (entries[last].at - entries[first].at).days
        # A simulation steps through the quiet hours between submissions too: years of them would run for hours.
        raise UserError(f"{p}: its jobs are submitted over {days:,} days (line {lines[first]} to line "
                        f"{lines[last]}); a trace may span at most {MAX_SPAN.days} days",
                        fix="split it into traces of a month or a few (check the dates of those lines)")
    return entries, market or MarketSpec()


_MARKET_FIX = 'the first line may be {"market": {"reclaim_scale": {"aws": 2.0, "*": 1.0}}}'


def _is_market(line: str) -> bool:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError:
        return False  # _entry reports it
    return isinstance(doc, dict) and "market" in doc


def _market(line: str, where: str) -> MarketSpec:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: not JSON ({exc.msg} at column {exc.colno})", fix=_MARKET_FIX) from None
    if not isinstance(doc, dict) or set(doc) != {"market"}:
        raise UserError(f"{where}: a market line has the one key 'market'", fix=_MARKET_FIX)
    try:
        return MarketSpec.model_validate(doc["market"])
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'market'}: {e['msg']}" for e in exc.errors())
        raise UserError(f"{where}: market: {problems}", fix=_MARKET_FIX) from None


_LINE_FIX = 'each line is {"at": "2026-11-02T09:00:00+08:00", "job": {...job.yaml as JSON...}}'


def _entry(line: str, where: str) -> TraceEntry:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: not JSON ({exc.msg} at column {exc.colno})", fix=_LINE_FIX) from None
    if not isinstance(doc, dict):
        raise UserError(f"{where}: a line must be a JSON object, not {type(doc).__name__}", fix=_LINE_FIX)
    unknown = sorted(set(doc) - {"at", "job"})
    missing = [k for k in ("at", "job") if k not in doc]
    if unknown or missing:
        parts = [f"missing {', '.join(missing)}"] if missing else []
        parts += [f"unknown key(s) {', '.join(unknown)}"] if unknown else []
        raise UserError(f"{where}: {'; '.join(parts)}", fix=_LINE_FIX)
    at = _at(doc["at"], where)
    spec = parse_job(doc["job"], where)
    problems = submit_problems(spec, at)
    if problems:
        raise JobFileError(where, problems)
    return TraceEntry(at=at, job=spec)


def _at(value: object, where: str) -> datetime:
    fix = 'an ISO time with a UTC offset, e.g. "2026-11-02T09:00:00+08:00"'
    if not isinstance(value, str):
        raise UserError(f"{where}: at: must be a time string, not {type(value).__name__}", fix=fix)
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise UserError(f"{where}: at: {value!r} is not an ISO time", fix=fix) from None
    if at.tzinfo is None:
        raise UserError(f"{where}: at: {value!r} has no UTC offset", fix=fix)
    if not EARLIEST_TIME.year <= at.year < LATEST_TIME.year:  # the written year: year 9999 -05:00 overflows in UTC
        raise UserError(f"{where}: at: {value!r} is outside the years {EARLIEST_TIME.year}-{LATEST_TIME.year - 1}, "
                        "the times gpusched computes with", fix=fix)
    return at


def entry_json(entry: TraceEntry) -> str:
    """One trace line. Defaults are left out: the job parses back to the same spec."""
    job = entry.job.model_dump(mode="json", exclude_defaults=True, exclude_none=True)
    return json.dumps({"at": entry.at.isoformat(), "job": job}, separators=(",", ":"), ensure_ascii=False)


def dump_trace(entries: Iterable[TraceEntry], path: str | Path, market: MarketSpec | None = None) -> None:
    """Write ``entries`` as JSON lines; gzip-compressed when ``path`` ends in ``.gz``.

    A ``market`` other than the catalog's goes first, on its own line. The gzip header carries no
    time or name, so the same entries give the same bytes.
    """
    p = Path(path)
    head = "" if market is None or market.is_catalog else (
        json.dumps({"market": market.model_dump(mode="json")}, separators=(",", ":"), sort_keys=True) + "\n")
    data = (head + "".join(entry_json(e) + "\n" for e in entries)).encode("utf-8")
    if _is_gzip(p):
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
            gz.write(data)
        data = buf.getvalue()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    except OSError as exc:
        raise UserError(f"cannot write trace {p}: {exc.strerror or exc}", fix="check the path") from None
