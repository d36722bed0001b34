"""``--gaps``: every job's bill beside its share of the lower bound, on what a real simulation wrote."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from decimal import Decimal

from providers.catalog import load_catalog
from scheduler.settings import Settings
from scheduler.simulation.gaps import GAPS_COLUMNS, JobGap, totals, write_gaps_csv
from scheduler.simulation.lower_bound import lower_bound
from scheduler.simulation.lower_bound_options import feasible_options
from scheduler.simulation.simagent import SimAgents
from scheduler.simulation.simulate import Submission, simulate
from tests.conftest import SIM_START
from tests.simulation.test_fair_score import entry

SETTINGS = Settings(_env_file=None)
SPEED = re.compile(r"^[A-Z0-9-]+ x\d+\.\d\d(, [A-Z0-9-]+ x\d+\.\d\d)*$")


def test_each_job_is_set_beside_its_bound_share_and_the_bill_adds_up(tmp_path):
    entries = [entry("fine", deadline="24h"), entry("too-tight", deadline="5m"), entry("no-deadline"),
               entry("spot-only", capacity="spot")]
    bound = lower_bound(entries, load_catalog(), currency="CNY", fx=SETTINGS.fx)
    subs = [Submission(at=e.at, job=e.job, source=f"t:{i + 1}") for i, e in enumerate(entries)]
    sims = {policy: simulate(subs, policy=policy, seed=3, bound=bound, horizon=timedelta(days=2))
            for policy in ("on-demand", "gpusched")}
    for policy, summary in sims.items():
        gaps = summary.gaps
        assert sorted(g.trace_line for g in gaps) == [1, 2, 3, 4], policy
        by_name = {g.name: g for g in gaps}
        # The bill: every job's busy hours plus the idle machines; the bound: every priced job's share.
        busy = sum(g.cost for g in gaps)
        assert abs(busy + summary.fair_score.cost_idle - summary.total_cost) <= Decimal("0.05"), policy
        priced = [j for j in bound.jobs if j.cost is not None]
        assert abs(sum(g.bound_cost for g in gaps if g.bound_cost is not None)
                   - sum(j.cost.amount for j in priced)) <= Decimal("0.01") * len(priced)
        # Nothing can run the 5-minute job: no share, no gap, listed last; the others by gap, largest first.
        tight = by_name["too-tight"]
        assert tight.bound_cost is None and tight.gap is None and tight.bound_setup == "" and gaps[-1] is tight
        ranked = [g.gap for g in gaps if g.gap is not None]
        assert ranked == sorted(ranked, reverse=True) and len(ranked) == 3
        for g in gaps:
            if g.gap is not None:
                assert g.gap == g.cost - g.bound_cost and g.bound_setup
            assert Decimal(0) <= g.on_demand_cost <= g.cost
            # The simulated true speed of each GPU the job ran on: the agents' own seeded draw.
            if g.attempts:
                assert SPEED.match(g.true_speed), g.true_speed
                agents = SimAgents(None, {}, "sim", seed=3)  # type: ignore[arg-type]  # only its draw is used
                drawn = []
                for part in g.true_speed.split(", "):
                    gpu, factor = part.rsplit(" x", 1)
                    drawn.append(agents.true_factor(g.job_id, gpu))
                    assert factor == f"{drawn[-1]:.2f}"
                assert g.slowest == round(max(drawn), 4)
            else:
                assert g.true_speed == "" and g.slowest is None and g.cost == 0
    # Ours keeps a spot-only job on spot; the on-demand baseline bills every busy hour at on-demand prices.
    spot_only = {g.name: g for g in sims["gpusched"].gaps}["spot-only"]
    assert spot_only.on_demand_cost == 0 and spot_only.cost > 0
    assert all(g.on_demand_cost == g.cost for g in sims["on-demand"].gaps)
    # The bound runs a job with no deadline on spot; on-demand throughout costs more than that share.
    assert sims["on-demand"].gaps[0].gap > 0 and "spot" in {g.name: g for g in sims["on-demand"].gaps}[
        "no-deadline"].bound_setup

    path = tmp_path / "gaps.csv"
    write_gaps_csv(sims["gpusched"].gaps, path)
    header, *rows = path.read_text().splitlines()
    assert tuple(header.split(",")) == GAPS_COLUMNS and len(rows) == 4
    assert rows[-1].startswith("2,") and ",too-tight," in rows[-1] and ",,," in rows[-1]  # no share, no gap


def test_without_a_bound_there_are_no_gaps():
    entries = [entry("fine", deadline="24h")]
    subs = [Submission(at=e.at, job=e.job, source="t:1") for e in entries]
    assert simulate(subs, policy="on-demand", seed=3, horizon=timedelta(days=1)).gaps == ()


def gap(name: str, cost: str, bound: str | None, *, on_demand: str = "0", preemptions: int = 0,
        slowest: float | None = None) -> JobGap:
    c, b = Decimal(cost), Decimal(bound) if bound is not None else None
    return JobGap(trace_line=1, job_id=name, name=name, team="t", kind="train", outcome="on-time", cost=c,
                  on_demand_cost=Decimal(on_demand), bound_cost=b, bound_setup="spot 1x A10" if b else "",
                  gap=c - b if b is not None else None, preemptions=preemptions, attempts=1,
                  true_speed="", slowest=slowest)


def test_the_totals_say_on_which_kinds_of_job_the_gaps_are():
    gaps = [
        gap("reclaimed-and-slow", "10.00", "6.00", preemptions=3, slowest=1.25),  # +4 in two kinds
        gap("on-demand", "9.00", "4.00", on_demand="8.00", slowest=1.05),  # +5, mostly on-demand, not slow
        gap("half-on-demand", "4.00", "3.00", on_demand="2.00", slowest=1.10),  # +1: half is not mostly; 1.10 not over
        gap("cheaper", "2.00", "3.00", preemptions=1, on_demand="2.00", slowest=2.0),  # below its share: counts nowhere
        gap("no-share", "7.00", None, preemptions=1),  # nothing can run it: no gap
    ]
    t = totals(gaps)
    assert (t.over_share, t.reclaimed, t.slow, t.on_demand) == (Decimal("10.00"), Decimal("4.00"), Decimal("4.00"),
                                                                 Decimal("5.00"))
    assert totals([]).over_share == 0


def test_the_bound_at_true_speeds_is_solved_on_the_agents_own_draws():
    """``simulate(true_speed_bound=...)`` hands the solver each job's simulated speed per GPU: the summary's
    second bound and each job's share of it are that bound's, and so is the gap left beside it."""
    entries = [entry("fine", deadline="24h"), entry("no-deadline"), entry("spot-only", capacity="spot")]
    catalog = load_catalog()
    bound = lower_bound(entries, catalog, currency="CNY", fx=SETTINGS.fx)
    subs = [Submission(at=e.at, job=e.job, source=f"t:{i + 1}") for i, e in enumerate(entries)]
    asked: list = []

    def solve(speed):
        asked.append(speed)
        return lower_bound(entries, catalog, currency="CNY", fx=SETTINGS.fx, speed=speed)

    def solve_floor(speed):
        asked.append(speed)
        return lower_bound(entries, catalog, currency="CNY", fx=SETTINGS.fx, speed=speed, reclaims=True,
                           on_time=True)

    summary = simulate(subs, policy="gpusched", seed=3, bound=bound, horizon=timedelta(days=2),
                       true_speed_bound=solve, true_speed_floor=solve_floor)
    assert len(asked) == 2 and asked[0] is asked[1]  # both at the same true speeds
    agents = SimAgents(None, {}, "sim", seed=3)  # type: ignore[arg-type]  # only its draw is used
    id_of = {g.trace_line - 1: g.job_id for g in summary.gaps}
    for i in range(len(entries)):
        for gpu in ("A10", "T4"):
            assert asked[0](i, gpu) == agents.true_factor(id_of[i], gpu)
    at_true = lower_bound(entries, catalog, currency="CNY", fx=SETTINGS.fx,
                          speed=lambda i, gpu: agents.true_factor(id_of[i], gpu))
    assert summary.lower_bound_true_speed_cost == at_true.total.quantize().amount
    assert summary.lower_bound_true_speed_cost != summary.lower_bound_cost  # the draws are not all 1.0
    assert summary.true_speed_infeasible_jobs == 0
    for g in summary.gaps:
        share = at_true.jobs[g.trace_line - 1].cost
        assert share is not None and g.true_speed_bound_cost == share.amount.quantize(Decimal("0.01"))
        assert g.true_speed_gap == g.cost - g.true_speed_bound_cost
        # The on-time floor's share: the same job at the same speeds, its spot through expected reclaims.
        assert g.floor_cost is not None and g.floor_cost >= g.true_speed_bound_cost and g.floor_setup
        assert g.floor_gap == g.cost - g.floor_cost
    floor = lower_bound(entries, catalog, currency="CNY", fx=SETTINGS.fx, reclaims=True, on_time=True,
                        speed=lambda i, gpu: agents.true_factor(id_of[i], gpu))
    assert summary.floor_true_speed_cost == floor.total.quantize().amount > summary.lower_bound_true_speed_cost
    t = totals(summary.gaps)
    assert t.over_true_speed_share == sum((g.true_speed_gap for g in summary.gaps if g.true_speed_gap > 0),
                                          Decimal(0))


def test_misses_no_schedule_could_avoid_are_judged_at_the_true_speeds():
    """A job whose deadline leaves a minute over its fastest estimate: the bound (no boot) has it on time, the
    simulated run (which boots) misses it. At the estimate that miss was avoidable; once the true-speed bound
    has the job too slow for every option, it is one no schedule could avoid."""
    catalog = load_catalog()
    fastest_h = min(o.hours for o in feasible_options(entry("x").job, SIM_START, catalog, currency="CNY",
                                                          fx=SETTINGS.fx).options)
    entries = [entry("tight", deadline=f"{math.ceil(fastest_h * 60) + 1}m"), entry("fine", deadline="24h")]
    bound = lower_bound(entries, catalog, currency="CNY", fx=SETTINGS.fx)
    assert [j.why_not for j in bound.jobs] == [None, None]  # both on time at the estimate
    subs = [Submission(at=e.at, job=e.job, source=f"t:{i + 1}") for i, e in enumerate(entries)]

    def slow_tight(speed):  # the tight job made 20x slower than its draw: late on every option
        return lower_bound(entries, catalog, currency="CNY", fx=SETTINGS.fx,
                           speed=lambda i, gpu: speed(i, gpu) * (20.0 if i == 0 else 1.0))

    runs = {name: simulate(subs, policy="on-demand", seed=3, bound=bound, horizon=timedelta(days=1),
                           true_speed_bound=solver)
            for name, solver in (("estimate", None), ("true speed", slow_tight))}
    assert runs["true speed"].true_speed_infeasible_jobs == 1
    assert runs["estimate"].true_speed_infeasible_jobs is None
    for name, summary in runs.items():
        assert summary.deadline_misses == 1, name  # the tight job, late by its boot
    assert (runs["estimate"].fair_score.misses_unavoidable, runs["estimate"].fair_score.misses_avoidable) == (0, 1)
    assert (runs["true speed"].fair_score.misses_unavoidable,
            runs["true speed"].fair_score.misses_avoidable) == (1, 0)
