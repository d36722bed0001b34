"""Load a job.yaml (or the same document as JSON) into a ``JobSpec``, or say exactly why not.

Every failure is one ``JobFileError`` carrying one ``FieldProblem`` per fault:
the dotted field path (``policy.budget``, ``resources.gpus[1]``), what is wrong
in plain words, and a value that would be right. All problems of a file are
reported together, so a user fixes a file in one round, not one error at a time.

Two layers of checks:

* structure (types, ranges, patterns, unknown keys) comes from the pydantic
  models in ``scheduler.models``; their errors are translated here, never
  shown raw;
* rules that span fields or need the catalog (which section goes with which
  kind, known GPU models, ``half`` with ``dynamic``, the GPU total) run on the
  raw document, so they are reported even when other fields are broken.

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

import difflib
import re
import types
import typing
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml
from pydantic import BaseModel, ValidationError

from scheduler.errors import FieldProblem, JobFileError
from scheduler.gpus import GPUS
from scheduler.models import EXPORT_FORMATS, MODELS, PROVIDERS, JobSpec, Kind
from scheduler.money import CURRENCIES, Money
from scheduler.times import utc

__all__ = [
    "FIELD_EXAMPLES",
    "MAX_GPUS_PER_JOB",
    "load_job_file",
    "parse_job_text",
    "parse_job",
    "job_json_schema",
    "submit_problems",
]

MAX_GPUS_PER_JOB = 64
FILE_FIELD = "(file)"
SECTIONS = ("train", "infer", "val", "export")

# A right value for every field, shown under each problem. Keys are dotted
# paths without list indices; a test keeps this table complete.
FIELD_EXAMPLES: dict[str, str] = {
    FILE_FIELD: "see examples/helmet-s-train.yaml",
    "name": "helmet-v3",
    "team": "vision-qa",
    "project": "safety-helmet",
    "kind": "train (or infer, val, export)",
    "model": "yolov9-s",
    "data": "{uri: s3://bucket/datasets/helmet, train_images: 12000, val_images: 1500}",
    "data.uri": "s3://bucket/datasets/helmet",
    "data.train_images": "12000",
    "data.val_images": "1500",
    "train": "{epochs: 100, img_size: 640, batch: 64}",
    "train.epochs": "100",
    "train.img_size": "640",
    "train.batch": "64",
    "train.weights": "yolov9-s.pt, s3://bucket/weights/yolov9-s.pt or '' (from scratch)",
    "train.hyp": "hyp.scratch-high.yaml",
    "train.close_mosaic": "15",
    "train.patience": "100",
    "infer": "{source: s3://bucket/images/2026-11/, images: 200000, weights: s3://bucket/runs/helmet-v3/best.pt}",
    "infer.source": "s3://bucket/images/2026-11/",
    "infer.images": "200000",
    "infer.img_size": "640",
    "infer.weights": "s3://bucket/runs/helmet-v3/best.pt",
    "infer.conf": "0.25",
    "infer.iou": "0.45",
    "infer.output": "s3://bucket/runs/helmet-infer/",
    "val": "{weights: s3://bucket/runs/helmet-v3/best.pt, batch: 32}",
    "val.weights": "s3://bucket/runs/helmet-v3/best.pt",
    "val.img_size": "640",
    "val.batch": "32",
    "export": "{weights: s3://bucket/runs/helmet-v3/best.pt, formats: [onnx, engine], half: true}",
    "export.weights": "s3://bucket/runs/helmet-v3/best.pt",
    "export.formats": "[onnx, engine]",
    "export.img_size": "640",
    "export.half": "true (and dynamic: false)",
    "export.dynamic": "false (or half: false)",
    "resources": "{gpus: [A10, L4, A10G], gpu_count: 1, nodes: 1}",
    "resources.gpus": "[A10, L4, A10G]",
    "resources.gpu_count": "1",
    "resources.nodes": "1",
    "where": "{providers: [aws, alibaba, tencent], regions: [cn-hangzhou]}",
    "where.providers": "[aws, alibaba, tencent]",
    "where.regions": "[cn-hangzhou, ap-guangzhou, us-east-1]",
    "policy": "{deadline: 36h, budget: 800 CNY}",
    "policy.capacity": "auto (or spot, on-demand, reserved)",
    "policy.deadline": "2026-12-10T18:00:00+08:00 or 36h",
    "policy.budget": "800 CNY",
    "policy.priority": "50",
    "policy.max_restarts": "10",
    "policy.idle_stop_minutes": "10",
}

# What a string pattern means, in words, for each field that has one.
_PATTERN_MESSAGES: dict[str, str] = {
    "name": "must be lowercase letters, digits and '-', starting and ending with a letter or digit",
    "team": "must be lowercase letters, digits, '-' and '_', starting with a letter or digit",
    "project": "must be lowercase letters, digits, '-' and '_', starting with a letter or digit",
    "data.uri": "must be a folder URI starting with s3://, oss:// or cos://",
    "infer.source": "must be a folder URI starting with s3://, oss:// or cos://",
    "infer.output": "must be a folder URI starting with s3://, oss:// or cos://",
    "train.weights": "must be a .pt file name, an s3:// / oss:// / cos:// URI, or '' to train from scratch",
    "infer.weights": "must be a .pt file name or an s3:// / oss:// / cos:// URI",
    "val.weights": "must be a .pt file name or an s3:// / oss:// / cos:// URI",
    "export.weights": "must be a .pt file name or an s3:// / oss:// / cos:// URI",
    "train.hyp": "must be a .yaml file name, e.g. one of YOLOv9's data/hyps files",
}

# The allowed values of each choice field, for "did you mean" hints.
_CHOICES: dict[str, tuple[str, ...]] = {
    "kind": tuple(k.value for k in Kind),
    "model": MODELS,
    "where.providers": PROVIDERS,
    "export.formats": EXPORT_FORMATS,
    "policy.capacity": ("auto", "spot", "on-demand", "reserved"),
}

_URI_FIELDS = {"data.uri", "infer.source", "infer.output", "train.weights", "infer.weights", "val.weights",
               "export.weights"}
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# Models whose insides are one value to the user (a budget is "800 CNY", not a mapping).
_LEAF_MODELS: tuple[type[BaseModel], ...] = (Money,)


# --- entry points -------------------------------------------------------------


def load_job_file(path: str | Path) -> JobSpec:
    """Read and validate one job file; raise ``JobFileError`` listing every problem."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _fail(source, "no such file", "gpusched submit examples/helmet-s-train.yaml") from None
    except IsADirectoryError:
        raise _fail(source, "is a folder, not a job file", "gpusched submit examples/helmet-s-train.yaml") from None
    except PermissionError:
        raise _fail(source, "cannot be read: permission denied") from None
    except UnicodeDecodeError:
        raise _fail(source, "is not UTF-8 text; save the job file as UTF-8") from None
    except OSError as exc:
        raise _fail(source, f"cannot be read: {exc.strerror or type(exc).__name__}") from None
    return parse_job_text(text, source)


def parse_job_text(text: str, source: str) -> JobSpec:
    """Parse YAML (JSON is YAML too) and validate it; ``source`` names it in errors."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        raise JobFileError(source, [_yaml_problem(exc)]) from None
    except yaml.reader.ReaderError as exc:
        raise _fail(source, f"has a character YAML does not allow ({exc.character!r}) "
                            f"at position {exc.position}") from None
    except yaml.YAMLError as exc:
        raise _fail(source, f"is not valid YAML ({type(exc).__name__})") from None
    if data is None:
        raise _fail(source, "the file is empty (or holds only comments)")
    return parse_job(data, source)


def parse_job(data: object, source: str = "<job>") -> JobSpec:
    """Validate an already parsed document (a dict from YAML or the HTTP API's JSON)."""
    if not isinstance(data, Mapping):
        raise _fail(
            source,
            f"the top level must be a mapping of keys (name:, team:, kind: ...), not {_kind_of(data)}",
        )
    problems: list[FieldProblem] = []
    spec: JobSpec | None = None
    try:
        spec = JobSpec.model_validate(dict(data))
    except ValidationError as exc:
        problems.extend(_translate(exc))
    problems.extend(_rule_problems(data))
    problems = _dedupe(problems)
    if problems or spec is None:
        raise JobFileError(source, problems)
    return spec


def submit_problems(spec: JobSpec, now: datetime) -> list[FieldProblem]:
    """Checks that depend on the submission time; an empty list means the job may be queued."""
    deadline = spec.policy.deadline
    if isinstance(deadline, datetime) and utc(deadline) <= utc(now):
        return [
            FieldProblem(
                "policy.deadline",
                f"the deadline {deadline.isoformat()} has already passed "
                f"(now is {utc(now).isoformat(timespec='seconds')})",
                FIELD_EXAMPLES["policy.deadline"],
            )
        ]
    return []


def job_json_schema() -> dict[str, Any]:
    """JSON Schema of job.yaml for editors (yaml-language-server, VS Code).

    Deadlines and budgets are written as text in job files, so the schema says
    so, instead of pydantic's view of them (datetime / timedelta, a Money object).
    """
    schema = JobSpec.model_json_schema()
    defs = schema.setdefault("$defs", {})
    policy = defs["PolicySpec"]["properties"]
    policy["deadline"] = {
        "title": "Deadline",
        "description": "An ISO 8601 time with a UTC offset, or a duration from submission such as 36h, 2d, 1d12h, 90m.",
        "anyOf": [{"type": "string", "pattern": _DEADLINE_PATTERN}, {"type": "null"}],
        "default": None,
        "examples": ["2026-12-10T18:00:00+08:00", "36h"],
    }
    policy["budget"] = {
        "title": "Budget",
        "description": f"Most the job may cost: an amount and a currency ({', '.join(CURRENCIES)}).",
        "anyOf": [{"type": "string", "pattern": _BUDGET_PATTERN}, {"type": "null"}],
        "default": None,
        "examples": ["800 CNY", "120 USD"],
    }
    defs.pop("Money", None)
    gpus = defs["ResourcesSpec"]["properties"]["gpus"]
    gpus["anyOf"] = [{"type": "array", "items": {"enum": list(GPUS)}}, {"type": "null"}]
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gpusched job file"
    return schema


_DEADLINE_PATTERN = (
    r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})"
    r"|\s*(\d+d)?\s*(\d+h)?\s*(\d+m)?\s*)$"
)
_BUDGET_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*(" + "|".join(CURRENCIES) + r")\s*$"


# --- YAML ---------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys: PyYAML silently keeps the last one."""


class _DuplicateKey(yaml.constructor.ConstructorError):
    pass


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # an unhashable key; construct_mapping reports it properly
            break
        if duplicate:
            raise _DuplicateKey(None, None, f"key {key!r} appears twice; keep one", key_node.start_mark)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def _yaml_problem(exc: yaml.MarkedYAMLError) -> FieldProblem:
    mark = exc.problem_mark or exc.context_mark
    what = exc.problem or exc.context or "unreadable YAML"
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    if isinstance(exc, _DuplicateKey):
        return FieldProblem(FILE_FIELD, f"duplicate key{where}: {what}", "each key once per section")
    return FieldProblem(
        FILE_FIELD,
        f"YAML syntax error{where}: {what}",
        "key: value pairs, two-space indents, lists as [a, b]",
    )


# --- translating pydantic errors ----------------------------------------------


def _translate(exc: ValidationError) -> list[FieldProblem]:
    problems = []
    for err in exc.errors(include_url=False):
        path, key = _field_path(err["loc"], err["type"])
        if err["type"] == "extra_forbidden" and key not in ("policy.deadline", "policy.budget"):
            message, example = _unknown_key(key)
        else:
            message, example = _message(err, key), _example(key)
        problems.append(FieldProblem(path, message, example))
    return problems


def _field_path(loc: tuple[int | str, ...], err_type: str) -> tuple[str, str]:
    """``("resources", "gpus", 1)`` -> ``("resources.gpus[1]", "resources.gpus")``.

    Walks the models alongside the location so that union tags pydantic adds
    (``policy.deadline.datetime``) and the insides of leaf values (a budget's
    ``amount``) do not leak into the path the user sees.
    """
    model: type[BaseModel] | None = JobSpec
    shown = ""
    key = ""
    for i, item in enumerate(loc):
        if err_type in ("extra_forbidden", "invalid_key") and i == len(loc) - 1:
            shown = f"{shown}.{item}" if shown else str(item)
            key = f"{key}.{item}" if key else str(item)
            break
        if isinstance(item, int):
            shown += f"[{item}]"
            continue
        if model is not None and item in model.model_fields:
            shown = f"{shown}.{item}" if shown else item
            key = f"{key}.{item}" if key else item
            model = _submodel(model.model_fields[item].annotation)
            if model in _LEAF_MODELS:
                break
            continue
        # anything else is a union tag: not part of the user's document
    return shown or FILE_FIELD, key or FILE_FIELD


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``X``, ``X | None``, ``tuple[X, ...]``; else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, tuple, list):
        for arg in typing.get_args(annotation):
            found = _submodel(arg)
            if found is not None:
                return found
    return None


def _message(err: Mapping[str, Any], key: str) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    shown = _show(value)
    # A deadline or budget is one value to the user, whatever pydantic tried inside it.
    if key == "policy.deadline" and kind != "value_error":
        return f"{shown} is neither an ISO time with a UTC offset nor a duration like '36h'"
    if key == "policy.budget" and kind != "value_error":
        return f"{shown} is not an amount with a currency"
    if kind == "missing":
        return "is required"
    if kind == "invalid_key":
        return f"keys must be text, not {_kind_of(value)}"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"])).removeprefix("Value error, ")
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be a whole number, not {shown}"
    if kind in ("float_parsing", "float_type"):
        return f"must be a number, not {shown}"
    if kind in ("bool_parsing", "bool_type"):
        return f"must be true or false, not {shown}"
    if kind == "string_type":
        hint = "; put it in quotes" if isinstance(value, (int, float, bool)) else ""
        return f"must be text, not {_kind_of(value)}{hint}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a section of keys (a mapping), not {_kind_of(value)}"
    if kind in ("tuple_type", "list_type"):
        return f"must be a list such as {FIELD_EXAMPLES.get(key, '[a, b]')}, not {_kind_of(value)}"
    if kind == "too_short":
        return "must list at least one item"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}, not {shown}"
    if kind == "greater_than":
        return f"must be more than {ctx.get('gt')}, not {shown}"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')}, not {shown}"
    if kind == "less_than":
        return f"must be less than {ctx.get('lt')}, not {shown}"
    if kind == "multiple_of":
        return f"must be a multiple of {ctx.get('multiple_of')} (YOLOv9's largest stride), not {shown}"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters, not {len(str(value))}"
    if kind == "string_too_short":
        return f"must be at least {ctx.get('min_length')} characters"
    if kind == "string_pattern_mismatch":
        return _pattern_message(key, value)
    if kind in ("literal_error", "enum"):
        return _choice_message(key, value, str(ctx.get("expected", "")))
    # A type of error the table does not know yet: still one plain line, no dump.
    return f"{shown} is not accepted here: {str(err['msg']).lower()}"


def _pattern_message(key: str, value: object) -> str:
    if key in _URI_FIELDS and isinstance(value, str):
        scheme = _SCHEME_RE.match(value)
        if scheme and scheme.group(1).lower() not in ("s3", "oss", "cos"):
            return (
                f"{scheme.group(1)}:// is not supported; give an s3://, oss:// or cos:// URI "
                "(instances download inputs from object storage)"
            )
    if key in ("name", "team", "project") and isinstance(value, str) and value != value.lower():
        return f"{_show(value)} has uppercase letters; {_PATTERN_MESSAGES[key]}"
    return f"{_show(value)}: {_PATTERN_MESSAGES.get(key, 'has the wrong form')}"


def _choice_message(key: str, value: object, expected: str) -> str:
    choices = _CHOICES.get(key)
    if choices is None:
        return f"{_show(value)} is not one of {expected}"
    return _unknown_choice(_CHOICE_NOUNS.get(key, "value"), value, choices)


_CHOICE_NOUNS = {
    "kind": "kind",
    "model": "model",
    "where.providers": "provider",
    "export.formats": "export format",
    "policy.capacity": "capacity",
    "resources.gpus": "GPU",
}


def _unknown_choice(noun: str, value: object, choices: tuple[str, ...]) -> str:
    message = f"unknown {noun} {_show(value)}"
    hint = _closest(str(value), choices)
    if hint:
        message += f"; did you mean {hint!r}?"
    return f"{message} (known: {', '.join(choices)})"


def _unknown_key(key: str) -> tuple[str, str | None]:
    """Message and example for a key the schema does not know, with the likeliest fix."""
    parent_key, _, name = key.rpartition(".")
    model = _model_for(parent_key)
    known = tuple(model.model_fields) if model is not None else ()
    hint = _closest(name, known)
    if hint:
        full = f"{parent_key}.{hint}" if parent_key else hint
        example = FIELD_EXAMPLES.get(full)
        return f"unknown key {name!r}; did you mean {hint!r}?", f"{hint}: {example}" if example else None
    sections = _section_models()
    home = [s for s, m in sections.items() if name in m.model_fields and s != parent_key]
    if home:
        return (
            f"unknown key {name!r} here; it belongs in the {home[0]}: section",
            f"{home[0]}: {FIELD_EXAMPLES[home[0]]}",
        )
    where = f"{parent_key}: takes" if parent_key else "the top level takes"
    return f"unknown key {name!r}; {where} {', '.join(known)}", _example(parent_key or FILE_FIELD)


def _model_for(dotted: str) -> type[BaseModel] | None:
    model: type[BaseModel] | None = JobSpec
    for part in filter(None, dotted.split(".")):
        if model is None or part not in model.model_fields:
            return None
        model = _submodel(model.model_fields[part].annotation)
    return model


def _section_models() -> dict[str, type[BaseModel]]:
    sections = {}
    for name, field in JobSpec.model_fields.items():
        model = _submodel(field.annotation)
        if model is not None:
            sections[name] = model
    return sections


def _example(key: str) -> str | None:
    if key in FIELD_EXAMPLES:
        return FIELD_EXAMPLES[key]
    parent = key.rpartition(".")[0]
    # An unknown key: show what its section looks like.
    return FIELD_EXAMPLES.get(parent) if parent else FIELD_EXAMPLES[FILE_FIELD]


# --- rules across fields -------------------------------------------------------


def _rule_problems(doc: Mapping[Any, Any]) -> list[FieldProblem]:
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
            if isinstance(name, str) and name not in GPUS:
                problems.append(
                    _problem(
                        f"resources.gpus[{i}]",
                        _unknown_choice("GPU", name, tuple(GPUS)),
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


# --- small helpers --------------------------------------------------------------


def _problem(field: str, message: str, *, example: str | None = None, example_key: str | None = None) -> FieldProblem:
    return FieldProblem(field, message, example if example is not None else _example(example_key or field))


def _fail(source: str, message: str, example: str | None = None) -> JobFileError:
    return JobFileError(source, [FieldProblem(FILE_FIELD, message, example or FIELD_EXAMPLES[FILE_FIELD])])


def _dedupe(problems: Iterable[FieldProblem]) -> list[FieldProblem]:
    # A union field fails once per member; the user needs to hear it once.
    seen: set[str] = set()
    out = []
    for p in problems:
        if p.field not in seen:
            seen.add(p.field)
            out.append(p)
    return out


def _closest(word: str, choices: Iterable[str]) -> str | None:
    choices = tuple(choices)
    by_lower = {c.lower(): c for c in choices}
    if word.lower() in by_lower:
        return by_lower[word.lower()]
    match = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[match[0]] if match else None


def _a(word: str) -> str:
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _show(value: object) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind_of(value: object) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {_show(value)}"
    if value is None:
        return "nothing (null)"
    return type(value).__name__
