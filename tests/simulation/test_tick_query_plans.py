"""No question the tick asks every round reads a whole table.

A daemon's store, and a month's simulation, keep every job, machine, interval and cost record they
ever had: a query that SQLite answers by walking a table grows slower each day, and a month of ticks
spent most of its time there (the month roll-over's open intervals, spot machines to terminate found
through ``job_id IS NULL``, which every terminated machine matches, and reconcile's live machines found
through the provider's index, which holds every machine the provider ever ran). The small seeded month is run
with every statement its ticks, its simulated agents and its event search issue captured, and
SQLite's plan for each is asked on the store the run leaves behind.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from scheduler.settings import Settings
from scheduler.simulation import simulate as sim
from scheduler.simulation.simagent import SimAgents
from scheduler.simulation.trace_file import load_trace

TRACE = Path(__file__).resolve().parent / "data" / "small-trace.jsonl"

# The store's tables that grow with its history (the lease and settings tables hold a row or two).
GROWING = ("jobs", "attempts", "instances", "usage_intervals", "cost_records", "events", "perf_samples",
           "job_logs", "idle_stops")


@contextmanager
def _captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, tuple]]:
    """Every distinct statement issued inside a tick, an agents' step or the event search, with its parameters."""
    seen: dict[str, tuple] = {}
    inside = [0]

    def listen(conn, cursor, statement, params, context, executemany) -> None:
        if inside[0] and not executemany and statement.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE")):
            seen.setdefault(statement, tuple(params or ()))

    def counted(fn):
        def wrapper(*args, **kwargs):
            inside[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                inside[0] -= 1
        return wrapper

    monkeypatch.setattr(sim.lifecycle, "tick", counted(sim.lifecycle.tick))
    monkeypatch.setattr(sim, "_next_event", counted(sim._next_event))
    monkeypatch.setattr(sim, "open_work", counted(sim.open_work))
    monkeypatch.setattr(SimAgents, "step", counted(SimAgents.step))
    monkeypatch.setattr(SimAgents, "step_started", counted(SimAgents.step_started))
    event.listen(Engine, "before_cursor_execute", listen)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", listen)


def test_no_statement_of_a_tick_walks_a_growing_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entries = load_trace(TRACE)
    subs = [sim.Submission(at=e.at, job=e.job, source=f"{TRACE.name}:{i + 1}") for i, e in enumerate(entries)]
    settings = Settings(_env_file=None, cluster="sim", sandbox_seed=3, tick_seconds=10.0)
    with _captured(monkeypatch) as seen:
        summary = sim.simulate(subs, policy="gpusched", seed=3, settings=settings, work_dir=tmp_path)
    assert summary.ticks > 100 and len(seen) > 40, (summary.ticks, len(seen))  # the run did ask its questions
    db = sqlite3.connect(str(tmp_path / "sim-gpusched.db"))
    walks = []
    for statement, params in seen.items():
        steps = [row[-1] for row in db.execute(f"EXPLAIN QUERY PLAN {statement}", params)]
        walked = [step for step in steps if step.split()[:1] == ["SCAN"] and step.split()[1] in GROWING
                  and "INDEX" not in step]
        # Keys that every row of the history shares: ``job_id IS NULL`` (every machine ever terminated is idle)
        # and a provider alone (every machine it ever ran).
        walked += [step for step in steps if "INDEX ix_instances_job_id" in step and "job_id IS NULL" in statement]
        walked += [step for step in steps if "INDEX ix_instances_cloud (provider=?)" in step]
        if walked:
            walks.append((" ".join(statement.split())[:200], walked))
    db.close()
    assert walks == []
