"""Workload traces: the file format, the generator, and the two traces shipped in examples/traces/."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from providers.catalog import load_catalog
from scheduler.errors import JobFileError, UserError
from scheduler.jobs.jobfile import load_job_file
from scheduler.models import Kind
from scheduler.money import FxRates
from scheduler.simulation.lower_bound_options import PricedCatalog
from scheduler.simulation.trace_file import TraceEntry, dump_trace, entry_json, load_trace
from scheduler.simulation.traces import FAMILIES, expected_jobs, family, generate_month, main, scale_for_jobs

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "examples" / "traces"
MONTH_TRACE = TRACES / "month-3teams.jsonl"
STRESS_TRACE = TRACES / "stress-month.jsonl.gz"
NOV = (datetime(2026, 10, 31, 16, tzinfo=timezone.utc), datetime(2026, 12, 1, 8, tzinfo=timezone.utc))


@pytest.fixture(scope="module")
def month() -> list[TraceEntry]:
    """Exactly what examples/traces/README.md says made month-3teams.jsonl."""
    return generate_month(1, "2026-11", 3, scale_for_jobs(400, 3, "2026-11"))


def _example_entries() -> list[TraceEntry]:
    return [
        TraceEntry(at=datetime(2026, 11, 2, 9, 30, tzinfo=timezone(timedelta(hours=8))),
                   job=load_job_file(ROOT / "examples" / name))
        for name in ("helmet-s-train.yaml", "nightly-infer.yaml", "helmet-export.yaml", "helmet-val.yaml")
    ]


# --- the file format ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["t.jsonl", "t.jsonl.gz"])
def test_a_dumped_trace_loads_back_equal(tmp_path: Path, name: str) -> None:
    entries = _example_entries()
    path = tmp_path / name
    dump_trace(entries, path)
    assert load_trace(path) == entries
    raw = path.read_bytes()
    assert (raw[:2] == b"\x1f\x8b") == name.endswith(".gz")


def test_gzip_output_is_byte_for_byte_repeatable(tmp_path: Path) -> None:
    dump_trace(_example_entries(), tmp_path / "a.jsonl.gz")
    dump_trace(_example_entries(), tmp_path / "b.jsonl.gz")
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()


def test_a_relative_deadline_counts_from_the_submission() -> None:
    entry = _example_entries()[0]  # helmet-s-train: deadline "36h"
    assert entry.deadline_at == entry.at + timedelta(hours=36)
    line = json.loads(entry_json(entry))
    assert line["job"]["policy"]["deadline"] == "1d12h"
    assert line["at"] == "2026-11-02T09:30:00+08:00"


GOOD_JOB: dict[str, Any] = json.loads(entry_json(_example_entries()[1]))["job"]


def _with_policy(**policy: Any) -> dict[str, Any]:
    return {**GOOD_JOB, "policy": {**GOOD_JOB["policy"], **policy}}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{not json", "line 2: not JSON"),
        ('["at", "job"]', "line 2: a line must be a JSON object"),
        (json.dumps({"at": "2026-11-02T09:00:00+08:00"}), "line 2: missing job"),
        (json.dumps({"at": "2026-11-02T09:00:00+08:00", "job": GOOD_JOB, "who": "me"}), "unknown key(s) who"),
        (json.dumps({"at": "2026-11-02T09:00:00", "job": GOOD_JOB}), "line 2: at: '2026-11-02T09:00:00' has no UTC"),
        (json.dumps({"at": "yesterday", "job": GOOD_JOB}), "line 2: at: 'yesterday' is not an ISO time"),
        (json.dumps({"at": 1700000000, "job": GOOD_JOB}), "line 2: at: must be a time string"),
        (json.dumps({"at": "9999-12-31T23:59:00-05:00", "job": GOOD_JOB}), "is outside the years 2000-2199"),
        (json.dumps({"at": "0001-01-01T00:00:00+00:00", "job": GOOD_JOB}), "is outside the years 2000-2199"),
        (json.dumps({"at": "2026-11-02T09:00:00+08:00", "job": _with_policy(budget="800")}),
         "line 2: 1 problem(s)\n  policy.budget"),
        (json.dumps({"at": "2026-11-02T09:00:00+08:00", "job": {**GOOD_JOB, "kind": "trian", "model": "yolo"}}),
         "line 2: 2 problem(s)"),
        (json.dumps({"at": "2026-11-02T09:00:00+08:00", "job": _with_policy(deadline="2026-11-01T00:00:00+08:00")}),
         "policy.deadline: the deadline 2026-11-01T00:00:00+08:00 has already passed"),
    ],
)
def test_a_bad_line_is_reported_with_its_number_and_fields(tmp_path: Path, line: str, expected: str) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"at": "2026-11-02T09:00:00+08:00", "job": GOOD_JOB})
    path.write_text(f"{good}\n{line}\n\n{good}\n", encoding="utf-8")
    with pytest.raises(UserError) as info:
        load_trace(path)
    assert expected in str(info.value)
    assert str(path) in str(info.value)


def test_job_problems_come_as_a_job_file_error_listing_every_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    job = {**GOOD_JOB, "kind": "trian", "resources": {"gpus": ["A11"]}}
    path.write_text(json.dumps({"at": "2026-11-02T09:00:00+08:00", "job": job}) + "\n", encoding="utf-8")
    with pytest.raises(JobFileError) as info:
        load_trace(path)
    assert info.value.path.endswith("line 1")
    assert {p.field for p in info.value.problems} == {"kind", "resources.gpus[0]"}


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("missing.jsonl", None, "no such trace file"),
        ("broken.jsonl.gz", b"not gzip at all", "cannot be read"),
        ("latin1.jsonl", "{\"at\": \"caf\xe9\"}".encode("latin-1"), "is not UTF-8"),
    ],
)
def test_an_unreadable_trace_file_is_a_user_error(tmp_path: Path, name: str, content: bytes | None,
                                                   expected: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UserError, match=expected):
        load_trace(path)


@pytest.mark.parametrize("content", ["", "\n\n", '{"market": {"reclaim_scale": {"aws": 2.0}}}\n'])
def test_a_trace_without_jobs_is_a_user_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match="holds no jobs"):
        load_trace(path)


def test_a_trace_spanning_more_than_a_year_names_its_first_and_last_lines(tmp_path: Path) -> None:
    # Simulated, the quiet years between two such submissions would be stepped through six hours at a time.
    path = tmp_path / "years.jsonl"
    lines = [json.dumps({"at": at, "job": GOOD_JOB}) for at in
             ("2026-11-02T09:00:00+08:00", "2031-11-02T09:00:00+08:00", "2026-11-01T09:00:00+08:00")]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"over 1,827 days \(line 3 to line 2\); a trace may span at most 366"):
        load_trace(path)
    path.write_text("\n".join(lines[::2]) + "\n", encoding="utf-8")
    assert len(load_trace(path)) == 2  # a day apart: fine


# --- the generator -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_team() -> list[TraceEntry]:
    return generate_month(7, teams=1, scale=0.3)


def test_the_same_seed_gives_the_same_month_and_another_seed_does_not(one_team: list[TraceEntry]) -> None:
    assert generate_month(7, teams=1, scale=0.3) == one_team
    assert generate_month(8, teams=1, scale=0.3) != one_team


def test_adding_a_team_leaves_the_others_jobs_alone(one_team: list[TraceEntry]) -> None:
    two = generate_month(7, teams=2, scale=0.3)
    assert [e for e in two if e.job.team == one_team[0].job.team] == one_team
    assert len({e.job.team for e in two}) == 2


def test_a_month_for_three_teams_has_about_400_jobs_of_every_kind(month: list[TraceEntry]) -> None:
    assert 340 <= len(month) <= 460
    assert len(month) == pytest.approx(expected_jobs(3, scale_for_jobs(400, 3)), rel=0.1)
    kinds = Counter(e.job.kind for e in month)
    assert set(kinds) == set(Kind)
    assert [e.at for e in month] == sorted(e.at for e in month)
    assert all(NOV[0] <= e.at < NOV[1] for e in month)
    assert len({e.job.name for e in month}) == len(month)
    assert len({e.job.team for e in month}) == 3


def test_every_team_runs_batch_inference_every_night_due_by_morning(month: list[TraceEntry]) -> None:
    nightly = [e for e in month if e.job.kind is Kind.infer and e.job.policy.priority == 70]
    per_team = Counter(e.job.team for e in nightly)
    assert set(per_team.values()) == {30}
    for e in nightly:
        assert e.at.astimezone(timezone(timedelta(hours=8))).hour >= 22
        assert e.job.infer is not None and 20_000 <= e.job.infer.images <= 360_000
        assert e.deadline_at is not None and e.deadline_at - e.at <= timedelta(hours=8)


def test_weekly_retrains_have_deadlines_and_are_followed_by_validation_and_export(month: list[TraceEntry]) -> None:
    retrains = [e for e in month if e.job.kind is Kind.train and e.job.policy.priority >= 50]
    assert len(retrains) >= 3 * 4
    by_name = {e.job.name: e for e in month}
    for e in retrains:
        assert e.job.model in ("yolov9-s", "yolov9-c", "yolov9-m", "gelan-c")
        assert e.job.data is not None and 10_000 <= (e.job.data.train_images or 0) <= 70_000
        assert e.job.train is not None and 50 <= e.job.train.epochs <= 150
        assert e.deadline_at is not None and e.deadline_at - e.at >= timedelta(hours=23)
        for suffix in ("val", "export"):
            follow = by_name.get(f"{e.job.name}-{suffix}")
            if follow is not None:
                assert follow.at > e.at
                assert e.job.name in str(follow.job.model_dump())
    assert sum(1 for e in month if e.job.kind is Kind.export) >= len(retrains) * 0.8


def test_experiments_come_in_office_hours_with_loose_or_no_deadlines(month: list[TraceEntry]) -> None:
    experiments = [e for e in month if e.job.name.startswith("exp-")]
    assert len(experiments) > len(month) / 3
    assert {e.job.policy.capacity for e in experiments} == {"auto", "on-demand", "spot"}
    assert any(e.job.policy.deadline is None for e in experiments)
    for e in experiments:
        assert e.at.weekday() < 5 and 9 <= e.at.hour <= 19  # in the team's own UTC offset
        assert e.deadline_at is None or e.deadline_at - e.at >= timedelta(hours=48)


def test_every_generated_job_can_run_on_the_catalog_with_room_before_its_deadline(month: list[TraceEntry]) -> None:
    offers = load_catalog()
    catalog = PricedCatalog(offers, currency="CNY", fx=FxRates())
    regions = {(o.provider, o.region) for o in offers}
    for e in month:
        options = catalog.options(e.job, e.at)
        assert options.options, f"{e.job.name}: {options.why_not}"
        if e.deadline_at is not None:
            fastest = min(o.hours for o in options.options)
            assert e.deadline_at - e.at >= timedelta(hours=1.5 * fastest)
        for region in e.job.where.regions or ():
            assert any((p, region) in regions for p in e.job.where.providers or ("aws", "alibaba", "tencent"))


def test_data_lives_where_the_team_computes(month: list[TraceEntry]) -> None:
    scheme = {"aws": "s3", "alibaba": "oss", "tencent": "cos"}
    for e in month:
        uri = e.job.data.uri if e.job.data else e.job.infer.source if e.job.infer else None
        if uri is not None and e.job.where.providers == ("alibaba",):
            assert uri.startswith(scheme["alibaba"])


def test_scale_for_jobs_inverts_the_expected_count() -> None:
    for jobs, teams in ((400, 3), (10_000, 12), (50, 1)):
        assert expected_jobs(teams, scale_for_jobs(jobs, teams)) == pytest.approx(jobs, rel=0.02)
    with pytest.raises(UserError):
        scale_for_jobs(0, 3)
    with pytest.raises(UserError, match="at most 100,000 jobs, not 99,999,999,999"):
        scale_for_jobs(99_999_999_999, 3)
    # The most a trace holds is asked for as any other count (its scale comes out a hair over it).
    assert expected_jobs(12, scale_for_jobs(100_000, 12)) == pytest.approx(100_000, rel=0.01)


@pytest.mark.parametrize(("args", "expected"), [
    ({"month": "November"}, "is not YYYY-MM"),
    ({"month": "9999-12"}, "outside the years 2000-2198"),  # was an OverflowError
    ({"month": "2199-06"}, "outside the years 2000-2198"),  # its deadlines would fall in 2200
    ({"teams": 0}, "at least one team"),
    ({"scale": 0}, "must be a positive number"),
    ({"scale": float("nan")}, "must be a positive number"),
    # Refused before a job is made: 100,000 teams ran for minutes towards millions of jobs.
    ({"teams": 100_000}, r"100,000 teams at scale 1 would submit about 13,131,429 jobs; a trace holds at most"),
    ({"teams": 12, "scale": 80.0}, "a trace holds at most 100,000"),
])
def test_generator_arguments_are_checked(args: dict[str, Any], expected: str) -> None:
    with pytest.raises(UserError, match=expected):
        generate_month(1, **args)


def test_the_command_line_writes_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "small.jsonl.gz"
    assert main(["--seed", "3", "--teams", "1", "--scale", "0.1", "--out", str(out)]) == 0
    entries = load_trace(out)
    assert entries == generate_month(3, teams=1, scale=0.1)
    assert f"wrote {len(entries)} jobs" in capsys.readouterr().out


# --- the shipped traces --------------------------------------------------------------------


def test_the_month_trace_is_what_its_readme_command_makes(month: list[TraceEntry]) -> None:
    assert load_trace(MONTH_TRACE) == month


def test_the_stress_trace_has_about_ten_thousand_valid_jobs() -> None:
    raw = STRESS_TRACE.read_bytes()
    assert len(raw) < 3_000_000
    lines = gzip.decompress(raw).decode("utf-8").splitlines()
    entries = load_trace(STRESS_TRACE)  # every job validated
    assert len(entries) == len(lines)
    assert 9_000 <= len(entries) <= 11_000
    assert len({e.job.team for e in entries}) >= 10
    assert all(NOV[0] <= e.at < NOV[1] for e in entries)


# --- families of months -----------------------------------------------------------------------


def _long(e: TraceEntry) -> bool:
    train = e.job.train
    return (e.job.kind is Kind.train and train is not None and train.epochs >= 150
            and e.job.model in ("yolov9-e", "yolov9-c") and train.img_size >= 640)


def test_the_standard_family_is_the_month_as_before(month: list[TraceEntry]) -> None:
    fam = FAMILIES["standard"]
    assert generate_month(1, "2026-11", 3, scale_for_jobs(400, 3, "2026-11", fam), fam=fam) == month


def test_unknown_family_is_a_user_error_listing_the_families() -> None:
    with pytest.raises(UserError, match="long-training"):
        family("longest")


@pytest.fixture(scope="module")
def mixed() -> list[TraceEntry]:
    return generate_month(31, "2026-11", 4, 0.4, fam=FAMILIES["mixed"])


def test_the_mixed_family_has_long_training_a100_lists_tight_deadlines_and_heavy_nights(
        mixed: list[TraceEntry]) -> None:
    long = [e for e in mixed if _long(e)]
    assert len(long) >= 4
    assert {e.job.model for e in long} <= {"yolov9-e", "yolov9-c"}
    assert all(150 <= e.job.train.epochs <= 300 and 640 <= e.job.train.img_size <= 960  # type: ignore[union-attr]
               for e in long)
    assert all(e.job.data.train_images <= 48_000 for e in long)  # type: ignore[union-attr,operator]
    assert any(any(g.startswith("A100") for g in e.job.resources.gpus or ()) for e in mixed)
    nightly = [e for e in mixed if e.job.kind is Kind.infer and e.job.policy.max_restarts == 5]
    assert nightly and all(e.deadline_at - e.at == timedelta(hours=10) for e in nightly)  # type: ignore[operator]
    assert max(e.job.infer.images for e in nightly) > 300_000  # type: ignore[union-attr]
    tight = [e for e in mixed if e.deadline_at is not None and e.job.kind is Kind.train
             and e.deadline_at - e.at <= timedelta(hours=72) and e.job.policy.max_restarts == 10]
    assert tight


def test_a_deadline_kept_as_written_may_be_tighter_than_the_work(mixed: list[TraceEntry]) -> None:
    """The tight families keep some deadlines as people write them: the lower bound calls those infeasible."""
    catalog = PricedCatalog(load_catalog(), currency="CNY", fx=FxRates())
    infeasible = [e for e in mixed if e.deadline_at is not None and not catalog.options(e.job, e.at).options]
    loose = generate_month(31, "2026-11", 4, 0.4, fam=FAMILIES["long-training"])
    assert all(catalog.options(e.job, e.at).options for e in loose if e.deadline_at is not None)
    assert len(infeasible) < len(mixed) // 10  # a few, not a month of refusals
