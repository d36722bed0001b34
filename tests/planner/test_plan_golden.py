"""The planner's decisions on large seeded workloads are the ones it made before its speed-ups.

``golden`` builds the workloads (the speed benchmark's 9,820 stress-trace jobs against 2,000 offers,
submitted as in the trace and all at once; and 3,000 jobs with a fleet, avoided offers, resumed jobs,
budgets and measured rates, under ours and a baseline) and digests every decision's JSON; the
digests in ``data/plan_digests.json`` were written by the code before issue 17's speed work. A few
seconds of CPU per workload.
"""

from __future__ import annotations

import json

import pytest

from scheduler.simulation.trace_file import TraceEntry, load_trace
from tests.planner.golden import CASES, FIXTURE, STRESS, case_name, digest, plan_of


@pytest.fixture(scope="module")
def entries() -> list[TraceEntry]:
    return load_trace(STRESS)


@pytest.mark.parametrize(("name", "strategy"), CASES, ids=[case_name(n, s) for n, s in CASES])
def test_the_plan_of_a_large_workload_is_unchanged(entries: list[TraceEntry], name: str, strategy: str | None) -> None:
    expected = json.loads(FIXTURE.read_text())[case_name(name, strategy)]
    got = digest(plan_of(name, entries, strategy=strategy))
    assert got["actions"] == expected["actions"]
    first_diff = next((i for i, (a, b) in enumerate(zip(got["chunks"], expected["chunks"], strict=True)) if a != b),
                      None)
    assert first_diff is None, f"decisions {first_diff * 500}-{first_diff * 500 + 499} differ from the fixture's"
    assert got["sha256"] == expected["sha256"]
