"""A seeded small month, simulated under ours and a baseline, must come out as it always has.

Speed work on the tick (issue 17 item 4: the working set kept between ticks, fewer transactions,
the candidate book reused) must change no outcome. ``data/small-trace.jsonl`` is the first 30 jobs
of ``gpusched trace generate --seed 5 --teams 2 --jobs 40``; ``data/small-summaries.json`` holds what
``simulate`` (sandbox seed 3) returned for it before that work: every field of the summary but its
wall time, and every job it explains. Rewritten once since, when the ledger learnt each cloud's billing rule
(AWS does not bill the boot): costs only, every decision, tick and outcome the same; and once when the
steering rule began to read the planner's learned rates (ours only: ``shelf-audit-c-w46`` on time, no longer
1.3 h late); and once when the simulated agents began to date a progress report when its last epoch ended
(ours 266.92 -> 268.05 CNY, 244 -> 248 ticks; skypilot-like's summary the same), and once when a waiting job
the steering rule would send to on-demand was left to the planner where a faster machine on spot meets its
deadline (ours 268.05 -> 268.33 CNY, 248 -> 244 ticks), and once when the steering rule and the planner began
to read a job's own measured rates before its key's (ours 268.33 -> 269.32 CNY, no miss either way; skypilot-like
the same), and once when the rule's guard began to ask the planner for a faster on-demand way out before leaving
spot (ours 269.32 -> 268.94 CNY, 244 -> 240 ticks, its 1.13 CNY of on-demand gone, no miss; skypilot-like the
same), and once when the simulator stopped jumping past the moment the steering rule asked to be asked again
(``TickContext.look_again_by``; ours 240 -> 244 ticks, nothing else), and once when that moment stopped waiting
past the next checkpoint for a job its own epochs had not yet timed on its GPU (ours 244 -> 288 ticks, nothing
else; 290 once a job looked at only for that moment was weighed on its own rates too). Rewrite it only for a
change meant to change outcomes: ``.venv/bin/python -m tests.simulation.test_simulate_golden --write``. A field
added to the summary without a change of outcome is added to the fixture as it comes out here (the on-time floor,
``floor_true_speed_cost``: null, as no bound is asked for).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from scheduler.logs import configure_logging
from scheduler.settings import Settings
from scheduler.simulation.simulate import Submission, simulate
from scheduler.simulation.trace_file import load_trace

DATA = Path(__file__).resolve().parent / "data"
TRACE = DATA / "small-trace.jsonl"
FIXTURE = DATA / "small-summaries.json"
SEED = 3
POLICIES = ("gpusched", "skypilot-like")  # ours, and the baseline that restarts from scratch


def summary_of(policy: str) -> dict:
    entries = load_trace(TRACE)
    subs = [Submission(at=e.at, job=e.job, source=f"{TRACE.name}:{i + 1}") for i, e in enumerate(entries)]
    settings = Settings(_env_file=None, cluster="sim", sandbox_seed=SEED, tick_seconds=10.0)
    s = simulate(subs, policy=policy, seed=SEED, settings=settings)
    out = s.model_dump(mode="json")
    del out["wall_seconds"]
    out["explained"] = [{k: str(v) for k, v in asdict(r).items()} for r in s.explained]
    return out


@pytest.mark.parametrize("policy", POLICIES)
def test_the_small_month_comes_out_as_it_always_has(policy: str) -> None:
    expected = json.loads(FIXTURE.read_text())[policy]
    got = summary_of(policy)
    assert got["ticks"] == expected["ticks"]
    assert got == expected


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.simulation.test_simulate_golden --write")
    configure_logging("console", "warning")
    FIXTURE.write_text(json.dumps({p: summary_of(p) for p in POLICIES}, indent=1, sort_keys=True) + "\n")
    print(FIXTURE.read_text())
