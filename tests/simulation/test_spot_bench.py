"""The trace loader, the replay, the exact optimum and the benchmark, on tiny synthetic traces."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from scheduler.errors import UserError
from scheduler.planner.spot_rule import IDLE, OD, POLICIES, SPOT, Facts
from scheduler.simulation.spotbench.bench import (
    ALL,
    GROUPS,
    P3_2XLARGE_ON_DEMAND,
    BenchResult,
    price_ratio,
    run_spot_bench,
    start_points,
)
from scheduler.simulation.spotbench.optimal import forward_runs, optimal
from scheduler.simulation.spotbench.replay import Lanes, replay
from scheduler.simulation.spotbench.report import render_markdown, write_outputs
from scheduler.simulation.spotbench.traces import (
    TRACES_COMMIT,
    TRACES_ORIGIN,
    load_traces,
    resample,
    spells,
)

# -- an independent, scalar model of the same job: the yardstick for replay and DP ---------


def simulate(
    avail: np.ndarray, start: int, plan: list[int], compute: int, changeover: int, k: float
) -> tuple[float, int]:
    """(cost, finish tick) of following ``plan`` (a target per tick); finish -1 if unfinished.

    Spot must be available when chosen; a running spot whose market vanishes is idle.
    """
    state, warm, progress, cost = IDLE, 0, 0, 0.0
    for t, target in enumerate(plan):
        spot_now = bool(avail[start + t])
        if state == SPOT and not spot_now:
            state, warm = IDLE, 0
        assert target != SPOT or spot_now
        if target != state and target != IDLE:
            warm = changeover
        if target == IDLE:
            warm = 0
        state = target
        cost += {IDLE: 0.0, SPOT: 1.0, OD: k}[state]
        if state != IDLE:
            if warm:
                warm -= 1
            else:
                progress += 1
        if progress >= compute:
            return cost, t + 1
    return cost, -1


def brute_force(avail: np.ndarray, start: int, deadline: int, compute: int, changeover: int, k: float) -> float:
    best = math.inf

    def walk(plan: list[int]) -> None:
        nonlocal best
        cost, finish = simulate(avail, start, plan, compute, changeover, k)
        if finish >= 0:
            best = min(best, cost)
            return
        if len(plan) == deadline or cost >= best:
            return
        for target in (IDLE, SPOT, OD):
            if target == SPOT and not avail[start + len(plan)]:
                continue
            walk(plan + [target])

    walk([])
    return best


@pytest.mark.parametrize("seed", range(12))
def test_optimum_is_exact_on_small_cases(seed: int) -> None:
    rng = np.random.default_rng(seed)
    avail = rng.random(14) < rng.uniform(0.3, 0.9)
    deadline = int(rng.integers(4, 9))
    compute = int(rng.integers(1, deadline))
    changeover = int(rng.integers(1, 3))
    k = float(rng.choice([2.0, 3.3]))
    starts = np.arange(0, len(avail) - deadline + 1)
    got = optimal(avail, 1.0, k, starts, deadline=deadline, compute=compute, changeover=changeover).cost
    want = [brute_force(avail, int(s), deadline, compute, changeover, k) for s in starts]
    np.testing.assert_allclose(got, want)


def test_optimum_tracks_its_spot_work() -> None:
    avail = np.array([1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1], dtype=bool)
    # 6 ticks of work, due in 12, changeover 1: spot at 0-3 (3 of work), idle 4-5, spot 6-9 (3 of work).
    res = optimal(avail, 0.5, 3.0, np.array([0]), deadline=12, compute=6, changeover=1, track_spot_work=True)
    assert res.cost[0] == pytest.approx(8 * 0.5)
    assert res.spot_work_h is not None and res.spot_work_h[0] == pytest.approx(6 * 0.5)


def test_optimum_refuses_a_window_outside_the_trace() -> None:
    with pytest.raises(ValueError):
        optimal(np.ones(10, dtype=bool), 1.0, 3.0, np.array([5]), deadline=8, compute=4, changeover=1)


# -- the replay ---------------------------------------------------------------------------


def one_lane(start: int, deadline: int, compute: int, changeover: int) -> Lanes:
    return Lanes(np.array([start]), np.array([deadline]), np.array([compute]), np.array([changeover]))


def test_replay_follows_the_model_through_a_reclaim() -> None:
    # Greedy: launch spot (1 tick of changeover), 4 ticks of work, reclaimed at tick 5, waits,
    # relaunches at tick 8 (1 tick), 4 more ticks of work: done at tick 13, 10 spot ticks billed.
    avail = np.array([1] * 5 + [0] * 3 + [1] * 20, dtype=bool)
    out = replay(POLICIES["greedy"], avail, 0.5, 3.0, one_lane(0, 20, 8, 1))
    assert out.cost[0] == pytest.approx(10 * 0.5)
    assert out.finish_h[0] == pytest.approx(13 * 0.5)
    assert (out.reclaims[0], out.changeovers[0], out.spot_work_h[0], out.od_h[0]) == (1, 2, 4.0, 0.0)
    assert not out.missed[0]


def test_od_only_costs_k_times_work_and_changeover() -> None:
    out = replay(POLICIES["od-only"], np.ones(40, dtype=bool), 0.25, 3.3, one_lane(0, 30, 20, 3))
    assert out.cost[0] == pytest.approx(3.3 * 23 * 0.25)
    assert out.finish_h[0] == pytest.approx(23 * 0.25)


def test_replay_and_scalar_model_agree_on_any_policy_path() -> None:
    rng = np.random.default_rng(3)
    avail = rng.random(400) < 0.6
    lanes = Lanes(np.array([0, 50, 120]), np.array([120, 100, 90]), np.array([80, 70, 60]), np.array([2, 3, 1]))
    seen: list[np.ndarray] = []

    def recorder(x: Facts):  # type: ignore[no-untyped-def]
        choice = POLICIES["gpusched"](x)
        seen.append(np.where(x.done, IDLE, choice.target))
        return choice

    out = replay(recorder, avail, 0.1, 3.0, lanes)
    plans = np.stack(seen, axis=1)
    for i in range(len(lanes)):
        finish = round(out.finish_h[i] / 0.1)
        cost, done = simulate(
            avail, int(lanes.start[i]), list(plans[i, :finish]), int(lanes.compute[i]), int(lanes.changeover[i]), 3.0
        )
        assert (cost * 0.1, done) == (pytest.approx(out.cost[i]), finish)


def test_replay_reports_what_a_daemon_would_have_seen() -> None:
    avail = np.array([1, 1, 0, 0, 0, 1, 1, 1, 0, 1] * 6, dtype=bool)
    facts_at: dict[int, Facts] = {}

    def spy(x: Facts):  # type: ignore[no-untyped-def]
        facts_at[round(x.elapsed_h[0] / 0.5)] = x
        return POLICIES["od-only"](x)

    replay(spy, avail, 0.5, 3.0, one_lane(10, 40, 20, 1))
    at4 = facts_at[4]  # trace ticks 10..14 observed: 1,1,0,0,0 (the spell began before the job)
    assert at4.observed_h[0] == 2.5 and at4.spot_seen_h[0] == 1.0 and at4.spot_spells[0] == 0
    assert at4.outage_h[0] == 1.5 and at4.spell_h[0] == 0.0
    at6 = facts_at[6]  # ...,1,1: the first spell that began while watching, two ticks old
    assert at6.spell_h[0] == 1.0 and at6.outage_h[0] == 0.0 and at6.spot_spells[0] == 1
    assert at6.remaining_h[0] == (40 - 6) * 0.5


@pytest.mark.parametrize("seed", range(4))
def test_no_policy_misses_and_none_beats_the_optimum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    # Outages and spells of random lengths, like the published traces (mostly short, some long).
    runs = rng.geometric(rng.uniform(0.02, 0.3), size=200)
    avail = np.concatenate([np.full(n, i % 2 == 0) for i, n in enumerate(runs)])[:3000]
    starts = np.array(sorted(rng.integers(0, len(avail) - 200, size=20)))
    deadline, compute, changeover = 180, int(rng.integers(120, 170)), int(rng.integers(1, 6))
    deadline = max(deadline, compute + changeover + 1)
    lanes = Lanes(starts, np.full(20, deadline), np.full(20, compute), np.full(20, changeover))
    best = optimal(avail, 0.1, 3.3, starts, deadline=deadline, compute=compute, changeover=changeover).cost
    for name, policy in POLICIES.items():
        out = replay(policy, avail, 0.1, 3.3, lanes)
        assert not out.missed.any(), name
        assert (out.cost >= best - 1e-9).all(), name


# -- traces --------------------------------------------------------------------------------


def write_trace(root: Path, rel: str, data: list[int], gap_s: float, prices: list[float] | None = None) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    body: dict[str, object] = {"metadata": {"gap_seconds": gap_s}, "data": data}
    if prices is not None:
        body["prices"] = prices
    path.write_text(json.dumps(body))


def test_traces_load_with_their_folder_facts(tmp_path: Path) -> None:
    write_trace(tmp_path, "availability/1-node/aws-10-26-2022/us-west-2a_v100_1.json", [1, 0, 1, 1], 600)
    write_trace(tmp_path, "preemption/4-node/aws-08-03-2023/us-east-1f_v100_1.json", [4, 3, 4, 0], 300, [1.53] * 4)
    one, four = sorted(load_traces(tmp_path), key=lambda t: t.nodes)
    assert (one.group, one.zone, one.gpu, one.gpus_per_instance) == (
        "availability/1-node/aws-10-26-2022",
        "us-west-2a",
        "v100",
        1,
    )
    assert one.availability_share() == 0.75 and one.hours == pytest.approx(4 / 6)
    # A 4-node gang sees spot only when all four are there.
    assert four.group == "preemption/4-node/aws-08-03-2023"
    assert list(four.available()) == [True, False, True, False]
    assert price_ratio(four) == pytest.approx(P3_2XLARGE_ON_DEMAND / 1.53)
    assert price_ratio(one) == pytest.approx(3.06 / 0.918)


def test_missing_traces_say_where_to_get_them(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        load_traces(tmp_path / "nowhere")
    assert TRACES_ORIGIN in str(err.value) and TRACES_COMMIT in str(err.value)


def test_a_malformed_trace_is_named(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text('{"data": [1, 0]}')
    with pytest.raises(UserError, match="broken.json"):
        load_traces(tmp_path)


def test_resample_splits_coarse_ticks_and_merges_fine_ones() -> None:
    split, tick = resample(np.array([1, 0], dtype=bool), 600, 200)
    assert tick == 200 and list(split) == [1, 1, 1, 0, 0, 0]
    merged, tick = resample(np.array([1, 1, 1, 0, 1, 1, 1, 1, 1, 1], dtype=bool), 32, 200)
    assert tick == 192 and list(merged) == [False]  # one merged tick (6 samples); the rest dropped
    same, tick = resample(np.array([1, 0, 1], dtype=bool), 195, 200)
    assert tick == 195 and list(same) == [1, 0, 1]


def test_spells_and_outages_in_order() -> None:
    up, down = spells(np.array([0, 1, 1, 0, 0, 0, 1], dtype=bool), 0.5)
    assert list(up) == [1.0, 0.5] and list(down) == [0.5, 1.5]


def test_start_points_are_fixed_by_seed_and_trace() -> None:
    a = start_points("t", 1000, 100, 50, seed=0)
    assert (a == start_points("t", 1000, 100, 50, seed=0)).all()
    assert not (a == start_points("t", 1000, 100, 50, seed=1)).all()
    assert a.min() >= 0 and a.max() <= 900
    with pytest.raises(UserError):
        start_points("t", 50, 100, 5, seed=0)


def test_forward_runs() -> None:
    assert list(forward_runs(np.array([1, 1, 0, 1], dtype=bool))) == [2, 1, 0, 1]


# -- the whole benchmark, small ------------------------------------------------------------


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    rng = np.random.default_rng(11)

    def pattern(ticks: int, up: float, down: float, value: int) -> list[int]:
        out: list[int] = []
        on = True
        while len(out) < ticks:
            out += [value if on else 0] * int(rng.geometric(1 / (up if on else down)))
            on = not on
        return out[:ticks]

    # Sixteen days at 10 minutes: long enough for the sanity run's 60 h windows in two weeks.
    write_trace(tmp_path, "availability/1-node/aws-10-26-2022/us-west-2a_v100_1.json", pattern(2304, 20, 3, 1), 600)
    write_trace(tmp_path, "availability/1-node/aws-02-15-2023/us-east-1a_v100_1.json", pattern(2000, 3, 12, 1), 195)
    write_trace(tmp_path, "preemption/4-node/aws-08-03-2023/us-east-1f_v100_1.json", pattern(600, 10, 4, 4), 300)
    return tmp_path


def test_benchmark_end_to_end(trace_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_spot_bench(trace_dir, starts=4, compute_h=8.0, changeovers_h=(0.1, 0.3), workers=1)
    write_outputs(result, out)
    assert [g.name for g in result.groups] == [g for g in GROUPS if any(x.name == g for x in result.groups)] + [ALL]
    everything = result.group(ALL)
    assert everything.windows == 3 * 4 * 4 * 2 and everything.traces == 3
    by = {s.policy: s for s in everything.policies}
    assert by["od-only"].mean_cost == pytest.approx(1.0)
    assert all(by[p].mean_cost >= by["optimal"].mean_cost - 1e-9 for p in by)
    assert by["gpusched"].misses == 0 and result.targets.misses == 0
    assert result.sanity is not None and result.sanity.windows == 4
    sanity = {r.policy: r for r in result.sanity.rows}
    assert sanity["optimal"].spot_use == 1.0 and sanity["od-only"].spot_work_h == 0.0
    assert all(r.od_work_h + r.spot_work_h == pytest.approx(48.0) for r in result.sanity.rows)
    # Written: the Markdown, the chart (a PNG) and the result, which reads back.
    text = (out / "spot-bench.md").read_text()
    assert text == render_markdown(result) and "Sanity run" in text and "gpusched" in text
    assert (out / "spot-bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert BenchResult.model_validate_json((out / "spot-bench.json").read_text()) == result


def test_benchmark_refuses_a_job_no_schedule_can_finish(trace_dir: Path) -> None:
    with pytest.raises(UserError, match="slack"):
        run_spot_bench(
            trace_dir, starts=2, compute_h=1.0, ratios=(0.95,), changeovers_h=(0.3,), workers=1, sanity=False
        )
