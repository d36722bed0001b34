"""``gpusched simulate --policy all``: several policies over one trace, each in its own process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.errors import UserError
from scheduler.simulation.compare import load_month, policies_of, run_policies, run_policy, sim_settings, solve_bound
from scheduler.simulation.simulate import POLICIES

JOB = {"team": "t", "kind": "train", "model": "yolov9-t", "data": {"uri": "s3://b/d", "train_images": 2000},
       "train": {"epochs": 2}, "resources": {"gpus": ["T4"]},
       "where": {"providers": ["alibaba"], "regions": ["cn-hangzhou"]}}


def small_trace(tmp_path: Path, n: int = 3) -> Path:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(
        json.dumps({"at": f"2026-11-02T{9 + k:02d}:00:00+08:00",
                    "job": {**JOB, "name": f"j{k}", "policy": {"deadline": "12h"}}}) + "\n" for k in range(n)))
    return trace


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("all", POLICIES),
        ("on-demand", ("on-demand",)),
        ("gpusched, on-demand,gpusched", ("gpusched", "on-demand")),  # each once, in the order given
        ("skypilot-like,spot-greedy", ("skypilot-like", "spot-greedy")),
    ],
)
def test_policies_are_one_name_a_list_or_all(text: str, expected: tuple[str, ...]) -> None:
    assert policies_of(text) == expected


@pytest.mark.parametrize("text", ["", " , ", "greedy", "gpusched,od"])
def test_an_unknown_policy_is_a_user_error_naming_the_choices(text: str) -> None:
    with pytest.raises(UserError) as e:
        policies_of(text)
    assert "unknown policy" in e.value.message and "skypilot-like" in (e.value.fix or "")


def _comparable(summary) -> dict:
    out = summary.model_dump(mode="json")
    del out["wall_seconds"]
    return out


def test_runs_in_processes_are_the_runs_of_one_process(tmp_path: Path) -> None:
    """The same summaries (but for wall time) in two processes, in one, and one policy at a time; the bound
    at the estimates is solved once and handed over; every policy gets the same bound at true speeds."""
    trace = small_trace(tmp_path)
    month = load_month(trace)
    bound = solve_bound(month, sim_settings(3, 60.0))
    policies = ("gpusched", "skypilot-like")
    finished: list[str] = []
    apart = run_policies(trace, policies, 3, 60.0, bound, workers=2, done=lambda r: finished.append(r.summary.policy))
    together = run_policies(trace, policies, 3, 60.0, bound, workers=1)
    assert list(apart) == list(together) == list(policies) and sorted(finished) == sorted(policies)
    for p in policies:
        alone = run_policy(trace, p, 3, 60.0, bound).summary
        assert _comparable(apart[p].summary) == _comparable(together[p].summary) == _comparable(alone), p
        assert apart[p].cpu_seconds > 0
    bounds = {(r.summary.lower_bound_cost, r.summary.lower_bound_true_speed_cost) for r in apart.values()}
    assert len(bounds) == 1 and None not in next(iter(bounds))
