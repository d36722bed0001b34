"""``gpusched simulate --policy all``: several policies over one trace, each in its own process."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from scheduler.errors import SettingsError, UserError
from scheduler.settings import WHAT_IF_SETTINGS, Settings
from scheduler.simulation.compare import (
    load_month,
    policies_of,
    run_policies,
    run_policy,
    sim_settings,
    solve_bound,
    what_if_of,
)
from scheduler.simulation.simulate import POLICIES, changed_settings

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


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        ([], {}),
        (["idle_stop_minutes=5"], {"idle_stop_minutes": "5"}),
        (["GPUSCHED_IDLE_STOP_MINUTES=5", "budget-at-limit = stop"], {"idle_stop_minutes": "5",
                                                                      "budget_at_limit": "stop"}),
        (['team_budgets={"a": "10 CNY"}'], {"team_budgets": '{"a": "10 CNY"}'}),
        (["idle_stop_minutes=5", "idle_stop_minutes=7"], {"idle_stop_minutes": "7"}),  # the last one wins
    ],
)
def test_what_if_settings_are_key_value_pairs(pairs: list[str], expected: dict[str, str]) -> None:
    assert what_if_of(pairs) == expected


@pytest.mark.parametrize(("pairs", "message"), [
    (["idle_stop_minutes"], "not KEY=VALUE"),
    (["api_token=x"], "'api_token' is not a setting a simulation can change"),  # nor a secret in a summary
    (["tick_seconds=5"], "is not a setting"),  # the simulator's own: --tick-seconds
])
def test_a_setting_a_simulation_cannot_change_is_refused_with_the_list(pairs: list[str], message: str) -> None:
    with pytest.raises(UserError) as e:
        what_if_of(pairs)
    assert message in e.value.message and "idle_stop_minutes" in (e.value.fix or "")


def test_a_bad_value_is_refused_before_anything_runs() -> None:
    with pytest.raises(SettingsError) as e:
        sim_settings(1, 10.0, {"idle_stop_minutes": "-4"})
    assert "GPUSCHED_IDLE_STOP_MINUTES" in e.value.message


def test_the_summary_names_the_settings_away_from_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """From the environment as from --set: a comparison must say what shaped it. Only the what-if settings:
    the simulator's own are its flags, and a secret never lands in a summary."""
    assert changed_settings(sim_settings(1, 10.0)) == {}
    monkeypatch.setenv("GPUSCHED_IDLE_STOP_MINUTES", "3")
    monkeypatch.setenv("GPUSCHED_API_TOKEN", "s3cret-token-value")
    settings = sim_settings(1, 10.0, {"budget_at_limit": "stop", "team_budgets": '{"a": "10 CNY"}'})
    assert changed_settings(settings) == {"idle_stop_minutes": "3", "budget_at_limit": '"stop"',
                                          "team_budgets": '{"a": {"amount": "10", "currency": "CNY"}}'}
    assert set(WHAT_IF_SETTINGS) <= set(Settings.model_fields)


def test_a_what_if_setting_changes_the_run_and_is_recorded(tmp_path: Path) -> None:
    trace = small_trace(tmp_path)
    runs = {minutes: run_policy(trace, "on-demand", 3, 60.0, None,
                                what_if={"idle_stop_minutes": str(minutes)} if minutes != 10 else None).summary
            for minutes in (0, 10, 120)}
    assert runs[10].settings == {} and runs[120].settings == {"idle_stop_minutes": "120"}
    # Machines kept warm longer idle longer: the only difference between the runs is the setting.
    assert runs[0].idle_hours < runs[10].idle_hours < runs[120].idle_hours
    assert runs[0].total_cost < runs[10].total_cost < runs[120].total_cost


def test_the_bound_is_solved_on_what_the_simulated_daemon_has(tmp_path: Path) -> None:
    """Its clouds (``providers``) and its reserved capacity, free at the margin: a what-if on either moves the
    bound with the run, so the run is never held to offers it could not use."""
    trace = small_trace(tmp_path)  # Alibaba only, T4, in cn-hangzhou
    month = load_month(trace)
    plain = solve_bound(month, sim_settings(3, 60.0))
    assert plain.infeasible_jobs == 0 and plain.total.amount > 0
    elsewhere = solve_bound(month, sim_settings(3, 60.0, what_if_of(["providers=aws,tencent"])))
    assert elsewhere.infeasible_jobs == len(month.entries)  # the jobs ask for Alibaba: nothing else runs them
    reservation = ('[{"provider": "alibaba", "region": "cn-hangzhou", "instance_type": "ecs.gn6i-c4g1.xlarge", '
                   '"count": 3, "until": "2027-01-01T00:00:00Z"}]')
    what_if = what_if_of([f"reserved={reservation}"])
    owned = solve_bound(month, sim_settings(3, 60.0, what_if))
    assert owned.total.amount < plain.total.amount
    run = run_policy(trace, "gpusched", 3, 60.0, owned, what_if=what_if).summary
    assert "reserved" in run.settings and run.lower_bound_cost == owned.total.quantize().amount
    assert run.lower_bound_true_speed_cost is not None and run.lower_bound_true_speed_cost < plain.total.amount
    # The on-time floor is solved on the same market: the reserved machines are free there too.
    assert run.floor_true_speed_cost is not None
    assert run.lower_bound_true_speed_cost <= run.floor_true_speed_cost < plain.total.amount
    assert run.deadline_misses == 0 and run.failed == 0
    # The reserved machines ran the work: the bill (reserved hours free at the margin) is below the plain run's.
    assert run.total_cost < run_policy(trace, "gpusched", 3, 60.0, plain).summary.total_cost


def test_a_reservation_fee_is_amortized_over_the_simulated_span_beside_the_bill(tmp_path: Path) -> None:
    """The bill prices reserved hours at zero (the ledger's rule); the fee is reported beside it, amortized as the
    monthly report amortizes it, so "should we buy this reservation" is the amortized cost against a run without."""
    trace = small_trace(tmp_path)  # submissions from 01:00 UTC on 2 November
    inside = ('{"provider": "alibaba", "region": "cn-hangzhou", "instance_type": "ecs.gn6i-c4g1.xlarge", '
              '"count": 1, "start": "2026-11-02T01:00:00Z", "until": "2026-11-02T02:00:00Z", '
              '"upfront_fee": "12.34 CNY"}')
    # Six months at 1,000 CNY a month, all of November inside them: of the month, the span's hours' share.
    longer = ('{"provider": "alibaba", "region": "cn-hangzhou", "instance_type": "ecs.gn6i-c4g1.xlarge", '
              '"count": 1, "start": "2026-10-01T00:00:00Z", "until": "2027-04-01T00:00:00Z", '
              '"monthly_fee": "1000 CNY"}')
    for terms, expected in ((f"[{inside}]", lambda days: Decimal("12.34")),  # a term wholly inside: all of it
                            (f"[{longer}]", lambda days: Decimal(1000) * Decimal(days) / 30)):
        what_if = what_if_of([f"reserved={terms}"])
        run = run_policy(trace, "gpusched", 3, 60.0, solve_bound(load_month(trace), sim_settings(3, 60.0, what_if)),
                         what_if=what_if).summary
        # simulated_days is rounded to 0.01 day: 0.005 day either way is 0.17 CNY of a 33.33 CNY day.
        assert abs(run.reserved_fees - expected(run.simulated_days)) <= Decimal("0.17")
        assert run.amortized_cost == run.total_cost + run.reserved_fees
    plain = run_policy(trace, "gpusched", 3, 60.0, solve_bound(load_month(trace), sim_settings(3, 60.0))).summary
    assert plain.reserved_fees == 0 and plain.amortized_cost == plain.total_cost


@pytest.mark.parametrize(("reservation", "also"), [
    ('{"provider": "alibaba", "region": "cn-hangzhou", "instance_type": "ecs.gn6i-typo", "count": 1, '
     '"until": "2027-01-01T00:00:00Z"}', []),  # no such instance type
    ('{"provider": "alibaba", "region": "cn-hangzhou", "instance_type": "ecs.gn6i-c4g1.xlarge", "count": 1, '
     '"until": "2027-01-01T00:00:00Z"}', ["providers=aws,tencent"]),  # a cloud the simulated daemon lacks
])
def test_a_reservation_that_matches_no_simulated_offer_is_refused(reservation: str, also: list[str]) -> None:
    """The daemon logs such a reservation and never launches it: a what-if would charge its fee for nothing."""
    with pytest.raises(UserError, match="matches no offer of the simulated clouds") as err:
        sim_settings(3, 60.0, what_if_of([f"reserved=[{reservation}]", *also]))
    assert "gpusched offers" in (err.value.fix or "")
