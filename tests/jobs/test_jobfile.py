"""job.yaml loading: every bad file gets its field path, a plain message and an example."""

from __future__ import annotations

import copy
import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from scheduler.errors import FieldProblem, JobFileError
from scheduler.gpus import GPUS
from scheduler.jobs.jobfile import load_job_file, parse_job, parse_job_text, submit_problems
from scheduler.jobs.jobfile_examples import FIELD_EXAMPLES
from scheduler.jobs.jobfile_schema import job_json_schema
from scheduler.models import JobSpec, Kind

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DROP = object()  # a patch value that removes the key

BASE: dict[str, Any] = {
    "name": "helmet-v3",
    "team": "vision-qa",
    "project": "safety-helmet",
    "kind": "train",
    "model": "yolov9-s",
    "data": {"uri": "s3://bucket/datasets/helmet", "train_images": 12000, "val_images": 1500},
    "train": {"epochs": 100, "img_size": 640, "batch": 64, "weights": "yolov9-s.pt"},
    "resources": {"gpus": ["A10", "L4", "A10G"], "gpu_count": 1, "nodes": 1},
    "where": {"providers": ["aws", "alibaba", "tencent"]},
    "policy": {"capacity": "auto", "deadline": "36h", "budget": "800 CNY", "priority": 50},
}
INFER = {"source": "s3://bucket/images/2026-11/", "images": 200000, "weights": "s3://bucket/runs/h/best.pt"}
VAL = {"weights": "s3://bucket/runs/h/best.pt"}
EXPORT = {"weights": "s3://bucket/runs/h/best.pt", "formats": ["onnx", "engine"], "half": True}
AS_INFER = {"kind": "infer", "train": DROP, "data": DROP, "infer": INFER}
AS_EXPORT = {"kind": "export", "train": DROP, "data": DROP, "export": EXPORT}


def patched(changes: dict[str, Any]) -> dict[str, Any]:
    """BASE with dotted-path changes applied (DROP removes a key)."""
    doc = copy.deepcopy(BASE)
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = doc
        for p in parents:
            node = node.setdefault(p, {})
        if value is DROP:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(value)
    return doc


def problems_of(doc: object) -> list[FieldProblem]:
    with pytest.raises(JobFileError) as info:
        parse_job(doc, "job.yaml")
    return info.value.problems


def text_problems(text: str) -> list[FieldProblem]:
    with pytest.raises(JobFileError) as info:
        parse_job_text(text, "job.yaml")
    return info.value.problems


def find(problems: list[FieldProblem], field: str) -> FieldProblem:
    matches = [p for p in problems if p.field == field]
    assert matches, f"no problem at {field!r}; got {problems!r}"
    return matches[0]


def assert_plain(p: FieldProblem) -> None:
    # Users see our words, never a library's.
    for leak in ("Input should", "validation error", "Traceback", "pydantic", "Value error,"):
        assert leak not in p.message
    assert p.example, f"{p.field} has no example"


def test_base_document_is_valid() -> None:
    spec = parse_job(BASE)
    assert spec.kind is Kind.train
    assert spec.policy.deadline == timedelta(hours=36)
    assert str(spec.policy.budget) == "800.00 CNY"


# (id, changes to BASE, field, phrase in the message)
DOC_CASES = [
    ("unknown-key", {"train.epoch": 3}, "train.epoch", "did you mean 'epochs'"),
    ("unknown-top-key", {"resource": {"gpu_count": 1}}, "resource", "did you mean 'resources'"),
    ("key-in-wrong-section", {"epochs": 100}, "epochs", "belongs in the train: section"),
    ("wrong-type", {"train.epochs": "many"}, "train.epochs", "whole number"),
    ("wrong-type-bool", {"policy.priority": "high"}, "policy.priority", "whole number"),
    ("number-for-text", {"team": 42}, "team", "put it in quotes"),
    ("section-not-mapping", {"data": ["s3://bucket/x"]}, "data", "must be a section"),
    ("list-not-list", {"resources.gpus": "A10"}, "resources.gpus", "must be a list"),
    ("priority-too-high", {"policy.priority": 101}, "policy.priority", "at most 100"),
    ("gpu-count-zero", {"resources.gpu_count": 0}, "resources.gpu_count", "at least 1"),
    ("img-size-not-32", {"train.img_size": 650}, "train.img_size", "multiple of 32"),
    ("conf-out-of-range", {**AS_INFER, "infer": {**INFER, "conf": 1.5}}, "infer.conf", "less than 1"),
    ("name-uppercase", {"name": "Helmet-V3"}, "name", "uppercase"),
    ("name-bad-chars", {"name": "helmet_v3"}, "name", "lowercase letters, digits and '-'"),
    ("name-too-long", {"name": "h" * 64}, "name", "at most 63 characters"),
    ("name-missing", {"name": DROP}, "name", "is required"),
    ("unknown-kind", {"kind": "training"}, "kind", "did you mean 'train'"),
    ("unknown-model", {"model": "yolov10-s"}, "model", "unknown model 'yolov10-s'"),
    ("unknown-gpu", {"resources.gpus": ["A10", "RTX9090"]}, "resources.gpus[1]", "unknown GPU 'RTX9090'"),
    ("gpu-misspelt", {"resources.gpus": ["H10"]}, "resources.gpus[0]", "did you mean 'H100'"),
    ("gpu-unknown-size", {"resources.gpus": ["A100-120GB"]}, "resources.gpus[0]", "unknown GPU 'A100-120GB'"),
    ("unknown-provider", {"where.providers": ["gcp"]}, "where.providers[0]", "unknown provider 'gcp'"),
    ("unknown-capacity", {"policy.capacity": "spto"}, "policy.capacity", "did you mean 'spot'"),
    ("unknown-currency", {"policy.budget": "800 EUR"}, "policy.budget", "unknown currency 'EUR'"),
    ("budget-number-only", {"policy.budget": 800}, "policy.budget", "needs a currency"),
    ("budget-text-no-currency", {"policy.budget": "800"}, "policy.budget", "not an amount with a currency"),
    ("budget-zero", {"policy.budget": "0 CNY"}, "policy.budget", "more than zero"),
    ("deadline-gibberish", {"policy.deadline": "tomorrow"}, "policy.deadline", "neither an ISO time"),
    ("deadline-no-offset", {"policy.deadline": "2026-12-10T18:00:00"}, "policy.deadline", "UTC offset"),
    ("deadline-a-number", {"policy.deadline": 36}, "policy.deadline", "duration string"),
    ("deadline-a-list", {"policy.deadline": ["36h"]}, "policy.deadline", "neither an ISO time"),
    ("infer-section-in-train", {"infer": INFER}, "infer", "a train job takes no infer: section"),
    ("train-section-in-export", {**AS_EXPORT, "train": BASE["train"]}, "train", "an export job takes no train:"),
    ("train-without-data", {"data": DROP}, "data", "needs a data: section"),
    ("train-without-train-images", {"data.train_images": DROP}, "data.train_images", "number of images"),
    ("train-without-train-section", {"train": DROP}, "train", "needs a train: section"),
    ("infer-without-infer", {**AS_INFER, "infer": DROP}, "infer", "needs an infer: section"),
    ("val-without-val", {"kind": "val", "train": DROP}, "val", "needs a val: section"),
    ("val-without-val-images", {"kind": "val", "train": DROP, "val": VAL, "data.val_images": DROP},
     "data.val_images", "number of images"),
    ("export-without-export", {**AS_EXPORT, "export": DROP}, "export", "needs an export: section"),
    ("export-format-unknown", {**AS_EXPORT, "export": {**EXPORT, "formats": ["onnx", "engin"]}},
     "export.formats[1]", "did you mean 'engine'"),
    ("export-half-and-dynamic", {**AS_EXPORT, "export": {**EXPORT, "dynamic": True}},
     "export.dynamic", "cannot be combined"),
    ("uri-http", {"data.uri": "http://example.com/helmet"}, "data.uri", "http:// is not supported"),
    ("uri-no-scheme", {"data.uri": "datasets/helmet"}, "data.uri", "s3://, oss:// or cos://"),
    ("weights-http", {"train.weights": "https://x.org/yolov9-s.pt"}, "train.weights", "https:// is not supported"),
    ("too-many-gpus", {"resources.gpu_count": 8, "resources.nodes": 9}, "resources", "at most 64"),
    ("infer-on-two-gpus", {**AS_INFER, "resources.gpu_count": 2}, "resources.gpu_count", "runs on one GPU"),
]


@pytest.mark.parametrize(("changes", "field", "phrase"), [c[1:] for c in DOC_CASES], ids=[c[0] for c in DOC_CASES])
def test_bad_document_names_field_and_says_why(changes: dict[str, Any], field: str, phrase: str) -> None:
    problem = find(problems_of(patched(changes)), field)
    assert phrase in problem.message
    assert_plain(problem)


TEXT_CASES = [
    ("empty", "", "empty"),
    ("only-comments", "# nothing here yet\n", "empty"),
    ("syntax-error", "name: helmet\n  team: vision-qa\n", "line 2, column 7"),
    ("unclosed-list", "name: helmet\nresources:\n  gpus: [A10, L4\n", "YAML syntax error at line"),
    ("duplicate-key", "name: a\nteam: t\nname: b\n", "key 'name' appears twice"),
    ("top-level-list", "- name: helmet\n- team: vision-qa\n", "not a list"),
    ("top-level-text", "just some words\n", "not the text"),
    ("control-character", "name: helmet\x07\n", "character YAML does not allow"),
]


@pytest.mark.parametrize(("text", "phrase"), [c[1:] for c in TEXT_CASES], ids=[c[0] for c in TEXT_CASES])
def test_bad_text_is_a_file_problem(text: str, phrase: str) -> None:
    problems = text_problems(text)
    assert [p.field for p in problems] == ["(file)"]
    assert phrase in problems[0].message
    assert_plain(problems[0])


def test_yaml_date_without_time_asks_for_time_and_offset() -> None:
    text = yaml.safe_dump({**BASE, "policy": {"budget": "800 CNY"}})
    text = text.replace("policy:\n", "policy:\n  deadline: 2026-12-10\n")
    assert "time of day" in find(text_problems(text), "policy.deadline").message


def test_unquoted_yaml_timestamp_with_offset_is_accepted() -> None:
    text = yaml.safe_dump({k: v for k, v in BASE.items() if k != "policy"})
    spec = parse_job_text(text + "policy:\n  deadline: 2026-12-10T18:00:00+08:00\n", "job.yaml")
    assert spec.policy.deadline == datetime(2026, 12, 10, 10, 0, tzinfo=timezone.utc)


def test_every_problem_in_a_file_is_reported() -> None:
    doc = patched({
        "name": "Helmet",
        "model": "yolov10-s",
        "train.epoch": 3,
        "resources.gpus": ["A10", "B200"],
        "policy.budget": "800 EUR",
        "policy.deadline": "soon",
        "infer": INFER,
    })
    fields = {p.field for p in problems_of(doc)}
    assert fields == {
        "name", "model", "train.epoch", "resources.gpus[1]", "policy.budget", "policy.deadline", "infer",
    }


def test_error_text_names_the_file_and_each_field() -> None:
    with pytest.raises(JobFileError) as info:
        parse_job(patched({"policy.priority": 101, "model": "yolo"}), "jobs/helmet.yaml")
    text = str(info.value)
    assert text.startswith("jobs/helmet.yaml: 2 problem(s)")
    assert "policy.priority:" in text and "model:" in text and "e.g. 50" in text


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(JobFileError) as info:
        load_job_file(tmp_path / "nope.yaml")
    assert info.value.path.endswith("nope.yaml")
    assert "no such file" in info.value.problems[0].message


def test_folder_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(JobFileError) as info:
        load_job_file(tmp_path)
    assert "is a folder" in info.value.problems[0].message


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes("name: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(JobFileError) as info:
        load_job_file(path)
    assert "UTF-8" in info.value.problems[0].message


def test_good_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(BASE), encoding="utf-8")
    assert load_job_file(path) == parse_job(BASE)


# --- submit-time checks ------------------------------------------------------------

NOW = datetime(2026, 11, 2, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("deadline", "late"),
    [
        ("2026-11-02T19:59:00+08:00", True),  # 11:59 UTC
        ("2026-11-02T12:00:00Z", True),  # exactly now leaves no time to run
        ("2026-11-02T20:01:00+08:00", False),
        ("36h", False),
        (None, False),
    ],
)
def test_submit_problems_flags_a_past_deadline(deadline: str | None, late: bool) -> None:
    spec = parse_job(patched({"policy.deadline": deadline if deadline is not None else DROP}))
    problems = submit_problems(spec, NOW)
    assert [p.field for p in problems] == (["policy.deadline"] if late else [])
    if late:
        assert "already passed" in problems[0].message


# --- the examples -------------------------------------------------------------------


def example(name: str) -> JobSpec:
    return load_job_file(EXAMPLES / name)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_example_is_valid_and_round_trips(path: Path) -> None:
    spec = load_job_file(path)
    assert parse_job(spec.model_dump(), str(path)) == spec


def test_examples_cover_every_kind_and_three_teams() -> None:
    specs = [load_job_file(p) for p in EXAMPLES.glob("*.yaml")]
    assert {s.kind for s in specs} == set(Kind)
    assert {s.team for s in specs} == {"vision-qa", "retail-ai", "traffic-ops"}


def test_example_numbers_the_demo_relies_on() -> None:
    helmet = example("helmet-s-train.yaml")
    assert (helmet.model, helmet.team, helmet.project) == ("yolov9-s", "vision-qa", "safety-helmet")
    assert (helmet.data.train_images, helmet.data.val_images) == (12000, 1500)
    assert (helmet.train.epochs, helmet.train.batch) == (100, 64)
    assert helmet.resources.gpus == ("A10", "L4", "A10G", "T4")
    assert (helmet.policy.deadline, str(helmet.policy.budget), helmet.policy.capacity) == (
        timedelta(hours=36), "800.00 CNY", "auto")
    shelf = example("shelf-c-train.yaml")
    assert (shelf.model, shelf.team, shelf.project, shelf.train.epochs) == ("yolov9-c", "retail-ai", "shelf-audit", 60)
    assert 19000 <= shelf.data.train_images <= 21000
    assert (shelf.policy.deadline, str(shelf.policy.budget)) == (timedelta(hours=72), "3,000.00 CNY")
    nightly = example("nightly-infer.yaml")
    assert (nightly.kind, nightly.team, nightly.project, nightly.model) == (
        Kind.infer, "traffic-ops", "junction-cams", "yolov9-s")
    assert nightly.infer.images == 200000 and nightly.infer.weights.startswith("s3://")
    assert nightly.policy.deadline == timedelta(hours=8)
    export = example("helmet-export.yaml")
    assert (export.kind, export.team, export.export.formats, export.export.half) == (
        Kind.export, "vision-qa", ("onnx", "engine"), True)
    val = example("helmet-val.yaml")
    assert (val.kind, val.team) == (Kind.val, "vision-qa")


# --- the schema and the example table ------------------------------------------------


def leaf_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    from scheduler.jobs.jobfile_problems import submodel  # the same walk the loader uses
    from scheduler.money import Money

    paths = set()
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.add(path)
        sub = submodel(field.annotation)
        if sub is not None and sub is not Money:
            paths |= leaf_paths(sub, f"{path}.")
    return paths


def test_example_table_covers_every_field_and_nothing_else() -> None:
    assert set(FIELD_EXAMPLES) - {"(file)"} == leaf_paths(JobSpec)


def test_schema_describes_deadline_and_budget_as_text() -> None:
    schema = job_json_schema()
    json.dumps(schema)  # must be plain JSON
    policy = schema["$defs"]["PolicySpec"]["properties"]
    deadline = next(s for s in policy["deadline"]["anyOf"] if s.get("type") == "string")
    budget = next(s for s in policy["budget"]["anyOf"] if s.get("type") == "string")
    assert "800 CNY" in policy["budget"]["examples"]
    assert "36h" in policy["deadline"]["examples"]
    for good in ("36h", "2d", "1d12h", "2026-12-10T18:00:00+08:00", "2026-12-10T10:00:00Z"):
        assert re.fullmatch(deadline["pattern"], good), good
    for bad in ("tomorrow", "2026-12-10T18:00:00"):
        assert not re.fullmatch(deadline["pattern"], bad), bad
    assert re.fullmatch(budget["pattern"], "800 CNY") and not re.fullmatch(budget["pattern"], "800")
    assert "Money" not in schema["$defs"]


def test_schema_lists_fields_and_known_gpus() -> None:
    schema = job_json_schema()
    assert set(schema["properties"]) == set(JobSpec.model_fields)
    assert set(schema["required"]) == {"name", "team", "kind", "model"}
    gpus = schema["$defs"]["ResourcesSpec"]["properties"]["gpus"]["anyOf"][0]
    enum, spelt = gpus["items"]["anyOf"]
    assert enum["enum"] == list(GPUS)  # what editors offer to complete
    pattern = spelt["pattern"]
    assert all(re.fullmatch(pattern, name) for name in GPUS)
    assert all(re.fullmatch(pattern, name) for name in ("A100", "a100-80gb", "h100", "l40s", "A10g"))
    assert not re.fullmatch(pattern, "RTX9090") and not re.fullmatch(pattern, "A100-120GB")


@pytest.mark.parametrize(("typed", "means"), [
    ("A100", "A100-40G"), ("a100", "A100-40G"), ("A100-40GB", "A100-40G"), ("A100-80GB", "A100-80G"),
    ("a100-80g", "A100-80G"), ("a10g", "A10G"), ("L40S", "L40S"), ("l40s", "L40S"), ("H100", "H100"),
    ("h100", "H100"), ("t4", "T4"), ("v100-32gb", "V100-32G"),
])
def test_gpu_names_as_people_write_them_mean_the_models_offers_carry(typed: str, means: str) -> None:
    spec = parse_job(patched({"resources.gpus": [typed]}))
    assert spec.resources.gpus == (means,)
