"""Rules of a job file that span fields or need the catalog, checked on the raw document.

They run whether or not the pydantic models accepted the file, so a user hears about them
together with every other problem: which section goes with which kind, known GPU models,
``half`` with ``dynamic``, the GPU total, a zero budget.

Sections per kind. Each kind needs its own section and takes no other kind's
section (``data``, ``resources``, ``where`` and ``policy`` go with every kind):

======  =================  ================================================
kind    needs              why
======  =================  ================================================
train   ``train:``,        the ``train:`` section is required even though
        ``data.uri``,      all its keys have defaults: epochs drive the cost
        ``data.train_``    estimate, and a file that silently trains 100
        ``images``         epochs is a surprise on the bill. Image counts
                           drive the time estimate.
infer   ``infer:``         ``data:`` is optional (only its data.yaml names)
val     ``val:``,          val_images drive the time estimate
        ``data.uri``,
        ``data.val_images``
export  ``export:``        ``half`` and ``dynamic`` exclude each other
======  =================  ================================================

Inference, validation and export run YOLOv9 scripts that use one device, so
those kinds must ask for exactly one GPU.
"""

from __future__ import annotations

from typing import Any, Mapping

from scheduler.errors import FieldProblem
from scheduler.gpus import GPUS, canonical_gpu
from scheduler.jobs.jobfile_examples import FIELD_EXAMPLES, example_for
from scheduler.jobs.jobfile_problems import unknown_choice
from scheduler.models import Kind
from scheduler.money import Money

__all__ = ["MAX_GPUS_PER_JOB", "SECTIONS", "rule_problems"]

MAX_GPUS_PER_JOB = 64
SECTIONS = ("train", "infer", "val", "export")


def rule_problems(doc: Mapping[Any, Any]) -> list[FieldProblem]:
    """The problems of a raw job document that the models cannot see; an empty list when none."""
    problems: list[FieldProblem] = []
    kind = doc.get("kind")
    if isinstance(kind, str) and kind in {k.value for k in Kind}:
        problems.extend(_section_problems(Kind(kind), doc))
    resources = doc.get("resources")
    if isinstance(resources, Mapping):
        problems.extend(_resource_problems(resources, kind))
    export = doc.get("export")
    if isinstance(export, Mapping) and export.get("half") is True and export.get("dynamic") is True:
        problems.append(
            _problem(
                "export.dynamic",
                "half: true and dynamic: true cannot be combined; YOLOv9's export.py refuses --half with --dynamic",
            )
        )
    policy = doc.get("policy")
    if isinstance(policy, Mapping) and isinstance(policy.get("budget"), str):
        try:
            budget = Money.parse(policy["budget"])
        except ValueError:
            budget = None  # reported by the model
        if budget is not None and budget.amount == 0:
            problems.append(_problem("policy.budget", "must be more than zero; omit it for no budget"))
    return problems


def _section_problems(kind: Kind, doc: Mapping[Any, Any]) -> list[FieldProblem]:
    problems = []
    for section in SECTIONS:
        if section != kind.value and doc.get(section) is not None:
            problems.append(
                _problem(
                    section,
                    f"{_a(kind.value)} job takes no {section}: section (it belongs to kind: {section}); "
                    f"remove it or change kind",
                    example=f"{kind.value}: {FIELD_EXAMPLES[kind.value]}",
                )
            )
    if doc.get(kind.value) is None:
        problems.append(_problem(kind.value, f"{_a(kind.value)} job needs {_a(kind.value)}: section"))
    if kind in (Kind.train, Kind.val):
        data = doc.get("data")
        count = "train_images" if kind is Kind.train else "val_images"
        if data is None:
            problems.append(
                _problem("data", f"{_a(kind.value)} job needs a data: section with the dataset uri and {count}")
            )
        elif isinstance(data, Mapping):
            if data.get(count) is None:
                problems.append(
                    _problem(
                        f"data.{count}",
                        f"{_a(kind.value)} job needs the number of images ({count}) to estimate time and cost",
                    )
                )
            elif kind is Kind.val and data.get(count) == 0:
                problems.append(_problem(f"data.{count}", "a val job needs at least 1 validation image"))
    return problems


def _resource_problems(resources: Mapping[Any, Any], kind: object) -> list[FieldProblem]:
    problems = []
    gpus = resources.get("gpus")
    if isinstance(gpus, (list, tuple)):
        for i, name in enumerate(gpus):
            if isinstance(name, str) and canonical_gpu(name) is None:
                problems.append(
                    _problem(
                        f"resources.gpus[{i}]",
                        unknown_choice("GPU", name, tuple(GPUS)),
                        example_key="resources.gpus",
                    )
                )
    count, nodes = resources.get("gpu_count", 1), resources.get("nodes", 1)
    if _is_int(count) and _is_int(nodes) and count >= 1 and nodes >= 1:
        total = count * nodes
        if total > MAX_GPUS_PER_JOB:
            problems.append(
                _problem(
                    "resources",
                    f"gpu_count x nodes = {count} x {nodes} = {total} GPUs; a job may use at most {MAX_GPUS_PER_JOB}",
                )
            )
        if kind in (Kind.infer.value, Kind.val.value, Kind.export.value) and total > 1:
            problems.append(
                _problem(
                    "resources.gpu_count",
                    f"{_a(str(kind))} job runs on one GPU (YOLOv9's {kind} script uses one device); "
                    "set gpu_count: 1 and nodes: 1",
                )
            )
    return problems


def _problem(field: str, message: str, *, example: str | None = None, example_key: str | None = None) -> FieldProblem:
    return FieldProblem(field, message, example if example is not None else example_for(example_key or field))


def _a(word: str) -> str:
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
