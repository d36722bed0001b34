"""The gpusched command line as a user runs it: real processes, real exit codes, no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def gpusched(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}
    base.update({"COLUMNS": "200", **(env or {})})
    return subprocess.run([sys.executable, "-m", "scheduler.app.cli", *args], capture_output=True, text=True,
                          env=base, cwd=cwd or ROOT, timeout=120)


def test_validate_accepts_every_example():
    r = gpusched("validate", *sorted(str(p) for p in EXAMPLES.glob("*.yaml")))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("ok ") == len(list(EXAMPLES.glob("*.yaml")))


def test_validate_bad_file_names_file_field_and_fix_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: Helmet\nteam: vision-qa\nkind: train\nmodel: yolov9-s\n"
                   "data: {uri: s3://b/d, train_images: 100}\ntrain: {epochs: 10}\n"
                   "policy: {budget: 800, deadline: soon}\n")
    r = gpusched("validate", str(bad))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr + r.stdout
    assert str(bad) in r.stderr
    for field in ("name", "policy.budget", "policy.deadline"):
        assert field in r.stderr
    assert "e.g." in r.stderr


def test_schema_is_json_schema_naming_the_job_fields():
    r = gpusched("schema")
    assert r.returncode == 0
    schema = json.loads(r.stdout)
    assert {"name", "team", "kind", "model", "policy"} <= set(schema["properties"])


def test_plan_shows_spot_and_on_demand_alternatives_with_costs():
    r = gpusched("plan", str(EXAMPLES / "helmet-s-train.yaml"), "--at", "2026-11-02T09:00:00+00:00", "--show", "40")
    assert r.returncode == 0, r.stderr
    assert "spot" in r.stdout and "on-demand" in r.stdout
    assert "CNY" in r.stdout and "would launch" in r.stdout


def test_submit_without_a_daemon_says_how_to_start_it():
    r = gpusched("submit", str(EXAMPLES / "helmet-s-train.yaml"),
                 env={"GPUSCHED_API_URL": "http://127.0.0.1:9", "GPUSCHED_API_TOKEN": "x" * 24})
    assert r.returncode == 3  # README, "Exit statuses": the daemon cannot be reached
    assert "cannot reach the gpusched daemon" in r.stderr and "gpusched daemon" in r.stderr
    assert "Traceback" not in r.stderr


def test_bad_setting_is_a_clear_error(tmp_path):
    r = gpusched("plan", str(EXAMPLES / "helmet-s-train.yaml"), env={"GPUSCHED_REPORT_CURRENCY": "EUR"})
    assert r.returncode == 2
    assert "GPUSCHED_REPORT_CURRENCY" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("month", ["2026-13", "november"])
def test_report_rejects_a_malformed_month(tmp_path, month):
    r = gpusched("report", "--month", month, env={"GPUSCHED_DATA_DIR": str(tmp_path)})
    assert r.returncode == 2 and "month" in r.stderr and "Traceback" not in r.stderr


def test_report_from_an_empty_store_writes_its_files_and_the_audit_log(tmp_path):
    r = gpusched("report", "--month", "2026-11", "--out", str(tmp_path / "out"),
                 env={"GPUSCHED_DATA_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["audit-2026-11.csv"] + [f"report-2026-11.{ext}" for ext in ("csv", "html", "md", "pdf", "xlsx")]
    assert (tmp_path / "out" / "audit-2026-11.csv").read_text().splitlines() == [
        "at,actor,token_id,role,action,target,team,client,outcome,status,detail"]  # no API call: no entry
    assert (tmp_path / "out" / "report-2026-11.pdf").read_bytes().startswith(b"%PDF-")


def test_report_focus_writes_the_focus_file_beside_the_others(tmp_path):
    r = gpusched("report", "--month", "2026-11", "--focus", env={"GPUSCHED_DATA_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in (tmp_path / "reports").iterdir())
    assert "focus-2026-11.csv" in names and "report-2026-11.html" in names
    header = (tmp_path / "reports" / "focus-2026-11.csv").read_text(encoding="utf-8").splitlines()[0]
    assert header.startswith("AvailabilityZone,BilledCost,BillingAccountId")


def test_providers_check_prints_one_line_per_provider_and_no_secret():
    secret = "sk-test-should-never-print-0123456789"
    r = gpusched("providers", "check", env={"GPUSCHED_API_TOKEN": secret})
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    assert [line.split()[1] for line in lines] == ["alibaba", "aws", "tencent"]
    assert secret not in r.stdout + r.stderr


def test_offers_filters_by_gpu():
    r = gpusched("offers", "--gpu", "A10G")
    assert r.returncode == 0, r.stderr
    assert "A10G" in r.stdout and "g5." in r.stdout and "gn7i" not in r.stdout


def test_perf_lists_priors_for_a_fresh_store(tmp_path):
    r = gpusched("perf", "--model", "yolov9-c", "--gpu", "A10", env={"GPUSCHED_DATA_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "yolov9-c" in r.stdout and "prior" in r.stdout and "measured" not in r.stdout.replace("last measured", "")


def test_trace_generate_then_simulate_a_small_month(tmp_path):
    trace = tmp_path / "t.jsonl"
    r = gpusched("trace", "generate", "--out", str(trace), "--jobs", "12", "--seed", "5")
    assert r.returncode == 0, r.stderr
    lines = trace.read_text().splitlines()
    assert len(lines) >= 12
    small = tmp_path / "small.jsonl"
    small.write_text("\n".join(lines[:10]) + "\n")  # a few days of it keeps the test quick
    out = tmp_path / "summary.json"
    r = gpusched("simulate", "--trace", str(small), "--policy", "on-demand", "--seed", "2", "--output", str(out))
    assert r.returncode == 0, r.stderr
    summary = json.loads(out.read_text())
    for key in ("policy", "jobs", "currency", "total_cost", "on_demand_equivalent_cost", "lower_bound_cost",
                "deadline_misses", "interruptions", "lost_gpu_hours", "idle_hours", "cost_by_capacity"):
        assert key in summary
    assert summary["policy"] == "on-demand" and summary["interruptions"] == 0
    assert summary["total_cost"] == summary["on_demand_equivalent_cost"]
    assert float(summary["lower_bound_cost"]) <= float(summary["total_cost"])
    # Solved again at the jobs' simulated true speeds; both shown under the table with the bill over each.
    true_bound = float(summary["lower_bound_true_speed_cost"])
    assert 0 < true_bound <= float(summary["total_cost"]) and summary["true_speed_infeasible_jobs"] == 0
    total = float(summary["total_cost"])
    assert f"{total / float(summary['lower_bound_cost']):.3f}x" in r.stderr
    assert f"{total / true_bound:.3f}x" in r.stderr and "lower bound (true speeds)" in r.stderr
    # And the on-time floor at those speeds: spot through its expected reclaims, never below the bound.
    floor = float(summary["floor_true_speed_cost"])
    assert floor >= true_bound and "on-time floor" in r.stderr


def test_simulate_shows_a_progress_bar_when_asked_and_none_by_default_off_a_terminal(tmp_path):
    job = {"team": "t", "kind": "train", "model": "yolov9-t", "data": {"uri": "s3://b/d", "train_images": 2000},
           "train": {"epochs": 2}, "resources": {"gpus": ["T4"]},
           "where": {"providers": ["alibaba"], "regions": ["cn-hangzhou"]}}
    trace, n = tmp_path / "t.jsonl", 2
    trace.write_text("".join(json.dumps({"at": f"2026-11-02T{9 + k:02d}:00:00+08:00", "job": {**job, "name": f"j{k}"}})
                             + "\n" for k in range(n)))
    runs = {flag: gpusched("simulate", "--trace", str(trace), "--policy", "on-demand", "--seed", "2",
                           "--no-lower-bound", *([flag] if flag else []))
            for flag in ("--progress", "")}
    for r in runs.values():
        assert r.returncode == 0, r.stderr
    shown, default = runs["--progress"].stderr, runs[""].stderr
    assert "simulate on-demand: jobs submitted" in shown and f"{n}/{n}" in shown and "ticks" in shown
    assert "jobs submitted" not in default  # stderr is a pipe here, not a terminal
    summary = {flag: json.loads(r.stdout) for flag, r in runs.items()}  # the bar only reads
    assert {k: v for k, v in summary["--progress"].items() if k != "wall_seconds"} == \
        {k: v for k, v in summary[""].items() if k != "wall_seconds"}


def test_simulate_compares_several_policies_in_one_table(tmp_path):
    """``--policy all``: every policy's summary, keyed by policy, each the one ``--policy P`` prints (but for wall
    time); a listing each; one table with a column each on stderr."""
    from tests.simulation.test_compare import small_trace

    trace, why = small_trace(tmp_path), tmp_path / "why.csv"
    out = tmp_path / "all.json"
    r = gpusched("simulate", "--trace", str(trace), "--policy", "all", "--seed", "2", "--tick-seconds", "60",
                 "--output", str(out), "--explain", str(why))
    assert r.returncode == 0, r.stderr
    both = json.loads(r.stdout)
    assert both == json.loads(out.read_text())
    assert sorted(both) == sorted(["gpusched", "on-demand", "spot-greedy", "skypilot-like"])
    header = "the policies compared"
    assert header in r.stderr and "/ bound at true speeds" in r.stderr
    assert "/ on-time floor" in r.stderr and "the least a schedule that is always on time pays" in r.stderr
    table = r.stderr[r.stderr.index(header):]
    for policy, summary in both.items():
        assert (tmp_path / f"why-{policy}.csv").read_text().startswith("trace_line,")
        assert policy in table and f"{float(summary['total_cost']):,.2f}" in table
    alone = gpusched("simulate", "--trace", str(trace), "--policy", "spot-greedy", "--seed", "2", "--tick-seconds",
                     "60")
    assert alone.returncode == 0, alone.stderr
    one = json.loads(alone.stdout)
    assert {k: v for k, v in one.items() if k != "wall_seconds"} == \
        {k: v for k, v in both["spot-greedy"].items() if k != "wall_seconds"}
    assert not why.exists()  # several policies: a file each, none under the plain name

    bad = gpusched("simulate", "--trace", str(trace), "--policy", "gpusched,cheapest")
    assert bad.returncode != 0 and "unknown policy 'cheapest'" in bad.stderr and "Traceback" not in bad.stderr


def test_simulate_asks_what_if_the_daemon_had_another_setting(tmp_path):
    from tests.simulation.test_compare import small_trace

    trace = small_trace(tmp_path)
    base = ("simulate", "--trace", str(trace), "--policy", "on-demand", "--seed", "2", "--tick-seconds", "60",
            "--no-lower-bound")
    default, warm = gpusched(*base), gpusched(*base, "--set", "idle_stop_minutes=120")
    assert default.returncode == 0 and warm.returncode == 0, warm.stderr
    before, after = json.loads(default.stdout), json.loads(warm.stdout)
    assert before["settings"] == {} and after["settings"] == {"idle_stop_minutes": "120"}
    assert float(after["idle_hours"]) > float(before["idle_hours"])
    assert "idle_stop_minutes=120" in warm.stderr and "away from their defaults" not in default.stderr
    # A reservation bought: its fee, amortized over the simulated span, beside the bill and added to it.
    reservation = ('[{"provider": "alibaba", "region": "cn-hangzhou", "instance_type": "ecs.gn6i-c4g1.xlarge", '
                   '"count": 1, "start": "2026-11-02T01:00:00Z", "until": "2026-11-02T02:00:00Z", '
                   '"upfront_fee": "12.34 CNY"}]')
    bought = gpusched(*base, "--set", f"reserved={reservation}")
    assert bought.returncode == 0, bought.stderr
    fee = json.loads(bought.stdout)
    assert fee["reserved_fees"] == "12.34" and before["reserved_fees"] == "0.00"
    assert "reserved fees (amortized)" in bought.stderr and "total with the fees" in bought.stderr
    assert "reserved fees" not in default.stderr
    # A bad value is one line naming the setting (the unknown keys: tests/simulation/test_compare.py).
    r = gpusched(*base, "--set", "idle_stop_minutes=-1")
    assert r.returncode != 0 and "GPUSCHED_IDLE_STOP_MINUTES" in r.stderr and "Traceback" not in r.stderr


def test_simulate_explains_failed_and_late_jobs_in_a_csv(tmp_path):
    job = {"name": "too-tight", "team": "t", "kind": "train", "model": "yolov9-t",
           "data": {"uri": "s3://b/d", "train_images": 2000, "val_images": 200}, "train": {"epochs": 10},
           "resources": {"gpus": ["T4"]}, "where": {"providers": ["alibaba"], "regions": ["cn-hangzhou"]}}
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"at": "2026-11-02T09:00:00+08:00", "job": {**job, **extra}}) + "\n"
                             for extra in ({"name": "fine"}, {"policy": {"deadline": "5m"}})))
    why, gaps = tmp_path / "why.csv", tmp_path / "gaps.csv"
    r = gpusched("simulate", "--trace", str(trace), "--policy", "on-demand", "--seed", "2", "--explain", str(why),
                 "--gaps", str(gaps))
    assert r.returncode == 0, r.stderr
    fair = json.loads(r.stdout)["fair_score"]
    assert fair["misses_unavoidable"] == 1 and fair["misses_avoidable"] == 0
    assert fair["why_failed_or_late"] == {"infeasible": 1}
    assert "what the bill bought" in r.stderr and "infeasible from submission" in r.stderr
    header, row = why.read_text().splitlines()
    assert header.split(",")[:7] == ["trace_line", "job_id", "name", "team", "kind", "outcome", "reason"]
    assert row.startswith("2,") and ",too-tight,t,train,failed,infeasible,True," in row
    # --gaps: each job beside its share of the lower bound, the one the bound can price first.
    header, first, last = gaps.read_text().splitlines()
    assert header.split(",")[:3] == ["trace_line", "job_id", "name"] and first.startswith("1,") and ",fine," in first
    assert last.startswith("2,") and ",too-tight," in last
    assert f"2 job(s) beside their share of the lower bound in {gaps}" in r.stderr
    assert "  fine: " in r.stderr and "true speed T4 x" in r.stderr  # on-demand costs more than the bound's spot
    assert "on jobs billed mostly on-demand" in r.stderr.replace("\n", " ")


def test_simulate_refuses_gaps_without_the_bound_before_running(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    r = gpusched("simulate", "--trace", str(trace), "--no-lower-bound", "--gaps", str(tmp_path / "g.csv"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "--gaps compares each job with the lower bound" in r.stderr and "drop --no-lower-bound" in r.stderr
    r = gpusched("simulate", "--trace", str(trace), "--gaps", str(tmp_path))
    assert r.returncode != 0 and "is a folder" in r.stderr and "Traceback" not in r.stderr


def test_trace_export_writes_the_stores_month_and_simulate_replays_it(tmp_path):
    from scheduler.clock import SimClock
    from scheduler.jobs.jobfile import load_job_file
    from scheduler.lifecycle import service
    from scheduler.simulation.trace_file import load_trace
    from scheduler.store.database import Store
    from scheduler.times import utc

    store = Store(f"sqlite:///{tmp_path / 'gpusched.db'}")
    store.migrate()
    clock = SimClock(utc(datetime(2026, 11, 3, 9, 0, tzinfo=timezone.utc)))
    submitted = []
    for name in ("helmet-val.yaml", "helmet-export.yaml", "helmet-s-train.yaml"):
        spec = load_job_file(EXAMPLES / name)
        submitted.append((clock.now(), service.submit(store, clock, spec, source=name).id, spec))
        clock.advance(timedelta(hours=5))
    clock.set(datetime(2026, 12, 1, 0, 30, tzinfo=timezone.utc))  # December's job stays out of November
    service.submit(store, clock, load_job_file(EXAMPLES / "helmet-val.yaml"), source="december")
    store.dispose()

    env = {"GPUSCHED_DATA_DIR": str(tmp_path)}
    trace = tmp_path / "november.jsonl"
    r = gpusched("trace", "export", "--month", "2026-11", "--out", str(trace), env=env)
    assert r.returncode == 0, r.stderr
    assert "3 job(s)" in r.stdout
    entries = load_trace(trace)
    assert [(e.at, e.job.name) for e in entries] == [(at, spec.name) for at, _, spec in submitted]
    for e, (at, _, spec) in zip(entries, submitted, strict=True):
        assert e.job.model_copy(update={"policy": spec.policy}) == spec  # the job file, as submitted
        assert e.deadline_at == spec.deadline_at(at)  # a relative deadline, resolved at submission

    r = gpusched("simulate", "--trace", str(trace), "--policy", "on-demand", "--seed", "2")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["jobs"] == 3

    r = gpusched("trace", "export", "--month", "2026-10", "--out", str(tmp_path / "x.jsonl"), env=env)
    assert r.returncode == 2 and "no job was submitted in 2026-10" in r.stderr and "Traceback" not in r.stderr
    r = gpusched("trace", "export", "--month", "November", env=env)
    assert r.returncode == 2 and "2026-11" in r.stderr and "Traceback" not in r.stderr


def test_plan_shows_the_run_at_risk_that_the_daemon_would_make(tmp_path):
    """A deadline the fastest run meets only inside the safety margin: the daemon runs the job at risk on
    on-demand (``planner.fallback``), and the preview says the same, not "refused"."""
    import yaml

    from providers.registry import build_providers
    from scheduler.clock import SystemClock
    from scheduler.jobs.jobfile import load_job_file
    from scheduler.planner.inputs import PlanJob, PlannerPolicy
    from scheduler.planner.plan import options_for
    from scheduler.settings import Settings

    at = datetime(2026, 11, 2, 9, tzinfo=timezone.utc)
    settings = Settings(_env_file=None)
    offers = [o for p in build_providers(settings, SystemClock()).values() for o in p.offers()]
    spec = load_job_file(EXAMPLES / "helmet-s-train.yaml")
    probe = PlanJob(id="probe", spec=spec.with_capacity("on-demand"), submitted_at=at, deadline_at=None)
    policy = PlannerPolicy(currency=settings.report_currency, fx=settings.fx)
    fastest = min(o.finish_by for o in options_for(probe, offers, [], at, policy) if o.feasible)
    deadline = at + (fastest - at) / 0.95  # on time with 5% of the time to spare: inside the 10% margin
    doc = yaml.safe_load((EXAMPLES / "helmet-s-train.yaml").read_text())
    doc["policy"]["deadline"] = deadline.isoformat()
    job = tmp_path / "tight.yaml"
    job.write_text(yaml.safe_dump(doc))
    r = gpusched("plan", str(job), "--at", at.isoformat())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "would launch" in r.stdout and "at risk" in r.stdout and "on-demand" in r.stdout
