"""Turning pydantic's validation errors for a job file into ``FieldProblem``s a user can act on.

Each error becomes the dotted field path the user wrote (``resources.gpus[1]``, never pydantic's
union tags or the insides of a budget), a plain message ("must be at least 1, not 0"; "unknown
model 'yolov9-x'; did you mean 'yolov9-e'?") and a right value from ``jobfile_examples``. A key the
schema does not know gets the likeliest fix: a near spelling, or the section it belongs in.

Also the wording helpers the cross-field rules share: ``unknown_choice`` and ``kind_of``.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Any, Iterable, Mapping

from pydantic import BaseModel, ValidationError

from scheduler.errors import FieldProblem
from scheduler.jobs.jobfile_examples import FIELD_EXAMPLES, FILE_FIELD, example_for
from scheduler.models import EXPORT_FORMATS, MODELS, PROVIDERS, JobSpec, Kind
from scheduler.money import Money

__all__ = ["kind_of", "submodel", "translate", "unknown_choice"]

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


def translate(exc: ValidationError) -> list[FieldProblem]:
    """One ``FieldProblem`` per pydantic error, in pydantic's order (a union field may repeat)."""
    problems = []
    for err in exc.errors(include_url=False):
        path, key = _field_path(err["loc"], err["type"])
        if err["type"] == "extra_forbidden" and key not in ("policy.deadline", "policy.budget"):
            message, example = _unknown_key(key)
        else:
            message, example = _message(err, key), example_for(key)
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
            model = submodel(model.model_fields[item].annotation)
            if model in _LEAF_MODELS:
                break
            continue
        # anything else is a union tag: not part of the user's document
    return shown or FILE_FIELD, key or FILE_FIELD


def submodel(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``X``, ``X | None``, ``tuple[X, ...]``; else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, tuple, list):
        for arg in typing.get_args(annotation):
            found = submodel(arg)
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
        return f"keys must be text, not {kind_of(value)}"
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
        return f"must be text, not {kind_of(value)}{hint}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a section of keys (a mapping), not {kind_of(value)}"
    if kind in ("tuple_type", "list_type"):
        return f"must be a list such as {FIELD_EXAMPLES.get(key, '[a, b]')}, not {kind_of(value)}"
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
    return unknown_choice(_CHOICE_NOUNS.get(key, "value"), value, choices)


_CHOICE_NOUNS = {
    "kind": "kind",
    "model": "model",
    "where.providers": "provider",
    "export.formats": "export format",
    "policy.capacity": "capacity",
    "resources.gpus": "GPU",
}


def unknown_choice(noun: str, value: object, choices: tuple[str, ...]) -> str:
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
    return f"unknown key {name!r}; {where} {', '.join(known)}", example_for(parent_key or FILE_FIELD)


def _model_for(dotted: str) -> type[BaseModel] | None:
    model: type[BaseModel] | None = JobSpec
    for part in filter(None, dotted.split(".")):
        if model is None or part not in model.model_fields:
            return None
        model = submodel(model.model_fields[part].annotation)
    return model


def _section_models() -> dict[str, type[BaseModel]]:
    sections = {}
    for name, field in JobSpec.model_fields.items():
        model = submodel(field.annotation)
        if model is not None:
            sections[name] = model
    return sections


def _closest(word: str, choices: Iterable[str]) -> str | None:
    choices = tuple(choices)
    by_lower = {c.lower(): c for c in choices}
    if word.lower() in by_lower:
        return by_lower[word.lower()]
    match = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[match[0]] if match else None


def _show(value: object) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def kind_of(value: object) -> str:
    """What a value is, in words a YAML author knows: ``a list``, ``the number 3``, ``nothing (null)``."""
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
