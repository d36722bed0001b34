"""Properties of the job file, on generated documents (hypothesis): the validator accepts a file or
lists its problems, and raises nothing else, whatever it is given; a file it accepts can be
submitted and planned without an exception. The regression cases of the bounds are in
test_jobfile_limits.py; this finds the ones nobody thought of.

Run time is kept modest (max_examples below: about 15-30 s in all on 2 shared cores; 1,500 mutated
documents and 1,500 mutated texts per test also passed, in about 2 minutes).
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from providers.catalog import load_catalog
from scheduler.errors import JobFileError
from scheduler.gpus import GPUS
from scheduler.jobs.jobfile import parse_job, parse_job_text, submit_problems
from scheduler.models import EXPORT_FORMATS, MODELS, PROVIDERS, JobSpec
from scheduler.planner.inputs import PlanJob, PlannerPolicy
from scheduler.planner.plan import options_for, plan

NOW = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)
OFFERS = load_catalog()
POLICY = PlannerPolicy()
FAST = settings(max_examples=40, deadline=timedelta(seconds=5), suppress_health_check=[HealthCheck.too_slow])
MANY = settings(max_examples=150, deadline=timedelta(seconds=2), suppress_health_check=[HealthCheck.too_slow])

uri = st.sampled_from(["s3://bucket/data/helmet", "oss://b/x/", "cos://bkt-1250000000/ds"])
weights = st.sampled_from(["yolov9-s.pt", "s3://bucket/runs/best.pt", "gelan-c.pt"])
names = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?\Z")
teams = st.from_regex(r"\A[a-z0-9][a-z0-9_-]{0,20}\Z")
img = st.integers(1, 64).map(lambda n: n * 32)
durations = st.tuples(st.integers(0, 366), st.integers(0, 23), st.integers(0, 59)).filter(any).map(
    lambda t: "".join(f"{n}{u}" for n, u in zip(t, "dhm") if n)).filter(
    lambda s: timedelta(days=int(s.split("d")[0]) if "d" in s else 0) <= timedelta(days=365))
absolute = st.integers(3600, 360 * 86400).map(lambda s: (NOW + timedelta(seconds=s)).isoformat())
budgets = st.tuples(st.integers(1, 10**6), st.sampled_from(["CNY", "USD"])).map(lambda t: f"{t[0]} {t[1]}")


@st.composite
def valid_docs(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["train", "infer", "val", "export"]))
    doc: dict[str, Any] = {"name": draw(names), "team": draw(teams), "kind": kind,
                           "model": draw(st.sampled_from(MODELS))}
    # Each count mostly in a real job's range, sometimes anywhere up to its bound: every field within its bound,
    # together 10,000 epochs of 100 million images at 2048 px, planned a finish past the clock's last year.
    if kind == "train":
        gpu_count = draw(st.integers(1, 8))
        doc["data"] = {"uri": draw(uri), "train_images": draw(st.integers(1, 10**6) | st.integers(1, 10**8)),
                       "val_images": draw(st.integers(0, 10**5) | st.integers(0, 10**7))}
        doc["train"] = {"epochs": draw(st.integers(1, 300) | st.integers(1, 10_000)), "img_size": draw(img),
                        "batch": draw(st.integers(1, 256) | st.integers(1, 1024))}
        doc["resources"] = {"gpu_count": gpu_count, "nodes": draw(st.integers(1, 4) | st.integers(1, 64 // gpu_count))}
    elif kind == "infer":
        doc["infer"] = {"source": draw(uri), "images": draw(st.integers(1, 10**7) | st.integers(1, 10**9)),
                        "weights": draw(weights), "img_size": draw(img)}
    elif kind == "val":
        doc["data"] = {"uri": draw(uri), "val_images": draw(st.integers(1, 10**5) | st.integers(1, 10**7))}
        doc["val"] = {"weights": draw(weights), "img_size": draw(img)}
    else:
        doc["export"] = {"weights": draw(weights), "formats": draw(st.lists(st.sampled_from(EXPORT_FORMATS),
                                                                           min_size=1, max_size=3, unique=True))}
    resources = doc.setdefault("resources", {})
    if draw(st.booleans()):
        resources["gpus"] = draw(st.lists(st.sampled_from(sorted(GPUS)), min_size=1, max_size=4, unique=True))
    if draw(st.booleans()):
        doc["where"] = {"providers": draw(st.lists(st.sampled_from(PROVIDERS), min_size=1, max_size=4, unique=True))}
    policy: dict[str, Any] = {"capacity": draw(st.sampled_from(["auto", "spot", "on-demand", "reserved"]))}
    if draw(st.booleans()):
        policy["deadline"] = draw(st.one_of(durations, absolute))
    if draw(st.booleans()):
        policy["budget"] = draw(budgets)
    doc["policy"] = policy
    return doc


# Anything JSON or YAML can carry, extremes included: huge and negative numbers, inf and nan, text
# with control characters and lone surrogates, deep and wide containers.
leaves = st.one_of(
    st.none(), st.booleans(),
    st.integers(), st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30), st.text(alphabet=st.characters(codec=None), max_size=10),
    st.sampled_from(["1e999999999 CNY", "-5 CNY", "0 USD", "999999999d", "9999-12-31T23:00:00-05:00",
                     "0001-01-01T00:00:00+14:00", "\ud800", "36h", "800 CNY", "s3://b/x", "A100", "yolov9-e"]),
)
anything = st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                        max_leaves=20)


# Values at the edges of what a field can hold, the kind that broke the tick or gave tracebacks.
ODD = ["\ud800", "a\udc80b", "x" * 2000, "", [], {}, None, True, float("nan"), 10**4300]
NUMBERS = [10**30, -(2**63), 2**63, 0, -1, float("inf"), float("-inf"), 1e308, 2.5, "12"]
EXTREMES: dict[str, list[Any]] = {
    "budget": ["1e999999999 CNY", "99999999999999999999 CNY", "1000000.01 USD", "0.000000001 CNY", "0 CNY",
               {"amount": "1e999999999", "currency": "CNY"}, {"amount": -5, "currency": "CNY"},
               {"amount": "NaN", "currency": "USD"}, {"amount": 1, "currency": "EUR"}, 800],
    "deadline": ["999999999d", "99999999999999999999h", "367d", "366d", "0m", "9999-12-31T23:00:00-05:00",
                 "9999-12-31T23:59:59+00:00", "0001-01-01T00:00:00+14:00", "2026-11-02T09:00:00",
                 "2026-13-01T00:00:00Z", "2200-01-01T00:00:00Z", "2199-12-31T23:00:00-05:00", 36],
}
FIELDS = [("policy", k) for k in ("deadline", "budget", "priority", "max_restarts", "idle_stop_minutes")] + [
    (section, k) for section in ("train", "data", "infer", "resources")
    for k in ("epochs", "batch", "img_size", "train_images", "val_images", "images", "gpu_count", "nodes")]


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated_docs(draw: st.DrawFn) -> Any:
    doc = copy.deepcopy(draw(valid_docs()))
    if draw(st.booleans()):  # half the time: one field of the policy or a count at an extreme
        section_name, key = draw(st.sampled_from(FIELDS))
        if section_name == "policy" and draw(st.booleans()):
            key = draw(st.sampled_from(["deadline", "budget"]))  # where the tick-breaking values went
        section = doc.setdefault(section_name, {})
        if isinstance(section, dict):
            # a copy: a later mutation must not change the shared constant (hypothesis replays draws)
            section[key] = copy.deepcopy(draw(st.sampled_from(EXTREMES.get(key, NUMBERS) + ODD)))
    for _ in range(draw(st.integers(0, 2))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            return draw(anything)
        path = draw(st.sampled_from(paths))
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.one_of(st.text(max_size=12), st.integers(), st.none()))] = draw(anything)
        else:
            parent[path[-1]] = draw(anything)
    return doc


def accepted_or_problems(load: Any, *args: Any) -> JobSpec | None:
    """The property: a spec, or JobFileError with at least one problem. Anything else fails the test."""
    try:
        return load(*args)
    except JobFileError as exc:
        assert exc.problems, "an error without problems tells the user nothing"
        for p in exc.problems:
            assert p.field and p.message
            (p.field + p.message + (p.example or "") + exc.path).encode("utf-8")  # printable and storable
        str(exc)
        return None


def plans(spec: JobSpec) -> None:
    """An accepted spec can be submitted (its time checks) and planned without an exception."""
    submit_problems(spec, NOW)
    job = PlanJob(id="job-p", spec=spec, submitted_at=NOW, deadline_at=spec.deadline_at(NOW))
    [decision] = plan([job], OFFERS, [], NOW, POLICY)
    assert decision.job_id == "job-p" and decision.reason
    for option in options_for(job, OFFERS, [], NOW, POLICY):  # what `gpusched plan` prints
        f"{option.est_hours:.1f} {option.est_cost} {option.finish_by:%m-%d %H:%M} {option.why}".encode()
    spec.model_dump(mode="json")
    if spec.policy.budget is not None:
        str(spec.policy.budget)


@FAST
@given(valid_docs())
def test_a_generated_valid_job_is_accepted_and_plans(doc: dict[str, Any]) -> None:
    spec = accepted_or_problems(parse_job, doc, "gen.json")
    assert spec is not None
    plans(spec)
    again = parse_job(spec.model_dump(mode="json"), "stored.json")  # what the store keeps reads back
    assert again == spec or spec.policy.deadline != again.policy.deadline


@MANY
@given(mutated_docs())
def test_a_mutated_job_is_accepted_or_gets_problems_never_an_exception(doc: Any) -> None:
    spec = accepted_or_problems(parse_job, doc, "mutated.json")
    if spec is not None:
        plans(spec)


@MANY
@given(valid_docs(), st.data())
def test_mutated_yaml_text_is_accepted_or_gets_problems(doc: dict[str, Any], data: st.DataObject) -> None:
    text = yaml.safe_dump(doc, sort_keys=False)
    at = data.draw(st.integers(0, len(text)))
    insert = data.draw(st.one_of(
        st.text(max_size=20),
        st.sampled_from(["&a ", "*a", "<<: *a\n", "[" * 50, "{" * 50, "\n  - ", ": ", "!!python/object:os.system ",
                         "9" * 5000, "\\ud800", '"\\ud800"', "\t", "\x00", "\ufeff", "---\n", "? "]),
    ))
    spec = accepted_or_problems(parse_job_text, text[:at] + insert + text[at:], "mutated.yaml")
    if spec is not None:
        plans(spec)


@FAST
@given(st.integers(1, 200), st.sampled_from(["[", "{a: ", "- "]))
def test_nesting_of_any_depth_is_accepted_or_gets_problems(depth: int, opener: str) -> None:
    if opener == "- ":
        text = "".join("  " * i + "- \n" for i in range(depth)) + "  " * depth + "x\n"
    else:
        closer = {"[": "]", "{a: ": "}"}[opener]
        text = "name: " + opener * depth + "1" + closer * depth + "\n"
    assume(text)
    accepted_or_problems(parse_job_text, text, "deep.yaml")
